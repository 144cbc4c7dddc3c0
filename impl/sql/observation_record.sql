-- name: observation_record
-- Every runner message is recorded in the transaction that decides it (invariant 10). attempt_id
-- is the attempt the message names when §6.1 checks 1-5 pass, otherwise NULL.
-- $1 sender, $2 kind, $3 job, $4 attempt, $5 lease id, $6 fence, $7 attributed attempt,
-- $8 received at, $9 runner time, $10 verdict, $11 reason, $12 outcome, $13 payload sha256,
-- $14 the lease expiry an accepted heartbeat granted (else NULL)
INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id,
    named_fence, attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256,
    lease_expiry)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
