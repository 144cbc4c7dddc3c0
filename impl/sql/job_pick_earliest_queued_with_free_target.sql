-- name: job_pick_earliest_queued_with_free_target
-- Rule R1 `claim`: the earliest-submitted `queued` job of the runner's project whose target slot
-- is free: reserved by no job of any project (slots are global, §8.2). Concurrent claimers skip
-- each other's locked rows and never get the same job.
-- $1 project, $2 job ids to skip (their target was reserved concurrently)
SELECT j.id, j.target
FROM jobs AS j
WHERE j.project_id = $1
  AND j.state = 'queued'
  AND NOT (j.id = ANY($2))
  AND NOT EXISTS (
      SELECT 1 FROM target_reservations AS t
      WHERE t.target = j.target)
ORDER BY j.submitted_seq
LIMIT 1
FOR NO KEY UPDATE OF j SKIP LOCKED
