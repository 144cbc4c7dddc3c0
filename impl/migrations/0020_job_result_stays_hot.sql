-- The result's update of a job can be HOT (issue 35 item 2; docs/benchmarks.md, "WAL per job";
-- docs/impl.md, "Schema"). No rule, predicate or verdict changes.
--
-- An update is HOT (one heap record, no index entry) only if it changes no column an index
-- names, in its key or in its predicate. Every index of `jobs` but the primary key named `state`
-- or `finished_at` (the queued indexes of 0001 and 0002 in their predicate, `jobs_leased` and
-- `jobs_finished_by_time`), so the claim's and the result's updates of a job each wrote an entry
-- in the primary key and in one partial index (`leasewright bench writes`: 4 entries, about 300 B,
-- per job). Now:
--
-- * `queued`: whether the job is queued, a stored generated column (`state = 'queued'`), so no
--   statement can set it apart from the state. The queued indexes name it instead of `state`: a
--   claim still changes it (true to false), a requeue back; a result, an adoption, an abort or a
--   sweep never does.
-- * `jobs_leased` (the sweep's) is dropped: the expiry sweep walks the executing attempts through
--   `attempts_one_current_per_job` (which holds exactly the active and uncertain attempts) and
--   reaches each one's job by its key; the queue depth (`/metrics`) counts the executing jobs the
--   same way.
-- * `jobs_finished_by_time` (the prune's) is replaced by `jobs_unqueued_by_submission`
--   (submitted_at) WHERE NOT queued: the prune picks, among the jobs submitted before its cutoff
--   (a job finished before it was submitted before it), those finished before it, earliest
--   submitted first. A claim writes an entry in it (as it did in `jobs_leased`); a result none.
--
-- So the result's update names no indexed column: it is HOT when the new version fits on the
-- row's page. A job's row is written three times (submission, claim, result), and the claim's
-- version is not HOT (it leaves the queue), so leave room on every page for the versions after the
-- submission: fillfactor 50 (rows submitted from now on; existing pages keep their fill, as
-- 0009's slots did). Pages are pruned of dead versions when they run short.
ALTER TABLE jobs ADD COLUMN queued boolean GENERATED ALWAYS AS (state = 'queued') STORED;

DROP INDEX jobs_queued_by_submission;
DROP INDEX jobs_queued_in_submission_order;
DROP INDEX jobs_leased;
DROP INDEX jobs_finished_by_time;

CREATE INDEX jobs_queued_by_submission ON jobs (project_id, submitted_seq) WHERE queued;
CREATE INDEX jobs_queued_in_submission_order ON jobs (submitted_seq) WHERE queued;
CREATE INDEX jobs_unqueued_by_submission ON jobs (submitted_at) WHERE NOT queued;

ALTER TABLE jobs SET (fillfactor = 50);
