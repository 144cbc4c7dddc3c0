-- Multiply a recorded ledger for measuring `leasewright audit` on a large one (docs/audit.md):
--   psql "$DATABASE_URL" -v copies=50 -f audit/src/multiply.sql
-- Each copy k of every job is the same history under fresh ids (md5 of the id and k), with its
-- ledger_seq shifted past every earlier copy, so each copy replays exactly as the original did,
-- and every time shifted past the earlier copies' (k times the ledger's time span + 1 day): the
-- copies share projects, so copies at the same times would be one queue claimed out of
-- submission order (`claim_order`, docs/audit.md).
-- Each copy has its own projects and runners (names suffixed `:k`): copies sharing a project
-- would be one queue whose earlier copy's queued jobs later copies' claims pass over
-- (`claim_order`). Slots are copied with their jobs, and with their holder (the reservation,
-- migration 0009). Each copy is chained as its original (migrations 0015, 0017): the copies are
-- written with the triggers off (`session_replication_role = replica`: the chain's triggers would
-- redraw every ledger_seq in insertion order and advance the jobs' rows one record at a time),
-- keeping each record's chain_seq, and their hashes are recomputed from the copied fields, one
-- chain position at a time over every job (ledger_claim_hash and ledger_observation_hash, the
-- writer's own; the submission's, reconciliation's, cancel's and sweep's encodings as the trigger
-- writes them); the job's head (its row's and its current attempt's) is the hash at its stored
-- seq. Schema: migrations 0001-0017. Not part of the implementation: a measuring tool.

\set ON_ERROR_STOP on
BEGIN;
-- Superuser: the triggers and the foreign keys' checks off for this transaction.
SET LOCAL session_replication_role = replica;
CREATE TEMP TABLE base AS SELECT max(m) + 1 AS span FROM (
    SELECT max(ledger_seq) AS m FROM jobs UNION ALL SELECT max(ledger_seq) FROM attempts
    UNION ALL SELECT max(ledger_seq) FROM observations
    UNION ALL SELECT max(ledger_seq) FROM reconciliations
    UNION ALL SELECT max(ledger_seq) FROM cancels UNION ALL SELECT max(ledger_seq) FROM expiry_sweeps
) AS t;
CREATE TEMP TABLE timespan AS SELECT max(t) - min(t) + interval '1 day' AS span FROM (
    SELECT min(submitted_at) AS t FROM jobs UNION ALL SELECT max(submitted_at) FROM jobs
    UNION ALL SELECT max(lease_expiry) FROM attempts UNION ALL SELECT max(claimed_at) FROM attempts
    UNION ALL SELECT max(received_at) FROM observations
    UNION ALL SELECT max(lease_expiry) FROM observations
    UNION ALL SELECT max(decided_at) FROM reconciliations
    UNION ALL SELECT max(requested_at) FROM cancels UNION ALL SELECT max(swept_at) FROM expiry_sweeps
) AS t;
CREATE TEMP TABLE copies AS SELECT generate_series(1, :copies) AS k;
CREATE TEMP TABLE src_jobs AS SELECT * FROM jobs;
CREATE TEMP TABLE src_attempts AS SELECT * FROM attempts;
CREATE FUNCTION pg_temp.remap(id uuid, k int) RETURNS uuid
    LANGUAGE sql IMMUTABLE AS $$ SELECT md5(id::text || ':' || k)::uuid $$;

INSERT INTO projects (id, name, created_at)
SELECT pg_temp.remap(p.id, c.k), p.name || ':' || c.k, p.created_at FROM projects AS p, copies AS c;
INSERT INTO runners (id, project_id, name, token_sha256, created_at)
SELECT pg_temp.remap(r.id, c.k), pg_temp.remap(r.project_id, c.k), r.name || ':' || c.k,
    r.token_sha256, r.created_at
FROM runners AS r, copies AS c;

INSERT INTO target_slots (slot, kind, slot_token, holder_project_id, holder_job_id,
    holder_attempt_id, reserved_at)
SELECT CASE WHEN j.id IS NOT NULL THEN pg_temp.remap(j.id, c.k)::text ELSE s.slot || ':' || c.k END,
    s.kind, s.slot_token, pg_temp.remap(s.holder_project_id, c.k), pg_temp.remap(s.holder_job_id, c.k),
    pg_temp.remap(s.holder_attempt_id, c.k), s.reserved_at + c.k * ts.span
FROM target_slots AS s LEFT JOIN src_jobs AS j ON j.id::text = s.slot, copies AS c, timespan AS ts;

INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest, command, target,
    target_kind, state, fence, current_attempt_id, cancel_requested, outcome, result_digest,
    finished_at, ledger_seq, chain_seq)
SELECT pg_temp.remap(j.id, c.k), pg_temp.remap(j.project_id, c.k), j.submitted_at + c.k * ts.span, j.source_revision, j.source_digest,
    j.command,
    CASE WHEN j.target = j.id::text THEN pg_temp.remap(j.id, c.k)::text ELSE j.target || ':' || c.k END,
    j.target_kind, j.state, j.fence, pg_temp.remap(j.current_attempt_id, c.k), j.cancel_requested,
    j.outcome, j.result_digest, j.finished_at + c.k * ts.span, j.ledger_seq + c.k * b.span,
    j.chain_seq
FROM src_jobs AS j, copies AS c, base AS b, timespan AS ts
ORDER BY c.k, j.submitted_seq;

INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state, lease_expiry,
    outcome, result_digest, claimed_at, ended_at, ledger_seq, claim_lease_expiry, slot_token,
    chain_seq, job_chain_seq)
SELECT pg_temp.remap(a.id, c.k), pg_temp.remap(a.job_id, c.k), pg_temp.remap(a.project_id, c.k),
    pg_temp.remap(a.runner_id, c.k),
    pg_temp.remap(a.lease_id, c.k), a.fence, a.state, a.lease_expiry + c.k * ts.span, a.outcome,
    a.result_digest, a.claimed_at + c.k * ts.span, a.ended_at + c.k * ts.span,
    a.ledger_seq + c.k * b.span, a.claim_lease_expiry + c.k * ts.span, a.slot_token,
    a.chain_seq, a.job_chain_seq
FROM src_attempts AS a, copies AS c, base AS b, timespan AS ts;

INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id,
    named_fence, attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256,
    ledger_seq, lease_expiry, chain_seq)
SELECT pg_temp.remap(o.sender_runner_id, c.k), o.kind, pg_temp.remap(o.named_job_id, c.k),
    pg_temp.remap(o.named_attempt_id, c.k), pg_temp.remap(o.named_lease_id, c.k), o.named_fence,
    pg_temp.remap(o.attempt_id, c.k), o.received_at + c.k * ts.span,
    o.runner_time + c.k * ts.span, o.verdict, o.reason, o.outcome, o.payload_sha256,
    o.ledger_seq + c.k * b.span, o.lease_expiry + c.k * ts.span, o.chain_seq
FROM observations AS o, copies AS c, base AS b, timespan AS ts
WHERE o.ledger_seq < b.span
ORDER BY c.k, o.id;

INSERT INTO reconciliations (project_id, job_id, attempt_id, finding, decision, verdict, reason,
    decided_at, ledger_seq, chain_seq)
SELECT pg_temp.remap(r.project_id, c.k), pg_temp.remap(r.job_id, c.k), pg_temp.remap(r.attempt_id, c.k), r.finding,
    r.decision, r.verdict, r.reason, r.decided_at + c.k * ts.span, r.ledger_seq + c.k * b.span,
    r.chain_seq
FROM reconciliations AS r, copies AS c, base AS b, timespan AS ts
WHERE r.ledger_seq < b.span
ORDER BY c.k, r.id;

INSERT INTO cancels (project_id, job_id, attempt_id, verdict, reason, requested_at, ledger_seq,
    chain_seq)
SELECT pg_temp.remap(x.project_id, c.k), pg_temp.remap(x.job_id, c.k), pg_temp.remap(x.attempt_id, c.k), x.verdict,
    x.reason, x.requested_at + c.k * ts.span, x.ledger_seq + c.k * b.span, x.chain_seq
FROM cancels AS x, copies AS c, base AS b, timespan AS ts
WHERE x.ledger_seq < b.span
ORDER BY c.k, x.id;

INSERT INTO expiry_sweeps (job_id, attempt_id, swept_at, ledger_seq, chain_seq)
SELECT pg_temp.remap(x.job_id, c.k), pg_temp.remap(x.attempt_id, c.k),
    x.swept_at + c.k * ts.span, x.ledger_seq + c.k * b.span, x.chain_seq
FROM expiry_sweeps AS x, copies AS c, base AS b, timespan AS ts
WHERE x.ledger_seq < b.span
ORDER BY c.k, x.id;

-- The chain hashes of every job submitted at or after ledger position `from_seq` (and chained):
-- every hash at (job, seq) into the temp table `hashes`, seq 1 the submission's, then one position
-- at a time over every such job (a record at position s hashes on the job's hash at s - 1), by the
-- writer's own functions and encodings. Also the forger's suite's (audit/tests/common/mod.rs cuts
-- it out between the two marker lines and calls it over every job, after renumbering them).
-- chain_hashes: begin
CREATE FUNCTION pg_temp.chain_hashes(from_seq bigint) RETURNS void LANGUAGE plpgsql AS $chain$
DECLARE
    s integer := 2;
    n bigint;
BEGIN
    CREATE TEMP TABLE hashes (job uuid, seq integer, hash bytea, PRIMARY KEY (job, seq));
    INSERT INTO hashes
    SELECT j.id, 1, sha256(ledger_field('job'::text) || ledger_field(1::bigint)
            || ledger_field(j.id) || ledger_field(j.project_id) || ledger_field(j.ledger_seq)
            || ledger_field(j.submitted_at) || ledger_field(j.source_revision)
            || ledger_field(j.source_digest) || ledger_field(j.command)
            || ledger_field(j.target) || ledger_field(j.target_kind))
    FROM jobs AS j
    WHERE j.ledger_seq >= from_seq AND j.chain_seq IS NOT NULL;
    LOOP
        INSERT INTO hashes
        SELECT a.job_id, s, ledger_claim_hash(h.hash, s, a.id, a.job_id, a.project_id,
            a.ledger_seq, a.runner_id, a.lease_id, a.fence, a.slot_token, a.claimed_at,
            a.claim_lease_expiry)
        FROM attempts AS a JOIN hashes AS h ON h.job = a.job_id AND h.seq = s - 1
        WHERE a.chain_seq = s
        UNION ALL
        SELECT o.named_job_id, s, ledger_observation_hash(h.hash, s, o.id, o.named_job_id,
            o.ledger_seq, o.sender_runner_id, o.kind, o.named_attempt_id, o.named_lease_id,
            o.named_fence, o.attempt_id, o.received_at, o.runner_time, o.verdict, o.reason,
            o.outcome, o.payload_sha256, o.lease_expiry)
        FROM observations AS o JOIN hashes AS h ON h.job = o.named_job_id AND h.seq = s - 1
        WHERE o.chain_seq = s
        UNION ALL
        SELECT r.job_id, s, sha256(h.hash || ledger_field('reconciliation'::text)
            || ledger_field(s::bigint) || ledger_field(r.id) || ledger_field(r.job_id)
            || ledger_field(r.ledger_seq) || ledger_field(r.project_id)
            || ledger_field(r.attempt_id) || ledger_field(r.finding) || ledger_field(r.decision)
            || ledger_field(r.verdict) || ledger_field(r.reason) || ledger_field(r.decided_at))
        FROM reconciliations AS r JOIN hashes AS h ON h.job = r.job_id AND h.seq = s - 1
        WHERE r.chain_seq = s
        UNION ALL
        SELECT x.job_id, s, sha256(h.hash || ledger_field('cancel'::text)
            || ledger_field(s::bigint) || ledger_field(x.id) || ledger_field(x.job_id)
            || ledger_field(x.ledger_seq) || ledger_field(x.project_id)
            || ledger_field(x.attempt_id) || ledger_field(x.verdict) || ledger_field(x.reason)
            || ledger_field(x.requested_at))
        FROM cancels AS x JOIN hashes AS h ON h.job = x.job_id AND h.seq = s - 1
        WHERE x.chain_seq = s
        UNION ALL
        SELECT x.job_id, s, sha256(h.hash || ledger_field('sweep'::text)
            || ledger_field(s::bigint) || ledger_field(x.id) || ledger_field(x.job_id)
            || ledger_field(x.ledger_seq) || ledger_field(x.attempt_id)
            || ledger_field(x.swept_at))
        FROM expiry_sweeps AS x JOIN hashes AS h ON h.job = x.job_id AND h.seq = s - 1
        WHERE x.chain_seq = s;
        GET DIAGNOSTICS n = ROW_COUNT;
        EXIT WHEN n = 0;
        s := s + 1;
    END LOOP;
END
$chain$;
-- chain_hashes: end
-- The copies' chains.
SELECT pg_temp.chain_hashes(span) FROM base;
ANALYZE hashes;
UPDATE jobs AS j SET chain_head = h.hash
FROM hashes AS h WHERE h.job = j.id AND h.seq = j.chain_seq;
UPDATE attempts AS a SET chain_hash = h.hash,
    job_chain_head = (SELECT g.hash FROM hashes AS g WHERE g.job = a.job_id AND g.seq = a.job_chain_seq)
FROM hashes AS h WHERE h.job = a.job_id AND h.seq = a.chain_seq;
UPDATE observations AS o SET chain_hash = h.hash
FROM hashes AS h WHERE h.job = o.named_job_id AND h.seq = o.chain_seq;
UPDATE reconciliations AS r SET chain_hash = h.hash
FROM hashes AS h WHERE h.job = r.job_id AND h.seq = r.chain_seq;
UPDATE cancels AS x SET chain_hash = h.hash
FROM hashes AS h WHERE h.job = x.job_id AND h.seq = x.chain_seq;
UPDATE expiry_sweeps AS x SET chain_hash = h.hash
FROM hashes AS h WHERE h.job = x.job_id AND h.seq = x.chain_seq;

SELECT setval('ledger_seq', (SELECT span * (:copies + 1) FROM base));
COMMIT;
VACUUM ANALYZE;
