-- name: attempt_heartbeat_if_current
-- Rule R2 `heartbeat`, the accept path in one statement (one round trip, one transaction): lock
-- the job row (as job_lock does), extend the lease of the exact current attempt while it is still
-- valid, and record the accepted heartbeat (as observation_record does), chained in the attempt's
-- one update (migration 0017): the observation's id and ledger position drawn under the job's row
-- lock, the job's head (the later of the job row's and the attempt's) advanced in the attempt's
-- row, the observation inserted chained (the trigger leaves it as it is), so the job's row is
-- only locked, never rewritten.
-- Zero rows: nothing was changed or recorded (an id and a ledger position may have been drawn:
-- gaps, as a rolled-back transaction leaves); the store classifies the tuple by §6.1 in a
-- transaction of its own (job_lock, ...), never retrying this statement without its predicates.
-- $1 runner, $2 job, $3 attempt, $4 lease id, $5 fence, $6 now (the lease is judged by it),
-- $7 new lease expiry, $8 received at, $9 runner time
WITH job AS (
    SELECT id, project_id, state, current_attempt_id, cancel_requested, chain_seq, chain_head
    FROM jobs
    WHERE id = $2
    FOR NO KEY UPDATE
), drawn AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('observations', 'id')) AS observation_id,
        nextval('ledger_seq') AS ledger_seq
    FROM job
), beat AS (
    UPDATE attempts AS a
    SET lease_expiry = $7,
        job_chain_seq = ledger_later_seq(j.chain_seq, a.job_chain_seq) + 1,
        job_chain_head = ledger_observation_hash(
            ledger_later_head(j.chain_seq, j.chain_head, a.job_chain_seq, a.job_chain_head),
            ledger_later_seq(j.chain_seq, a.job_chain_seq) + 1, d.observation_id, $2,
            d.ledger_seq, $1, 'heartbeat', $3, $4, $5, $3, $8, $9, 'accepted', NULL::text,
            NULL::text, NULL::text, $7)
    FROM job AS j, runners AS r, drawn AS d
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
      AND j.state IN ('running', 'cancelling')
      AND $6 < a.lease_expiry -- guard: expiry
    RETURNING a.lease_expiry, j.cancel_requested, a.job_chain_seq, a.job_chain_head,
        d.observation_id, d.ledger_seq
), recorded AS (
    INSERT INTO observations (id, sender_runner_id, kind, named_job_id, named_attempt_id,
        named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, lease_expiry,
        ledger_seq, chain_seq, chain_hash)
    OVERRIDING SYSTEM VALUE
    SELECT beat.observation_id, $1, 'heartbeat', $2, $3, $4, $5, $3, $8, $9, 'accepted',
        beat.lease_expiry, beat.ledger_seq, beat.job_chain_seq, beat.job_chain_head
    FROM beat
)
SELECT lease_expiry, cancel_requested FROM beat
