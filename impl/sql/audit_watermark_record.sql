-- name: audit_watermark_record
-- Retention: the operator says the ledger is audited through $1 (the watermark `leasewright audit`
-- printed). The recorded watermark never goes back: a smaller value leaves it as it is.
-- $1 watermark, $2 now
INSERT INTO ledger_audit_watermark (singleton, watermark, recorded_at)
VALUES (true, $1, $2)
ON CONFLICT (singleton) DO UPDATE
SET watermark = EXCLUDED.watermark, recorded_at = EXCLUDED.recorded_at
WHERE ledger_audit_watermark.watermark < EXCLUDED.watermark
