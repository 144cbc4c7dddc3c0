-- name: target_reserve_if_free
-- Rule R1 `claim`: reserve the job's target slot for the new attempt and issue the attempt's slot
-- token, the slot's counter + 1 (§8.2, §8.3). Slots are global: the reservation and the counter
-- are keyed by the slot name alone, whatever project the job belongs to.
-- Zero rows: the slot is reserved (committed), or another claim is reserving it right now (its
-- transaction holds the slot's advisory lock); the claim then picks another job instead of
-- waiting, so concurrent batch claims over shared slots never deadlock. A batch claim that
-- reserved the slot already in this transaction conflicts with its own reservation: at most one
-- job per slot.
-- $1 project, $2 target slot, $3 job, $4 attempt, $5 now
WITH reserved AS (
    INSERT INTO target_reservations (project_id, target, job_id, attempt_id, reserved_at)
    SELECT $1, $2, $3, $4, $5
    WHERE pg_try_advisory_xact_lock(hashtextextended('leasewright slot ' || $2, 0))
    ON CONFLICT ON CONSTRAINT target_reservations_one_holder_per_slot DO NOTHING
    RETURNING target
)
UPDATE target_slots AS s
SET slot_token = s.slot_token + 1
FROM reserved
WHERE s.slot = reserved.target
RETURNING s.slot_token
