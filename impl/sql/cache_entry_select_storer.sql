-- name: cache_entry_select_storer
-- A read (not a rule): a project's cache entry `key` with the attempt that stored it last
-- (the conformance suite compares who stored it, docs/conformance.md class 5).
-- $1 project, $2 key
SELECT content, stored_by_attempt FROM cache_entries WHERE project_id = $1 AND key = $2
