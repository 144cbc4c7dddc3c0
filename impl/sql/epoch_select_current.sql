-- name: epoch_select_current
-- The database's epoch (docs/protocol.md §2, "Epochs"): its WAL insertion timeline minus 1, plus
-- the operator's offset (the function `current_epoch`, impl/sql/functions/epoch.sql). Fails on a standby.
SELECT current_epoch() AS epoch
