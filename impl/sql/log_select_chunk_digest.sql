-- name: log_select_chunk_digest
-- $1 attempt, $2 seq
SELECT content_sha256 FROM logs WHERE attempt_id = $1 AND seq = $2
