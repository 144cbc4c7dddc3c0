-- name: target_lock
-- $1 slot
SELECT kind, highest_slot_token, applied_count FROM targets WHERE slot = $1 FOR UPDATE
