-- name: target_release
-- A committed outcome or a reconciliation releases the job's target reservation (§8).
-- $1 job
DELETE FROM target_reservations WHERE job_id = $1
