-- name: target_reservation_select_of_job
-- The job's target reservation: its slot's row when it names the job as its holder (0009).
-- $1 job
SELECT s.slot AS target, s.holder_attempt_id AS attempt_id
FROM jobs AS j
JOIN target_slots AS s ON s.slot = j.target
WHERE j.id = $1
  AND s.holder_job_id = j.id
