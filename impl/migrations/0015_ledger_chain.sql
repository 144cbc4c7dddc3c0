-- A ledger that shows its own edits (issue 27 item 2; docs/audit.md, "The chain"). Every record of
-- a job carries a per-job sequence number (`chain_seq`: 1 for the job's submission, then 2, 3, ...
-- in the order the records were written under the job's row lock) and a hash chained to the job's
-- previous record (`chain_hash` = sha256(previous hash || the record's canonical encoding)); the
-- job's row carries the last of them (`chain_seq`, `chain_head`). `leasewright audit` recomputes
-- every chain from the records' fields (its own implementation of the encoding, audit/src/chain.rs):
-- a deleted record is a gap in the sequence, a copied one a duplicate, an edited field a broken
-- hash, and the watermark it prints commits to every job's chain head (a digest), so a later
-- `--since` run detects an edit of a job it does not replay. No rule, predicate or verdict changes.
--
-- The chained records: the job's row (its submission, seq 1), attempts (claims), observations
-- naming an existing job (every runner message about it, accepted or rejected), reconciliations,
-- cancels and expiry sweeps. Not chained: observations naming no existing job (the security log's
-- unknown_job / unknown_runner rows: no job to chain them to), log chunks, artifacts and cache
-- entries (side effects; artifacts and cache entries are replaced in place by a later put, so they
-- are state, not append-only records), target mutations (the targets' record, written under the
-- slot's lock, not the job's), and jobs submitted before this migration (their chain is NULL; the
-- audit counts them as unchained).
--
-- The writer is one trigger per record table, BEFORE INSERT: it advances the job's chain in its
-- row (an UPDATE under the row lock the statement holds already, or takes) and stamps the record.
-- No statement of impl/sql changes, except the sweep's (its job update now comes before its
-- record, as every other statement's does: a trigger must never update a job row that its own
-- statement updates afterwards).

ALTER TABLE jobs ADD COLUMN chain_seq integer, ADD COLUMN chain_head bytea;
-- The ledger position is drawn by the triggers (ledger_chain_record), after the job's row lock
-- (no longer by the column default, which was drawn before it): one value per record, as before.
ALTER TABLE jobs ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE attempts ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE observations ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE reconciliations ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE cancels ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE expiry_sweeps ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE attempts ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE observations ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE reconciliations ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE cancels ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE expiry_sweeps ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;

-- A pruned job's last chain head (`leasewright prune`, `serve --retain-finished-jobs`): a later
-- `audit --since W` verifies W's digest over every job's head as of W; a job pruned since is
-- found here instead of being reported deleted. `job_ledger_seq`: the job's own (its submission's)
-- ledger sequence value (a watermark below it did not know the job); `max_ledger_seq`: the
-- largest of its records' (its head is its head as of any watermark at or above it).
CREATE TABLE ledger_pruned (
    job_id         uuid        PRIMARY KEY,
    chain_seq      integer     NOT NULL,
    chain_head     bytea       NOT NULL,
    job_ledger_seq bigint      NOT NULL,
    max_ledger_seq bigint      NOT NULL
);

-- claim() as migration 0012 defined it, except that the claim chains its own attempt: the
-- `started` update of the job (which the claim makes anyway) advances the job's chain, and the
-- attempt is inserted chained, so the trigger writes no second version of the job's row
-- (docs/benchmarks.md, "The ledger's chain").

-- The functions and triggers this migration defined (the encoding: ledger_field, ledger_claim_hash,
-- ledger_observation_hash; the writers: ledger_chain_job, ledger_chain_record and the triggers
-- jobs_chain, attempts_chain, observations_chain, reconciliations_chain, cancels_chain,
-- expiry_sweeps_chain; claim) live in impl/sql/functions/ledger_encoding.sql, ledger_chain.sql and
-- claim.sql, in the one form the server runs, applied after the migrations whenever they change
-- (docs/ARCHITECTURE.md, "SQL: tables in migrations, functions in one file each"). This file keeps
-- the tables it changed and why.
