-- name: target_reservation_select_of_job
-- $1 job
SELECT target, attempt_id FROM target_reservations WHERE job_id = $1
