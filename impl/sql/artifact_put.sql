-- name: artifact_put
-- Rule R8 `artifact put`: store (or replace) an artifact of the attempt.
-- $1 attempt, $2 name, $3 content, $4 content sha256, $5 now
INSERT INTO artifacts (attempt_id, name, content, content_sha256, stored_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT artifacts_one_per_attempt_name
DO UPDATE SET content = EXCLUDED.content, content_sha256 = EXCLUDED.content_sha256,
    stored_at = EXCLUDED.stored_at
