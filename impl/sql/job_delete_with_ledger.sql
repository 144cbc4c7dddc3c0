-- name: job_delete_with_ledger
-- Retention, one batch's delete: the jobs $1 (locked by job_lock_finished_before in this
-- transaction) and everything they own: their attempts, every record of their ledger
-- (observations naming them, reconciliations, cancels, expiry sweeps), their attempts' log chunks
-- and artifacts, and the demonstration targets' record of their mutations. Kept: the projects'
-- cache entries (a project's, whichever attempt stored them), the slots' rows with their token
-- counters, the targets' state. Rows of other schemas' tables that reference a job go by their
-- own foreign keys' ON DELETE (the server's: server/migrations/1002). Every sub-statement sees the
-- same snapshot; the foreign keys left (logs and artifacts to attempts, attempts to jobs) are
-- checked at the statement's end, when every row that referenced a deleted one is gone too.
-- Each deleted job leaves its chain's tombstone in ledger_pruned (migration 0015), with the ledger
-- position the prune drew for it (`pruned_seq`, migration 0019: the pruning on the record).
-- Counts per table, for the prune's report.
-- $1 job ids
WITH doomed AS (
    SELECT id FROM jobs
    WHERE id = ANY($1)
      AND state IN ('passed', 'failed', 'cancelled', 'aborted') -- guard: terminal
), tombstones AS (
    -- Each pruned job's last chain head (migration 0015): a later `audit --since` finds it here
    -- instead of reporting the job's records deleted. Jobs submitted before 0015 have none.
    -- The head: the later of the job row's and its current attempt's (migration 0017).
    INSERT INTO ledger_pruned (job_id, chain_seq, chain_head, job_ledger_seq, max_ledger_seq,
        pruned_seq)
    SELECT j.id, ledger_later_seq(j.chain_seq, a.job_chain_seq),
        ledger_later_head(j.chain_seq, j.chain_head, a.job_chain_seq, a.job_chain_head),
        j.ledger_seq, greatest(j.ledger_seq,
        (SELECT max(ledger_seq) FROM attempts WHERE job_id = j.id),
        (SELECT max(ledger_seq) FROM observations WHERE named_job_id = j.id),
        (SELECT max(ledger_seq) FROM reconciliations WHERE job_id = j.id),
        (SELECT max(ledger_seq) FROM cancels WHERE job_id = j.id),
        (SELECT max(ledger_seq) FROM expiry_sweeps WHERE job_id = j.id)),
        nextval('ledger_seq')
    FROM jobs AS j
    LEFT JOIN attempts AS a ON a.id = j.current_attempt_id
    WHERE j.id IN (SELECT id FROM doomed)
      AND j.chain_seq IS NOT NULL
    ON CONFLICT (job_id) DO NOTHING
), doomed_attempts AS (
    SELECT id FROM attempts WHERE job_id IN (SELECT id FROM doomed)
), logs_deleted AS (
    DELETE FROM logs WHERE attempt_id IN (SELECT id FROM doomed_attempts) RETURNING 1
), artifacts_deleted AS (
    DELETE FROM artifacts WHERE attempt_id IN (SELECT id FROM doomed_attempts) RETURNING 1
), observations_deleted AS (
    DELETE FROM observations WHERE named_job_id IN (SELECT id FROM doomed) RETURNING 1
), reconciliations_deleted AS (
    DELETE FROM reconciliations WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), cancels_deleted AS (
    DELETE FROM cancels WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), sweeps_deleted AS (
    DELETE FROM expiry_sweeps WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), mutations_deleted AS (
    DELETE FROM target_mutations WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), attempts_deleted AS (
    DELETE FROM attempts WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), jobs_deleted AS (
    DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM jobs_deleted) AS jobs,
    (SELECT count(*) FROM attempts_deleted) AS attempts,
    (SELECT count(*) FROM observations_deleted) AS observations,
    (SELECT count(*) FROM reconciliations_deleted) AS reconciliations,
    (SELECT count(*) FROM cancels_deleted) AS cancels,
    (SELECT count(*) FROM sweeps_deleted) AS expiry_sweeps,
    (SELECT count(*) FROM logs_deleted) AS log_chunks,
    (SELECT count(*) FROM artifacts_deleted) AS artifacts,
    (SELECT count(*) FROM mutations_deleted) AS target_mutations
