-- name: job_insert
-- submit: a new job is `queued` with fence 0 and no attempt.
-- $1 id, $2 project, $3 now, $4 source revision, $5 source digest, $6 command, $7 target, $8 target kind
INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest, command, target, target_kind)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
