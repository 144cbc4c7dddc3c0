-- name: project_insert
-- $1 id, $2 name, $3 now
INSERT INTO projects (id, name, created_at) VALUES ($1, $2, $3)
