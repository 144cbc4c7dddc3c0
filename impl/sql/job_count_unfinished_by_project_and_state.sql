-- name: job_count_unfinished_by_project_and_state
-- The queue depth (`/metrics`): the jobs not finished, by project name and state. Reads only
-- unfinished jobs where an index lists them (queued: jobs_queued_by_submission; running and
-- cancelling: jobs_leased); uncertain jobs have no index of their own.
SELECT p.name AS project, j.state, count(*) AS jobs
FROM jobs AS j
JOIN projects AS p ON p.id = j.project_id
WHERE j.state IN ('queued', 'running', 'cancelling', 'uncertain')
GROUP BY p.name, j.state
