-- Performance only (docs/benchmarks.md): no constraint, predicate or rule changes.

-- The claim (job_pick_earliest_queued_with_free_target) walks queued jobs in submission order.
-- jobs_queued_by_submission (project_id, submitted_seq) serves it once the statistics say that
-- queued jobs are few; while they say that (nearly) every job is queued (a bulk submission, a
-- freshly analyzed queue), the planner prefers the smaller jobs_submitted_seq_unique and then
-- filters every running and finished job at the head of the table: each pick scans all jobs
-- claimed since the last ANALYZE, and claim throughput falls as they accumulate. This index holds
-- exactly the queued jobs in the claim's order, so every plan the planner can choose visits no
-- job that is not queued. It is maintained only at submission (a claim's new row version is not
-- queued, so it gets no entry).
CREATE INDEX jobs_queued_in_submission_order ON jobs (submitted_seq) WHERE state = 'queued';

-- Queue tables: every claim leaves a dead row version in jobs (and a dead entry at the head of the
-- queued indexes); every result deletes a reservation. Vacuum them after 2% churn (plus a
-- constant) instead of the default 20%, without cost-based sleeping, and re-analyze jobs at the
-- same pace so that the planner's idea of how many jobs are queued follows the queue.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE target_reservations SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- A heartbeat rewrites attempts.lease_expiry, which no index covers: with free space on the page
-- the new row version stays on it (a HOT update: no index entry, no index churn). Leave 20% of
-- every attempts page free for that. (A claim's update of jobs changes `state`, which indexes
-- cover, so it can never be HOT: jobs keeps the default fillfactor.)
ALTER TABLE attempts SET (fillfactor = 80);
