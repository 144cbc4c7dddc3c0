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

-- The epoch current now (current_epoch(), impl/sql/functions/epoch.sql: the insertion timeline
-- of the WAL minus 1, plus the offset, none yet) never waits.
INSERT INTO epochs (epoch, began_at)
VALUES (('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint - 1,
    '-infinity');

INSERT INTO lease_policy (id, max_lease_ttl)
SELECT true, max(claim_lease_expiry - claimed_at) FROM attempts
HAVING max(claim_lease_expiry - claimed_at) > interval '0';

-- Rule R1 `claim`, as migration 0011 defined it (the same parameters, result columns, settings,
-- cached and robust plan, pick, free-slot locking and reservation in the slot row), with the
-- epoch: the statement's first CTE asks `claim_epoch` (once: a volatile function in a CTE is
-- evaluated once), `runner` is empty while it is NULL (so nothing is picked), and the fence and
-- the slot token are greatest(counter + 1, epoch * 2^32 + 1). Dropped and created again in this
-- migration's transaction, as 0008, 0009 and 0011 did.

-- The functions this migration defined (current_epoch, claim_epoch, claim) live in
-- impl/sql/functions/epoch.sql and claim.sql, in the one form the server runs, applied after the
-- migrations whenever it changes (docs/ARCHITECTURE.md, "SQL: tables in migrations, functions in
-- one file each"). This file keeps the tables it changed and why.

