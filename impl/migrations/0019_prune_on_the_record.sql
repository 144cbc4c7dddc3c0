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
