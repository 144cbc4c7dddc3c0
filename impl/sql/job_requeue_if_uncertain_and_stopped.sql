-- name: job_requeue_if_uncertain_and_stopped
-- Rule R7 `reconcile` with decision `retry`: only an `uncertain` job whose execution was
-- established stopped (or its outcome observed), without a cancel request, returns to the queue.
-- The next claim creates a new attempt with a larger fence.
-- $1 job, $2 operator's project, $3 finding
UPDATE jobs AS j
SET state = 'queued', current_attempt_id = NULL
FROM (SELECT id, current_attempt_id FROM jobs WHERE id = $1) AS before
WHERE j.id = $1
  AND before.id = j.id
  AND j.project_id = $2 -- guard: project
  AND j.state = 'uncertain'
  AND $3 <> 'still_running' -- guard: stopped
  AND NOT j.cancel_requested -- guard: cancel
RETURNING before.current_attempt_id
