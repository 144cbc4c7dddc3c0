-- A forger's full recomputation of every chain (issue 37 item 6): what anyone who can write to the
-- database can do after an edit, since the chain is a keyless sha256. Each job's records are
-- numbered again 2, 3, ... in their stored order (closing the gap a deleted record left), every
-- hash recomputed with the writer's own SQL (migration 0015's encodings, as audit/src/multiply.sql
-- recomputes them), and each job's row made to hold its last head (its attempts' copies of the
-- head, migration 0017, cleared). Run on one connection, after the edit. Its hash loop repeats
-- multiply.sql's on purpose: that script hashes only the copies it made and renumbers nothing;
-- this one is the forger's, over every job, and must stay the writer's encoding independently of
-- the audit's Rust (a ledger it rewrote auditing clean is the check that all three agree).
CREATE TEMP TABLE renumbered AS
SELECT t, rid, job, (row_number() OVER (PARTITION BY job ORDER BY chain_seq, ledger_seq) + 1)::integer AS s
FROM (
    SELECT 'claim' AS t, id::text AS rid, job_id AS job, chain_seq, ledger_seq FROM attempts
    UNION ALL SELECT 'observation', id::text, named_job_id, chain_seq, ledger_seq FROM observations
        WHERE named_job_id IN (SELECT id FROM jobs)
    UNION ALL SELECT 'reconciliation', id::text, job_id, chain_seq, ledger_seq FROM reconciliations
    UNION ALL SELECT 'cancel', id::text, job_id, chain_seq, ledger_seq FROM cancels
    UNION ALL SELECT 'sweep', id::text, job_id, chain_seq, ledger_seq FROM expiry_sweeps
) AS records;
UPDATE attempts AS a SET chain_seq = r.s FROM renumbered AS r WHERE r.t = 'claim' AND r.rid = a.id::text;
UPDATE observations AS a SET chain_seq = r.s FROM renumbered AS r WHERE r.t = 'observation' AND r.rid = a.id::text;
UPDATE reconciliations AS a SET chain_seq = r.s FROM renumbered AS r WHERE r.t = 'reconciliation' AND r.rid = a.id::text;
UPDATE cancels AS a SET chain_seq = r.s FROM renumbered AS r WHERE r.t = 'cancel' AND r.rid = a.id::text;
UPDATE expiry_sweeps AS a SET chain_seq = r.s FROM renumbered AS r WHERE r.t = 'sweep' AND r.rid = a.id::text;
CREATE TEMP TABLE hashes (job uuid, seq integer, hash bytea, PRIMARY KEY (job, seq));
INSERT INTO hashes
SELECT j.id, 1, sha256(ledger_field('job'::text) || ledger_field(1::bigint)
        || ledger_field(j.id) || ledger_field(j.project_id) || ledger_field(j.ledger_seq)
        || ledger_field(j.submitted_at) || ledger_field(j.source_revision)
        || ledger_field(j.source_digest) || ledger_field(j.command)
        || ledger_field(j.target) || ledger_field(j.target_kind))
FROM jobs AS j;
DO $chain$
DECLARE
    s integer := 2;
    n bigint;
BEGIN
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
UPDATE jobs AS j SET chain_seq = h.seq, chain_head = h.hash
FROM hashes AS h WHERE h.job = j.id AND h.seq = (SELECT max(g.seq) FROM hashes AS g WHERE g.job = j.id);
UPDATE attempts SET job_chain_seq = NULL, job_chain_head = NULL;
UPDATE attempts AS a SET chain_hash = h.hash FROM hashes AS h WHERE h.job = a.job_id AND h.seq = a.chain_seq;
UPDATE observations AS o SET chain_hash = h.hash FROM hashes AS h WHERE h.job = o.named_job_id AND h.seq = o.chain_seq;
UPDATE reconciliations AS r SET chain_hash = h.hash FROM hashes AS h WHERE h.job = r.job_id AND h.seq = r.chain_seq;
UPDATE cancels AS x SET chain_hash = h.hash FROM hashes AS h WHERE h.job = x.job_id AND h.seq = x.chain_seq;
UPDATE expiry_sweeps AS x SET chain_hash = h.hash FROM hashes AS h WHERE h.job = x.job_id AND h.seq = x.chain_seq;
DROP TABLE renumbered;
DROP TABLE hashes
