-- name: job_lock
-- Every rule that names a job locks its row first, so the rules on one job are serialized and a
-- zero-row conditional statement can be classified against a state nobody else is changing.
-- (Lock order everywhere: jobs, then attempts.)
-- $1 job
SELECT id, project_id, state, current_attempt_id, cancel_requested, fence
FROM jobs
WHERE id = $1
FOR UPDATE
