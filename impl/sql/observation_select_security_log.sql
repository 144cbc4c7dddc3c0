-- name: observation_select_security_log
-- A project's security log: the observations its runners sent naming a job that is not one of
-- the project's (another project's job: `wrong_project`; no job at all: `unknown_job`), in the
-- order received. They are never in the named job's ledger (observation_select_of_job); both
-- are unattributed (checks 2 and 3 come before attribution). One page: ids after $2, at most $3.
-- $1 project, $2 after this id (0: from the start), $3 at most this many
SELECT o.id, o.sender_runner_id, o.kind, o.named_job_id, o.named_attempt_id, o.named_lease_id,
    o.named_fence, o.attempt_id, o.received_at, o.runner_time, o.verdict, o.reason, o.outcome,
    o.payload_sha256
FROM observations AS o
JOIN runners AS r ON r.id = o.sender_runner_id
WHERE r.project_id = $1
    AND o.attempt_id IS NULL
    AND o.id > $2
    AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = o.named_job_id AND j.project_id = $1)
ORDER BY o.id
LIMIT $3
