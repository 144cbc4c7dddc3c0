-- A forger's full recomputation of every chain (issue 37 item 6): what anyone who can write to the
-- database can do after an edit, since the chain is a keyless sha256. Each job's records are
-- numbered again 2, 3, ... in their stored order (closing the gap a deleted record left), every
-- hash recomputed with the writer's own SQL (migration 0015's encodings: the function
-- `pg_temp.chain_hashes` of audit/src/multiply.sql, which common/mod.rs defines first on the same
-- connection), and each job's row made to hold its last head (its attempts' copies of the head,
-- migration 0017, cleared). Run on one connection, after the edit. The hashes stay the writer's
-- encoding independently of the audit's Rust (a ledger rewritten by it auditing clean is the check
-- that they agree).
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
SELECT pg_temp.chain_hashes(0);
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
