-- name: runner_revoke
-- revoke a runner of a project (once: a second revocation keeps the first time). Only
-- `revoked_at` changes; the token hash never does.
-- $1 runner, $2 project, $3 now
UPDATE runners SET revoked_at = COALESCE(revoked_at, $3)
WHERE id = $1 AND project_id = $2
RETURNING id, name, created_at, revoked_at, listed_seq
