-- name: job_lock_finished_before
-- Retention, one batch's pick: lock at most $4 jobs that finished before $1, earliest submitted
-- first, and say of each whether its whole ledger is audited (every record at or below the audit
-- watermark $2; NULL: no watermark, nothing is audited). With $3 false only audited jobs are picked.
-- SKIP LOCKED: a job another transaction holds (a late runner message being recorded, another
-- prune's batch) is skipped, never waited for. Only job rows are locked; the slot's row is read,
-- not locked, so a claim of the slot's next job never waits for a prune.
-- The jobs are walked in submission order through jobs_unqueued_by_submission (migration 0020:
-- no index of jobs names finished_at, so that a result's update of the row is HOT), among those
-- submitted before the cutoff: a job finished before it was submitted before it, by the clock of
-- the replica that finished it, which is within 2 * max_clock_skew of the one that took it
-- (docs/protocol.md §3.1).
-- $1 finished before, $2 audited through (or NULL), $3 also unaudited jobs, $4 batch size
SELECT j.id, ledger.last_record <= coalesce($2, -1) AS audited
FROM jobs AS j
CROSS JOIN LATERAL (
    SELECT greatest(j.ledger_seq,
        (SELECT max(a.ledger_seq) FROM attempts AS a WHERE a.job_id = j.id),
        (SELECT max(o.ledger_seq) FROM observations AS o WHERE o.named_job_id = j.id),
        (SELECT max(r.ledger_seq) FROM reconciliations AS r WHERE r.job_id = j.id),
        (SELECT max(c.ledger_seq) FROM cancels AS c WHERE c.job_id = j.id),
        (SELECT max(e.ledger_seq) FROM expiry_sweeps AS e WHERE e.job_id = j.id)) AS last_record
) AS ledger
WHERE NOT j.queued
  AND j.submitted_at < $1 + 2 * coalesce(
      (SELECT p.max_clock_skew FROM lease_policy AS p WHERE p.id), interval '0')
  AND j.finished_at < $1 -- guard: finished before the cutoff
  AND j.state IN ('passed', 'failed', 'cancelled', 'aborted') -- guard: terminal
  AND NOT EXISTS (SELECT 1 FROM target_slots AS s
                  WHERE s.slot = j.target AND s.holder_job_id = j.id) -- guard: holds no slot
  AND ($3 OR (j.ledger_seq <= coalesce($2, -1)
              AND ledger.last_record <= coalesce($2, -1))) -- guard: audited
ORDER BY j.submitted_at
LIMIT $4
FOR UPDATE OF j SKIP LOCKED
