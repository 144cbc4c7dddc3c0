-- name: log_append_once
-- Rule R8 `log append`: idempotent per (attempt, sequence number). Zero rows: the sequence number
-- was appended before; same content is acknowledged, other content is a `sequence_conflict`.
-- $1 attempt, $2 seq, $3 content, $4 content sha256, $5 now
INSERT INTO logs (attempt_id, seq, content, content_sha256, appended_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT logs_one_chunk_per_attempt_seq DO NOTHING
RETURNING seq
