-- name: attempt_select_of_job
-- §6.1 checks 4-11, read after a zero-row conditional statement to name the first failing check.
-- $1 attempt, $2 job
SELECT id, runner_id, lease_id, fence, state, lease_expiry, outcome, result_digest
FROM attempts
WHERE id = $1 AND job_id = $2
