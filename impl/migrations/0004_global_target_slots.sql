-- Global target slots with per-slot slot tokens (docs/protocol.md §8).
--
-- A slot name denotes one real thing whichever project names it, so the reservation and the
-- fencing token are global: one holder per slot name across every project (the reservation's key
-- was (project, target)), and a slot token counter per slot that every claim reserving the slot
-- increments. Attempts keep the slot token they were issued; targets compare slot tokens, never
-- job fences (a job fence orders the attempts of one job only).

-- The slot registry: one kind per slot (§8.1) and the slot token counter (§8.3). A slot is
-- registered by the first job that names it; `job_insert` refuses a job naming it with another
-- kind (`target_kind_mismatch`, through jobs_target_kind_is_the_slots).
CREATE TABLE target_slots (
    slot       text   PRIMARY KEY,
    kind       text   NOT NULL,
    -- The slot token of the slot's latest reservation (0: never reserved). A claim issues
    -- slot_token + 1 and stores it here: tokens strictly increase over every reservation of the
    -- slot, whatever job or project held it (invariant 15).
    slot_token bigint NOT NULL DEFAULT 0,
    CONSTRAINT target_slots_kind_known CHECK (kind IN ('fenced', 'idempotent', 'unfenced')),
    CONSTRAINT target_slots_token_not_negative CHECK (slot_token >= 0),
    CONSTRAINT target_slots_one_kind UNIQUE (slot, kind)
);

-- Existing slots (a database from before this migration): the kind of the earliest job naming
-- the slot, and a counter above every token that can have reached the slot's target. Before this
-- migration an attempt's mutations carried its job fence, so start above the highest fence of any
-- attempt of any job naming the slot and above the highest the demonstration target applied: a
-- worker still running from before the upgrade is then refused by a fenced target once the slot's
-- next holder deployed.
INSERT INTO target_slots (slot, kind, slot_token)
SELECT DISTINCT ON (j.target) j.target, j.target_kind,
    (SELECT coalesce(max(a.fence), 0)
     FROM attempts AS a JOIN jobs AS named ON named.id = a.job_id
     WHERE named.target = j.target)
FROM jobs AS j
ORDER BY j.target, j.submitted_seq;

UPDATE target_slots AS s
SET slot_token = t.highest_fence
FROM targets AS t
WHERE t.slot = s.slot AND t.highest_fence > s.slot_token;

-- A job's target kind is its slot's kind. NOT VALID: jobs submitted before this migration that
-- named one slot with two kinds keep their rows (they are not rewritten); every new job is checked.
ALTER TABLE jobs ADD CONSTRAINT jobs_target_kind_is_the_slots
    FOREIGN KEY (target, target_kind) REFERENCES target_slots (slot, kind) NOT VALID;

-- Every attempt stores the slot token its claim issued (the token it carries on target mutations).
-- Attempts from before this migration carried their fence.
ALTER TABLE attempts ADD COLUMN slot_token bigint;
UPDATE attempts SET slot_token = fence;
ALTER TABLE attempts
    ALTER COLUMN slot_token SET NOT NULL,
    ADD CONSTRAINT attempts_slot_token_positive CHECK (slot_token >= 1);

-- One holder per slot name across every project (§8.2, invariant 14). A database where two
-- projects hold one slot name right now cannot be upgraded silently: that is the double
-- reservation this migration exists to prevent, and an operator must reconcile one of them first.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM target_reservations GROUP BY target HAVING count(*) > 1) THEN
        RAISE EXCEPTION 'two projects hold one target slot; reconcile one of them before upgrading (docs/protocol.md §8.2)';
    END IF;
END
$$;

ALTER TABLE target_reservations
    DROP CONSTRAINT target_reservations_one_holder_per_target,
    ADD CONSTRAINT target_reservations_one_holder_per_slot PRIMARY KEY (target),
    ADD CONSTRAINT target_reservations_slot_registered
        FOREIGN KEY (target) REFERENCES target_slots (slot);

-- The demonstration targets compare slot tokens (§8.4).
ALTER TABLE targets RENAME COLUMN highest_fence TO highest_slot_token;
ALTER TABLE targets RENAME CONSTRAINT targets_only_fenced_has_fence
    TO targets_only_fenced_has_slot_token;
ALTER TABLE target_mutations RENAME COLUMN fence TO slot_token;
