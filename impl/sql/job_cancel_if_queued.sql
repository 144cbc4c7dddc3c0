-- name: job_cancel_if_queued
-- Rule R6 `cancel`: a `queued` job is `cancelled` at once (it has no attempt).
-- $1 job, $2 operator's project, $3 now
UPDATE jobs
SET state = 'cancelled', outcome = 'cancelled', finished_at = $3
WHERE id = $1
  AND project_id = $2 -- guard: project
  AND state = 'queued'
RETURNING id
