-- name: job_count_unfinished_by_project_and_state
-- The queue depth (`/metrics`): the jobs not finished, by project name and state. Reads only
-- unfinished jobs, where an index lists them: queued jobs through jobs_queued_by_submission;
-- running, cancelling and uncertain jobs through their current attempt, which is active or
-- uncertain (attempts_one_current_per_job; no index of jobs names its state: migration 0020).
SELECT p.name AS project, u.state, count(*) AS jobs
FROM (
    SELECT j.project_id, j.state FROM jobs AS j WHERE j.queued
    UNION ALL
    SELECT j.project_id, j.state
    FROM attempts AS a
    JOIN jobs AS j ON j.id = a.job_id AND j.current_attempt_id = a.id
    WHERE a.state IN ('active', 'uncertain')
      AND j.state IN ('running', 'cancelling', 'uncertain')
) AS u
JOIN projects AS p ON p.id = u.project_id
GROUP BY p.name, u.state
