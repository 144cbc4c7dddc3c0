-- name: attempt_select_views_of_job
-- $1 job
SELECT id, job_id, runner_id, lease_id, fence, slot_token, state, lease_expiry, outcome, result_digest,
    claimed_at, ended_at
FROM attempts
WHERE job_id = $1
ORDER BY fence
