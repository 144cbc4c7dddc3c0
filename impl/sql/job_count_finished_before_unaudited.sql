-- name: job_count_finished_before_unaudited
-- Retention, the prune's report: how many jobs finished before $1 have a record above the audit
-- watermark $2 (NULL: no watermark, every one): the jobs a prune keeps unless told otherwise.
-- $1 finished before, $2 audited through (or NULL)
SELECT count(*) FROM jobs AS j
WHERE NOT j.queued -- the jobs of job_lock_finished_before, through its index
  AND j.submitted_at < $1 + 2 * coalesce(
      (SELECT p.max_clock_skew FROM lease_policy AS p WHERE p.id), interval '0')
  AND j.finished_at < $1
  AND (j.ledger_seq > coalesce($2, -1)
    OR EXISTS (SELECT 1 FROM attempts AS a
               WHERE a.job_id = j.id AND a.ledger_seq > coalesce($2, -1))
    OR EXISTS (SELECT 1 FROM observations AS o
               WHERE o.named_job_id = j.id AND o.ledger_seq > coalesce($2, -1))
    OR EXISTS (SELECT 1 FROM reconciliations AS r
               WHERE r.job_id = j.id AND r.ledger_seq > coalesce($2, -1))
    OR EXISTS (SELECT 1 FROM cancels AS c
               WHERE c.job_id = j.id AND c.ledger_seq > coalesce($2, -1))
    OR EXISTS (SELECT 1 FROM expiry_sweeps AS e
               WHERE e.job_id = j.id AND e.ledger_seq > coalesce($2, -1)))
