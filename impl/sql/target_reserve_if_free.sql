-- name: target_reserve_if_free
-- Rule R1 `claim`: reserve the job's target slot for the new attempt and issue the attempt's slot
-- token, greatest(the slot's counter + 1, epoch * 2^32 + 1) (§8.2, §8.3; at epoch 0 the counter
-- + 1), in one update of the slot's row (its holder columns, migration 0009). Slots are global: the row is keyed by the slot name alone, whatever
-- project the job belongs to.
-- Zero rows: the slot is reserved (committed), or another claim is reserving it right now (its
-- transaction holds the slot's row locked: SKIP LOCKED skips it); the claim then picks another job
-- instead of waiting, so concurrent batch claims over shared slots never deadlock. A batch claim
-- that reserved the slot already in this transaction finds it held: at most one job per slot.
-- $1 project, $2 target slot, $3 job, $4 attempt, $5 now, $6 epoch (from claim_epoch)
UPDATE target_slots
SET holder_project_id = $1, holder_job_id = $3, holder_attempt_id = $4, reserved_at = $5,
    slot_token = greatest(slot_token + 1, $6 * 4294967296 + 1)
WHERE slot = (
        SELECT slot FROM target_slots
        WHERE slot = $2 AND holder_job_id IS NULL
        FOR NO KEY UPDATE SKIP LOCKED)
  AND holder_job_id IS NULL
RETURNING slot_token
