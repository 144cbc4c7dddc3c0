-- name: attempt_commit_result_if_current
-- Rule R3 `result`: the exact current attempt, with a valid lease, commits its outcome. `cancelled`
-- only while the job is `cancelling`; `passed`/`failed` only while it is `running`.
-- Zero rows: classified by §6.1 (late report, duplicate, conflict, ...), never retried.
-- $1 runner, $2 job, $3 attempt, $4 lease id, $5 fence, $6 now, $7 outcome, $8 result digest,
-- $9 now (receipt time; $6 is the clock the lease is judged by, also now)
UPDATE attempts AS a
SET state = $7, outcome = $7, result_digest = $8, ended_at = $9
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
  AND $6 < a.lease_expiry -- guard: expiry
  AND ((j.state = 'running' AND $7 IN ('passed', 'failed'))
       OR (j.state = 'cancelling' AND $7 = 'cancelled'))
RETURNING a.id
