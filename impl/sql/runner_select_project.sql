-- name: runner_select_project
-- §6.1 check 1 / §6.2 check 1 (`unknown_runner`): the sender exists; its project authorizes it.
-- $1 runner
SELECT project_id FROM runners WHERE id = $1
