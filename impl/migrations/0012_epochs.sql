-- Epochs (issue 26; docs/protocol.md §2 "Epochs", R1, §8.3 and "What the protocol needs from
-- its database"). Every fence and slot token a claim issues carries the database's epoch in its
-- high 32 bits, so that a token issued after an event that can forget commits (a promotion of a
-- standby, a point-in-time restore) is above every token issued before it, the forgotten ones
-- included, and after such an event no job is claimed until every lease granted before it has
-- expired.
--
-- The epoch is the PostgreSQL WAL timeline of the database minus 1 (plus the operator's
-- `epoch_offset`, below), read from the current WAL insert position: `pg_walfile_name` names the
-- segment with the insertion timeline (`GetWALInsertionTimeLine()` since PostgreSQL 15), which is
-- the new timeline as soon as a promotion ends, whereas `pg_control_checkpoint()` still shows the
-- old one until the next checkpoint. A fresh cluster is timeline 1, epoch 0: there
-- `greatest(x + 1, 0 * 2^32 + 1)` is `x + 1`, and every fence and slot token is what it was before
-- this migration. A promotion and the end of an archive recovery (a point-in-time restore) always
-- start a timeline never used before in the cluster's lineage (one above the newest in the
-- archive's history), and the timeline is in the WAL itself, not in a row: it cannot be forgotten
-- with the commits.
--
-- Tables:
--   epochs:       every epoch a claim has seen, with the time its first claim came
--                 (`began_at`); the epoch current when this migration ran has '-infinity', so a
--                 migrated or fresh database never waits.
--   lease_policy: one row, the largest lease ttl any store of this database was created with (a
--                 store records its ttl when it connects, keeping the max; seeded here from the
--                 leases already granted). The wait after an epoch change is that long.
--   epoch_offset: one row, or none (0): added to the timeline's epoch by the operator after a
--                 logical restore (pg_dump / pg_restore into a new cluster starts at timeline
--                 1 again), `leasewright migrate --advance-epoch`.
-- Functions:
--   current_epoch():  the epoch, as above.
--   claim_epoch(now): the epoch a claim received at `now` issues its tokens in; NULL while claims
--                 wait: when the current epoch has no row yet (the first claim after an epoch
--                 change) it inserts one with began_at = now; while now < began_at + the largest
--                 lease ttl it answers NULL.
--   claim:        as migration 0011 defined it, and its fence and slot token are
--                 greatest(counter + 1, epoch * 2^32 + 1); it takes nothing while claim_epoch is
--                 NULL (the claim then answers `no_queued_job`: the wait looks like an empty queue).
CREATE TABLE epochs (
    epoch bigint PRIMARY KEY CONSTRAINT epochs_epoch_not_negative CHECK (epoch >= 0),
    began_at timestamptz NOT NULL
);

CREATE TABLE lease_policy (
    id boolean PRIMARY KEY DEFAULT true CONSTRAINT lease_policy_one_row CHECK (id),
    max_lease_ttl interval NOT NULL
        CONSTRAINT lease_policy_ttl_positive CHECK (max_lease_ttl > interval '0')
);

CREATE TABLE epoch_offset (
    id boolean PRIMARY KEY DEFAULT true CONSTRAINT epoch_offset_one_row CHECK (id),
    epoch_offset bigint NOT NULL CONSTRAINT epoch_offset_not_negative CHECK (epoch_offset >= 0)
);

-- The epoch: the insertion timeline of the WAL minus 1, plus the operator's offset. Fails on a
-- standby ("recovery is in progress"), where no claim can write anyway.
CREATE FUNCTION current_epoch() RETURNS bigint
LANGUAGE sql
VOLATILE
AS $current_epoch$
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint - 1
    + coalesce((SELECT epoch_offset FROM epoch_offset WHERE id), 0)
$current_epoch$;

-- $1 now: the epoch a claim at `now` issues its tokens in, or NULL while the claims wait.
CREATE FUNCTION claim_epoch(timestamptz) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $claim_epoch$
DECLARE
    epoch_now bigint := current_epoch();
    began timestamptz;
BEGIN
    SELECT e.began_at INTO began FROM epochs AS e WHERE e.epoch = epoch_now;
    IF NOT FOUND THEN
        -- The first claim of a new epoch: the wait begins now (a concurrent first claim inserts
        -- the same epoch: the later one keeps the earlier's row).
        INSERT INTO epochs (epoch, began_at) VALUES (epoch_now, $1) ON CONFLICT (epoch) DO NOTHING;
        RETURN NULL;
    END IF;
    IF $1 < began + coalesce((SELECT p.max_lease_ttl FROM lease_policy AS p WHERE p.id),
                             interval '0') THEN
        RETURN NULL;
    END IF;
    RETURN epoch_now;
END
$claim_epoch$;

INSERT INTO epochs (epoch, began_at) VALUES (current_epoch(), '-infinity');

INSERT INTO lease_policy (id, max_lease_ttl)
SELECT true, max(claim_lease_expiry - claimed_at) FROM attempts
HAVING max(claim_lease_expiry - claimed_at) > interval '0';

-- Rule R1 `claim`, as migration 0011 defined it (the same parameters, result columns, settings,
-- cached and robust plan, pick, free-slot locking and reservation in the slot row), with the
-- epoch: the statement's first CTE asks `claim_epoch` (once: a volatile function in a CTE is
-- evaluated once), `runner` is empty while it is NULL (so nothing is picked), and the fence and
-- the slot token are greatest(counter + 1, epoch * 2^32 + 1). Dropped and created again in this
-- migration's transaction, as 0008, 0009 and 0011 did.
DROP FUNCTION claim(uuid, bigint, timestamptz, timestamptz);

CREATE FUNCTION claim(uuid, bigint, timestamptz, timestamptz)
RETURNS TABLE (job_id uuid, attempt_id uuid, lease_id uuid, fence bigint, slot_token bigint,
    source_revision text, source_digest text, command text, target text, target_kind text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
-- In order:
--   epoch:        the epoch base (epoch * 2^32) the claim issues its tokens in, NULL while the
--                 claims wait after an epoch change (claim_epoch);
--   runner:       the sender and its project (§6.2 check 1); none while the claims wait;
--   head:         the K earliest queued jobs of the project that no concurrent claimer holds
--                 locked, each locked (jobs other claimers hold locked are skipped, so no two
--                 claimers get one job), whatever their slots;
--   head_free:    of those, the jobs whose target slot is free (its row names no holder:
--                 reserved by no job of any project, §8.2);
--   beyond:       only when some of the head's slots were not free: the earliest queued jobs
--                 after it whose slot is free, locked, as many as the head fell short of K;
--   picked:       both: up to K queued jobs of the project whose slot is free, earliest
--                 submitted first, skipping jobs other claimers hold locked (docs/protocol.md,
--                 R1 and "Batch claim");
--   one_per_slot: of the picked jobs naming one slot, only the earliest (a batch takes at most
--                 one job per slot), each with a new attempt id;
--   free:         their slots' rows, locked, that are still free: a slot another claim holds
--                 locked (it is reserving it right now) is skipped, never waited for, and one
--                 reserved since this statement's snapshot fails the recheck;
--   reserved:     each free slot reserved for its job's attempt and its slot token issued,
--                 greatest(the slot's counter + 1, epoch base + 1) (§8.3), in one update of the
--                 slot's row;
--   started:      each reserved job becomes `running` with fence greatest(fence + 1, epoch base
--                 + 1) and the new current attempt;
--   attempted:    the `active` attempts, with a fresh lease id, lease_expiry = now + lease_ttl
--                 (kept in claim_lease_expiry too) and the slot token issued.
WITH epoch AS MATERIALIZED (
    SELECT claim_epoch($3) * 4294967296 AS base
), runner AS (
    SELECT id, project_id FROM runners
    WHERE id = $1
      AND (SELECT base FROM epoch) IS NOT NULL
), head AS (
    SELECT j.id, j.project_id, j.target, j.submitted_seq
    FROM jobs AS j
    WHERE j.project_id = (SELECT project_id FROM runner)
      AND j.state = 'queued'
    ORDER BY j.submitted_seq
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
), head_free AS (
    SELECT h.id, h.project_id, h.target, h.submitted_seq
    FROM head AS h
    JOIN target_slots AS s ON s.slot = h.target
    WHERE s.holder_job_id IS NULL
), beyond AS (
    SELECT q.id, q.project_id, q.target, q.submitted_seq
    FROM jobs AS q
    JOIN target_slots AS s ON s.slot = q.target
    WHERE (SELECT count(*) FROM head_free) < $2
      AND q.project_id = (SELECT project_id FROM runner)
      AND q.state = 'queued'
      AND s.holder_job_id IS NULL
      AND q.id <> ALL (ARRAY(SELECT id FROM head))
    ORDER BY q.submitted_seq
    LIMIT $2 - (SELECT count(*) FROM head_free)
    FOR NO KEY UPDATE OF q SKIP LOCKED
), picked AS (
    SELECT id, project_id, target, submitted_seq FROM head_free
    UNION ALL
    SELECT id, project_id, target, submitted_seq FROM beyond
), one_per_slot AS (
    SELECT DISTINCT ON (p.target) p.id, p.project_id, p.target, p.submitted_seq,
        gen_random_uuid() AS attempt_id
    FROM picked AS p
    ORDER BY p.target, p.submitted_seq
), free AS MATERIALIZED (
    SELECT s.slot
    FROM one_per_slot AS o
    JOIN target_slots AS s ON s.slot = o.target
    WHERE s.holder_job_id IS NULL
    FOR NO KEY UPDATE OF s SKIP LOCKED
), reserved AS (
    UPDATE target_slots AS s
    SET holder_project_id = o.project_id, holder_job_id = o.id,
        holder_attempt_id = o.attempt_id, reserved_at = $3,
        slot_token = greatest(s.slot_token + 1, (SELECT base FROM epoch) + 1)
    FROM one_per_slot AS o
    WHERE s.slot = o.target
      AND s.slot IN (SELECT slot FROM free)
      AND s.holder_job_id IS NULL
    RETURNING o.id AS job_id, o.attempt_id, s.slot, s.slot_token
), started AS (
    UPDATE jobs AS j
    SET state = 'running', fence = greatest(j.fence + 1, (SELECT base FROM epoch) + 1),
        current_attempt_id = r.attempt_id
    FROM reserved AS r
    WHERE j.id = r.job_id
      AND j.state = 'queued'
    RETURNING j.id, j.project_id, j.submitted_seq, j.target, j.target_kind, j.fence,
        j.source_revision, j.source_digest, j.command, r.attempt_id, r.slot_token
), attempted AS (
    INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state,
        lease_expiry, claim_lease_expiry, claimed_at, slot_token)
    SELECT st.attempt_id, st.id, st.project_id, $1, gen_random_uuid(), st.fence, 'active',
        $4, $4, $3, st.slot_token
    FROM started AS st
    RETURNING id, job_id, lease_id, fence, slot_token
)
SELECT st.id AS job_id, a.id AS attempt_id, a.lease_id, a.fence, a.slot_token,
    st.source_revision, st.source_digest, st.command, st.target, st.target_kind
FROM started AS st
JOIN attempted AS a ON a.job_id = st.id
ORDER BY st.submitted_seq
;
END
$claim$;
