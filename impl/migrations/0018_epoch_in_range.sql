-- Epochs stay in range (issue 36, item 2; docs/protocol.md §2 "Epochs"). A fence or slot token is
-- epoch * 2^32 + its generation in a bigint, so an epoch holds 31 bits: 0 to 2^31 - 1
-- (leasewright_impl::epoch::MAX_EPOCH). Before this migration an epoch past it (a timeline of
-- 2^31 or more, an operator's offset raised past it, or `epoch_advance` over a token a client
-- had sent) made the first claim's `epoch * 4294967296` overflow, and every later claim failed
-- the same way.
--   epoch_offset, epochs: a CHECK that the offset and every recorded epoch are in range (no row
--                 out of range can exist: the largest epoch ever reachable before was 2^31 - 1
--                 from a token, and `epoch_advance` refuses now before writing one past it);
--   claim_epoch(now) (impl/sql/functions/claim.sql) refuses an epoch past 2^31 - 1 with a
--                 message naming it (SQLSTATE 22003, numeric_value_out_of_range: a deterministic
--                 error, which the server answers `500 internal_error` and logs, never the
--                 retryable `503 database_unavailable`), before anything is written.
ALTER TABLE epoch_offset
    ADD CONSTRAINT epoch_offset_in_range CHECK (epoch_offset <= 2147483647);

ALTER TABLE epochs
    ADD CONSTRAINT epochs_epoch_in_range CHECK (epoch <= 2147483647);

-- The recorded max_clock_skew (δ, migration 0016) is bounded like `serve --max-clock-skew-ms`:
-- at most one minute. The database keeps the largest δ any server recorded, and the sweep acts
-- 2δ past a lease: one server started with a δ of years stopped the sweep of every server of
-- the database for good. A larger value recorded before this migration is lowered to the bound
-- (no server can run with more any longer: `serve` refuses it); `leasewright migrate
-- --set-max-clock-skew-ms` lowers it further.
UPDATE lease_policy SET max_clock_skew = interval '1 minute'
WHERE max_clock_skew > interval '1 minute';

ALTER TABLE lease_policy
    ADD CONSTRAINT lease_policy_clock_skew_bounded CHECK (max_clock_skew <= interval '1 minute');
