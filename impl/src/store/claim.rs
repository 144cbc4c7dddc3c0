//! Rule R1 `claim` (docs/protocol.md §6.2, §7).

use super::{parse, Store};
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

/// How a claim's transaction begins, in one round trip (a simple query of two statements): every
/// statement of the claim is planned for its own parameters and the tables as they are now. A
/// cached generic plan of the pick, made while the reservations were analyzed empty (then a table
/// of their own), turned the free-slot check into a nested loop over a sequential scan of every
/// reservation, once per candidate job (10 s per claim was seen at 11,000 reservations,
/// docs/benchmarks.md, "cold statistics"); a custom plan sees the tables as they are and looks the
/// slot up by its key.
pub(crate) const CLAIM_BEGIN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan";

impl Store {
    /// Rule R1 `claim`: the earliest-submitted queued job of the runner's project whose target
    /// slot is free (reserved by no job of any project), under a new attempt with
    /// `fence = greatest(job.fence + 1, epoch * 2^32 + 1)`; the claim reserves the slot and issues
    /// the attempt's slot token (likewise above the epoch's base). While claims wait after an
    /// epoch change it takes nothing and answers `no_queued_job` (docs/protocol.md §2, "Epochs").
    pub async fn claim(
        &self,
        runner: RunnerId,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Lease>, Error> {
        Ok(match self.claim_batch(runner, 1, runner_time).await? {
            Verdict::Accepted(mut leases) => match leases.pop() {
                Some(lease) => Verdict::Accepted(lease),
                None => Verdict::Rejected(Reason::NoQueuedJob),
            },
            Verdict::Acknowledged => Verdict::Acknowledged,
            Verdict::Rejected(reason) => Verdict::Rejected(reason),
        })
    }

    /// Rule R1 `claim`, batched: up to `k` jobs in one transaction, at most one per target slot.
    /// Rejected `no_queued_job` when not even one job could be claimed.
    ///
    /// The accept path is one statement (`claim`: one round trip, one transaction) that picks up to
    /// `k` jobs as a set, starts them, reserves their slots, issues their slot tokens and inserts
    /// their attempts. It may take fewer than `k` jobs when picked jobs share a slot or lose their
    /// slot to a concurrent claim. When it takes none, [`Store::claim_past_taken_slots`] answers.
    pub async fn claim_batch(
        &self,
        runner: RunnerId,
        k: usize,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<Lease>>, Error> {
        if k == 0 {
            return Err(Error::InvalidArgument(
                "a batch claim takes at least one job",
            ));
        }
        let limit = i64::try_from(k)
            .map_err(|_| Error::InvalidArgument("a batch claim takes too many jobs"))?;
        let now = self.now();
        let lease_expiry = now + self.lease_ttl;
        tracing::debug!(%runner, ?runner_time, k, "claim");
        // A call of the server-side function `claim` (migrations 0007 to 0012, 0015), prepared once
        // per connection: the function keeps the plan of its statement for the session, made with
        // settings under which no statistics can turn a lookup into a scan (docs/impl.md, "The
        // claim's plan"), so a claim is not planned again.
        let rows = sqlx::query(self.sql(sql::CLAIM))
            .bind(runner.0)
            .bind(limit)
            .bind(now)
            .bind(lease_expiry)
            .fetch_all(self.pool())
            .await?;
        if rows.is_empty() {
            return self.claim_past_taken_slots(runner, k, now).await;
        }
        let mut leases = Vec::with_capacity(rows.len());
        for row in rows {
            leases.push(Lease {
                tuple: Tuple {
                    runner,
                    job: JobId(row.try_get("job_id")?),
                    attempt: AttemptId(row.try_get("attempt_id")?),
                    lease_id: LeaseId(row.try_get("lease_id")?),
                    fence: row.try_get("fence")?,
                },
                lease_expiry,
                slot_token: row.try_get("slot_token")?,
                target: row.try_get("target")?,
                target_kind: parse(row.try_get("target_kind")?, TargetKind::from_code)?,
                source_revision: row.try_get("source_revision")?,
                source_digest: row.try_get("source_digest")?,
                command: row.try_get("command")?,
            });
        }
        Ok(Verdict::Accepted(leases))
    }

    /// The claim when its one statement took no job: it tells `unknown_runner` from
    /// `no_queued_job` and, job by job, picks past queued jobs whose slot a concurrent claim took
    /// since the statement's snapshot or is reserving right now (what the set-based statement
    /// cannot wait for). Several statements, one transaction.
    async fn claim_past_taken_slots(
        &self,
        runner: RunnerId,
        k: usize,
        now: DateTime<Utc>,
    ) -> Result<Verdict<Vec<Lease>>, Error> {
        // One round trip: the transaction and its plan setting (see CLAIM_BEGIN).
        let mut tx = crate::transaction::begin(self.pool(), Some(CLAIM_BEGIN)).await?;
        let Some(project) = self.runner_project(&mut tx, runner).await? else {
            return Ok(Verdict::Rejected(Reason::UnknownRunner));
        };
        // The epoch the claim issues its tokens in; none while claims wait after an epoch change
        // (docs/protocol.md §2, "Epochs"): then nothing is claimed, as by the statement above.
        let epoch: Option<i64> = sqlx::query_scalar(self.sql(sql::CLAIM_EPOCH))
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        let Some(epoch) = epoch else {
            // The first claim of a new epoch records its start: commit it.
            tx.commit().await?;
            return Ok(Verdict::Rejected(Reason::NoQueuedJob));
        };
        let mut leases = Vec::new();
        let mut skipped: Vec<Uuid> = Vec::new();
        while leases.len() < k {
            let Some(picked) =
                sqlx::query(self.sql(sql::JOB_PICK_EARLIEST_QUEUED_WITH_FREE_TARGET))
                    .bind(project.0)
                    .bind(&skipped)
                    .fetch_optional(&mut *tx)
                    .await?
            else {
                break;
            };
            let job: Uuid = picked.try_get("id")?;
            let target: String = picked.try_get("target")?;
            let attempt = AttemptId::new_random();
            let slot_token: Option<i64> = sqlx::query_scalar(self.sql(sql::TARGET_RESERVE_IF_FREE))
                .bind(project.0)
                .bind(&target)
                .bind(job)
                .bind(attempt.0)
                .bind(now)
                .bind(epoch)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(slot_token) = slot_token else {
                skipped.push(job);
                continue;
            };
            let started = sqlx::query(self.sql(sql::JOB_START_IF_QUEUED))
                .bind(job)
                .bind(attempt.0)
                .bind(epoch)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::Invariant("a picked queued job was not queued"))?;
            let fence: i64 = started.try_get("fence")?;
            let lease_id = LeaseId::new_random();
            let lease_expiry = now + self.lease_ttl;
            sqlx::query(self.sql(sql::ATTEMPT_INSERT_ON_CLAIM))
                .bind(attempt.0)
                .bind(job)
                .bind(project.0)
                .bind(runner.0)
                .bind(lease_id.0)
                .bind(fence)
                .bind(lease_expiry)
                .bind(now)
                .bind(slot_token)
                .execute(&mut *tx)
                .await?;
            leases.push(Lease {
                tuple: Tuple {
                    runner,
                    job: JobId(job),
                    attempt,
                    lease_id,
                    fence,
                },
                lease_expiry,
                slot_token,
                target,
                target_kind: parse(started.try_get("target_kind")?, TargetKind::from_code)?,
                source_revision: started.try_get("source_revision")?,
                source_digest: started.try_get("source_digest")?,
                command: started.try_get("command")?,
            });
        }
        tx.commit().await?;
        Ok(if leases.is_empty() {
            Verdict::Rejected(Reason::NoQueuedJob)
        } else {
            Verdict::Accepted(leases)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::sql;
    use sqlx::{Connection, PgConnection};

    /// The job-by-job path (what answers when the claim's one statement took nothing) waits after
    /// an epoch change as the statement does, then issues its fence and slot token above the
    /// epoch's base, and within the epoch goes on from its counters.
    #[tokio::test]
    async fn the_job_by_job_claim_waits_after_an_epoch_change_and_issues_tokens_in_the_new_epoch() {
        use crate::types::*;
        let database = crate::database::TestDatabase::create()
            .await
            .expect("a test database");
        let clock = crate::ManualClock::at_fixed_start();
        let store = database
            .store(
                std::sync::Arc::new(clock.clone()),
                crate::StoreConfig::default(),
            )
            .await
            .expect("a store");
        let project = store.create_project("epochs").await.expect("a project");
        let (runner, _) = store
            .create_runner(project, "runner")
            .await
            .expect("a runner");
        let mut job = NewJob::new("r", "d", "true");
        job.target = Some("prod".to_string());
        let first = store.submit_job(project, job.clone()).await.expect("a job");
        let lease = match store.claim_past_taken_slots(runner, 1, store.now()).await {
            Ok(Verdict::Accepted(mut leases)) => leases.pop().expect("a lease"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (lease.tuple.job, lease.tuple.fence, lease.slot_token),
            (first, 1, 1)
        );
        let verdict = store
            .report_result(&lease.tuple, Outcome::Passed, "d", None)
            .await
            .expect("result");
        assert_eq!(verdict, Verdict::Accepted(()));
        let second = store.submit_job(project, job).await.expect("a job");

        crate::epoch::advance_epoch(store.pool())
            .await
            .expect("advance");
        let waiting = store
            .claim_past_taken_slots(runner, 1, store.now())
            .await
            .expect("claim");
        assert_eq!(waiting, Verdict::Rejected(Reason::NoQueuedJob));
        clock.advance(chrono::Duration::seconds(30) - chrono::Duration::microseconds(1));
        let waiting = store
            .claim_past_taken_slots(runner, 1, store.now())
            .await
            .expect("claim");
        assert_eq!(waiting, Verdict::Rejected(Reason::NoQueuedJob));
        clock.advance(chrono::Duration::microseconds(1));
        let lease = match store.claim_past_taken_slots(runner, 1, store.now()).await {
            Ok(Verdict::Accepted(mut leases)) => leases.pop().expect("a lease"),
            other => panic!("{other:?}"),
        };
        let base = 1_i64 << 32;
        assert_eq!(
            (lease.tuple.job, lease.tuple.fence, lease.slot_token),
            (second, base + 1, base + 1)
        );
        // Within the epoch the counters go on (greatest(counter + 1, base + 1) is counter + 1).
        store.sweep_expired().await.expect("sweep");
        clock.advance(chrono::Duration::seconds(30));
        store.sweep_expired().await.expect("sweep");
        let verdict = store
            .reconcile(project, second, Finding::Stopped, Decision::Retry)
            .await
            .expect("reconcile");
        assert_eq!(verdict, Verdict::Accepted(()));
        let lease = match store.claim_past_taken_slots(runner, 1, store.now()).await {
            Ok(Verdict::Accepted(mut leases)) => leases.pop().expect("a lease"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (lease.tuple.job, lease.tuple.fence, lease.slot_token),
            (second, base + 2, base + 2)
        );
    }

    /// The plan the function `claim` caches in a session set up by `session` (empty: as the store
    /// runs it): its one statement, read from the installed function, prepared under the
    /// function's own settings (`proconfig`) and executed six times while no slot was reserved
    /// and the slots' holder columns were analyzed empty (all NULL: a generic plan made then is
    /// the one the function would keep), then explained after 11,000 slots were reserved: the
    /// JSON of `EXPLAIN (FORMAT JSON)`, or of `EXPLAIN (VERBOSE, FORMAT JSON)` when `verbose`.
    async fn claim_plan_after_an_empty_analyze(session: &str, verbose: bool) -> String {
        let (database, store) = crate::store::plan::test_store().await;
        let project = store.create_project("plan").await.expect("a project");
        let (runner, _) = store
            .create_runner(project, "runner")
            .await
            .expect("a runner");
        // A runner of a project without jobs: its claims reserve nothing.
        let idle_project = store.create_project("idle").await.expect("a project");
        let (idle, _) = store
            .create_runner(idle_project, "idle")
            .await
            .expect("a runner");
        store.close().await;
        let mut conn = PgConnection::connect(database.url())
            .await
            .expect("connect");
        // 30,000 queued jobs on slots of their own, none reserved; analyzed so (the statistics
        // say that no slot has a holder).
        sqlx::query(
            "INSERT INTO target_slots (slot, kind)
             SELECT 'plan-' || g, 'unfenced' FROM generate_series(1, 30000) AS g",
        )
        .execute(&mut conn)
        .await
        .expect("slots");
        sqlx::query(
            "INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest,
                               command, target, target_kind)
             SELECT gen_random_uuid(), $1, now(), 'r', 'd', 'true', 'plan-' || g, 'unfenced'
             FROM generate_series(1, 30000) AS g",
        )
        .bind(project.0)
        .execute(&mut conn)
        .await
        .expect("jobs");
        sqlx::raw_sql("ANALYZE jobs; ANALYZE target_slots")
            .execute(&mut conn)
            .await
            .expect("analyze");
        // The function as installed: its statement and the settings it plans and runs under.
        let (source, settings): (String, Vec<String>) = sqlx::query_as(
            "SELECT prosrc, coalesce(proconfig, '{}') FROM pg_proc
             WHERE proname = 'claim' AND pronamespace = current_schema()::regnamespace",
        )
        .fetch_one(&mut conn)
        .await
        .expect("the function claim");
        assert!(
            settings
                .iter()
                .any(|s| s == "plan_cache_mode=force_generic_plan"),
            "the function keeps one plan per session: {settings:?}"
        );
        for setting in &settings {
            let (name, value) = setting.split_once('=').expect("name=value");
            sqlx::query("SELECT set_config($1, $2, false)")
                .bind(name)
                .bind(value)
                .execute(&mut conn)
                .await
                .expect("the function's setting");
        }
        if !session.is_empty() {
            sqlx::raw_sql(session)
                .execute(&mut conn)
                .await
                .expect("session");
        }
        let claim = sql::returned_query(&source).expect("RETURN QUERY ... END");
        sqlx::raw_sql(&format!(
            "PREPARE claim(uuid, bigint, timestamptz, timestamptz) AS {claim}"
        ))
        .execute(&mut conn)
        .await
        .expect("prepare");
        let execute = |runner: uuid::Uuid| {
            format!("claim('{runner}', 1, now(), now() + interval '30 seconds')")
        };
        // The plans, all while no slot is reserved (under the function's force_generic_plan the
        // first execution makes the generic plan that is kept for the life of the connection).
        for _ in 0..6 {
            sqlx::raw_sql(&format!("EXECUTE {}", execute(idle.0)))
                .execute(&mut conn)
                .await
                .expect("execute");
        }
        // The slots of the 11,000 earliest jobs reserved (their holders are attempts that a
        // claim would insert; this one never commits).
        sqlx::raw_sql("BEGIN")
            .execute(&mut conn)
            .await
            .expect("begin");
        sqlx::query(
            "UPDATE target_slots AS s
             SET holder_project_id = j.project_id, holder_job_id = j.id,
                 holder_attempt_id = gen_random_uuid(), reserved_at = now()
             FROM (SELECT project_id, target, id FROM jobs ORDER BY submitted_seq LIMIT 11000) AS j
             WHERE s.slot = j.target",
        )
        .execute(&mut conn)
        .await
        .expect("reservations");
        let options = if verbose {
            "VERBOSE, FORMAT JSON"
        } else {
            "FORMAT JSON"
        };
        let plan: serde_json::Value = sqlx::query_scalar(&format!(
            "EXPLAIN ({options}) EXECUTE {}",
            execute(runner.0)
        ))
        .fetch_one(&mut conn)
        .await
        .expect("explain");
        plan.to_string()
    }

    /// Every node of `plan` that reads `target_slots` (the reservations are its holder columns),
    /// as "node type (index condition)".
    fn slot_scans(plan: &str) -> Vec<String> {
        let plan: serde_json::Value = serde_json::from_str(plan).expect("json");
        crate::store::plan::scans_of(&plan, "target_slots")
    }

    #[tokio::test]
    async fn the_claims_pick_looks_slots_up_by_key_even_after_an_empty_analyze() {
        let plan = claim_plan_after_an_empty_analyze("", false).await;
        let scans = slot_scans(&plan);
        // The free-slot checks of the pick (of the locked head, `h`, and of the jobs beyond it,
        // `q`): the slot of each candidate job looked up by its key, once per candidate job: not
        // a sequential scan, and not a whole index read (and materialized) in place of one.
        for candidate in ["(slot = h.target)", "(slot = q.target)"] {
            assert!(
                scans.iter().any(|scan| scan.contains(candidate)),
                "the pick must read each candidate job's slot by its key, {candidate}: \
                 {scans:?}: {plan}"
            );
        }
        // Every read of the slots (the pick's, and the reservation's update's) is a lookup by key.
        assert!(
            scans
                .iter()
                .all(|scan| scan.starts_with("Index") && scan.contains("(slot = ")),
            "the claim must look slots up by their key, not {scans:?}: {plan}"
        );
    }

    /// The pick reads the queued jobs of the runner's project by the project: every read of
    /// `jobs` in the cached plan is an index lookup, and the pick's two walks of the queue (the
    /// head, `j`, and the jobs beyond it, `q`) have the project in their index condition. A walk
    /// that filtered the project row by row (migration 0025 dropped the index that let the plan
    /// do so while the statistics said one project) read the whole queue whenever the claim
    /// found nothing of its project: a runner of a project without queued jobs (this test's plan
    /// was made by one), every claim while the claims wait after an epoch change (the project is
    /// NULL), an unknown runner.
    #[tokio::test]
    async fn the_claims_pick_reads_only_its_projects_queued_jobs() {
        let plan = claim_plan_after_an_empty_analyze("", false).await;
        let scans = {
            let plan: serde_json::Value = serde_json::from_str(&plan).expect("json");
            crate::store::plan::scans_of(&plan, "jobs")
        };
        assert!(
            scans
                .iter()
                .all(|scan| scan.starts_with("Index") && !scan.contains("no Index Cond")),
            "every read of jobs must be an index lookup: {scans:?}: {plan}"
        );
        let walks = scans
            .iter()
            .filter(|scan| scan.contains("(project_id = "))
            .count();
        assert_eq!(
            walks, 2,
            "the head and the jobs beyond it must each walk the queue of the runner's project by \
             its index: {scans:?}: {plan}"
        );
    }

    /// The chain's hash of the claimed attempt (`ledger_claim_hash` and the `ledger_field`s it
    /// is made of, impl/sql/functions/ledger_encoding.sql) is inlined into the claim's cached
    /// plan: a SQL function the planner cannot inline (an argument it reads more than once that
    /// holds a sub-select, such as the epoch's base) is parsed and planned again on every claim,
    /// about 8% of the claim's time in the database.
    #[tokio::test]
    async fn the_claims_plan_calls_no_ledger_function() {
        let plan = claim_plan_after_an_empty_analyze("", true).await;
        assert!(plan.contains("sha256("), "the hash is in the plan: {plan}");
        for function in ["ledger_claim_hash(", "ledger_field("] {
            assert!(
                !plan.contains(function),
                "{function}) must be inlined into the claim's plan: {plan}"
            );
        }
    }
}
