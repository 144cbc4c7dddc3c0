-- Replica clocks (docs/protocol.md §3.1, issue 29 item 5): every replica's clock is within
-- max_clock_skew (δ) of the database server's, so two replicas disagree by at most 2δ. A rule
-- that acts on a lease being over to the benefit of another attempt waits 2δ past it:
--   lease_policy.max_clock_skew: the largest δ any server of this database was started with
--                 (recorded by `lease_policy_record_clock_skew` when a server starts; 0 until
--                 then: one clock);
--   claim_epoch(now): as migration 0012 defined it, but the claims wait after an epoch change
--                 until now >= began_at + the largest lease ttl + 2 * max_clock_skew.
-- The expiry sweep reads the same column (impl/sql/job_make_uncertain_if_lease_expired.sql).
ALTER TABLE lease_policy
    ADD COLUMN max_clock_skew interval NOT NULL DEFAULT interval '0'
        CONSTRAINT lease_policy_clock_skew_not_negative CHECK (max_clock_skew >= interval '0');

-- The function this migration defined (claim_epoch) lives in impl/sql/functions/claim.sql, in the
-- one form the server runs, applied after the migrations whenever it changes (docs/ARCHITECTURE.md,
-- "SQL: tables in migrations, functions in one file each"). This file keeps the tables it changed
-- and why.
