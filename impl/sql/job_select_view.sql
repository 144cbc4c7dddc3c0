-- name: job_select_view
-- $1 job
SELECT id, project_id, state, current_attempt_id, fence, cancel_requested, outcome, result_digest,
    source_revision, source_digest, command, target, target_kind, submitted_at, finished_at
FROM jobs
WHERE id = $1
