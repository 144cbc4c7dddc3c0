-- name: job_pick_earliest_queued_with_free_target
-- Rule R1 `claim`: the earliest-submitted `queued` job of the runner's project whose target slot
-- is free: its slot's row names no holder (reserved by no job of any project; slots are global,
-- §8.2). Concurrent claimers skip each other's locked rows and never get the same job; the slot is
-- locked by target_reserve_if_free, not here (a walk past a slot reserved since the snapshot would
-- keep its row locked: see migration 0009).
-- $1 project, $2 job ids to skip (their target was reserved concurrently)
SELECT j.id, j.target
FROM jobs AS j
JOIN target_slots AS s ON s.slot = j.target
WHERE j.project_id = $1
  AND j.queued
  AND NOT (j.id = ANY($2))
  AND s.holder_job_id IS NULL
ORDER BY j.submitted_seq
LIMIT 1
FOR NO KEY UPDATE OF j SKIP LOCKED
