-- name: observation_select_of_job
-- The job's ledger: every observation that named the job, attributed or not, in the order
-- received, except what a runner of another project sent (docs/protocol.md §7: a runner never
-- writes into another project's ledger; those rows are its own project's security log,
-- observation_select_security_log). One page: ids after $2, at most $3 rows.
-- $1 job, $2 after this id (0: from the start), $3 at most this many
SELECT o.id, o.sender_runner_id, o.kind, o.named_job_id, o.named_attempt_id, o.named_lease_id,
    o.named_fence, o.attempt_id, o.received_at, o.runner_time, o.verdict, o.reason, o.outcome,
    o.payload_sha256
FROM observations AS o
WHERE o.named_job_id = $1
    AND o.id > $2
    AND NOT EXISTS (
        SELECT 1 FROM runners AS r, jobs AS j
        WHERE r.id = o.sender_runner_id AND j.id = o.named_job_id AND r.project_id <> j.project_id)
ORDER BY o.id
LIMIT $3
