//! `leasewright audit`'s teeth (docs/audit.md): a ledger written by the real Store, covering every
//! rule, audits clean; each corruption a real incident leaves (a hand-run UPDATE requeueing an
//! uncertain job, a result row inserted with an old fence, a deleted observation, a heartbeat
//! whose expiry came from the runner's clock, an overwritten outcome) is caught and named.

use chrono::{DateTime, Duration, Utc};
use leasewright_conformance::audit::{self, AuditOptions, AuditReport, Kind};
use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use std::sync::Arc;

const TTL_SECONDS: i64 = 30;

/// The ids a corruption needs.
struct Fixture {
    db: TestDatabase,
    /// Passed, with a duplicate, a conflicting result and an outsider's replay.
    passed: JobId,
    /// Retried after a reconciliation; the late result of its first attempt rejected.
    retried: JobId,
    first_attempt: Tuple,
    /// Left uncertain.
    uncertain: JobId,
    /// Left running, two accepted heartbeats (the second valid only thanks to the first).
    running: JobId,
    runner_skew: Duration,
}

fn at(clock: &ManualClock, start: DateTime<Utc>, seconds: i64) {
    clock.set(start + Duration::seconds(seconds));
}

async fn build() -> Fixture {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let start = clock.now();
    let config = StoreConfig {
        lease_ttl: std::time::Duration::from_secs(TTL_SECONDS as u64),
        ..StoreConfig::default()
    };
    let store = db
        .store(Arc::new(clock.clone()), config)
        .await
        .expect("a store");
    let project = store.create_project("audited").await.unwrap();
    let outsider_project = store.create_project("outsider").await.unwrap();
    let (r1, _) = store.create_runner(project, "r1").await.unwrap();
    let (r2, _) = store.create_runner(project, "r2").await.unwrap();
    let (outsider, _) = store.create_runner(outsider_project, "o1").await.unwrap();
    let submit = |name: &str| NewJob::new("rev", "digest", name);
    let passed = store.submit_job(project, submit("passed")).await.unwrap();
    let retried = store.submit_job(project, submit("retried")).await.unwrap();
    let cancelled = store
        .submit_job(project, submit("cancelled"))
        .await
        .unwrap();
    let queued_cancel = store.submit_job(project, submit("queued")).await.unwrap();
    let uncertain = store
        .submit_job(project, submit("uncertain"))
        .await
        .unwrap();
    let running = store.submit_job(project, submit("running")).await.unwrap();
    let skew = Duration::hours(-1);
    let runner_time = |clock: &ManualClock| Some(clock.now() + skew);
    let lease = |v: Verdict<Lease>| match v {
        Verdict::Accepted(lease) => lease.tuple,
        other => panic!("claim: {other:?}"),
    };

    // passed: claim, heartbeat, side effects, result, duplicate, conflict, outsider's replay.
    let t = lease(store.claim(r1, runner_time(&clock)).await.unwrap());
    assert_eq!(t.job, passed);
    at(&clock, start, 5);
    store.heartbeat(&t, runner_time(&clock)).await.unwrap();
    store.append_log(&t, 0, b"hello", None).await.unwrap();
    store.append_log(&t, 0, b"hello", None).await.unwrap();
    store.append_log(&t, 0, b"other", None).await.unwrap();
    store.put_artifact(&t, "out.txt", b"x", None).await.unwrap();
    store.get_artifact(&t, "missing", None).await.unwrap();
    store.cache_get(&t, "k", None).await.unwrap();
    let forged = Tuple { fence: 999, ..t };
    store.heartbeat(&forged, None).await.unwrap();
    let outsiders = Tuple {
        runner: outsider,
        ..t
    };
    store
        .report_result(&outsiders, Outcome::Passed, "d1", None)
        .await
        .unwrap();
    let accepted = store
        .report_result(&t, Outcome::Passed, "d1", runner_time(&clock))
        .await
        .unwrap();
    assert_eq!(accepted, Verdict::Accepted(()));
    store
        .report_result(&t, Outcome::Passed, "d1", None)
        .await
        .unwrap();
    store
        .report_result(&t, Outcome::Passed, "d2", None)
        .await
        .unwrap();
    store.heartbeat(&t, None).await.unwrap();

    // retried: claim, expiry, heartbeat after expiry (unswept), sweep, reconcile retry, second
    // claim, the first attempt's late result, the second attempt passes.
    at(&clock, start, 10);
    let first = lease(store.claim(r2, None).await.unwrap());
    assert_eq!(first.job, retried);
    // cancelled: claimed by r1 now, so that it expires with `retried`.
    let c = lease(store.claim(r1, None).await.unwrap());
    assert_eq!(c.job, cancelled);
    at(&clock, start, 10 + TTL_SECONDS);
    store.heartbeat(&first, None).await.unwrap();
    store.rejoin(&first, None).await.unwrap();
    // A cancel on an expired but unswept lease is accepted (docs/protocol.md §6.3).
    assert_eq!(
        store.cancel(project, cancelled).await.unwrap(),
        Verdict::Accepted(())
    );
    store.cancel(outsider_project, cancelled).await.unwrap();
    store
        .reconcile(project, retried, Finding::Stopped, Decision::Retry)
        .await
        .unwrap();
    let swept = store.sweep_expired().await.unwrap();
    assert!(matches!(swept, SweepVerdict::Uncertain(ref jobs) if jobs.len() == 2));
    store.cancel(project, cancelled).await.unwrap();
    store
        .reconcile(project, retried, Finding::StillRunning, Decision::Retry)
        .await
        .unwrap();
    assert_eq!(
        store
            .reconcile(project, retried, Finding::Stopped, Decision::Retry)
            .await
            .unwrap(),
        Verdict::Accepted(())
    );
    store
        .reconcile(project, cancelled, Finding::Stopped, Decision::Retry)
        .await
        .unwrap();
    store
        .reconcile(project, cancelled, Finding::Stopped, Decision::Abort)
        .await
        .unwrap();
    at(&clock, start, 50);
    let second = lease(store.claim(r1, None).await.unwrap());
    assert_eq!((second.job, second.fence), (retried, 2));
    store
        .report_result(&first, Outcome::Passed, "late", None)
        .await
        .unwrap();
    store
        .report_result(&second, Outcome::Cancelled, "c", None)
        .await
        .unwrap();
    store.heartbeat(&second, None).await.unwrap();
    store
        .report_result(&second, Outcome::Passed, "d", None)
        .await
        .unwrap();

    // queued_cancel: cancelled while queued; cancelled again.
    store.cancel(project, queued_cancel).await.unwrap();
    store.cancel(project, queued_cancel).await.unwrap();

    // uncertain: claimed, expired, swept, left uncertain.
    let u = lease(store.claim(r2, None).await.unwrap());
    assert_eq!(u.job, uncertain);
    // running: claimed, two heartbeats, the second inside the lease the first granted only.
    let r = lease(store.claim(r1, None).await.unwrap());
    assert_eq!(r.job, running);
    at(&clock, start, 50 + 20);
    store.heartbeat(&r, runner_time(&clock)).await.unwrap();
    at(&clock, start, 50 + TTL_SECONDS + 5);
    store.sweep_expired().await.unwrap();
    let answer = store.heartbeat(&r, runner_time(&clock)).await.unwrap();
    assert!(matches!(answer, Verdict::Accepted(_)), "{answer:?}");
    store.cancel(project, uncertain).await.unwrap();
    store
        .reconcile(project, uncertain, Finding::Stopped, Decision::Adopt)
        .await
        .unwrap();
    store.close().await;
    Fixture {
        db,
        passed,
        retried,
        first_attempt: first,
        uncertain,
        running,
        runner_skew: skew,
    }
}

async fn run_audit(url: &str) -> AuditReport {
    let options = AuditOptions {
        batch: 2,
        ..AuditOptions::default()
    };
    let (report, projects) = audit::audit(url, &options, |_| {})
        .await
        .expect("the audit runs");
    eprintln!("{}", report.render(&projects));
    report
}

async fn sql(url: &str, statements: &[String]) {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

async fn scalar(url: &str, query: &str) -> i64 {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(query)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The first (`min`) or last (`max`) heartbeat observation naming `job`.
async fn heartbeat_id(url: &str, job: JobId, which: &str) -> i64 {
    let query = format!(
        "SELECT {which}(id) FROM observations WHERE named_job_id = '{}' AND kind = 'heartbeat'",
        job.0
    );
    scalar(url, &query).await
}

/// Exactly one violation, of `kind`, about `job`, naming `record`.
fn assert_caught(report: &AuditReport, kind: Kind, job: JobId, record: &str) {
    assert_eq!(
        report.violations.len(),
        1,
        "one violation expected: {:#?}",
        report.violations
    );
    let v = &report.violations[0];
    assert_eq!((v.kind, v.job), (kind, job.0), "{v:#?}");
    assert!(
        v.record.starts_with(record),
        "the violation names {}, not {record}",
        v.record
    );
    assert!(!v.steps.is_empty(), "the violation shows its steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_written_by_the_store_audits_clean_and_resumes_from_its_watermark() {
    let f = build().await;
    let url = f.db.url();
    let report = run_audit(url).await;
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert_eq!(report.jobs, 6);
    assert!(report.unauditable.is_empty());
    let records = scalar(
        url,
        "SELECT (SELECT count(*) FROM attempts) + (SELECT count(*) FROM observations) \
              + (SELECT count(*) FROM reconciliations) + (SELECT count(*) FROM cancels) \
              + (SELECT count(*) FROM expiry_sweeps)",
    )
    .await;
    assert_eq!(report.records as i64, records, "every record is read");
    // Every rule left its record.
    for (table, at_least) in [
        ("cancels", 6),
        ("expiry_sweeps", 3),
        ("reconciliations", 6),
        ("observations WHERE lease_expiry IS NOT NULL", 3),
    ] {
        let n = scalar(url, &format!("SELECT count(*) FROM {table}")).await;
        assert!(n >= at_least, "{table}: {n}");
    }
    // Nothing new: nothing audited. One new record: only its job.
    let options = AuditOptions {
        since: Some(report.watermark),
        batch: 100,
        ..AuditOptions::default()
    };
    let (again, _) = audit::audit(url, &options, |_| {}).await.unwrap();
    assert_eq!((again.jobs, again.watermark), (0, report.watermark));
    let clock = ManualClock::at_fixed_start();
    clock.advance(Duration::seconds(500));
    let store =
        f.db.store(Arc::new(clock), StoreConfig::default())
            .await
            .unwrap();
    store.heartbeat(&f.first_attempt, None).await.unwrap();
    let (resumed, _) = audit::audit(url, &options, |_| {}).await.unwrap();
    assert!(resumed.is_clean(), "{:#?}", resumed.violations);
    assert_eq!(resumed.jobs, 1);
    assert!(resumed.watermark > report.watermark);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_job_requeued_by_hand_is_a_retry_without_reconciliation() {
    let f = build().await;
    let url = f.db.url();
    let job = f.uncertain.0;
    sql(
        url,
        &[format!(
            "UPDATE jobs SET state = 'queued', current_attempt_id = NULL WHERE id = '{job}'"
        )],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::RetryWithoutReconciliation,
        f.uncertain,
        "job ",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_row_inserted_with_an_old_fence_is_a_stale_acceptance() {
    let f = build().await;
    let url = f.db.url();
    let t = f.first_attempt;
    sql(
        url,
        &[format!(
            "INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, \
             named_lease_id, named_fence, attempt_id, received_at, verdict, outcome, payload_sha256) \
             VALUES ('{}', 'result', '{}', '{}', '{}', {}, '{}', '2030-01-01 00:10:00+00', \
             'accepted', 'failed', 'x')",
            t.runner.0, t.job.0, t.attempt.0, t.lease_id.0, t.fence, t.attempt.0
        )],
    )
    .await;
    let id = scalar(url, "SELECT max(id) FROM observations").await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::StaleAcceptance,
        f.retried,
        &format!("observation #{id} "),
    );
    assert!(report.violations[0].detail.contains("not_current"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_heartbeat_leaves_a_later_acceptance_unexplained() {
    let f = build().await;
    let url = f.db.url();
    let first = heartbeat_id(url, f.running, "min").await;
    let second = heartbeat_id(url, f.running, "max").await;
    sql(
        url,
        &[format!("DELETE FROM observations WHERE id = {first}")],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::LeaseAfterExpiry,
        f.running,
        &format!("observation #{second} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_whose_expiry_came_from_the_runners_clock_is_caught() {
    let f = build().await;
    let url = f.db.url();
    let running = f.running.0;
    let last = heartbeat_id(url, f.running, "max").await;
    let expiry = format!("runner_time + interval '{TTL_SECONDS} seconds'");
    sql(
        url,
        &[
            format!("UPDATE observations SET lease_expiry = {expiry} WHERE id = {last}"),
            format!(
                "UPDATE attempts SET lease_expiry = (SELECT {expiry} FROM observations WHERE id = {last}) \
                 WHERE job_id = '{running}'"
            ),
        ],
    )
    .await;
    assert!(f.runner_skew < Duration::zero());
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::TimeAuthority,
        f.running,
        &format!("observation #{last} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_outcome_is_a_replaced_outcome() {
    let f = build().await;
    let url = f.db.url();
    let passed = f.passed.0;
    sql(
        url,
        &[
            format!("UPDATE jobs SET state = 'failed', outcome = 'failed' WHERE id = '{passed}'"),
            format!(
                "UPDATE attempts SET state = 'failed', outcome = 'failed' WHERE job_id = '{passed}'"
            ),
        ],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(&report, Kind::ReplacedOutcome, f.passed, "job ");
}

/// A ledger across an epoch change (docs/audit.md, "A database that forgot commits"): the raised
/// epoch (the operator's `advance_epoch`, as a promotion would), a job left running from epoch 0,
/// a job retried across the change (its fence jumps to 2^32 + 1) and a job first claimed in epoch
/// 1. Returns the database, the job left running and the job first claimed in epoch 1.
async fn across_an_epoch() -> (TestDatabase, JobId, JobId) {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let config = StoreConfig {
        lease_ttl: std::time::Duration::from_secs(TTL_SECONDS as u64),
        ..StoreConfig::default()
    };
    let store = db
        .store(Arc::new(clock.clone()), config)
        .await
        .expect("a store");
    let project = store.create_project("epochs").await.unwrap();
    let (runner, _) = store.create_runner(project, "r1").await.unwrap();
    let claim = |v: Verdict<Lease>| match v {
        Verdict::Accepted(lease) => lease.tuple,
        other => panic!("claim: {other:?}"),
    };
    let running = store
        .submit_job(project, NewJob::new("rev", "digest", "running"))
        .await
        .unwrap();
    let retried = store
        .submit_job(project, NewJob::new("rev", "digest", "retried"))
        .await
        .unwrap();
    assert_eq!(claim(store.claim(runner, None).await.unwrap()).job, running);
    assert_eq!(claim(store.claim(runner, None).await.unwrap()).job, retried);
    clock.advance(Duration::seconds(TTL_SECONDS));
    store.sweep_expired().await.unwrap();
    // The sweep made both uncertain; `running` is left so, `retried` is retried.
    let verdict = store
        .reconcile(project, retried, Finding::Stopped, Decision::Retry)
        .await
        .unwrap();
    assert_eq!(verdict, Verdict::Accepted(()));
    let later = store
        .submit_job(project, NewJob::new("rev", "digest", "later"))
        .await
        .unwrap();
    leasewright_impl::epoch::advance_epoch(store.pool())
        .await
        .unwrap();
    assert_eq!(
        store.claim(runner, None).await.unwrap(),
        Verdict::Rejected(Reason::NoQueuedJob),
        "the new epoch's wait"
    );
    clock.advance(Duration::seconds(TTL_SECONDS));
    let again = claim(store.claim(runner, None).await.unwrap());
    assert_eq!((again.job, again.fence), (retried, (1 << 32) + 1));
    let first = claim(store.claim(runner, None).await.unwrap());
    assert_eq!((first.job, first.fence), (later, (1 << 32) + 1));
    store
        .report_result(&first, Outcome::Passed, "d", None)
        .await
        .unwrap();
    (db, running, later)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_across_an_epoch_audits_clean_and_shows_the_boundary_and_the_job_across_it() {
    let (db, running, _) = across_an_epoch().await;
    let report = run_audit(db.url()).await;
    assert!(report.is_clean(), "{:#?}", report.violations);
    let epochs: Vec<(i64, bool, bool, usize)> = report
        .epochs
        .iter()
        .map(|e| (e.epoch, e.recorded, e.began_at.is_some(), e.claims))
        .collect();
    // Epoch 0 from the start (two claims), epoch 1 begun at its first claim (two claims).
    assert_eq!(epochs, vec![(0, true, false, 2), (1, true, true, 2)]);
    let across: Vec<(uuid::Uuid, &str, i64, i64)> = report
        .across_epochs
        .iter()
        .map(|a| (a.job, a.state.as_str(), a.claimed_in, a.latest))
        .collect();
    assert_eq!(across, vec![(running.0, "uncertain", 0, 1)]);
    let text = report.render(&Default::default());
    assert!(
        text.contains("epochs: 0 (from the start, 2 claims), 1 (began "),
        "{text}"
    );
    assert!(text.contains("across an epoch: job "), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["across_epochs"][0]["claimed_in"], 0);
    assert_eq!(json["epochs"][1]["epoch"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_that_jumps_other_than_to_a_later_epochs_first_is_a_fence_order_violation() {
    let (db, _, later) = across_an_epoch().await;
    let url = db.url();
    let fence = (1_i64 << 32) + 2;
    sql(
        url,
        &[
            format!(
                "UPDATE attempts SET fence = {fence} WHERE job_id = '{}'",
                later.0
            ),
            format!("UPDATE jobs SET fence = {fence} WHERE id = '{}'", later.0),
            format!(
                "UPDATE observations SET named_fence = {fence} WHERE named_job_id = '{}'",
                later.0
            ),
        ],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(&report, Kind::FenceOrder, later, "attempt ");
}
