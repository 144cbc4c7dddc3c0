-- name: attempt_select_views_of_job
-- The job's attempts in fence order, one page: fences after $2, at most $3 rows.
-- $1 job, $2 after this fence (0: from the start), $3 at most this many
SELECT id, job_id, runner_id, lease_id, fence, slot_token, state, lease_expiry, outcome, result_digest,
    claimed_at, ended_at
FROM attempts
WHERE job_id = $1 AND fence > $2
ORDER BY fence
LIMIT $3
