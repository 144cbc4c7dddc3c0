-- function: epoch
-- The epoch (docs/protocol.md §2, "Epochs"): the insertion timeline of the WAL minus 1, plus the
-- operator's offset (`epoch_offset`, raised by `leasewright migrate --advance-epoch`). Every fence
-- and slot token a claim issues carries it in its high 32 bits (claim.sql). `pg_walfile_name` names
-- the segment with the insertion timeline (PostgreSQL 15 on), the new timeline as soon as a
-- promotion ends. Fails on a standby ("recovery is in progress"), where no claim can write anyway.
-- Called by claim_epoch (claim.sql), impl/sql/epoch_select_current.sql, impl/sql/epoch_advance.sql
-- and audit/src/chain.rs. History: migration 0012; since then in this file alone: PL/pgSQL instead
-- of SQL.
-- PL/pgSQL, not SQL: a SQL function whose body reads a table is never inlined, so it was parsed
-- and planned again at every call (every claim's claim_epoch); PL/pgSQL keeps the plan of its
-- statement for the session (docs/impl.md, "No SQL function is called at run time on the hot
-- path").
CREATE OR REPLACE FUNCTION current_epoch() RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $current_epoch$
BEGIN
    RETURN ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint - 1
        + coalesce((SELECT o.epoch_offset FROM epoch_offset AS o WHERE o.id), 0);
END
$current_epoch$;
