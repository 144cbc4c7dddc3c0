-- name: job_make_uncertain_if_lease_expired
-- Rule R4 `expiry sweep`: every `running`/`cancelling` job whose current lease expired at `now`
-- by more than 2 * max_clock_skew (docs/protocol.md §3.1: replicas' clocks may disagree by 2δ;
-- migration 0016; 0 with one clock) becomes `uncertain`, and so does its attempt. Never
-- `queued`: a timeout is not a stopped process.
-- Each job made uncertain is recorded in expiry_sweeps (the audit's ledger) by the same statement,
-- after its job's row is updated (the record reads `swept`): the record's trigger advances the
-- job's chain in that row (migration 0015), which this statement must not update after it.
-- The executing attempts are found through attempts_one_current_per_job (the active and uncertain
-- ones), each job by its key: no index of jobs names its state (migration 0020).
-- $1 now, $2 project (NULL: every project)
WITH expired AS (
    SELECT j.id AS job_id, a.id AS attempt_id
    FROM attempts AS a
    JOIN jobs AS j ON j.id = a.job_id AND j.current_attempt_id = a.id
    WHERE a.state = 'active'
      AND j.state IN ('running', 'cancelling')
      AND a.lease_expiry <= $1 - 2 * coalesce(
          (SELECT p.max_clock_skew FROM lease_policy AS p WHERE p.id), interval '0')
      AND ($2::uuid IS NULL OR j.project_id = $2)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j, a
),
uncertain_attempts AS (
    UPDATE attempts AS a
    SET state = 'uncertain'
    FROM expired
    WHERE a.id = expired.attempt_id
),
swept AS (
    UPDATE jobs AS j
    SET state = 'uncertain'
    FROM expired
    WHERE j.id = expired.job_id
    RETURNING j.id, expired.attempt_id
),
recorded AS (
    INSERT INTO expiry_sweeps (job_id, attempt_id, swept_at)
    SELECT id, attempt_id, $1 FROM swept
    ORDER BY id
)
SELECT id FROM swept
