-- name: observation_select_of_attempt
-- The attempt's ledger of observations: the messages attributed to it.
-- $1 attempt
SELECT id, sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, named_fence,
    attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256
FROM observations
WHERE attempt_id = $1
ORDER BY id
