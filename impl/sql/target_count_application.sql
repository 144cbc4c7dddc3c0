-- name: target_count_application
-- Rule R9 `target mutation` (`idempotent` after a first application, and `unfenced` always, which
-- checks nothing at all): the target changed.
-- $1 slot
UPDATE targets SET applied_count = applied_count + 1 WHERE slot = $1
