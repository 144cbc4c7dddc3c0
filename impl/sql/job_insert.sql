-- name: job_insert
-- submit: a new job is `queued` with fence 0 and no attempt. The job's target slot is registered
-- with the job's kind if no job named it before (§8.1); a slot registered with another kind
-- refuses the job through jobs_target_kind_is_the_slots (`target_kind_mismatch`).
-- $1 id, $2 project, $3 now, $4 source revision, $5 source digest, $6 command, $7 target, $8 target kind
WITH slot AS (
    INSERT INTO target_slots (slot, kind) VALUES ($7, $8)
    ON CONFLICT (slot) DO NOTHING
)
INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest, command, target, target_kind)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
