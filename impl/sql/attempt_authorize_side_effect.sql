-- name: attempt_authorize_side_effect
-- Rule R8 side effects (`source fetch`, `log append`, `artifact put`, `artifact get`, `cache get`,
-- `cache put`): the same whole tuple as completion, a valid lease, and no cancel request pending.
-- $1 runner, $2 job, $3 attempt, $4 lease id, $5 fence, $6 now
SELECT a.id
FROM attempts AS a, jobs AS j, runners AS r
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
  AND j.state = 'running' -- guard: cancel
  AND $6 < a.lease_expiry -- guard: expiry
FOR NO KEY UPDATE OF a
