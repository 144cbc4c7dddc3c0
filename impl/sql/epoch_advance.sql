-- name: epoch_advance
-- The operator's step after a logical restore (pg_dump / pg_restore into a new cluster, which starts
-- at timeline 1 again) or any restore that kept the timeline (docs/protocol.md "What the protocol
-- needs from its database"): raise the epoch to one above every epoch the database has seen, in its
-- `epochs` table and in the high 32 bits of every fence and slot token a claim issued (jobs,
-- attempts, target slots: never a token a client sent, such as a demonstration target's
-- `highest_slot_token`), and above the current one, by raising `epoch_offset`. The next claim
-- then starts the new epoch's wait. Reads every job, attempt and slot (an operator's step, never
-- on a request path).
-- Returns the epoch before and after; `epoch_offset` is NULL and nothing is written when the new
-- epoch would be past the largest an epoch may be (2^31 - 1: a token is epoch * 2^32 + its
-- generation, a bigint).
WITH before AS MATERIALIZED (
    SELECT current_epoch() AS epoch
), seen AS MATERIALIZED (
    SELECT greatest(
        (SELECT epoch FROM before),
        (SELECT max(epoch) FROM epochs),
        (SELECT max(fence) >> 32 FROM jobs),
        (SELECT max(fence) >> 32 FROM attempts),
        (SELECT max(slot_token) >> 32 FROM attempts),
        (SELECT max(slot_token) >> 32 FROM target_slots)) AS epoch
), advanced AS (
    INSERT INTO epoch_offset (id, epoch_offset)
    SELECT true, coalesce((SELECT o.epoch_offset FROM epoch_offset AS o WHERE o.id), 0)
        + (SELECT epoch FROM seen) + 1 - (SELECT epoch FROM before)
    WHERE (SELECT epoch FROM seen) < 2147483647 -- the new epoch in range: at most 2^31 - 1
    ON CONFLICT (id) DO UPDATE SET epoch_offset = EXCLUDED.epoch_offset
    RETURNING epoch_offset
)
SELECT (SELECT epoch FROM before) AS before, (SELECT epoch FROM seen) + 1 AS after,
    (SELECT epoch_offset FROM advanced) AS epoch_offset
