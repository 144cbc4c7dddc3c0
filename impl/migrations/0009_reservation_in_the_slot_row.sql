-- The target reservation as columns of its slot's row (issue 14, write amplification;
-- docs/impl.md, "Schema"; docs/benchmarks.md, "The reservation in the slot row (migration 0009)").
-- No rule, predicate or verdict changes.
--
-- Until now a claim inserted a `target_reservations` row per job (two index entries, a speculative
-- insertion, an advisory try-lock per slot and three foreign-key triggers) beside its update of
-- the slot's `target_slots` row (the slot token), and every release deleted that row again. The
-- reservation is now four columns of the slot's own row, which exists already (one per slot
-- name): the claim reserves the slot and issues its slot token in ONE update of that row, and the
-- release clears the four columns in another. No index names them, so both updates can be HOT
-- (no index entry), and "one holder per slot across every project" (§8.2, invariant 14) is the
-- structure itself: a slot has one row, so it has one holder.
--
-- The constraints of the old table, one by one:
--   target_reservations_one_holder_per_slot (PK on the slot): one row per slot, target_slots_pkey;
--   target_reservations_slot_registered (FK to target_slots): the reservation is the slot's row;
--   target_reservations_one_per_job (UNIQUE job_id): a job names one slot, and the reservation is
--     found through the job's slot (holder_job_id = the job, slot = the job's target);
--   target_reservations_job_exists, target_reservations_attempt_exists (FKs to jobs and attempts,
--     the latter deferred): not kept, since each would fire a trigger at every claim. The claim
--     statement (and its job-by-job path) is the only writer of the holder columns, and copies
--     them from the job row it locks and starts and from the attempt it inserts for that job in
--     the same statement (transaction); the release only clears them. A test checks that every
--     holder is an existing job of the named project whose target is the slot, held by an
--     existing attempt of that job (impl/tests/protocol.rs,
--     `every_attempt_and_reservation_is_of_its_job_and_project`), as 0005 did for the same-job and
--     same-project halves.
-- The four columns are all set (reserved) or all NULL (free): target_slots_holder_all_or_none.
ALTER TABLE target_slots
    ADD COLUMN holder_project_id uuid,
    ADD COLUMN holder_job_id uuid,
    ADD COLUMN holder_attempt_id uuid,
    ADD COLUMN reserved_at timestamptz,
    ADD CONSTRAINT target_slots_holder_all_or_none
        CHECK (num_nulls(holder_project_id, holder_job_id, holder_attempt_id, reserved_at) IN (0, 4));

-- An update is HOT only if its new row version fits on the row's page. Slots are registered at
-- submission, one row after another, and claims reserve them in about that order, so every slot of
-- a page can be reserved at once. A free slot row is about 90 bytes, a reserved one about 150 (the
-- holder's 56 bytes, aligned), each with its line pointer and, once updated, the redirect to it:
-- a page holds about 53 reserved rows. Filled to 80% at registration (about 70 rows) a quarter of
-- the claims found no room and their update went to another page, with an entry in each of the
-- table's two indexes (`leasewright bench writes`: 25% of single claims, 36% at K=16); at 60%, 14%
-- at K=16; at 50% (about 44 rows) every claim's and every release's update was HOT
-- (docs/benchmarks.md, "The reservation in the slot row (migration 0009)"). Dead versions on the
-- page are pruned when it runs short. Rows registered from now on: existing pages keep their fill.
ALTER TABLE target_slots SET (fillfactor = 50);

-- An existing database: each reservation becomes its slot's holder (the old table's primary key
-- was the slot, and its every slot is registered), then the table goes.
UPDATE target_slots AS s
SET holder_project_id = r.project_id, holder_job_id = r.job_id,
    holder_attempt_id = r.attempt_id, reserved_at = r.reserved_at
FROM target_reservations AS r
WHERE r.target = s.slot;

DROP TABLE target_reservations;

-- Rule R1 `claim`, as migration 0008 defined it (the same parameters, result columns, settings and
-- cached, robust plan: everything 0007 says of them holds), reading and writing the reservation in
-- the slot's row. The pick joins each candidate job to its slot's row by key and keeps the jobs
-- whose slot names no holder; then the slots of the (at most K) jobs kept are locked,
-- `FOR NO KEY UPDATE SKIP LOCKED`: a slot another claim is reserving right now is locked by that
-- claim and skipped, never waited for (what the advisory try-lock did: no deadlock between batch
-- claims over shared slots), and a slot reserved since this statement's snapshot fails the recheck
-- of `holder_job_id IS NULL` on its newest version and is skipped too. The slots are locked after
-- the pick, not in it (`FOR NO KEY UPDATE OF j, s`): a row lock whose recheck fails is kept to the
-- end of the transaction (here, of the statement), and a pick that finds no free slot walks the
-- whole queue, so a claim that met a slot reserved since its snapshot kept it locked for that
-- walk and the release of the slot (the result's update of its row) waited for it (`leasewright
-- bench claims`, claim->result on 4 shared slots: 33-44 jobs/s against 44-67 before this
-- migration; 70-83 so). With enable_material
-- off the lookup of the slot is an index scan by key per candidate job, whatever the statistics of
-- the holder columns say (the plan test,
-- store::claim::tests::the_claims_pick_looks_slots_up_by_key_even_after_an_empty_analyze, reads
-- this function from pg_proc). Dropped and created again in this migration's transaction, as 0008
-- did (no claim runs without it).
-- $1 runner, $2 K (at most this many jobs), $3 now, $4 lease expiry

-- The function this migration defined (claim) lives in impl/sql/functions/claim.sql, in the one
-- form the server runs, applied after the migrations whenever it changes (docs/ARCHITECTURE.md,
-- "SQL: tables in migrations, functions in one file each"). This file keeps the tables it changed
-- and why.
