-- name: observation_select_of_attempt
-- The attempt's ledger of observations: the messages attributed to it. An attributed message
-- names the attempt's job (docs/protocol.md §7, checks 1-5), so they are read among the job's
-- (the key of observations, (named_job_id, id): migrations 0010, 0023).
-- $1 attempt
SELECT id, sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, named_fence,
    attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256
FROM observations
WHERE named_job_id = (SELECT job_id FROM attempts WHERE id = $1)
    AND attempt_id = $1
ORDER BY id
