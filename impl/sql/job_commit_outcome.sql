-- name: job_commit_outcome
-- Rule R3 `result`, second half: the job takes the outcome its current attempt committed.
-- $1 job, $2 attempt, $3 outcome, $4 result digest, $5 now
UPDATE jobs
SET state = $3, outcome = $3, result_digest = $4, finished_at = $5
WHERE id = $1
  AND current_attempt_id = $2
  AND state IN ('running', 'cancelling')
