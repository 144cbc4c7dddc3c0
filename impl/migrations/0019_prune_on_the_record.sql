-- A tombstone is judged, never trusted (issue 37 item 1; docs/audit.md, "Tombstones"). A prune
-- (impl/sql/job_delete_with_ledger.sql) leaves each deleted job's last chain head in
-- `ledger_pruned` (migration 0015); the audit takes that head in place of the job's records. Until
-- now nothing said when the prune ran, so a `--since` run could not tell a job pruned after its
-- watermark (whose rows it can no longer compare with what the watermark committed to) from one
-- pruned before it (which the watermark's row-state digest no longer covers). `pruned_seq`: the
-- ledger position the prune drew for the tombstone, from the ledger's own sequence, in the prune's
-- transaction: the pruning is itself on the record, in ledger order. NULL for a tombstone written
-- before this migration (before any watermark that commits to row state). Nothing else changes.
ALTER TABLE ledger_pruned ADD COLUMN pruned_seq bigint;

-- The lease policy's history on the record (issue 37 item 3): `lease_policy` holds only the
-- largest ttl now, so a ttl raised together with a lease granted under it left nothing to judge
-- the lease by. Every change of the row's `max_lease_ttl` (the writer is
-- impl/sql/lease_policy_record.sql; a trigger, so that no statement changes) appends the new value
-- with a ledger position drawn from the ledger's sequence: the audit judges each claim's ttl
-- against the policy in force at its position. Seeded with the value now (its position: this
-- migration's; the claims before it are judged against it).
CREATE TABLE lease_policy_history (
    ledger_seq    bigint      PRIMARY KEY DEFAULT nextval('ledger_seq'),
    max_lease_ttl interval    NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);

-- The trigger that appends to it: impl/sql/functions/lease_policy_history.sql (applied after the
-- migrations).
INSERT INTO lease_policy_history (max_lease_ttl) SELECT max_lease_ttl FROM lease_policy;
