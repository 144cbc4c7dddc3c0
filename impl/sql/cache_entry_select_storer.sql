-- name: cache_entry_select_storer
-- A read (not a rule): a project's cache entry `key` with the attempt that stored it last, that
-- attempt's job (none once the job is pruned: the entry outlives it) and when (the conformance
-- suite compares who stored it, docs/conformance.md class 5; GET /v1/projects/{p}/cache/{key}).
-- $1 project, $2 key
SELECT c.content, c.content_sha256, c.stored_by_attempt, a.job_id AS stored_by_job, c.stored_at
FROM cache_entries AS c LEFT JOIN attempts AS a ON a.id = c.stored_by_attempt
WHERE c.project_id = $1 AND c.key = $2
