-- name: job_request_cancel_if_running
-- Rule R6 `cancel`: a `running` job becomes `cancelling` and keeps `cancel requested` for ever. The
-- runner learns of it from its next heartbeat (or a `cancel_requested` rejection).
-- $1 job, $2 operator's project
UPDATE jobs
SET state = 'cancelling', cancel_requested = true
WHERE id = $1
  AND project_id = $2 -- guard: project
  AND state = 'running'
RETURNING id
