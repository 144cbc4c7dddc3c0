-- name: target_reserve_if_free
-- Rule R1 `claim`: reserve the job's target for the new attempt (§8). Zero rows: the target is
-- reserved (committed), or another claim is reserving it right now (its transaction holds the
-- target's advisory lock); the claim then picks another job instead of waiting, so concurrent
-- batch claims over shared targets never deadlock.
-- $1 project, $2 target, $3 job, $4 attempt, $5 now
INSERT INTO target_reservations (project_id, target, job_id, attempt_id, reserved_at)
SELECT $1, $2, $3, $4, $5
WHERE pg_try_advisory_xact_lock(hashtextextended('leasewright target ' || $1::text || '/' || $2, 0))
ON CONFLICT ON CONSTRAINT target_reservations_one_holder_per_target DO NOTHING
RETURNING job_id
