-- name: runner_select_token_hash
-- authenticate: the stored SHA-256 of the runner's bearer token (compared in constant time in Rust),
-- only of a runner that is not revoked (a revoked runner authenticates nothing).
-- $1 runner
SELECT token_sha256 FROM runners WHERE id = $1 AND revoked_at IS NULL
