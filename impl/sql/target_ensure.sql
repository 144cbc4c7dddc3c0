-- name: target_ensure
-- A demonstration target slot of one kind (created on first use).
-- $1 slot, $2 kind
INSERT INTO targets (slot, kind) VALUES ($1, $2) ON CONFLICT (slot) DO NOTHING
