-- name: cache_entry_put
-- Rule R8 `cache put`: store (or replace) a cache entry of the job's project.
-- $1 job, $2 key, $3 content, $4 content sha256, $5 attempt, $6 now
INSERT INTO cache_entries (project_id, key, content, content_sha256, stored_by_attempt, stored_at)
SELECT j.project_id, $2, $3, $4, $5, $6 FROM jobs AS j WHERE j.id = $1
ON CONFLICT ON CONSTRAINT cache_entries_one_per_project_key
DO UPDATE SET content = EXCLUDED.content, content_sha256 = EXCLUDED.content_sha256,
    stored_by_attempt = EXCLUDED.stored_by_attempt, stored_at = EXCLUDED.stored_at
