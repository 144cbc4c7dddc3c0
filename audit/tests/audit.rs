//! `leasewright audit`'s teeth (docs/audit.md): a ledger written by the real Store, covering every
//! rule, audits clean; each corruption a real incident leaves (a hand-run UPDATE requeueing an
//! uncertain job, a result row inserted with an old fence, a deleted observation, a heartbeat
//! whose expiry came from the runner's clock, an overwritten outcome) is caught and named.

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{scalar, sql};
use leasewright_audit::{self as audit, AuditOptions, AuditReport, Kind};
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

/// The first (`min`) or last (`max`) heartbeat observation naming `job`.
async fn heartbeat_id(url: &str, job: JobId, which: &str) -> i64 {
    let query = format!(
        "SELECT {which}(id) FROM observations WHERE named_job_id = '{}' AND kind = 'heartbeat'",
        job.0
    );
    scalar(url, &query).await
}

/// The violations other than `ledger_chain` (an edit of a chained record is one too:
/// audit/tests/chain.rs tests those).
fn replayed(report: &AuditReport) -> Vec<&audit::Violation> {
    report
        .violations
        .iter()
        .filter(|v| v.kind != Kind::LedgerChain)
        .collect()
}

/// Exactly one violation, of `kind`, about `job`, naming `record` (besides the `ledger_chain`
/// that an edit of a record also is: audit/tests/chain.rs tests those).
fn assert_caught(report: &AuditReport, kind: Kind, job: JobId, record: &str) {
    let violations: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.kind != Kind::LedgerChain)
        .collect();
    assert_eq!(
        violations.len(),
        1,
        "one violation expected: {:#?}",
        report.violations
    );
    let v = violations[0];
    assert_eq!((v.kind, v.job), (kind, job.0), "{v:#?}");
    assert!(
        v.record.starts_with(record),
        "the violation names {}, not {record}",
        v.record
    );
    assert!(
        !v.steps.is_empty()
            || matches!(
                v.kind,
                Kind::SlotOverlap | Kind::SlotCounter | Kind::SlotHolder | Kind::SideEffectRecord
            ),
        "the violation shows its steps"
    );
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

/// Since migration 0022 no foreign key refuses an attempt held by a runner of another project
/// (invariant 12): the replay of its claim finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_moved_to_another_projects_runner_is_caught() {
    let f = build().await;
    let url = f.db.url();
    let running = f.running.0;
    sql(
        url,
        &[format!(
            "UPDATE attempts SET runner_id = (SELECT id FROM runners WHERE name = 'o1') \
             WHERE job_id = '{running}'"
        )],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(&report, Kind::Verdict, f.running, "attempt ");
    let found = report
        .violations
        .iter()
        .find(|v| v.kind == Kind::Verdict)
        .expect("the verdict");
    assert!(
        found
            .detail
            .contains("the runner is not of the job's project"),
        "{found:#?}"
    );
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

/// The target slot `job` names.
async fn target_of(url: &str, job: JobId) -> String {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(&format!("SELECT target FROM jobs WHERE id = '{}'", job.0))
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The id of `job`'s attempt with `fence`.
async fn attempt_with_fence(url: &str, job: JobId, fence: i64) -> uuid::Uuid {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(&format!(
        "SELECT id FROM attempts WHERE job_id = '{}' AND fence = {fence}",
        job.0
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_cannot_be_judged_is_never_clean_and_its_records_are_counted() {
    let f = build().await;
    let url = f.db.url();
    let records = scalar(
        url,
        &format!(
            "SELECT (SELECT count(*) FROM attempts WHERE job_id = '{0}') \
                  + (SELECT count(*) FROM observations WHERE named_job_id = '{0}') \
                  + (SELECT count(*) FROM reconciliations WHERE job_id = '{0}') \
                  + (SELECT count(*) FROM cancels WHERE job_id = '{0}') \
                  + (SELECT count(*) FROM expiry_sweeps WHERE job_id = '{0}')",
            f.running.0
        ),
    )
    .await;
    // A violation hidden behind a missing claim expiry: the first heartbeat deleted.
    let first = heartbeat_id(url, f.running, "min").await;
    sql(
        url,
        &[
            format!(
                "UPDATE attempts SET claim_lease_expiry = NULL WHERE job_id = '{}'",
                f.running.0
            ),
            format!("DELETE FROM observations WHERE id = {first}"),
        ],
    )
    .await;
    let report = run_audit(url).await;
    assert!(replayed(&report).is_empty(), "{:#?}", report.violations);
    assert!(!report.is_clean(), "a job not judged is never clean");
    assert_eq!(report.unauditable.len(), 1);
    assert_eq!(report.unauditable[0].0, f.running.0);
    assert_eq!(report.unjudged_records as i64, records - 1);
    let summary = report.render(&Default::default());
    assert!(
        summary.contains(&format!(
            "{} records of 1 jobs could not be judged",
            records - 1
        )),
        "{summary}"
    );
    assert!(report.junit().contains("not_audited"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_fence_is_the_fence_order_of_the_claim_that_repeated_it() {
    let f = build().await;
    let url = f.db.url();
    let second = attempt_with_fence(url, f.retried, 2).await;
    sql(
        url,
        &[
            // A buggy migration: the constraint gone, a fence repeated.
            "ALTER TABLE attempts DROP CONSTRAINT attempts_fence_unique_per_job".to_string(),
            format!("UPDATE attempts SET fence = 1 WHERE id = '{second}'"),
        ],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::FenceOrder,
        f.retried,
        &format!("attempt {second} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_counter_rolled_back_below_an_issued_token_is_caught() {
    let f = build().await;
    let url = f.db.url();
    let slot = target_of(url, f.running).await;
    sql(
        url,
        &[format!(
            "UPDATE target_slots SET slot_token = 0 WHERE slot = '{slot}'"
        )],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::SlotCounter,
        f.running,
        &format!("target slot `{slot}` "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_written_into_another_slots_row_is_a_slot_holder_the_ledger_does_not_lead_to()
{
    let f = build().await;
    let url = f.db.url();
    let held = target_of(url, f.running).await;
    let free = target_of(url, f.passed).await;
    sql(
        url,
        &[format!(
            "UPDATE target_slots AS s SET holder_project_id = h.holder_project_id, \
             holder_job_id = h.holder_job_id, holder_attempt_id = h.holder_attempt_id, \
             reserved_at = h.reserved_at \
             FROM target_slots AS h WHERE h.slot = '{held}' AND s.slot = '{free}'"
        )],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::SlotHolder,
        f.running,
        &format!("target slot `{free}` "),
    );
}

/// Two jobs on slots `t1` and `t2`, both claimed and holding their slot; the ids of the second.
async fn two_holders() -> (TestDatabase, JobId, JobId, uuid::Uuid) {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .unwrap();
    let project = store.create_project("p").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let on = |target: &str| NewJob {
        target: Some(target.to_string()),
        ..NewJob::new("rev", "d", "c")
    };
    let a = store.submit_job(project, on("t1")).await.unwrap();
    let b = store.submit_job(project, on("t2")).await.unwrap();
    for job in [a, b] {
        let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
            panic!("a claim");
        };
        assert_eq!(lease.tuple.job, job);
    }
    store.close().await;
    let attempt = attempt_with_fence(db.url(), b, 1).await;
    (db, a, b, attempt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_displaced_a_slots_holder_is_a_slot_overlap() {
    let (db, _a, b, b_attempt) = two_holders().await;
    let url = db.url();
    let clean = run_audit(url).await;
    assert!(clean.is_clean(), "{:#?}", clean.violations);
    // b's claim moved onto t1 while a held it, consistently in b's rows and t1's counter.
    sql(
        url,
        &[
            "UPDATE target_slots SET holder_project_id = NULL, holder_job_id = NULL, \
             holder_attempt_id = NULL, reserved_at = NULL WHERE slot = 't2'"
                .to_string(),
            format!(
                "UPDATE target_slots SET holder_job_id = '{}', holder_attempt_id = '{b_attempt}', \
                 slot_token = 2 WHERE slot = 't1'",
                b.0
            ),
            format!("UPDATE jobs SET target = 't1' WHERE id = '{}'", b.0),
            format!("UPDATE attempts SET slot_token = 2 WHERE id = '{b_attempt}'"),
        ],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::SlotOverlap,
        b,
        &format!("attempt {b_attempt} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_received_by_a_clock_running_ahead_makes_receipt_times_go_backwards() {
    let f = build().await;
    let url = f.db.url();
    sql(
        url,
        &[format!(
            "UPDATE expiry_sweeps SET swept_at = swept_at + interval '1 hour' WHERE job_id = '{}'",
            f.retried.0
        )],
    )
    .await;
    let report = run_audit(url).await;
    let violations = replayed(&report);
    assert_eq!(violations.len(), 1, "{:#?}", report.violations);
    let v = violations[0];
    assert_eq!(
        (v.kind, v.job),
        (Kind::ReceiptTimeOrder, f.retried.0),
        "{v:#?}"
    );
    // Named on the first record after the sweep in commit order, against the sweep.
    assert!(v.record.starts_with("reconciliation #"), "{v:#?}");
    assert!(v.detail.contains("before expiry sweep #"), "{v:#?}");
}

/// Replicas whose clocks are each within the δ the database records (`max_clock_skew`) disagree
/// by up to 2δ, and may write one job's records in turn: receipt times out of commit order by
/// less than 2δ are what the protocol allows there, by more still a clock outside the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipt_times_out_of_order_are_judged_within_twice_the_recorded_clock_skew() {
    let f = build().await;
    let url = f.db.url();
    let job = f.retried.0;
    // The sweep received after the reconciliation that follows it in commit order.
    let sweep_after_reconciliation = |seconds: u32| {
        format!(
            "UPDATE expiry_sweeps SET swept_at = (SELECT max(decided_at) FROM reconciliations              WHERE job_id = '{job}') + interval '{seconds} seconds' WHERE job_id = '{job}'"
        )
    };
    sql(url, &[sweep_after_reconciliation(29)]).await;
    let receipt_order = |report: &AuditReport| -> Vec<uuid::Uuid> {
        replayed(report)
            .iter()
            .filter(|v| v.kind == Kind::ReceiptTimeOrder)
            .map(|v| v.job)
            .collect()
    };
    // δ = 0 recorded: the tolerance is 1 s.
    let report = run_audit(url).await;
    assert_eq!(
        receipt_order(&report),
        vec![job],
        "{:#?}",
        report.violations
    );
    // δ = 15 s recorded: 29 s is just within 2δ (a tolerance of δ, or of 1 s, reports it).
    sql(
        url,
        &["UPDATE lease_policy SET max_clock_skew = interval '15 seconds'".to_string()],
    )
    .await;
    let report = run_audit(url).await;
    assert!(replayed(&report).is_empty(), "{:#?}", report.violations);
    // 31 s is just past it (a tolerance of 3δ would allow it).
    sql(url, &[sweep_after_reconciliation(31)]).await;
    let report = run_audit(url).await;
    assert_eq!(
        receipt_order(&report),
        vec![job],
        "{:#?}",
        report.violations
    );
    let v = replayed(&report)[0];
    assert!(v.detail.contains("the 30 s tolerance"), "{v:#?}");
    assert_eq!(report.receipt_time_tolerance_seconds, 30.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_for_a_thousand_times_the_configured_ttl_is_caught_when_the_ttl_is_recorded(
) {
    let f = build().await;
    let url = f.db.url();
    // A running job's claim and heartbeats, consistently, with a ttl 1,000 times the store's.
    let running = f.running.0;
    let long = format!("interval '{} seconds'", TTL_SECONDS * 1000);
    sql(
        url,
        &[
            format!(
                "UPDATE attempts SET claim_lease_expiry = claimed_at + {long} WHERE job_id = '{running}'"
            ),
            format!(
                "UPDATE observations SET lease_expiry = received_at + {long} \
                 WHERE named_job_id = '{running}' AND lease_expiry IS NOT NULL"
            ),
            format!(
                "UPDATE attempts SET lease_expiry = (SELECT max(lease_expiry) FROM observations \
                 WHERE named_job_id = '{running}') WHERE job_id = '{running}'"
            ),
        ],
    )
    .await;
    // Without a record of the configured ttl (a schema from before migration 0012, which the
    // store now records its ttl in): not checked, and the report says so.
    sql(
        url,
        &["ALTER TABLE lease_policy RENAME TO lease_policy_hidden".to_string()],
    )
    .await;
    let report = run_audit(url).await;
    assert!(replayed(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.configured_lease_ttl_seconds, None);
    assert!(report
        .render(&Default::default())
        .contains("lease ttl not checked"));
    sql(
        url,
        &["ALTER TABLE lease_policy_hidden RENAME TO lease_policy".to_string()],
    )
    .await;
    // With it (migration 0012's `lease_policy`, the largest ttl a store was created with).
    sql(
        url,
        &[
            "CREATE TABLE IF NOT EXISTS lease_policy (id boolean PRIMARY KEY DEFAULT true, \
             max_lease_ttl interval NOT NULL)"
                .to_string(),
            format!(
                "INSERT INTO lease_policy (id, max_lease_ttl) VALUES (true, interval '{TTL_SECONDS} seconds') \
                 ON CONFLICT (id) DO UPDATE SET max_lease_ttl = EXCLUDED.max_lease_ttl"
            ),
        ],
    )
    .await;
    let attempt = attempt_with_fence(url, f.running, 1).await;
    let report = run_audit(url).await;
    assert_eq!(
        report.configured_lease_ttl_seconds,
        Some(TTL_SECONDS as f64)
    );
    assert_caught(
        &report,
        Kind::LeaseTtl,
        f.running,
        &format!("attempt {attempt} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benign_maintenance_is_not_flagged_in_full_or_since_the_clean_watermark() {
    let f = build().await;
    let url = f.db.url();
    let clean = run_audit(url).await;
    assert!(clean.is_clean(), "{:#?}", clean.violations);
    sql(
        url,
        &[
            "VACUUM FULL".to_string(),
            "REINDEX TABLE observations".to_string(),
            "REINDEX TABLE target_slots".to_string(),
            "SELECT setval('ledger_seq', nextval('ledger_seq') + 1000)".to_string(),
        ],
    )
    .await;
    let clock = ManualClock::at_fixed_start();
    let store =
        f.db.store(Arc::new(clock), StoreConfig::default())
            .await
            .unwrap();
    store.create_project("a new project").await.unwrap();
    store.close().await;
    let report = run_audit(url).await;
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert_eq!(report.records, clean.records);
    let options = AuditOptions {
        since: Some(clean.watermark),
        batch: 100,
        ..AuditOptions::default()
    };
    let (since, _) = audit::audit(url, &options, |_| {}).await.unwrap();
    assert!(since.is_clean(), "{:#?}", since.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_without_its_accepted_put_and_a_log_chunk_deleted_are_caught() {
    let f = build().await;
    let url = f.db.url();
    let passed = f.passed.0;
    let attempt = attempt_with_fence(url, f.passed, 1).await;
    // The artifact's accepted put deleted: the artifact row has no message behind it.
    sql(
        url,
        &[format!(
            "DELETE FROM observations WHERE named_job_id = '{passed}' AND kind = 'artifact_put'"
        )],
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::SideEffectRecord,
        f.passed,
        &format!("artifacts row out.txt of attempt {attempt}"),
    );
    // The log chunk deleted (the put restored): the accepted log_append has no chunk.
    let f = build().await;
    let url = f.db.url();
    let passed = f.passed.0;
    sql(
        url,
        &[format!(
            "DELETE FROM logs WHERE attempt_id IN (SELECT id FROM attempts WHERE job_id = '{passed}')"
        )],
    )
    .await;
    let appended = scalar(
        url,
        &format!(
            "SELECT min(id) FROM observations WHERE named_job_id = '{passed}' \
             AND kind = 'log_append' AND verdict = 'accepted'"
        ),
    )
    .await;
    let report = run_audit(url).await;
    assert_caught(
        &report,
        Kind::SideEffectRecord,
        f.passed,
        &format!("observation #{appended} "),
    );
}

/// Issue 37 item 3: after an epoch change with no claim since (no row in `epochs`, no token of
/// the new epoch), the report still shows the epoch and the job running across it, in a full run
/// and under `--since` a watermark of the new epoch when no job is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_with_no_claim_yet_is_shown_with_the_jobs_running_across_it() {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .expect("a store");
    let project = store.create_project("epochs").await.unwrap();
    let (runner, _) = store.create_runner(project, "r1").await.unwrap();
    let running = store
        .submit_job(project, NewJob::new("rev", "digest", "running"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    assert_eq!(lease.tuple.job, running);
    leasewright_impl::epoch::advance_epoch(store.pool())
        .await
        .unwrap();
    store.close().await;
    let full = run_audit(db.url()).await;
    assert!(full.is_clean(), "{:#?}", full.violations);
    type Shown = (Vec<(i64, usize)>, Vec<(uuid::Uuid, i64, i64)>);
    let shown = |r: &AuditReport| -> Shown {
        (
            r.epochs.iter().map(|e| (e.epoch, e.claims)).collect(),
            r.across_epochs
                .iter()
                .map(|a| (a.job, a.claimed_in, a.latest))
                .collect(),
        )
    };
    let expected = (vec![(0, 1), (1, 0)], vec![(running.0, 0, 1)]);
    assert_eq!(shown(&full), expected);
    let Ok(audit::chain::Since::Token(w)) = full.since.clone().unwrap().parse() else {
        panic!("a token");
    };
    let options = AuditOptions {
        since: Some(w.position),
        since_token: Some(w),
        since_witness: full.witness.clone(),
        ..AuditOptions::default()
    };
    let (since, _) = audit::audit(db.url(), &options, |_| {}).await.unwrap();
    assert_eq!(since.jobs, 0, "nothing new");
    assert_eq!(shown(&since), expected);
}

/// The replay runs on threads and the ledger is read over several connections sharing one
/// snapshot (issue 37 item 5); the report is the one a single thread on a single connection
/// gives, violations in the same order, on a ledger where four jobs were corrupted, in a full
/// run and under `--since` its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_is_the_same_on_one_thread_and_on_several() {
    let f = build().await;
    let url = f.db.url();
    let t = f.first_attempt;
    let first = heartbeat_id(url, f.running, "min").await;
    sql(
        url,
        &[
            format!(
                "UPDATE jobs SET state = 'queued', current_attempt_id = NULL WHERE id = '{}'",
                f.uncertain.0
            ),
            format!(
                "UPDATE jobs SET state = 'failed', outcome = 'failed' WHERE id = '{}'",
                f.passed.0
            ),
            format!("DELETE FROM observations WHERE id = {first}"),
            format!(
                "INSERT INTO observations (sender_runner_id, kind, named_job_id, \
                 named_attempt_id, named_lease_id, named_fence, attempt_id, received_at, \
                 verdict, outcome, payload_sha256) VALUES ('{}', 'result', '{}', '{}', '{}', \
                 {}, '{}', '2030-01-01 00:10:00+00', 'accepted', 'failed', 'x')",
                t.runner.0, t.job.0, t.attempt.0, t.lease_id.0, t.fence, t.attempt.0
            ),
        ],
    )
    .await;
    let options = |threads: usize, connections: usize| AuditOptions {
        batch: 3,
        threads,
        connections,
        ..AuditOptions::default()
    };
    let report = |options: AuditOptions| async move {
        let (report, _) = audit::audit(url, &options, |_| {})
            .await
            .expect("the audit runs");
        let mut json = serde_json::to_value(&report).unwrap();
        for timing in ["seconds", "records_per_second", "chain_seconds"] {
            json.as_object_mut().unwrap().remove(timing);
        }
        (json, report)
    };
    let (one, first) = report(options(1, 1)).await;
    let (several, _) = report(options(3, 3)).await;
    let replayed: std::collections::BTreeSet<&str> = one["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] != "ledger_chain")
        .map(|v| v["job"].as_str().unwrap())
        .collect();
    assert!(replayed.len() >= 4, "{one:#}");
    assert_eq!(one, several);
    // Under `--since` the first run's token and witness: the chain pass on several connections,
    // the jobs it names replayed.
    let Ok(audit::chain::Since::Token(w)) = first.since.clone().unwrap().parse() else {
        panic!("a token");
    };
    let since = |threads: usize, connections: usize| AuditOptions {
        since: Some(w.position),
        since_token: Some(w.clone()),
        since_witness: first.witness.clone(),
        ..options(threads, connections)
    };
    let (one, _) = report(since(1, 1)).await;
    let (several, _) = report(since(3, 3)).await;
    assert_eq!(one["chain_records"], several["chain_records"]);
    assert!(one["chain_records"].as_u64().unwrap() > 0, "{one:#}");
    assert_eq!(one, several);
}
