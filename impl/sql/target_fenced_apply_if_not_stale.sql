-- name: target_fenced_apply_if_not_stale
-- Rule R9 `target mutation` on a `fenced` target: compare-and-set on the slot's generation. A fence
-- lower than the highest applied is refused (`stale_fence`, invariant 7).
-- $1 slot, $2 fence
UPDATE targets
SET highest_fence = $2, applied_count = applied_count + 1
WHERE slot = $1
  AND kind = 'fenced'
  AND (highest_fence IS NULL OR highest_fence <= $2) -- guard: fence
RETURNING slot
