-- name: job_adopt_if_uncertain_and_observed
-- Rule R7 `reconcile` with decision `adopt`: the job takes the outcome observed on the target; its
-- attempt stays current and holds the committed outcome.
-- $1 job, $2 operator's project, $3 finding, $4 now
UPDATE jobs AS j
SET state = CASE $3 WHEN 'observed_passed' THEN 'passed' ELSE 'failed' END,
    outcome = CASE $3 WHEN 'observed_passed' THEN 'passed' ELSE 'failed' END,
    finished_at = $4
WHERE j.id = $1
  AND j.project_id = $2 -- guard: project
  AND j.state = 'uncertain'
  AND $3 IN ('observed_passed', 'observed_failed') -- guard: observed
RETURNING j.current_attempt_id, j.outcome
