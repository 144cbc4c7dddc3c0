-- name: job_start_if_queued
-- Rule R1 `claim`: the job becomes `running` under a new current attempt with fence
-- greatest(fence + 1, epoch * 2^32 + 1) (docs/protocol.md §2, "Epochs": at epoch 0 this is
-- fence + 1).
-- $1 job, $2 attempt, $3 epoch (from claim_epoch)
UPDATE jobs
SET state = 'running', fence = greatest(fence + 1, $3 * 4294967296 + 1), current_attempt_id = $2
WHERE id = $1
  AND state = 'queued'
RETURNING fence, target_kind, source_revision, source_digest, command
