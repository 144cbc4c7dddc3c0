-- name: target_reserve_if_free
-- Rule R1 `claim`: reserve the job's target for the new attempt (§8). Zero rows: another claim
-- reserved it first; the claim picks another job.
-- $1 project, $2 target, $3 job, $4 attempt, $5 now
INSERT INTO target_reservations (project_id, target, job_id, attempt_id, reserved_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT target_reservations_one_holder_per_target DO NOTHING
RETURNING job_id
