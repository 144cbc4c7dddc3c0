-- name: cancel_record
-- Rule R6 `cancel`: every cancel asked for is recorded, accepted, acknowledged or rejected, in the
-- transaction that decides it (the audit's ledger: docs/audit.md).
-- $1 operator's project, $2 job, $3 the job's current attempt (NULL: none, or another project's
-- job), $4 verdict, $5 reason, $6 now
INSERT INTO cancels (project_id, job_id, attempt_id, verdict, reason, requested_at)
VALUES ($1, $2, $3, $4, $5, $6)
