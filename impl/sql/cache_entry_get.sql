-- name: cache_entry_get
-- Rule R8 `cache get`: zero rows is `not_found`.
-- $1 job, $2 key
SELECT c.content
FROM cache_entries AS c, jobs AS j
WHERE j.id = $1 AND c.project_id = j.project_id AND c.key = $2
