-- name: observation_select_of_job
-- Every observation that named the job, attributed or not, in the order received.
-- $1 job
SELECT id, sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, named_fence,
    attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256
FROM observations
WHERE named_job_id = $1
ORDER BY id
