-- name: runner_select_page_of_project
-- a page of a project's runners in listing order (`listed_seq` after the cursor).
-- $1 project, $2 after (listed_seq), $3 limit
SELECT id, name, created_at, revoked_at, listed_seq FROM runners
WHERE project_id = $1 AND listed_seq > $2
ORDER BY listed_seq LIMIT $3
