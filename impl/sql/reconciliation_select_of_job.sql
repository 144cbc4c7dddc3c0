-- name: reconciliation_select_of_job
-- $1 job
SELECT id, project_id, job_id, attempt_id, finding, decision, verdict, reason, decided_at
FROM reconciliations
WHERE job_id = $1
ORDER BY id
