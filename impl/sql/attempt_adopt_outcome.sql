-- name: attempt_adopt_outcome
-- Rule R7 `reconcile` (`adopt`): the uncertain attempt takes the observed outcome.
-- $1 attempt, $2 outcome, $3 now
UPDATE attempts SET state = $2, outcome = $2, ended_at = $3 WHERE id = $1 AND state = 'uncertain'
