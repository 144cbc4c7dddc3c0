-- name: job_requeue_if_lease_expired
-- MUTANT (feature `mutants`, Mutant::ExpiryRequeues): the rule R4 gets wrong on purpose. An
-- expired job is silently returned to the queue and its attempt forgotten as stopped.
-- $1 now, $2 project (NULL: every project)
WITH expired AS (
    SELECT j.id AS job_id, a.id AS attempt_id, j.target
    FROM jobs AS j
    JOIN attempts AS a ON a.id = j.current_attempt_id
    WHERE j.state IN ('running', 'cancelling')
      AND a.state = 'active'
      AND a.lease_expiry <= $1
      AND ($2::uuid IS NULL OR j.project_id = $2)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j, a
),
stopped_attempts AS (
    UPDATE attempts AS a
    SET state = 'stopped', ended_at = $1
    FROM expired
    WHERE a.id = expired.attempt_id
),
released AS (
    UPDATE target_slots AS s
    SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL,
        reserved_at = NULL
    FROM expired
    WHERE s.slot = expired.target AND s.holder_job_id = expired.job_id
)
UPDATE jobs AS j
SET state = 'queued', current_attempt_id = NULL
FROM expired
WHERE j.id = expired.job_id
RETURNING j.id
