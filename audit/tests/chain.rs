//! The ledger's chain (impl migration 0015; docs/audit.md, "The chain"): on a ledger written by the
//! real Store, a deleted, duplicated, edited or inserted record is caught in a full run and under
//! `--since` the clean ledger's watermark while its job is not replayed; a watermark from another
//! database or from before a failover is refused; benign maintenance is not flagged.

mod common;

use chrono::Duration;
use common::{prune_audited, scalar, sql};
use leasewright_audit::chain::{Since, Watermark};
use leasewright_audit::{self as audit, AuditError, AuditOptions, AuditReport, Kind};
use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use std::sync::Arc;

/// A ledger with every kind of chained record: `passed` (claim, heartbeats, a rejected late
/// heartbeat from another runner, result), `retried` (claim, sweep, cancel, reconciliation, a
/// second claim), and a job left queued.
struct Ledger {
    db: TestDatabase,
    passed: JobId,
    retried: JobId,
}

async fn build() -> Ledger {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let config = StoreConfig {
        lease_ttl: std::time::Duration::from_secs(30),
        ..StoreConfig::default()
    };
    let store = db
        .store(Arc::new(clock.clone()), config)
        .await
        .expect("a store");
    let project = store.create_project("chained").await.unwrap();
    let (r1, _) = store.create_runner(project, "r1").await.unwrap();
    let (r2, _) = store.create_runner(project, "r2").await.unwrap();
    let lease = |v: Verdict<Lease>| match v {
        Verdict::Accepted(lease) => lease.tuple,
        other => panic!("claim: {other:?}"),
    };
    let passed = store
        .submit_job(project, NewJob::new("rev", "digest", "passed"))
        .await
        .unwrap();
    let retried = store
        .submit_job(project, NewJob::new("rev", "digest", "retried"))
        .await
        .unwrap();
    store
        .submit_job(project, NewJob::new("rev", "digest", "queued"))
        .await
        .unwrap();
    let t = lease(store.claim(r1, None).await.unwrap());
    assert_eq!(t.job, passed);
    clock.advance(Duration::seconds(5));
    store.heartbeat(&t, None).await.unwrap();
    clock.advance(Duration::seconds(5));
    store.heartbeat(&t, None).await.unwrap();
    let mut forged = t;
    forged.runner = r2;
    store.heartbeat(&forged, None).await.unwrap();
    store
        .report_result(&t, Outcome::Passed, "d", None)
        .await
        .unwrap();
    let u = lease(store.claim(r2, None).await.unwrap());
    assert_eq!(u.job, retried);
    clock.advance(Duration::seconds(60));
    store.sweep_expired().await.unwrap();
    store.cancel(project, retried).await.unwrap();
    let verdict = store
        .reconcile(project, retried, Finding::Stopped, Decision::Retry)
        .await
        .unwrap();
    assert_eq!(verdict, Verdict::Accepted(()));
    store.close().await;
    Ledger {
        db,
        passed,
        retried,
    }
}

async fn audit_with(url: &str, since: Option<&str>) -> Result<AuditReport, AuditError> {
    let mut options = AuditOptions {
        batch: 2,
        ..AuditOptions::default()
    };
    match since.map(|s| s.parse::<Since>().expect("a watermark")) {
        Some(Since::Token(w)) => {
            options.since = Some(w.position);
            options.since_token = Some(w);
        }
        Some(Since::Position(p)) => options.since = Some(p),
        None => {}
    }
    let (report, projects) = audit::audit(url, &options, |_| {}).await?;
    eprintln!("{}", report.render(&projects));
    Ok(report)
}

/// A clean ledger's report and its watermark token.
async fn clean(url: &str) -> (AuditReport, String) {
    let report = audit_with(url, None).await.expect("the audit runs");
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(report.unchained_jobs == 0, "every job is chained");
    let token = report.since.clone().expect("a watermark token");
    (report, token)
}

/// `corrupt` is caught as `ledger_chain` on `job` naming `record`, in a full run, and under
/// `--since` the clean ledger's watermark, where the job is not replayed (nothing is new), with the
/// watermark's digest reported as not matching.
async fn caught_in_full_and_since(url: &str, corrupt: &[String], job: JobId, record: &str) {
    let (_, token) = clean(url).await;
    sql(url, corrupt).await;
    let full = audit_with(url, None).await.expect("the audit runs");
    let chain: Vec<_> = full
        .violations
        .iter()
        .filter(|v| v.kind == Kind::LedgerChain)
        .collect();
    assert_eq!(chain.len(), 1, "{:#?}", full.violations);
    assert_eq!(chain[0].job, job.0, "{:#?}", chain[0]);
    assert!(
        chain[0].record.starts_with(record),
        "names {}: {}",
        chain[0].record,
        chain[0].detail
    );
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert_eq!(since.jobs, 0, "nothing new: no job replayed");
    let kinds: Vec<(Kind, uuid::Uuid)> = since.violations.iter().map(|v| (v.kind, v.job)).collect();
    assert_eq!(
        kinds,
        vec![
            (Kind::LedgerChain, job.0),
            (Kind::WatermarkMismatch, uuid::Uuid::nil())
        ],
        "{:#?}",
        since.violations
    );
    assert!(since.violations[0].record.starts_with(record));
}

async fn first_heartbeat(url: &str, job: JobId) -> i64 {
    scalar(
        url,
        &format!(
            "SELECT min(id) FROM observations WHERE named_job_id = '{}' AND kind = 'heartbeat'",
            job.0
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_chained_ledger_audits_clean_and_its_watermark_verifies() {
    let l = build().await;
    let url = l.db.url();
    let (report, token) = clean(url).await;
    let records = scalar(
        url,
        "SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM attempts) \
              + (SELECT count(*) FROM observations) + (SELECT count(*) FROM reconciliations) \
              + (SELECT count(*) FROM cancels) + (SELECT count(*) FROM expiry_sweeps)",
    )
    .await;
    assert_eq!(report.chain_records as i64, records, "every record hashed");
    let chained = scalar(
        url,
        "SELECT (SELECT count(*) FROM attempts WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM observations WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM expiry_sweeps WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM jobs WHERE chain_head IS NULL)",
    )
    .await;
    assert_eq!(chained, 0, "every record is chained");
    let again = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert!(again.is_clean(), "{:#?}", again.violations);
    assert_eq!(again.jobs, 0);
    assert_eq!(again.since.as_deref(), Some(token.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_record_is_a_gap_in_the_chain_in_full_and_since() {
    let l = build().await;
    let id = first_heartbeat(l.db.url(), l.passed).await;
    caught_in_full_and_since(
        l.db.url(),
        &[format!("DELETE FROM observations WHERE id = {id}")],
        l.passed,
        "observation #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_record_is_a_second_record_with_its_seq_in_full_and_since() {
    let l = build().await;
    let id = first_heartbeat(l.db.url(), l.passed).await;
    let columns = "sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, \
                   named_fence, attempt_id, received_at, runner_time, verdict, reason, outcome, \
                   payload_sha256, lease_expiry, ledger_seq, chain_seq, chain_hash";
    // A copy as a restore or a replication apply makes it: every column, the triggers off.
    caught_in_full_and_since(
        l.db.url(),
        &[
            "SET session_replication_role = replica".to_string(),
            format!(
                "INSERT INTO observations ({columns}) SELECT {columns} FROM observations \
                 WHERE id = {id}"
            ),
        ],
        l.passed,
        "observation #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_record_field_breaks_its_hash_in_full_and_since() {
    let l = build().await;
    let job = l.retried.0;
    caught_in_full_and_since(
        l.db.url(),
        &[format!(
            "UPDATE expiry_sweeps SET swept_at = swept_at - interval '1 second' \
             WHERE job_id = '{job}'"
        )],
        l.retried,
        "expiry sweep #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inserted_record_is_caught_in_full_and_since() {
    let l = build().await;
    let url = l.db.url();
    let id = first_heartbeat(url, l.passed).await;
    // A rejected heartbeat written past the trigger with a position below the watermark.
    caught_in_full_and_since(
        l.db.url(),
        &[
            "SET session_replication_role = replica".to_string(),
            format!(
                "INSERT INTO observations (sender_runner_id, kind, named_job_id, \
                 named_attempt_id, named_lease_id, named_fence, received_at, verdict, reason, \
                 ledger_seq) \
                 SELECT sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, \
                 named_fence, received_at, 'rejected', 'not_current', ledger_seq \
                 FROM observations WHERE id = {id}"
            ),
        ],
        l.passed,
        "observation #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_through_the_trigger_is_a_new_record_and_its_job_is_replayed() {
    let l = build().await;
    let url = l.db.url();
    let (clean_report, token) = clean(url).await;
    let id = first_heartbeat(url, l.passed).await;
    // The position written by hand is overwritten: the record is new, its job replayed.
    sql(
        url,
        &[format!(
            "INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, \
             named_lease_id, named_fence, received_at, verdict, reason, ledger_seq) \
             SELECT sender_runner_id, kind, named_job_id, named_attempt_id, named_lease_id, \
             named_fence, received_at, 'rejected', 'not_current', 1 \
             FROM observations WHERE id = {id}"
        )],
    )
    .await;
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert_eq!(since.jobs, 1, "the job with the new record is replayed");
    assert!(since.watermark > clean_report.watermark);
    assert!(
        since
            .violations
            .iter()
            .all(|v| v.kind != Kind::LedgerChain && v.kind != Kind::WatermarkMismatch),
        "{:#?}",
        since.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistently_rewritten_chain_is_a_watermark_mismatch_under_since() {
    let l = build().await;
    let url = l.db.url();
    let (_, token) = clean(url).await;
    // The job's whole history deleted (job row, records): a full run cannot know it existed.
    let job = l.retried.0;
    sql(
        url,
        &[
            format!("DELETE FROM expiry_sweeps WHERE job_id = '{job}'"),
            format!("DELETE FROM cancels WHERE job_id = '{job}'"),
            format!("DELETE FROM reconciliations WHERE job_id = '{job}'"),
            format!("DELETE FROM observations WHERE named_job_id = '{job}'"),
            format!("UPDATE target_slots SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL, reserved_at = NULL WHERE holder_job_id = '{job}'"),
            format!("UPDATE jobs SET current_attempt_id = NULL WHERE id = '{job}'"),
            format!("DELETE FROM attempts WHERE job_id = '{job}'"),
            format!("DELETE FROM jobs WHERE id = '{job}'"),
        ],
    )
    .await;
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    let kinds: Vec<Kind> = since.violations.iter().map(|v| v.kind).collect();
    assert_eq!(
        kinds,
        vec![Kind::WatermarkMismatch],
        "{:#?}",
        since.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_from_another_database_is_refused() {
    let a = build().await;
    let b = build().await;
    let (_, token) = clean(a.db.url()).await;
    let refused = audit_with(b.db.url(), Some(&token)).await;
    match refused {
        Err(AuditError::Watermark(why)) => assert!(why.contains("another database"), "{why}"),
        other => panic!("not refused: {:?}", other.map(|r| r.violations)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_from_before_a_failover_is_refused() {
    let l = build().await;
    let url = l.db.url();
    let (_, token) = clean(url).await;
    let store = common::default_store(&l.db).await;
    leasewright_impl::epoch::advance_epoch(store.pool())
        .await
        .expect("the epoch advanced");
    store.close().await;
    match audit_with(url, Some(&token)).await {
        Err(AuditError::Watermark(why)) => {
            assert!(why.contains("failover"), "{why}");
            assert!(why.contains("full audit"), "{why}");
        }
        other => panic!("not refused: {:?}", other.map(|r| r.violations)),
    }
    // A full run is the way on, and prints a watermark of the new epoch.
    let (_, new_token) = clean(url).await;
    let Ok(Since::Token(Watermark { epoch, .. })) = new_token.parse::<Since>() else {
        panic!("a token");
    };
    let Ok(Since::Token(Watermark { epoch: old, .. })) = token.parse::<Since>() else {
        panic!("a token");
    };
    assert!(epoch > old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benign_maintenance_is_not_flagged_by_the_chain_in_full_or_since() {
    let l = build().await;
    let url = l.db.url();
    let (_, token) = clean(url).await;
    sql(
        url,
        &[
            "VACUUM FULL".to_string(),
            "REINDEX TABLE observations".to_string(),
            "REINDEX TABLE jobs".to_string(),
            "SELECT setval('ledger_seq', nextval('ledger_seq') + 1000)".to_string(),
        ],
    )
    .await;
    let store = common::default_store(&l.db).await;
    store.create_project("a new project").await.unwrap();
    store.close().await;
    let full = audit_with(url, None).await.expect("the audit runs");
    assert!(full.is_clean(), "{:#?}", full.violations);
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert!(since.is_clean(), "{:#?}", since.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_job_is_not_a_deleted_one_under_since() {
    let l = build().await;
    let url = l.db.url();
    let (_, token) = clean(url).await;
    let clock = ManualClock::at_fixed_start();
    let finished_before = clock.now() + Duration::days(1);
    let store =
        l.db.store(Arc::new(clock), StoreConfig::default())
            .await
            .unwrap();
    // A job submitted and finished after the watermark, pruned too: not in the watermark's digest.
    let project = store.create_project("later").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    store
        .submit_job(project, NewJob::new("rev", "digest", "later"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    store
        .report_result(&lease.tuple, Outcome::Failed, "d", None)
        .await
        .unwrap();
    let (audited, _) = clean(url).await;
    let pruned = prune_audited(&store, audited.watermark, finished_before).await;
    store.close().await;
    assert_eq!(pruned, 2, "the passed job and the later one are pruned");
    let full = audit_with(url, None).await.expect("the audit runs");
    assert!(full.is_clean(), "{:#?}", full.violations);
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert!(since.is_clean(), "{:#?}", since.violations);
}

/// The claim and the result chain their own record in the update of the job's row they make anyway
/// (migration 0015's `claim()`, `attempt_commit_result(s)_if_current`): a batch claim's attempts,
/// a batch result's observations (one of its items a duplicate, judged singly and recorded through
/// the trigger), with a heartbeat between, are chained in the order they were written, their
/// positions rise along each chain, each job's row holds its last record's hash, and the ledger
/// audits clean in full and under its own watermark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_batch_results_chained_in_their_own_statements_audit_clean() {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .expect("a store");
    let project = store.create_project("batched").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    for command in ["a", "b", "c"] {
        store
            .submit_job(project, NewJob::new("rev", "digest", command))
            .await
            .unwrap();
    }
    let leases = match store.claim_batch(runner, 3, None).await.unwrap() {
        Verdict::Accepted(leases) => leases,
        other => panic!("claim: {other:?}"),
    };
    assert_eq!(leases.len(), 3);
    clock.advance(Duration::seconds(1));
    store.heartbeat(&leases[1].tuple, None).await.unwrap();
    let item = |lease: &Lease| ResultReport {
        tuple: lease.tuple,
        outcome: Outcome::Passed,
        result_digest: "d".into(),
        runner_time: None,
    };
    let mut items: Vec<ResultReport> = leases.iter().map(item).collect();
    items.push(item(&leases[0]));
    let verdicts = store.report_results(&items).await.unwrap();
    assert!(
        verdicts[..3].iter().all(|v| *v == Verdict::Accepted(())),
        "{verdicts:?}"
    );
    assert_ne!(verdicts[3], Verdict::Accepted(()), "{verdicts:?}");
    store.close().await;
    let url = db.url();
    // Per job: the claim is record 2; the result follows it (3, or 4 after the heartbeat); the
    // duplicate is the last; every record's position is above its predecessor's.
    let out_of_order = scalar(
        url,
        "WITH r AS ( \
             SELECT id AS job, 1 AS seq, ledger_seq, chain_head AS hash FROM jobs \
             UNION ALL SELECT job_id, chain_seq, ledger_seq, chain_hash FROM attempts \
             UNION ALL SELECT named_job_id, chain_seq, ledger_seq, chain_hash FROM observations), \
         o AS (SELECT job, seq, ledger_seq, \
                      lag(ledger_seq) OVER (PARTITION BY job ORDER BY seq) AS previous, \
                      row_number() OVER (PARTITION BY job ORDER BY seq) AS n FROM r) \
         SELECT count(*) FROM o WHERE seq IS NULL OR seq <> n OR ledger_seq <= previous",
    )
    .await;
    assert_eq!(out_of_order, 0, "every record chained, in order");
    let heads = scalar(
        url,
        "SELECT count(*) FROM jobs AS j WHERE j.chain_head = ( \
             SELECT chain_hash FROM ( \
                 SELECT chain_seq, chain_hash FROM attempts WHERE job_id = j.id \
                 UNION ALL SELECT chain_seq, chain_hash FROM observations \
                 WHERE named_job_id = j.id) AS r \
             ORDER BY chain_seq DESC LIMIT 1)",
    )
    .await;
    assert_eq!(heads, 3, "each job's row holds its last record's hash");
    let results = scalar(
        url,
        "SELECT count(*) FROM observations WHERE kind = 'result' AND verdict = 'accepted'",
    )
    .await;
    assert_eq!(results, 3);
    let (report, token) = clean(url).await;
    assert_eq!(report.chain_records, 3 + 3 + 1 + 4);
    let again = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert!(again.is_clean(), "{:#?}", again.violations);
}

/// A job after `beats` accepted heartbeats (migration 0017: each chained in the attempt's row,
/// the job's row only locked), left running or (`finish`) passed, and the heartbeats'
/// observation ids.
async fn beating(beats: usize, finish: bool) -> (TestDatabase, JobId, Vec<i64>) {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .expect("a store");
    let project = store.create_project("beating").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let job = store
        .submit_job(project, NewJob::new("rev", "digest", "beating"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim")
    };
    for _ in 0..beats {
        clock.advance(Duration::seconds(1));
        let verdict = store.heartbeat(&lease.tuple, None).await.unwrap();
        assert!(matches!(verdict, Verdict::Accepted(_)), "{verdict:?}");
    }
    if finish {
        let verdict = store
            .report_result(&lease.tuple, Outcome::Passed, "d", None)
            .await
            .unwrap();
        assert_eq!(verdict, Verdict::Accepted(()));
    }
    store.close().await;
    let ids = {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
        sqlx::query_scalar(
            "SELECT id FROM observations WHERE kind = 'heartbeat' AND verdict = 'accepted' \
             ORDER BY chain_seq",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    };
    (db, job, ids)
}

/// The one job's row's chain seq * 100 + its current attempt's head seq.
async fn heads(url: &str) -> i64 {
    scalar(
        url,
        "SELECT (j.chain_seq * 100 + a.job_chain_seq)::bigint FROM jobs AS j \
         JOIN attempts AS a ON a.id = j.current_attempt_id",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_heartbeats_chain_in_the_attempts_row_and_a_deleted_one_is_caught() {
    let (db, job, ids) = beating(3, false).await;
    let url = db.url();
    // The job's row still holds the claim's head (seq 2): the heartbeats advanced the attempt's.
    let heads = heads(url).await;
    assert_eq!(
        heads, 205,
        "job row at the claim (2), the attempt's head at 5"
    );
    let chained = scalar(
        url,
        "SELECT count(*) FROM observations AS o JOIN attempts AS a ON a.id = o.attempt_id \
         WHERE o.chain_seq = a.job_chain_seq AND o.chain_hash = a.job_chain_head",
    )
    .await;
    assert_eq!(
        chained, 1,
        "the attempt's head is its last heartbeat's hash"
    );
    // `clean` (in the helper) audits it clean first; then the middle heartbeat is deleted.
    caught_in_full_and_since(
        url,
        &[format!("DELETE FROM observations WHERE id = {}", ids[1])],
        job,
        "observation #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_accepted_heartbeat_deleted_is_a_chain_that_ends_early() {
    let (db, job, ids) = beating(3, false).await;
    caught_in_full_and_since(
        db.url(),
        &[format!("DELETE FROM observations WHERE id = {}", ids[2])],
        job,
        "the job's row",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_accepted_heartbeat_breaks_its_hash() {
    let (db, job, ids) = beating(3, false).await;
    caught_in_full_and_since(
        db.url(),
        &[format!(
            "UPDATE observations SET received_at = received_at - interval '1 second' \
             WHERE id = {}",
            ids[0]
        )],
        job,
        "observation #",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_after_heartbeats_follows_the_attempts_head() {
    let (db, _, _) = beating(3, true).await;
    let url = db.url();
    let heads = heads(url).await;
    assert_eq!(
        heads, 605,
        "the result (6) follows the attempt's head (5), in the job's row"
    );
    clean(url).await;
}

/// A job submitted by hand (through the chain's trigger) on `conn`: a copy of the queued job's
/// submission under a new id, named `command`.
fn submission(command: &str) -> String {
    format!(
        "INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest, command, \
         target, target_kind) \
         SELECT gen_random_uuid(), project_id, submitted_at, source_revision, source_digest, \
         '{command}', target, target_kind FROM jobs WHERE command = 'queued'"
    )
}

/// A transaction that drew its record's ledger position before the audit and commits while the
/// audit waits (a record in flight), with a record committed after it (so its position is below
/// the largest committed one): the audit waits for it before its snapshot, so the record is in the
/// watermark's digest, and `--since` the watermark is clean, no `watermark_mismatch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_flight_at_the_audits_start_is_waited_for_and_since_its_watermark_is_clean() {
    use sqlx::Connection as _;
    let l = build().await;
    let url = l.db.url().to_string();
    let mut held = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::query("BEGIN").execute(&mut held).await.unwrap();
    sqlx::query(&submission("held"))
        .execute(&mut held)
        .await
        .unwrap();
    sql(&url, &[submission("committed after it")]).await;
    let in_flight = scalar(&url, "SELECT count(*) FROM jobs WHERE command = 'held'").await;
    assert_eq!(in_flight, 0, "the held record is not committed");
    let audit = tokio::spawn({
        let url = url.clone();
        async move { audit_with(&url, None).await.expect("the audit runs") }
    });
    // Until the audit waits for the held transaction (or, without the wait, has finished).
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                   AND pid <> pg_backend_pid() AND query LIKE '%pg_xact_status%'";
    while scalar(&url, waiting).await == 0 && !audit.is_finished() {
        tokio::task::yield_now().await;
    }
    sqlx::query("COMMIT").execute(&mut held).await.unwrap();
    let report = audit.await.unwrap();
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(report.watermark_unsettled.is_none());
    let held_position = scalar(&url, "SELECT ledger_seq FROM jobs WHERE command = 'held'").await;
    assert!(
        held_position <= report.watermark,
        "the held record ({held_position}) is below the watermark ({})",
        report.watermark
    );
    let token = report.since.expect("a token");
    let since = audit_with(&url, Some(&token))
        .await
        .expect("the audit runs");
    assert!(since.is_clean(), "{:#?}", since.violations);
    assert_eq!(since.jobs, 0, "nothing after the watermark");
}

/// The same record held across the whole audit, whose wait runs out at once: the audit says so
/// and prints the watermark it started from (0 for a full run), so that `--since` it replays
/// everything and the record committed after the run is no `watermark_mismatch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_held_past_the_settle_timeout_leaves_the_watermark_where_the_run_started() {
    use sqlx::Connection as _;
    let l = build().await;
    let url = l.db.url();
    let (_, clean_token) = clean(url).await;
    let mut held = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query("BEGIN").execute(&mut held).await.unwrap();
    sqlx::query(&submission("held"))
        .execute(&mut held)
        .await
        .unwrap();
    sql(url, &[submission("committed after it")]).await;
    for start in [None, Some(clean_token.as_str())] {
        let mut options = AuditOptions {
            batch: 2,
            settle_timeout: Some(std::time::Duration::ZERO),
            ..AuditOptions::default()
        };
        let Some(Since::Token(w)) = start.map(|s| s.parse::<Since>().unwrap()) else {
            let (report, _) = audit::audit(url, &options, |_| {}).await.unwrap();
            assert!(report.is_clean(), "{:#?}", report.violations);
            let why = report.watermark_unsettled.as_deref().expect("not settled");
            assert!(why.contains("still in progress"), "{why}");
            assert_eq!(
                report.watermark, 0,
                "a full run's fallback: everything next time"
            );
            continue;
        };
        let position = w.position;
        options.since = Some(position);
        options.since_token = Some(w);
        let (report, _) = audit::audit(url, &options, |_| {}).await.unwrap();
        assert!(report.is_clean(), "{:#?}", report.violations);
        assert!(report.watermark_unsettled.is_some());
        assert_eq!(report.watermark, position, "--since's own position");
        assert_eq!(report.since.as_deref(), Some(clean_token.as_str()));
    }
    let (report, _) = audit::audit(
        url,
        &AuditOptions {
            batch: 2,
            settle_timeout: Some(std::time::Duration::ZERO),
            ..AuditOptions::default()
        },
        |_| {},
    )
    .await
    .unwrap();
    sqlx::query("COMMIT").execute(&mut held).await.unwrap();
    let token = report.since.expect("a token");
    let since = audit_with(url, Some(&token)).await.expect("the audit runs");
    assert!(since.is_clean(), "{:#?}", since.violations);
    assert_eq!(since.jobs, 5, "every job replayed, the held one too");
}
