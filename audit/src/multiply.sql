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
-- migration 0009). Schema: migrations 0001-0009. Not part of the
-- implementation: a measuring tool.

\set ON_ERROR_STOP on
BEGIN;
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
    finished_at, ledger_seq)
SELECT pg_temp.remap(j.id, c.k), pg_temp.remap(j.project_id, c.k), j.submitted_at + c.k * ts.span, j.source_revision, j.source_digest,
    j.command,
    CASE WHEN j.target = j.id::text THEN pg_temp.remap(j.id, c.k)::text ELSE j.target || ':' || c.k END,
    j.target_kind, j.state, j.fence, pg_temp.remap(j.current_attempt_id, c.k), j.cancel_requested,
    j.outcome, j.result_digest, j.finished_at + c.k * ts.span, j.ledger_seq + c.k * b.span
FROM src_jobs AS j, copies AS c, base AS b, timespan AS ts
ORDER BY c.k, j.submitted_seq;

INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state, lease_expiry,
    outcome, result_digest, claimed_at, ended_at, ledger_seq, claim_lease_expiry, slot_token)
SELECT pg_temp.remap(a.id, c.k), pg_temp.remap(a.job_id, c.k), pg_temp.remap(a.project_id, c.k),
    pg_temp.remap(a.runner_id, c.k),
    pg_temp.remap(a.lease_id, c.k), a.fence, a.state, a.lease_expiry + c.k * ts.span, a.outcome,
    a.result_digest, a.claimed_at + c.k * ts.span, a.ended_at + c.k * ts.span,
    a.ledger_seq + c.k * b.span, a.claim_lease_expiry + c.k * ts.span, a.slot_token
FROM src_attempts AS a, copies AS c, base AS b, timespan AS ts;

INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id,
    named_fence, attempt_id, received_at, runner_time, verdict, reason, outcome, payload_sha256,
    ledger_seq, lease_expiry)
SELECT pg_temp.remap(o.sender_runner_id, c.k), o.kind, pg_temp.remap(o.named_job_id, c.k),
    pg_temp.remap(o.named_attempt_id, c.k), pg_temp.remap(o.named_lease_id, c.k), o.named_fence,
    pg_temp.remap(o.attempt_id, c.k), o.received_at + c.k * ts.span,
    o.runner_time + c.k * ts.span, o.verdict, o.reason, o.outcome, o.payload_sha256,
    o.ledger_seq + c.k * b.span, o.lease_expiry + c.k * ts.span
FROM observations AS o, copies AS c, base AS b, timespan AS ts
WHERE o.ledger_seq < b.span
ORDER BY c.k, o.id;

INSERT INTO reconciliations (project_id, job_id, attempt_id, finding, decision, verdict, reason,
    decided_at, ledger_seq)
SELECT pg_temp.remap(r.project_id, c.k), pg_temp.remap(r.job_id, c.k), pg_temp.remap(r.attempt_id, c.k), r.finding,
    r.decision, r.verdict, r.reason, r.decided_at + c.k * ts.span, r.ledger_seq + c.k * b.span
FROM reconciliations AS r, copies AS c, base AS b, timespan AS ts
WHERE r.ledger_seq < b.span
ORDER BY c.k, r.id;

INSERT INTO cancels (project_id, job_id, attempt_id, verdict, reason, requested_at, ledger_seq)
SELECT pg_temp.remap(x.project_id, c.k), pg_temp.remap(x.job_id, c.k), pg_temp.remap(x.attempt_id, c.k), x.verdict,
    x.reason, x.requested_at + c.k * ts.span, x.ledger_seq + c.k * b.span
FROM cancels AS x, copies AS c, base AS b, timespan AS ts
WHERE x.ledger_seq < b.span
ORDER BY c.k, x.id;

INSERT INTO expiry_sweeps (job_id, attempt_id, swept_at, ledger_seq)
SELECT pg_temp.remap(x.job_id, c.k), pg_temp.remap(x.attempt_id, c.k),
    x.swept_at + c.k * ts.span, x.ledger_seq + c.k * b.span
FROM expiry_sweeps AS x, copies AS c, base AS b, timespan AS ts
WHERE x.ledger_seq < b.span
ORDER BY c.k, x.id;

SELECT setval('ledger_seq', (SELECT span * (:copies + 1) FROM base));
COMMIT;
ANALYZE;
