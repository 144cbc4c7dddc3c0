-- name: attempt_commit_result_if_current
-- Rule R3 `result`, the accept path in one statement (one round trip, one transaction): lock the
-- job row (as job_lock does); the exact current attempt, with a valid lease, commits its outcome
-- (`cancelled` only while the job is `cancelling`, `passed`/`failed` only while it is `running`);
-- the job takes the outcome; its target reservation is released (as target_release does: the
-- holder columns of its slot's row cleared); the accepted result is recorded (as
-- observation_record does), chained in the job's one update (migration 0015: the observation's id
-- and ledger position drawn under the job's row lock, the trigger leaving a chained record as it
-- is, so the job's row gets no second version), after the job's head: the later of the job row's
-- and the committed attempt's, which its accepted heartbeats advance (migration 0017; read from
-- the attempt's updated row, so a heartbeat committed while this statement waited is seen).
-- Zero rows: nothing was changed or recorded; the store classifies the tuple by §6.1 (late report,
-- duplicate, conflict, ...) in a transaction of its own, never retrying this statement without
-- its predicates. `committed` <> `finished` would be a bug (both follow from the locked job row).
-- `claimed_at`: the committed attempt's claim time (the job's run, for the server's metrics).
-- $1 runner, $2 job, $3 attempt, $4 lease id, $5 fence, $6 now (the lease is judged by it),
-- $7 outcome, $8 result digest, $9 received at, $10 runner time, $11 payload sha256
WITH job AS (
    SELECT id, project_id, state, current_attempt_id
    FROM jobs
    WHERE id = $2
    FOR NO KEY UPDATE
), committed AS (
    UPDATE attempts AS a
    SET state = $7, outcome = $7, result_digest = $8, ended_at = $9
    FROM job AS j, runners AS r
    WHERE a.id = $3
      AND a.job_id = $2
      AND j.id = a.job_id
      AND r.id = $1
      AND j.project_id = r.project_id -- guard: project
      AND a.runner_id = r.id
      AND a.lease_id = $4 -- guard: lease
      AND a.fence = $5 -- guard: fence
      AND j.current_attempt_id = a.id -- guard: current
      AND a.state = 'active'
      AND $6 < a.lease_expiry -- guard: expiry
      AND ((j.state = 'running' AND $7 IN ('passed', 'failed'))
           OR (j.state = 'cancelling' AND $7 = 'cancelled'))
    RETURNING a.id, a.job_id, a.claimed_at, a.job_chain_seq, a.job_chain_head
), drawn AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('observations', 'id')) AS observation_id,
        nextval('ledger_seq') AS ledger_seq
    FROM committed
), finished AS (
    UPDATE jobs AS j
    SET state = $7, outcome = $7, result_digest = $8, finished_at = $9,
        chain_seq = ledger_later_seq(j.chain_seq, c.job_chain_seq) + 1,
        chain_head = ledger_observation_hash(
            ledger_later_head(j.chain_seq, j.chain_head, c.job_chain_seq, c.job_chain_head),
            ledger_later_seq(j.chain_seq, c.job_chain_seq) + 1, d.observation_id, $2,
            d.ledger_seq, $1, 'result', $3, $4, $5, $3, $9, $10, 'accepted', NULL::text, $7,
            $11, NULL::timestamptz)
    FROM committed AS c, drawn AS d
    WHERE j.id = c.job_id
      AND j.current_attempt_id = $3
      AND j.state IN ('running', 'cancelling')
    RETURNING j.id, j.target, j.chain_seq, j.chain_head
), released AS (
    UPDATE target_slots
    SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL,
        reserved_at = NULL
    WHERE slot = (SELECT target FROM finished)
      AND holder_job_id = (SELECT id FROM finished)
), recorded AS (
    INSERT INTO observations (id, sender_runner_id, kind, named_job_id, named_attempt_id,
        named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, outcome,
        payload_sha256, ledger_seq, chain_seq, chain_hash)
    OVERRIDING SYSTEM VALUE
    SELECT d.observation_id, $1, 'result', $2, $3, $4, $5, $3, $9, $10, 'accepted', $7, $11,
        d.ledger_seq, f.chain_seq, f.chain_head
    FROM finished AS f, drawn AS d
)
SELECT (SELECT count(*) FROM committed) AS committed, (SELECT count(*) FROM finished) AS finished,
    (SELECT claimed_at FROM committed) AS claimed_at
