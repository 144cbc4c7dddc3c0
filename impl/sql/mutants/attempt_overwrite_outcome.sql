-- name: attempt_overwrite_outcome
-- MUTANT (feature `mutants`, Mutant::ConflictOverwrites): a conflicting result replaces the
-- committed outcome of the attempt and its job.
-- $1 job, $2 attempt, $3 outcome, $4 result digest
WITH a AS (
    UPDATE attempts SET state = $3, outcome = $3, result_digest = $4 WHERE id = $2
)
UPDATE jobs SET state = $3, outcome = $3, result_digest = $4 WHERE id = $1
