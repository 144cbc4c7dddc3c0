-- name: artifact_get
-- Rule R8 `artifact get`: zero rows is `not_found`.
-- $1 attempt, $2 name
SELECT content FROM artifacts WHERE attempt_id = $1 AND name = $2
