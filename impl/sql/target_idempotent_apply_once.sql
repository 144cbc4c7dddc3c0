-- name: target_idempotent_apply_once
-- Rule R9 `target mutation` on an `idempotent` target: each deployment id is applied at most once
-- (invariant 8); a repeat from any attempt is acknowledged.
-- $1 slot, $2 deployment id, $3 now
INSERT INTO target_applied_deployments (slot, deployment_id, applied_at)
VALUES ($1, $2, $3)
ON CONFLICT ON CONSTRAINT target_applied_deployments_once DO NOTHING
RETURNING slot
