-- name: attempt_heartbeat_if_current
-- Rule R2 `heartbeat`: extend the lease of the exact current attempt while it is still valid.
-- Zero rows: the tuple is not (or no longer) current; classified by §6.1, never retried.
-- $1 runner, $2 job, $3 attempt, $4 lease id, $5 fence, $6 now, $7 new lease expiry
UPDATE attempts AS a
SET lease_expiry = $7
FROM jobs AS j, runners AS r
WHERE a.id = $3
  AND a.job_id = $2
  AND j.id = a.job_id
  AND r.id = $1
  AND j.project_id = r.project_id -- guard: project
  AND a.runner_id = r.id
  AND a.lease_id = $4 -- guard: lease
  AND a.fence = $5 -- guard: fence
  AND j.current_attempt_id = a.id -- guard: current
  AND a.state = 'active'
  AND j.state IN ('running', 'cancelling')
  AND $6 < a.lease_expiry -- guard: expiry
RETURNING a.lease_expiry, j.cancel_requested
