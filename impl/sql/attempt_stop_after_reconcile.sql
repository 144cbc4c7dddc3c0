-- name: attempt_stop_after_reconcile
-- Rule R7 `reconcile` (`retry`, `abort`): the uncertain attempt was established `stopped`.
-- $1 attempt, $2 now
UPDATE attempts SET state = 'stopped', ended_at = $2 WHERE id = $1 AND state = 'uncertain'
