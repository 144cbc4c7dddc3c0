-- name: observation_select_security_log
-- A project's security log: the observations its runners sent naming a job that is not one of
-- the project's (another project's job: `wrong_project`; no job at all: `unknown_job`), in the
-- order received. They are never in the named job's ledger (observation_select_of_job); both
-- are unattributed (checks 2 and 3 come before attribution). One page: ids after $2, at most $3.
-- The observations are read per sender, in a LATERAL subquery with its own LIMIT (which the
-- planner cannot flatten into a join): a range of observations_unattributed_by_sender keyed by
-- the runner. The store sends it unnamed, so it is planned at every call for the tables as they
-- are: written as a join and kept prepared, a generic plan made while the table was nearly empty
-- read the whole index in id order and joined every runner's rows to the project's (3 ms per
-- read at 9,500 observations, growing with the table; docs/benchmarks.md, "The security log's
-- plan").
-- $1 project, $2 after this id (0: from the start), $3 at most this many
SELECT o.id, o.sender_runner_id, o.kind, o.named_job_id, o.named_attempt_id, o.named_lease_id,
    o.named_fence, o.attempt_id, o.received_at, o.runner_time, o.verdict, o.reason, o.outcome,
    o.payload_sha256
FROM runners AS r
CROSS JOIN LATERAL (
    SELECT s.id, s.sender_runner_id, s.kind, s.named_job_id, s.named_attempt_id,
        s.named_lease_id, s.named_fence, s.attempt_id, s.received_at, s.runner_time, s.verdict,
        s.reason, s.outcome, s.payload_sha256
    FROM observations AS s
    WHERE s.sender_runner_id = r.id
        AND s.attempt_id IS NULL
        AND s.id > $2
        AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = s.named_job_id AND j.project_id = $1)
    ORDER BY s.id
    LIMIT $3
) AS o
WHERE r.project_id = $1
ORDER BY o.id
LIMIT $3
