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

-- $1 now: the epoch a claim at `now` issues its tokens in, or NULL while the claims wait. The
-- same signature as 0012's, so `claim` (which calls it by name) is unchanged.
CREATE OR REPLACE FUNCTION claim_epoch(timestamptz) RETURNS bigint
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
    IF $1 < began + coalesce((SELECT p.max_lease_ttl + 2 * p.max_clock_skew
                              FROM lease_policy AS p WHERE p.id),
                             interval '0') THEN
        RETURN NULL;
    END IF;
    RETURN epoch_now;
END
$claim_epoch$;
