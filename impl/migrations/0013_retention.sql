-- Retention (issue 30; docs/impl.md, "Retention"; docs/audit.md, "Pruning audited jobs"): finished
-- jobs and everything they own can be deleted once they are older than an operator's retention,
-- in small batches that lock only the jobs they delete (`job_lock_finished_before`,
-- `job_delete_with_ledger`). No rule, predicate or verdict changes. Independent of 0012.

-- The batches pick the oldest finished jobs first: without this index every batch would read the
-- whole table. Partial: a job enters it once, when its outcome is committed (its `finished_at` is
-- set); queued and leased jobs have none, so claims and heartbeats never write an entry in it.
CREATE INDEX jobs_finished_by_time ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- Deleting a row that other rows reference runs, per deleted row, a query for the referencing rows
-- (the foreign key's check): without an index leading with the referencing column that query reads
-- the whole referencing table, once per deleted attempt. Six references to attempts had no such
-- index (an index on each would cost an entry on every runner message, claim or result: 0010
-- dropped observations_by_attempt for that reason). They are not kept as foreign keys; what each
-- guaranteed is written by the statements that set the column (each copies an attempt it has just
-- read or inserted under its job's row lock) and checked by a test after every kind of rule
-- (impl/tests/protocol.rs, `every_attempt_and_reservation_is_of_its_job_and_project` and
-- `every_attributed_observation_names_its_attempts_job`, which now also look for a reference to an
-- attempt that does not exist), as 0005 and 0009 did for the same-job halves:
--   observations.attempt_id (the attribution of docs/protocol.md §7),
--   reconciliations.attempt_id, cancels.attempt_id, expiry_sweeps.attempt_id (the attempt a
--     reconciliation, cancel or sweep was about),
--   jobs.current_attempt_id (deferred; the claim inserts the attempt it names in its statement).
-- Each is deleted with its job, in the same transaction, so no reference outlives its attempt.
ALTER TABLE observations DROP CONSTRAINT observations_attempt_id_fkey;
ALTER TABLE reconciliations DROP CONSTRAINT reconciliations_attempt_id_fkey;
ALTER TABLE cancels DROP CONSTRAINT cancels_attempt_id_fkey;
ALTER TABLE expiry_sweeps DROP CONSTRAINT expiry_sweeps_attempt_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_current_attempt_exists;
-- A cache entry is the project's, not the job's: it outlives the attempt that stored it last, and
-- stored_by_attempt then names an attempt that no longer exists (it counted against that
-- attempt's quota, which nothing writes to any more).
ALTER TABLE cache_entries DROP CONSTRAINT cache_entries_stored_by_attempt_fkey;

-- The demonstration targets' record of the mutations that reached them is deleted with the job
-- that sent them; this index finds them (one entry per mutation, a demonstration target's write).
-- The targets' own state (`targets`, `target_applied_deployments`) and the slots' token counters
-- (`target_slots`) are never deleted: a slot's counter must never go back.
CREATE INDEX target_mutations_by_job ON target_mutations (job_id);

-- The highest ledger sequence value an audit has covered (`leasewright prune --audited-through`,
-- the watermark `leasewright audit` printed): a job whose every record is at or below it has been
-- replayed by that audit, or by one before it. One row at most. A prune deletes a job with a
-- record above it (not audited yet) only when told to (docs/audit.md).
CREATE TABLE ledger_audit_watermark (
    singleton   boolean     PRIMARY KEY DEFAULT true,
    watermark   bigint      NOT NULL,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT ledger_audit_watermark_one_row CHECK (singleton),
    CONSTRAINT ledger_audit_watermark_not_negative CHECK (watermark >= 0)
);
