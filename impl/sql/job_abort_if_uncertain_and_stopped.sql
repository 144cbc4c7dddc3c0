-- name: job_abort_if_uncertain_and_stopped
-- Rule R7 `reconcile` with decision `abort`: the job ends `aborted`, or `cancelled` if a cancel was
-- requested; its attempt is no longer current.
-- $1 job, $2 operator's project, $3 finding, $4 now
UPDATE jobs AS j
SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'aborted' END,
    outcome = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'aborted' END,
    finished_at = $4,
    current_attempt_id = NULL
FROM (SELECT id, current_attempt_id FROM jobs WHERE id = $1) AS before
WHERE j.id = $1
  AND before.id = j.id
  AND j.project_id = $2 -- guard: project
  AND j.state = 'uncertain'
  AND $3 <> 'still_running' -- guard: stopped
RETURNING before.current_attempt_id
