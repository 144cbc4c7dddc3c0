-- name: reconciliation_record
-- Rule R7 `reconcile`: every reconciliation asked for is recorded, accepted or rejected.
-- $1 operator's project, $2 job, $3 attempt, $4 finding, $5 decision, $6 verdict, $7 reason, $8 now
INSERT INTO reconciliations (project_id, job_id, attempt_id, finding, decision, verdict, reason,
    decided_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
