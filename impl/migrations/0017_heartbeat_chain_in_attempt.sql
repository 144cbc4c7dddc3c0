-- The accepted heartbeat no longer writes a version of the job's row (issue 27 item 2's cost;
-- docs/audit.md, "The chain"; docs/benchmarks.md, "The heartbeat's chain"). Migration 0015 chained
-- the heartbeat's observation through the trigger, which advances the job's head in the (wide)
-- jobs row: one row version more per heartbeat. Now, while an attempt is current, the accepted
-- heartbeat (impl/sql/attempt_heartbeat_if_current.sql, the one-statement accept path) advances
-- the job's chain in the attempt's row, which it updates anyway (the lease expiry):
--   attempts.job_chain_seq, attempts.job_chain_head: the job's chain seq and head after the
--       last accepted heartbeat of this attempt (NULL before its first). Not the attempt's own
--       record's place in the chain (attempts.chain_seq / chain_hash, unchanged).
-- The job's head is the later of the job row's (jobs.chain_seq / chain_head) and its current
-- attempt's (ledger_later_seq / ledger_later_head): every writer of a chained record takes
-- it so and writes the next head into the job's row (the trigger, the results'
-- statements) or, for a heartbeat, into the attempt's. The job's row catches up with the first
-- record after the heartbeats; it is never behind when the current attempt changes: a claim
-- takes only queued jobs, which have no current attempt (submitted, or requeued with
-- current_attempt_id cleared, after the expiry sweep's record), so claim() is unchanged. The
-- canonical encoding is unchanged.
-- Readers of the head: the trigger, attempt_commit_result(s)_if_current.sql,
-- job_delete_with_ledger.sql (the prune's tombstone), audit/src/chain.rs (the stored head and the
-- watermark's digest), benches/src/floor.rs.

ALTER TABLE attempts ADD COLUMN job_chain_seq integer, ADD COLUMN job_chain_head bytea;

-- ledger_chain_record() as 0015 defined it, except that the job's head is the later of its row's
-- and its current attempt's (the triggers themselves are unchanged).

-- The functions this migration defined (ledger_later_seq, ledger_later_head, ledger_chain_record)
-- live in impl/sql/functions/ledger_chain.sql, in the one form the server runs, applied after the
-- migrations whenever it changes (docs/ARCHITECTURE.md, "SQL: tables in migrations, functions in
-- one file each"). This file keeps the tables it changed and why.
