-- name: target_release
-- A committed outcome or a reconciliation releases the job's target reservation (§8): the holder
-- columns of the job's slot's row are cleared if they name the job (migration 0009).
-- $1 job
UPDATE target_slots AS s
SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL, reserved_at = NULL
FROM jobs AS j
WHERE j.id = $1
  AND s.slot = j.target
  AND s.holder_job_id = j.id
