-- name: audit_watermark_select
-- Retention: the recorded audit watermark (no row: none recorded).
SELECT watermark FROM ledger_audit_watermark
