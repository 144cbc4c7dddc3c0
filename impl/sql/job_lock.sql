-- name: job_lock
-- Every rule that names a job locks its row first, so the rules on one job are serialized and a
-- zero-row conditional statement can be classified against a state nobody else is changing.
-- (Lock order everywhere: jobs, then attempts. NO KEY UPDATE: it serializes the rules on the job
-- without blocking inserts whose foreign keys merely reference it.)
-- $1 job
SELECT id, project_id, state, current_attempt_id, cancel_requested, fence
FROM jobs
WHERE id = $1
FOR NO KEY UPDATE
