-- name: job_start_if_queued
-- Rule R1 `claim`: the job becomes `running` under a new current attempt with fence = fence + 1.
-- $1 job, $2 attempt
UPDATE jobs
SET state = 'running', fence = fence + 1, current_attempt_id = $2
WHERE id = $1
  AND state = 'queued'
RETURNING fence, target_kind, source_revision, source_digest, command
