-- name: target_fenced_apply_if_not_stale
-- Rule R9 `target mutation` on a `fenced` target: compare-and-set on the slot's generation, the
-- slot token (§8.4). A slot token lower than the highest applied is refused (`stale_fence`,
-- invariant 7), whatever job or project sent it; job fences are never compared here.
-- $1 slot, $2 slot token
UPDATE targets
SET highest_slot_token = $2, applied_count = applied_count + 1
WHERE slot = $1
  AND kind = 'fenced'
  AND (highest_slot_token IS NULL OR highest_slot_token <= $2) -- guard: slot token
RETURNING slot
