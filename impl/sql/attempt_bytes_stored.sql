-- name: attempt_bytes_stored
-- The bytes the attempt holds (its log chunks, its artifacts, the cache entries it stored last),
-- leaving out the artifact $2 and the cache entry $3 that the write about to happen replaces.
-- Run under the job's row lock (job_lock), so concurrent writes of one attempt see each other.
-- $1 attempt, $2 the artifact name replaced (or NULL), $3 the cache key replaced (or NULL)
SELECT (SELECT coalesce(sum(octet_length(content)), 0) FROM logs WHERE attempt_id = $1)
    + (SELECT coalesce(sum(octet_length(content)), 0) FROM artifacts
        WHERE attempt_id = $1 AND name IS DISTINCT FROM $2)
    + (SELECT coalesce(sum(octet_length(content)), 0) FROM cache_entries
        WHERE stored_by_attempt = $1 AND key IS DISTINCT FROM $3) AS bytes
