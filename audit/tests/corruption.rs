//! The corruption suite of issue 27 (items 1, 4, 5 and 6): a ledger written by the real Store
//! with a demonstration fenced target, a retried job and jobs claimed in submission order, each
//! corrupted the way a buggy target, implementation or migration would, and each corruption
//! caught and named in a full run and in a `--since` run from the clean ledger's watermark.
//!
//! `--since` replays the jobs with a record after the watermark: the target's record, the slot rows,
//! every claim's slot token and every job's side effects are read in every run (no new record
//! needed); for the other corruptions the edited jobs get a new record after the watermark, as a
//! job still in flight does (the chain catches those edits without one: audit/tests/chain.rs).

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{prune_audited, scalar, sql};
use leasewright_audit::{self as audit, AuditOptions, AuditReport, Kind};
use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use std::sync::Arc;

const TTL_SECONDS: i64 = 30;

struct Ledger {
    db: TestDatabase,
    clock: ManualClock,
    start: DateTime<Utc>,
    /// On the fenced slot `prod`: passed, its late mutation refused `stale_fence`.
    first: Tuple,
    /// On `prod` after `first`: its mutation applied.
    second: Tuple,
    /// Expired, swept, retried; its second attempt's tuple.
    retried: Tuple,
    /// Submitted together, claimed in that order, 90 s apart.
    earlier: Tuple,
    later: Tuple,
    /// The clean ledger's watermark.
    watermark: i64,
}

fn accepted(v: Verdict<Lease>) -> Lease {
    match v {
        Verdict::Accepted(lease) => lease,
        other => panic!("claim: {other:?}"),
    }
}

async fn build() -> Ledger {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let start = clock.now();
    let at = |s: i64| clock.set(start + Duration::seconds(s));
    let config = StoreConfig {
        lease_ttl: std::time::Duration::from_secs(TTL_SECONDS as u64),
        ..StoreConfig::default()
    };
    let store = db
        .store(Arc::new(clock.clone()), config)
        .await
        .expect("a store");
    let project = store.create_project("corrupted").await.unwrap();
    let (r1, _) = store.create_runner(project, "r1").await.unwrap();
    let (r2, _) = store.create_runner(project, "r2").await.unwrap();
    let on_prod = || NewJob {
        target: Some("prod".to_string()),
        target_kind: TargetKind::Fenced,
        ..NewJob::new("rev", "digest", "deploy")
    };
    let prod = store.demo_target(TargetKind::Fenced, "prod").await.unwrap();
    let mutate = |lease: &Lease| TargetMutation {
        job: lease.tuple.job,
        attempt: lease.tuple.attempt,
        slot_token: lease.slot_token,
        deployment_id: lease.tuple.job.to_string(),
    };

    // Two deployments of `prod`, one after the other; the first one's late mutation refused.
    let a = store.submit_job(project, on_prod()).await.unwrap();
    let b = store.submit_job(project, on_prod()).await.unwrap();
    let first = accepted(store.claim(r1, None).await.unwrap());
    assert_eq!((first.tuple.job, first.slot_token), (a, 1));
    assert!(prod.mutate(&mutate(&first)).await.unwrap().is_accepted());
    at(5);
    store
        .report_result(&first.tuple, Outcome::Passed, "a", None)
        .await
        .unwrap();
    at(10);
    let second = accepted(store.claim(r2, None).await.unwrap());
    assert_eq!((second.tuple.job, second.slot_token), (b, 2));
    assert!(prod.mutate(&mutate(&second)).await.unwrap().is_accepted());
    at(11);
    assert_eq!(
        prod.mutate(&mutate(&first)).await.unwrap(),
        Verdict::Rejected(Reason::StaleFence)
    );
    store.heartbeat(&second.tuple, None).await.unwrap();
    // Its side effects: a log chunk; an artifact put twice and a cache entry put twice under one
    // key (each first put replaced by the second, as the rule allows).
    let t = &second.tuple;
    let ok = |v: Verdict<()>| assert_eq!(v, Verdict::Accepted(()));
    ok(store.append_log(t, 0, b"deploying", None).await.unwrap());
    ok(store
        .put_artifact(t, "report", b"draft", None)
        .await
        .unwrap());
    ok(store
        .put_artifact(t, "report", b"final", None)
        .await
        .unwrap());
    ok(store.cache_put(t, "deps", b"v1", None).await.unwrap());
    ok(store.cache_put(t, "deps", b"v2", None).await.unwrap());
    store
        .report_result(&second.tuple, Outcome::Passed, "b", None)
        .await
        .unwrap();

    // A job claimed, expired, swept, retried and claimed again.
    at(12);
    let f = store
        .submit_job(project, NewJob::new("rev", "digest", "retried"))
        .await
        .unwrap();
    assert_eq!(accepted(store.claim(r1, None).await.unwrap()).tuple.job, f);
    at(12 + TTL_SECONDS + 3);
    store.sweep_expired().await.unwrap();
    at(12 + TTL_SECONDS + 4);
    let verdict = store
        .reconcile(project, f, Finding::Stopped, Decision::Retry)
        .await
        .unwrap();
    assert_eq!(verdict, Verdict::Accepted(()));
    at(50);
    let retried = accepted(store.claim(r2, None).await.unwrap()).tuple;
    assert_eq!((retried.job, retried.fence), (f, 2));

    // Two jobs submitted together, claimed in submission order, 90 s apart.
    at(55);
    let c = store
        .submit_job(project, NewJob::new("rev", "digest", "earlier"))
        .await
        .unwrap();
    let d = store
        .submit_job(project, NewJob::new("rev", "digest", "later"))
        .await
        .unwrap();
    at(60);
    let earlier = accepted(store.claim(r1, None).await.unwrap()).tuple;
    assert_eq!(earlier.job, c);
    at(150);
    let later = accepted(store.claim(r2, None).await.unwrap()).tuple;
    assert_eq!(later.job, d);
    store.close().await;
    let clean = run(db.url(), None).await;
    assert!(clean.is_clean(), "{:#?}", clean.violations);
    Ledger {
        db,
        clock,
        start,
        first: first.tuple,
        second: second.tuple,
        retried,
        earlier,
        later,
        watermark: clean.watermark,
    }
}

async fn run(url: &str, since: Option<i64>) -> AuditReport {
    let options = AuditOptions {
        since,
        batch: 2,
        ..AuditOptions::default()
    };
    let (report, projects) = audit::audit(url, &options, |_| {})
        .await
        .expect("the audit runs");
    eprintln!("{}", report.render(&projects));
    report
}

/// The violations other than the chain's (`ledger_chain`: an edit of a chained record is one
/// too; audit/tests/chain.rs tests those).
fn replayed(report: &AuditReport) -> Vec<&audit::Violation> {
    report
        .violations
        .iter()
        .filter(|v| !matches!(v.kind, Kind::LedgerChain | Kind::WatermarkMismatch))
        .collect()
}

impl Ledger {
    /// A new record for each of `tuples`' jobs after the watermark (a heartbeat, whatever its
    /// verdict), as a job still in flight gets.
    async fn touch(&self, tuples: &[Tuple]) {
        self.clock.set(self.start + Duration::seconds(1000));
        let store = self
            .db
            .store(Arc::new(self.clock.clone()), StoreConfig::default())
            .await
            .unwrap();
        for t in tuples {
            store.heartbeat(t, None).await.unwrap();
        }
        store.close().await;
    }

    /// The violation of `kind` on `job`, naming `record`, in a full run and in a `--since` run
    /// from the clean ledger's watermark; the only one, and the ledger not clean.
    async fn caught(&self, kind: Kind, job: JobId, record: &str) -> AuditReport {
        let url = self.db.url();
        let mut last = None;
        for since in [None, Some(self.watermark)] {
            let report = run(url, since).await;
            let found = replayed(&report);
            assert_eq!(
                found.len(),
                1,
                "one violation expected (since {since:?}): {:#?}",
                report.violations
            );
            let v = found[0];
            assert_eq!((v.kind, v.job), (kind, job.0), "since {since:?}: {v:#?}");
            assert!(
                v.record.starts_with(record),
                "since {since:?}: the violation names {}, not {record}",
                v.record
            );
            assert!(!report.is_clean());
            last = Some(report);
        }
        last.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_mutation_the_fenced_target_applied_is_caught_on_its_row() {
    let l = build().await;
    let url = l.db.url();
    let refused = scalar(
        url,
        "SELECT id FROM target_mutations WHERE verdict = 'rejected'",
    )
    .await;
    sql(
        url,
        &[format!(
            "UPDATE target_mutations SET verdict = 'accepted', reason = NULL, applied = true \
             WHERE id = {refused}"
        )],
    )
    .await;
    let report = l
        .caught(
            Kind::TargetMutation,
            l.first.job,
            &format!("target mutation #{refused} (slot `prod`)"),
        )
        .await;
    assert!(
        replayed(&report)[0].detail.contains("stale_fence"),
        "{:#?}",
        report.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_applied_with_a_token_the_ledger_never_issued_to_its_attempt_is_caught() {
    let l = build().await;
    let url = l.db.url();
    let applied = scalar(
        url,
        &format!(
            "SELECT id FROM target_mutations WHERE attempt_id = '{}'",
            l.second.attempt.0
        ),
    )
    .await;
    // The target's own record is consistent (its highest token too): only the ledger tells.
    sql(
        url,
        &[
            format!("UPDATE target_mutations SET slot_token = 7 WHERE id = {applied}"),
            "UPDATE targets SET highest_slot_token = 7 WHERE slot = 'prod'".to_string(),
        ],
    )
    .await;
    let report = l
        .caught(
            Kind::TargetMutation,
            l.second.job,
            &format!("target mutation #{applied} "),
        )
        .await;
    assert!(replayed(&report)[0].detail.contains("never issued"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_targets_highest_token_rolled_back_is_caught_on_the_targets_row() {
    let l = build().await;
    sql(
        l.db.url(),
        &["UPDATE targets SET highest_slot_token = 1 WHERE slot = 'prod'".to_string()],
    )
    .await;
    l.caught(Kind::TargetMutation, l.second.job, "target `prod` (row)")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_took_a_later_job_while_an_earlier_one_stayed_queued_is_a_claim_order() {
    let l = build().await;
    let url = l.db.url();
    // The two claims' times exchanged, consistently (claim time, lease, claim lease): the later
    // job claimed at 60 s while the earlier one, queued since 55 s with its own slot free, stayed
    // queued until 150 s.
    let swap = |from: &Tuple, to: &Tuple| {
        format!(
            "UPDATE attempts AS a SET claimed_at = o.claimed_at, lease_expiry = o.lease_expiry, \
             claim_lease_expiry = o.claim_lease_expiry FROM attempts AS o \
             WHERE a.id = '{}' AND o.id = '{}'",
            from.attempt.0, to.attempt.0
        )
    };
    sql(
        url,
        &[
            "CREATE TABLE saved AS SELECT * FROM attempts".to_string(),
            swap(&l.earlier, &l.later).replace("FROM attempts AS o", "FROM saved AS o"),
            swap(&l.later, &l.earlier).replace("FROM attempts AS o", "FROM saved AS o"),
            "DROP TABLE saved".to_string(),
        ],
    )
    .await;
    l.touch(&[l.earlier, l.later]).await;
    let report = l
        .caught(
            Kind::ClaimOrder,
            l.later.job,
            &format!("attempt {} (claim", l.later.attempt.0),
        )
        .await;
    assert!(
        replayed(&report)[0]
            .detail
            .contains(&l.earlier.job.0.to_string()),
        "names the job passed over: {:#?}",
        report.violations
    );
}

/// `tuple`'s claim (its time, lease and claim lease) moved by `seconds`.
fn moved(tuple: &Tuple, seconds: i64) -> String {
    format!(
        "UPDATE attempts SET claimed_at = claimed_at + interval '{seconds} seconds', \
         lease_expiry = lease_expiry + interval '{seconds} seconds', \
         claim_lease_expiry = claim_lease_expiry + interval '{seconds} seconds' WHERE id = '{}'",
        tuple.attempt.0
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_passing_over_a_job_claimed_within_the_margin_is_not_flagged_and_beyond_it_is() {
    let l = build().await;
    let url = l.db.url();
    // The earlier job's claim moved to 1 s after the later one's (150 s): within the margin, a
    // concurrent claim that held it locked explains it.
    sql(url, &[moved(&l.earlier, 91)]).await;
    let report = run(url, None).await;
    assert!(replayed(&report).is_empty(), "{:#?}", report.violations);
    // 3 s after it: beyond the margin (2 s), nothing recorded explains it.
    sql(url, &[moved(&l.earlier, 2)]).await;
    let report = run(url, None).await;
    let found = replayed(&report);
    assert_eq!(found.len(), 1, "{:#?}", report.violations);
    let v = found[0];
    assert_eq!((v.kind, v.job), (Kind::ClaimOrder, l.later.job.0), "{v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_fence_in_a_job_that_cannot_be_judged_is_named_and_the_job_counted() {
    let l = build().await;
    let url = l.db.url();
    let job = l.retried.job.0;
    sql(
        url,
        &[
            format!("UPDATE attempts SET claim_lease_expiry = NULL WHERE job_id = '{job}'"),
            "ALTER TABLE attempts DROP CONSTRAINT attempts_fence_unique_per_job".to_string(),
            format!(
                "UPDATE attempts SET fence = 1 WHERE id = '{}'",
                l.retried.attempt.0
            ),
        ],
    )
    .await;
    // The new record names the fence the job's row still holds.
    l.touch(&[Tuple {
        fence: 1,
        ..l.retried
    }])
    .await;
    let report = l
        .caught(
            Kind::FenceOrder,
            l.retried.job,
            &format!("attempt {} (claim", l.retried.attempt.0),
        )
        .await;
    assert_eq!(report.unauditable.len(), 1, "still not judged");
    assert_eq!(report.unauditable[0].0, job);
    assert!(report.unjudged_records > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipt_times_going_backwards_in_a_job_that_cannot_be_judged_are_named() {
    let l = build().await;
    let url = l.db.url();
    let job = l.retried.job.0;
    sql(
        url,
        &[
            format!("UPDATE attempts SET claim_lease_expiry = NULL WHERE job_id = '{job}'"),
            format!(
                "UPDATE expiry_sweeps SET swept_at = swept_at + interval '1 hour' \
                 WHERE job_id = '{job}'"
            ),
        ],
    )
    .await;
    l.touch(&[l.retried]).await;
    let report = l
        .caught(Kind::ReceiptTimeOrder, l.retried.job, "reconciliation #")
        .await;
    assert_eq!(report.unauditable.len(), 1, "still not judged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_outcome_of_a_job_with_a_new_record_is_caught_under_since() {
    let l = build().await;
    let job = l.second.job.0;
    sql(
        l.db.url(),
        &[
            format!("UPDATE jobs SET state = 'failed', outcome = 'failed' WHERE id = '{job}'"),
            format!(
                "UPDATE attempts SET state = 'failed', outcome = 'failed' WHERE job_id = '{job}'"
            ),
        ],
    )
    .await;
    l.touch(&[l.second]).await;
    l.caught(Kind::ReplacedOutcome, l.second.job, "job ").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_counter_rolled_back_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    sql(
        l.db.url(),
        &["UPDATE target_slots SET slot_token = 1 WHERE slot = 'prod'".to_string()],
    )
    .await;
    l.caught(Kind::SlotCounter, l.second.job, "target slot `prod` (row)")
        .await;
}

/// The id of the second deployment's accepted message of `kind` (the last, if several).
async fn side_effect_message(l: &Ledger, kind: &str) -> i64 {
    scalar(
        l.db.url(),
        &format!(
            "SELECT max(id) FROM observations WHERE named_job_id = '{}' AND kind = '{kind}' \
             AND verdict = 'accepted'",
            l.second.job.0
        ),
    )
    .await
}

impl Ledger {
    /// `edit` (`{attempt}`: the second deployment's attempt) is a `side_effect_record` on `job`
    /// naming `record`, in a full run and under `--since` with no new record of any job.
    async fn side_effect_caught(&self, edit: &str, job: JobId, record: &str) -> AuditReport {
        let edit = edit.replace("{attempt}", &self.second.attempt.0.to_string());
        sql(self.db.url(), &[edit]).await;
        self.caught(Kind::SideEffectRecord, job, record).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_log_chunk_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let appended = side_effect_message(&l, "log_append").await;
    let edit = "DELETE FROM logs WHERE attempt_id = '{attempt}'";
    let record = format!("observation #{appended} ");
    l.side_effect_caught(edit, l.second.job, &record).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_log_chunk_is_caught_by_its_content_digest_under_since() {
    let l = build().await;
    let edit = "UPDATE logs SET content = 'tampered' WHERE attempt_id = '{attempt}'";
    let record = format!("logs row 0 of attempt {}", l.second.attempt.0);
    let report = l.side_effect_caught(edit, l.second.job, &record).await;
    let detail = &replayed(&report)[0].detail;
    assert!(detail.contains("the content was edited"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inserted_log_chunk_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let edit = "INSERT INTO logs (attempt_id, seq, content, content_sha256, appended_at) \
                SELECT attempt_id, 1, 'inserted', encode(sha256('inserted'), 'hex'), \
                appended_at FROM logs WHERE attempt_id = '{attempt}'";
    let record = format!("logs row 1 of attempt {}", l.second.attempt.0);
    l.side_effect_caught(edit, l.second.job, &record).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_artifact_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let put = side_effect_message(&l, "artifact_put").await;
    let edit = "DELETE FROM artifacts WHERE attempt_id = '{attempt}'";
    let record = format!("observation #{put} ");
    l.side_effect_caught(edit, l.second.job, &record).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_entrys_storer_rewritten_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let first = l.first.attempt.0;
    let edit = format!("UPDATE cache_entries SET stored_by_attempt = '{first}' WHERE key = 'deps'");
    let record = format!("cache_entries row deps of attempt {first}");
    l.side_effect_caught(&edit, l.first.job, &record).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cache_entry_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let put = side_effect_message(&l, "cache_put").await;
    let edit = "DELETE FROM cache_entries WHERE key = 'deps'";
    let record = format!("observation #{put} ");
    l.side_effect_caught(edit, l.second.job, &record).await;
}

/// Benign maintenance of the side-effect tables (`VACUUM FULL`, `REINDEX`) and a prune of the
/// deployments with their side effects (the cache entry outlives its storer): nothing flagged, in
/// a full run and under `--since` the clean ledger's watermark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benign_maintenance_and_a_prune_of_side_effects_are_not_flagged() {
    let l = build().await;
    let url = l.db.url();
    sql(
        url,
        &[
            "VACUUM FULL logs".to_string(),
            "VACUUM FULL artifacts".to_string(),
            "VACUUM FULL cache_entries".to_string(),
            "REINDEX TABLE logs".to_string(),
            "REINDEX TABLE cache_entries".to_string(),
        ],
    )
    .await;
    for since in [None, Some(l.watermark)] {
        let report = run(url, since).await;
        assert!(report.is_clean(), "{:#?}", report.violations);
    }
    let store =
        l.db.store(Arc::new(l.clock.clone()), StoreConfig::default())
            .await
            .unwrap();
    let pruned = prune_audited(&store, l.watermark, l.start + Duration::days(1)).await;
    store.close().await;
    assert_eq!(pruned, 2, "both deployments pruned");
    let entries = scalar(url, "SELECT count(*) FROM cache_entries").await;
    assert_eq!(entries, 1, "the cache entry outlives its storer");
    for since in [None, Some(l.watermark)] {
        let report = run(url, since).await;
        assert!(report.is_clean(), "{:#?}", report.violations);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_taking_one_job_per_slot_is_not_a_claim_order_but_passing_a_freed_slot_is() {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let start = clock.now();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .unwrap();
    let project = store.create_project("batch").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let on = |slot: &str| NewJob {
        target: Some(slot.to_string()),
        ..NewJob::new("rev", "d", "c")
    };
    let mut jobs = Vec::new();
    for slot in ["s1", "s1", "s2", "s3"] {
        jobs.push(store.submit_job(project, on(slot)).await.unwrap());
    }
    // A batch of 3 at 10 s: of the three earliest, one per slot (the second job's slot is the
    // first's): two jobs, the second left queued with its slot held by the batch.
    clock.set(start + Duration::seconds(10));
    let Verdict::Accepted(batch) = store.claim_batch(runner, 3, None).await.unwrap() else {
        panic!("a batch");
    };
    let taken: Vec<JobId> = batch.iter().map(|l| l.tuple.job).collect();
    assert_eq!(taken, vec![jobs[0], jobs[2]]);
    // At 100 s a claim passes over the second job (its slot still held) for the fourth.
    clock.set(start + Duration::seconds(100));
    let Verdict::Accepted(fourth) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    assert_eq!(fourth.tuple.job, jobs[3]);
    // Time passes (the ledger's latest record, at 200 s, shows the second job still queued).
    clock.set(start + Duration::seconds(200));
    store.heartbeat(&fourth.tuple, None).await.unwrap();
    store.close().await;
    let report = run(db.url(), None).await;
    assert!(replayed(&report).is_empty(), "{:#?}", report.violations);
    // The first job passed at once (its result received at its claim, releasing `s1`),
    // consistently in its rows, the slot's and an accepted result: the claim at 100 s then
    // passed over the second job, queued with its slot free.
    let first = jobs[0].0;
    sql(
        db.url(),
        &[
            format!(
                "UPDATE attempts SET state = 'passed', outcome = 'passed', result_digest = 'x', \
                 ended_at = claimed_at WHERE job_id = '{first}'"
            ),
            format!(
                "UPDATE jobs SET state = 'passed', outcome = 'passed', result_digest = 'x', \
                 finished_at = '{}' WHERE id = '{first}'",
                start + Duration::seconds(10)
            ),
            "UPDATE target_slots SET holder_project_id = NULL, holder_job_id = NULL, \
             holder_attempt_id = NULL, reserved_at = NULL WHERE slot = 's1'"
                .to_string(),
            format!(
                "INSERT INTO observations (sender_runner_id, kind, named_job_id, \
                 named_attempt_id, named_lease_id, named_fence, attempt_id, received_at, \
                 verdict, outcome, payload_sha256) \
                 SELECT runner_id, 'result', job_id, id, lease_id, fence, id, claimed_at, \
                 'accepted', 'passed', encode(sha256('passed:x'), 'hex') FROM attempts \
                 WHERE job_id = '{first}'"
            ),
        ],
    )
    .await;
    let report = run(db.url(), None).await;
    let found = replayed(&report);
    assert_eq!(found.len(), 1, "{:#?}", report.violations);
    let v = found[0];
    assert_eq!((v.kind, v.job), (Kind::ClaimOrder, jobs[3].0), "{v:#?}");
    assert!(v.detail.contains(&jobs[1].0.to_string()), "{v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_reconciliation_was_deleted_is_caught_under_since() {
    let l = build().await;
    sql(
        l.db.url(),
        &[format!(
            "DELETE FROM reconciliations WHERE job_id = '{}' AND verdict = 'accepted'",
            l.retried.job.0
        )],
    )
    .await;
    l.touch(&[l.retried]).await;
    l.caught(
        Kind::RetryWithoutReconciliation,
        l.retried.job,
        &format!("attempt {} (claim", l.retried.attempt.0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeats_granted_expiry_rewritten_is_caught_under_since() {
    let l = build().await;
    let url = l.db.url();
    let heartbeat = scalar(
        url,
        &format!(
            "SELECT id FROM observations WHERE named_job_id = '{}' AND kind = 'heartbeat'",
            l.second.job.0
        ),
    )
    .await;
    sql(
        url,
        &[format!(
            "UPDATE observations SET lease_expiry = lease_expiry + interval '10 seconds' \
             WHERE id = {heartbeat}"
        )],
    )
    .await;
    l.touch(&[l.second]).await;
    l.caught(
        Kind::TimeAuthority,
        l.second.job,
        &format!("observation #{heartbeat} "),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_inserted_for_a_superseded_attempt_is_caught_under_since() {
    let l = build().await;
    let url = l.db.url();
    let first = scalar(
        url,
        &format!(
            "SELECT count(*) FROM attempts WHERE job_id = '{}' AND fence = 1",
            l.retried.job.0
        ),
    )
    .await;
    assert_eq!(first, 1);
    sql(
        url,
        &[format!(
            "INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id, \
             named_lease_id, named_fence, attempt_id, received_at, verdict, outcome, \
             payload_sha256) \
             SELECT runner_id, 'result', job_id, id, lease_id, fence, id, '{}', 'accepted', \
             'failed', 'x' FROM attempts WHERE job_id = '{}' AND fence = 1",
            l.start + Duration::seconds(60),
            l.retried.job.0
        )],
    )
    .await;
    let id = scalar(url, "SELECT max(id) FROM observations").await;
    l.caught(
        Kind::StaleAcceptance,
        l.retried.job,
        &format!("observation #{id} "),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_of_a_thousand_times_the_ttl_is_caught_under_since() {
    let l = build().await;
    sql(
        l.db.url(),
        &[format!(
            "UPDATE attempts SET claim_lease_expiry = claimed_at + interval '30000 seconds', \
             lease_expiry = claimed_at + interval '30000 seconds' WHERE id = '{}'",
            l.earlier.attempt.0
        )],
    )
    .await;
    l.touch(&[l.earlier]).await;
    l.caught(
        Kind::LeaseTtl,
        l.earlier.job,
        &format!("attempt {} (claim", l.earlier.attempt.0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_copied_into_a_free_slots_row_is_caught_under_since_without_a_new_record() {
    let l = build().await;
    let url = l.db.url();
    let held = scalar(
        url,
        &format!(
            "SELECT count(*) FROM target_slots AS s JOIN jobs AS j ON j.target = s.slot \
             WHERE j.id = '{}' AND s.holder_job_id = j.id",
            l.later.job.0
        ),
    )
    .await;
    assert_eq!(held, 1);
    sql(
        url,
        &[format!(
            "UPDATE target_slots AS s SET holder_project_id = h.holder_project_id, \
             holder_job_id = h.holder_job_id, holder_attempt_id = h.holder_attempt_id, \
             reserved_at = h.reserved_at \
             FROM target_slots AS h JOIN jobs AS j ON j.target = h.slot \
             WHERE j.id = '{}' AND s.slot = 'prod'",
            l.later.job.0
        )],
    )
    .await;
    l.caught(Kind::SlotHolder, l.later.job, "target slot `prod` (row)")
        .await;
}

/// Issue 39: a watermark names the schema it was printed for. Two ledgers in two schemas of one
/// database (one cluster, one database name, one epoch): each one's token is refused by the
/// other, under `--since` and by `prune --audited-through`'s check, and accepted by its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_schema_of_the_same_database_is_refused() {
    let l = build().await;
    let url = l.db.url().to_string();
    let other = StoreConfig {
        schema: "other_ledger".into(),
        ..StoreConfig::default()
    };
    let store =
        l.db.store(Arc::new(l.clock.clone()), other)
            .await
            .expect("a store in another schema");
    let project = store.create_project("elsewhere").await.unwrap();
    store
        .submit_job(project, NewJob::new("rev", "digest", "elsewhere"))
        .await
        .unwrap();
    store.close().await;
    let other_url = url.replace(
        "options[search_path]=leasewright",
        "options[search_path]=other_ledger",
    );
    assert_ne!(other_url, url);
    let token = |r: AuditReport| r.since.expect("a token");
    let here = token(run(&url, None).await);
    let there = token(run(&other_url, None).await);
    for (target, foreign, own) in [(&url, &there, &here), (&other_url, &here, &there)] {
        let since = |t: &String| match t.parse::<audit::chain::Since>() {
            Ok(audit::chain::Since::Token(w)) => AuditOptions {
                since: Some(w.position),
                since_token: Some(w),
                batch: 2,
                ..AuditOptions::default()
            },
            other => panic!("a token: {other:?}"),
        };
        let refused = audit::audit(target, &since(foreign), |_| {}).await;
        assert!(
            matches!(&refused, Err(audit::AuditError::Watermark(why)) if why.contains("schema")),
            "{:?}",
            refused.map(|(r, _)| r.violations)
        );
        let accepted = audit::audit(target, &since(own), |_| {}).await;
        assert!(
            accepted.as_ref().is_ok_and(|(r, _)| r.is_clean()),
            "{:?}",
            accepted.map(|(r, _)| r.violations)
        );
        let parsed = foreign.parse().unwrap();
        assert!(matches!(
            audit::verify_watermark(target, &parsed).await,
            Err(audit::AuditError::Watermark(_))
        ));
        let parsed = own.parse().unwrap();
        assert!(audit::verify_watermark(target, &parsed).await.is_ok());
    }
}

/// `prune --audited-through`'s check: a bare number names no database (refused once the schema
/// has the chain), and a token's position must be one the ledger reached (issue 36 item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_takes_only_a_watermark_this_ledger_printed() {
    let l = build().await;
    let url = l.db.url();
    let report = run(url, None).await;
    let own: audit::chain::Since = report.since.clone().unwrap().parse().unwrap();
    assert_eq!(
        audit::verify_watermark(url, &own).await.ok(),
        Some(report.watermark)
    );
    let refused = |s: &str| {
        let since: audit::chain::Since = s.parse().unwrap();
        async move { audit::verify_watermark(url, &since).await.is_err() }
    };
    assert!(
        refused(&report.watermark.to_string()).await,
        "a bare number"
    );
    assert!(refused("9223372036854775807").await);
    let audit::chain::Since::Token(mut beyond) = own else {
        panic!("a token")
    };
    beyond.position = i64::MAX;
    assert!(
        refused(&beyond.to_string()).await,
        "a position never issued"
    );
}

/// Issue 37 item 4: a violation in one job never makes another a suspect. The first job on `prod`
/// has its accepted result's receipt time moved past its lease (a violation: its replay stops
/// there, before the release); the second job's later claim of the slot is not a `slot_overlap`,
/// in a full run and under `--since`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_violation_in_one_job_never_makes_the_next_holder_of_its_slot_a_suspect() {
    let l = build().await;
    let url = l.db.url();
    sql(
        url,
        &[format!(
            "UPDATE observations SET received_at = received_at + interval '1 hour' \
             WHERE attempt_id = '{}' AND kind = 'result'",
            l.first.attempt.0
        )],
    )
    .await;
    l.touch(&[l.first]).await;
    for since in [None, Some(l.watermark)] {
        let report = run(url, since).await;
        let on = |job: JobId| -> Vec<Kind> {
            replayed(&report)
                .iter()
                .filter(|v| v.job == job.0)
                .map(|v| v.kind)
                .collect()
        };
        assert!(!on(l.first.job).is_empty(), "{:#?}", report.violations);
        assert_eq!(on(l.second.job), vec![], "{:#?}", report.violations);
    }
}
