-- name: runner_insert
-- $1 id, $2 project, $3 name, $4 token sha256, $5 now
INSERT INTO runners (id, project_id, name, token_sha256, created_at) VALUES ($1, $2, $3, $4, $5)
