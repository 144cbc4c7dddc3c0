-- name: reconciliation_select_of_job
-- The reconciliations asked for the job, in order, one page: ids after $2, at most $3 rows.
-- $1 job, $2 after this id (0: from the start), $3 at most this many
SELECT id, project_id, job_id, attempt_id, finding, decision, verdict, reason, decided_at
FROM reconciliations
WHERE job_id = $1 AND id > $2
ORDER BY id
LIMIT $3
