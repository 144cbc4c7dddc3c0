-- name: attempt_commit_results_if_current
-- Rule R3 `result` for several results at once (a batch result), the accept path of every item
-- in one statement (one round trip, one transaction): exactly attempt_commit_result_if_current
-- applied to each item (each result chained in its job's one update after the later of the job
-- row's and the attempt's head, as there). The items' jobs are locked in job-id order (as the
-- sweep locks them, so batches and sweeps never deadlock); of several items naming one job only the first is tried
-- here, so a later one is judged after it, as if the items were sent one after another.
-- Returns the accepted items' positions (1-based; `finished` false would be a bug: the job did
-- not take its attempt's outcome). An item not returned changed and recorded
-- nothing; the store then applies the single result to it (attempt_commit_result_if_current,
-- then the §6.1 classification), in item order, never retrying this statement without its
-- predicates.
-- $1 runners, $2 jobs, $3 attempts, $4 lease ids, $5 fences, $6 now (leases are judged by it),
-- $7 outcomes, $8 result digests, $9 received at, $10 runner times, $11 payload sha256s
-- (arrays of one length, one element per item)
WITH item AS (
    SELECT DISTINCT ON (i.job) i.*
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::bigint[], $7::text[],
                $8::text[], $10::timestamptz[], $11::text[])
        WITH ORDINALITY AS i (runner, job, attempt, lease_id, fence, outcome, result_digest,
                              runner_time, payload_sha256, position)
    ORDER BY i.job, i.position
), job AS (
    SELECT id, project_id, state, current_attempt_id
    FROM jobs
    WHERE id IN (SELECT job FROM item)
    ORDER BY id
    FOR NO KEY UPDATE
), committed AS (
    UPDATE attempts AS a
    SET state = i.outcome, outcome = i.outcome, result_digest = i.result_digest, ended_at = $9
    FROM item AS i, job AS j, runners AS r
    WHERE a.id = i.attempt
      AND a.job_id = i.job
      AND j.id = a.job_id
      AND r.id = i.runner
      AND j.project_id = r.project_id -- guard: project
      AND a.runner_id = r.id
      AND a.lease_id = i.lease_id -- guard: lease
      AND a.fence = i.fence -- guard: fence
      AND j.current_attempt_id = a.id -- guard: current
      AND a.state = 'active'
      AND $6 < a.lease_expiry -- guard: expiry
      AND ((j.state = 'running' AND i.outcome IN ('passed', 'failed'))
           OR (j.state = 'cancelling' AND i.outcome = 'cancelled'))
    RETURNING a.id, a.job_id, a.claimed_at, i.outcome, i.result_digest, a.job_chain_seq,
        a.job_chain_head
), drawn AS MATERIALIZED (
    SELECT c.job_id, nextval(pg_get_serial_sequence('observations', 'id')) AS observation_id,
        nextval('ledger_seq') AS ledger_seq
    FROM committed AS c
), finished AS (
    UPDATE jobs AS j
    SET state = c.outcome, outcome = c.outcome, result_digest = c.result_digest,
        finished_at = $9,
        chain_seq = ledger_later_seq(j.chain_seq, c.job_chain_seq) + 1,
        chain_head = ledger_observation_hash(
            ledger_later_head(j.chain_seq, j.chain_head, c.job_chain_seq, c.job_chain_head),
            ledger_later_seq(j.chain_seq, c.job_chain_seq) + 1, d.observation_id, i.job,
            d.ledger_seq, i.runner, 'result', i.attempt, i.lease_id, i.fence, i.attempt, $9, i.runner_time, 'accepted', NULL::text, i.outcome, i.payload_sha256,
            NULL::timestamptz)
    FROM committed AS c, item AS i, drawn AS d
    WHERE j.id = c.job_id
      AND i.job = c.job_id
      AND d.job_id = c.job_id
      AND j.current_attempt_id = c.id
      AND j.state IN ('running', 'cancelling')
    RETURNING j.id, j.target, j.chain_seq, j.chain_head, d.observation_id, d.ledger_seq
), released AS (
    UPDATE target_slots AS s
    SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL,
        reserved_at = NULL
    FROM finished AS f
    WHERE s.slot = f.target
      AND s.holder_job_id = f.id
), recorded AS (
    INSERT INTO observations (id, sender_runner_id, kind, named_job_id, named_attempt_id,
        named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, outcome,
        payload_sha256, ledger_seq, chain_seq, chain_hash)
    OVERRIDING SYSTEM VALUE
    SELECT f.observation_id, i.runner, 'result', i.job, i.attempt, i.lease_id, i.fence,
        i.attempt, $9, i.runner_time, 'accepted', i.outcome, i.payload_sha256, f.ledger_seq,
        f.chain_seq, f.chain_head
    FROM item AS i
    JOIN finished AS f ON f.id = i.job
    ORDER BY i.position
)
SELECT i.position, f.id IS NOT NULL AS finished, c.claimed_at
FROM committed AS c
JOIN item AS i ON i.job = c.job_id
LEFT JOIN finished AS f ON f.id = c.job_id
ORDER BY i.position
