-- name: log_select_of_attempt
-- $1 attempt
SELECT seq, content FROM logs WHERE attempt_id = $1 ORDER BY seq
