//! A forger's suite (issue 37 items 1, 2, 3 and 6): someone who can write to the database and
//! knows the chain is a keyless sha256 edits a ledger written by the real Store, then recomputes
//! every chain with the writer's own SQL (common/rechain.sql). Each edit is reported under
//! `--since` the clean ledger's watermark with its witness, naming the job it touched; where a full
//! run can tell, there too. A tombstone is judged, never trusted.

mod common;

use chrono::Duration;
use common::{rechain, scalar, sql};
use leasewright_audit::chain::Since;
use leasewright_audit::witness::Witness;
use leasewright_audit::{self as audit, AuditOptions, AuditReport, Kind};
use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use std::sync::Arc;

struct Ledger {
    db: TestDatabase,
    /// Claimed by r1 on slot `prod`, heartbeat, passed.
    passed: JobId,
    /// Claimed by r2, expired, swept: uncertain, holding its slot.
    uncertain: JobId,
    /// Claimed by r1 after the others, a heartbeat: running.
    running: JobId,
    /// Never claimed.
    queued: JobId,
    r1: RunnerId,
    /// Revoked after its claim.
    r2: RunnerId,
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
    let project = store.create_project("forged").await.unwrap();
    let (r1, _) = store.create_runner(project, "r1").await.unwrap();
    let (r2, _) = store.create_runner(project, "r2").await.unwrap();
    let lease = |v: Verdict<Lease>| match v {
        Verdict::Accepted(lease) => lease.tuple,
        other => panic!("claim: {other:?}"),
    };
    let on_prod = NewJob {
        target: Some("prod".to_string()),
        ..NewJob::new("rev", "digest", "passed")
    };
    let passed = store.submit_job(project, on_prod).await.unwrap();
    let uncertain = store
        .submit_job(project, NewJob::new("rev", "digest", "uncertain"))
        .await
        .unwrap();
    let t = lease(store.claim(r1, None).await.unwrap());
    assert_eq!(t.job, passed);
    clock.advance(Duration::seconds(5));
    store.heartbeat(&t, None).await.unwrap();
    store
        .report_result(&t, Outcome::Passed, "d", None)
        .await
        .unwrap();
    let u = lease(store.claim(r2, None).await.unwrap());
    assert_eq!(u.job, uncertain);
    clock.advance(Duration::seconds(60));
    store.sweep_expired().await.unwrap();
    store.revoke_runner(project, r2).await.unwrap();
    let running = store
        .submit_job(project, NewJob::new("rev", "digest", "running"))
        .await
        .unwrap();
    let queued = store
        .submit_job(project, NewJob::new("rev", "digest", "queued"))
        .await
        .unwrap();
    let v = lease(store.claim(r1, None).await.unwrap());
    assert_eq!(v.job, running);
    clock.advance(Duration::seconds(5));
    store.heartbeat(&v, None).await.unwrap();
    store.close().await;
    Ledger {
        db,
        passed,
        uncertain,
        running,
        queued,
        r1,
        r2,
    }
}

async fn audit_with(url: &str, since: Option<(&str, &Witness)>) -> AuditReport {
    let mut options = AuditOptions {
        batch: 2,
        ..AuditOptions::default()
    };
    if let Some((token, witness)) = since {
        let Ok(Since::Token(w)) = token.parse::<Since>() else {
            panic!("a token: {token}");
        };
        options.since = Some(w.position);
        options.since_token = Some(w);
        options.since_witness = Some(witness.clone());
    }
    let (report, projects) = audit::audit(url, &options, |_| {})
        .await
        .expect("the audit runs");
    eprintln!("{}", report.render(&projects));
    report
}

/// The clean ledger's token and witness.
async fn clean(url: &str) -> (String, Witness) {
    let report = audit_with(url, None).await;
    assert!(report.is_clean(), "{:#?}", report.violations);
    let token = report.since.clone().expect("a token");
    assert!(token.starts_with("lw2."), "{token}");
    (token, report.witness.expect("a witness"))
}

/// The kinds of the violations naming `job`.
fn naming(report: &AuditReport, job: JobId) -> Vec<Kind> {
    report
        .violations
        .iter()
        .filter(|v| v.job == job.0)
        .map(|v| v.kind)
        .collect()
}

/// `edit`, then every chain recomputed: under `--since` with the witness, `job` is named (with
/// `kind` among its findings) and no violation is anonymous; the findings on `job` of the full
/// run and of the `--since` run.
async fn forged(l: &Ledger, edit: &[String], job: JobId, kind: Kind) -> (Vec<Kind>, Vec<Kind>) {
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    sql(url, edit).await;
    sql(url, &rechain()).await;
    let full = audit_with(url, None).await;
    assert!(
        full.violations.iter().all(|v| v.kind != Kind::LedgerChain),
        "the chains were recomputed: {:#?}",
        full.violations
    );
    let since = audit_with(url, Some((&token, &witness))).await;
    let kinds = naming(&since, job);
    assert!(kinds.contains(&kind), "{kinds:?}: {:#?}", since.violations);
    assert!(
        since.violations.iter().all(|v| !v.job.is_nil()
            || v.record.starts_with("runner ")
            || v.kind == Kind::SlotHolder),
        "every alarm names a job: {:#?}",
        since.violations
    );
    (naming(&full, job), kinds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recomputation_reproduces_a_clean_ledgers_chains() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    sql(url, &rechain()).await;
    let again = audit_with(url, Some((&token, &witness))).await;
    assert!(again.is_clean(), "{:#?}", again.violations);
    assert_eq!(again.since.as_deref(), Some(token.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_edited_and_every_chain_recomputed_is_named_under_since() {
    let l = build().await;
    let edit = format!(
        "UPDATE observations SET runner_time = received_at - interval '1 hour' \
         WHERE named_job_id = '{}' AND kind = 'heartbeat'",
        l.passed.0
    );
    forged(&l, &[edit], l.passed, Kind::WatermarkMismatch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_attempts_lease_expiry_edited_is_named_under_since() {
    let l = build().await;
    let edit = format!(
        "UPDATE attempts SET lease_expiry = lease_expiry + interval '1 day' WHERE job_id = '{}'",
        l.passed.0
    );
    forged(&l, &[edit], l.passed, Kind::WatermarkMismatch).await;
}

/// The same edit (a row field the replay does not compare) in a bucket where another job has a
/// record after the watermark: that bucket's rows cannot be compared as a whole, so the edited job
/// is compared on its own digest (issue 37, the hole left last round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_attempts_lease_expiry_edited_beside_a_job_with_a_new_record_is_named() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    // A new job in the edited job's bucket: submitted after the watermark, its bucket moved on.
    let store = common::default_store(&l.db).await;
    let project = store.create_project("later").await.unwrap();
    let bucket = |job: JobId| audit::witness::bucket_of(job.0, witness.buckets);
    let mut beside = None;
    for n in 0..1000 {
        let job = store
            .submit_job(project, NewJob::new("rev", "digest", format!("beside {n}")))
            .await
            .unwrap();
        if bucket(job) == bucket(l.passed) {
            beside = Some(job);
            break;
        }
    }
    store.close().await;
    assert!(beside.is_some(), "a job in the passed job's bucket");
    let edit = format!(
        "UPDATE attempts SET lease_expiry = lease_expiry + interval '1 day' WHERE job_id = '{}'",
        l.passed.0
    );
    sql(url, &[edit]).await;
    sql(url, &rechain()).await;
    let since = audit_with(url, Some((&token, &witness))).await;
    assert_eq!(
        naming(&since, l.passed),
        vec![Kind::WatermarkMismatch],
        "{:#?}",
        since.violations
    );
    assert_eq!(since.violations.len(), 1, "{:#?}", since.violations);
}

/// The lease policy's history is in the witness: a row inserted by hand with a position below the
/// watermark (raising the policy "before" a lease) is named under `--since` by its position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_policy_history_row_inserted_below_the_watermark_is_named_under_since() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    let position = scalar(url, "SELECT min(ledger_seq) FROM attempts").await;
    sql(
        url,
        &[format!(
            "INSERT INTO lease_policy_history (ledger_seq, max_lease_ttl) \
             SELECT {position}, max(max_lease_ttl) * 1000 FROM lease_policy_history"
        )],
    )
    .await;
    let since = audit_with(url, Some((&token, &witness))).await;
    let record = format!("lease_policy_history (ledger {position})");
    assert!(
        since
            .violations
            .iter()
            .any(|v| v.kind == Kind::WatermarkMismatch && v.record == record),
        "{:#?}",
        since.violations
    );
    assert_eq!(since.violations.len(), 1, "{:#?}", since.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_made_uncertain_without_a_sweep_is_named_in_full_and_since() {
    let l = build().await;
    let job = l.running.0;
    let edit = [
        format!("UPDATE jobs SET state = 'uncertain' WHERE id = '{job}'"),
        format!("UPDATE attempts SET state = 'uncertain' WHERE job_id = '{job}'"),
    ];
    let (full, since) = forged(&l, &edit, l.running, Kind::WatermarkMismatch).await;
    assert!(full.contains(&Kind::Gap), "{full:?}");
    // The suspect is replayed in full under --since too, which says what is wrong with it.
    assert!(since.contains(&Kind::Gap), "{since:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_left_held_by_a_passed_job_is_named_under_since() {
    let l = build().await;
    let job = l.passed.0;
    let edit = format!(
        "UPDATE target_slots SET holder_project_id = j.project_id, holder_job_id = j.id, \
         holder_attempt_id = j.current_attempt_id, reserved_at = j.submitted_at \
         FROM jobs AS j WHERE j.id = '{job}' AND target_slots.slot = j.target"
    );
    forged(&l, &[edit], l.passed, Kind::WatermarkMismatch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_for_a_job_still_there_is_judged_in_full_and_since() {
    let l = build().await;
    let job = l.passed.0;
    let edit = format!(
        "INSERT INTO ledger_pruned (job_id, chain_seq, chain_head, job_ledger_seq, \
         max_ledger_seq, pruned_seq) \
         SELECT id, chain_seq, chain_head, ledger_seq, ledger_seq, nextval('ledger_seq') \
         FROM jobs WHERE id = '{job}'"
    );
    let (full, _) = forged(&l, &[edit], l.passed, Kind::Tombstone).await;
    assert!(full.contains(&Kind::Tombstone), "{full:?}");
}

/// The forger deletes a queued job and writes its tombstone with its true head, as a prune would,
/// its prune position after the watermark: a prune never deletes an unfinished job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_deleted_behind_a_true_tombstone_is_named_under_since() {
    let l = build().await;
    let job = l.queued.0;
    let edit = [
        format!(
            "INSERT INTO ledger_pruned (job_id, chain_seq, chain_head, job_ledger_seq, \
             max_ledger_seq, pruned_seq) \
             SELECT id, chain_seq, chain_head, ledger_seq, ledger_seq, nextval('ledger_seq') \
             FROM jobs WHERE id = '{job}'"
        ),
        format!("DELETE FROM jobs WHERE id = '{job}'"),
    ];
    forged(&l, &edit, l.queued, Kind::Tombstone).await;
}

/// The same with the tombstone's prune position written below the watermark (as if pruned
/// before it): the watermark's rows had the job, so its bucket no longer matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_dated_before_the_watermark_for_a_job_it_had_is_named_under_since() {
    let l = build().await;
    let job = l.queued.0;
    let edit = [
        format!(
            "INSERT INTO ledger_pruned (job_id, chain_seq, chain_head, job_ledger_seq, \
             max_ledger_seq, pruned_seq) \
             SELECT id, chain_seq, chain_head, ledger_seq, ledger_seq, ledger_seq \
             FROM jobs WHERE id = '{job}'"
        ),
        format!("DELETE FROM jobs WHERE id = '{job}'"),
    ];
    forged(&l, &edit, l.queued, Kind::WatermarkMismatch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_moved_later_is_named_under_since() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    sql(
        url,
        &[format!(
            "UPDATE runners SET revoked_at = revoked_at + interval '1 day' WHERE id = '{}'",
            l.r2.0
        )],
    )
    .await;
    let since = audit_with(url, Some((&token, &witness))).await;
    let found: Vec<_> = since
        .violations
        .iter()
        .filter(|v| v.kind == Kind::Revocation)
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", since.violations);
    assert!(found[0].record.contains(&l.r2.0.to_string()), "{found:?}");
}

/// A runner revoked before a message the ledger accepted from it (its revocation moved earlier
/// by hand, or a server that failed to check it): a revoked runner authenticates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_accepted_after_its_runners_revocation_is_caught_in_full_and_since() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    let edit = format!(
        "UPDATE runners SET revoked_at = (SELECT min(received_at) - interval '10 seconds' \
         FROM observations WHERE named_job_id = '{}' AND verdict = 'accepted') WHERE id = '{}'",
        l.running.0, l.r1.0
    );
    sql(url, &[edit]).await;
    let full = audit_with(url, None).await;
    assert!(
        naming(&full, l.running).contains(&Kind::Revocation),
        "{:#?}",
        full.violations
    );
    let since = audit_with(url, Some((&token, &witness))).await;
    assert!(
        naming(&since, l.running).contains(&Kind::Revocation),
        "{:#?}",
        since.violations
    );
    let uncertain = scalar(
        url,
        &format!("SELECT count(*) FROM jobs WHERE id = '{}'", l.uncertain.0),
    )
    .await;
    assert_eq!(uncertain, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_file_of_another_watermark_is_refused() {
    let l = build().await;
    let url = l.db.url();
    let (token, mut witness) = clean(url).await;
    witness.unfinished.clear();
    let Ok(Since::Token(w)) = token.parse::<Since>() else {
        panic!("a token");
    };
    let options = AuditOptions {
        batch: 2,
        since: Some(w.position),
        since_token: Some(w),
        since_witness: Some(witness),
        ..AuditOptions::default()
    };
    let refused = audit::audit(url, &options, |_| {}).await;
    assert!(
        matches!(&refused, Err(audit::AuditError::Watermark(why)) if why.contains("witness")),
        "{:?}",
        refused.map(|_| ())
    );
}

/// What an operator does between two audits (a prune of audited jobs, VACUUM FULL, REINDEX, a new
/// project with a job) is not flagged under `--since` with the witness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benign_maintenance_and_a_prune_are_clean_under_since_with_the_witness() {
    let l = build().await;
    let url = l.db.url();
    let (token, witness) = clean(url).await;
    let clock = ManualClock::at_fixed_start();
    let finished_before = clock.now() + Duration::days(1);
    let store =
        l.db.store(Arc::new(clock), StoreConfig::default())
            .await
            .unwrap();
    let project = store.create_project("later").await.unwrap();
    store.create_runner(project, "r").await.unwrap();
    store
        .submit_job(project, NewJob::new("rev", "digest", "later"))
        .await
        .unwrap();
    let position = token.parse::<Since>().unwrap().position();
    let pruned = common::prune_audited(&store, position, finished_before).await;
    store.close().await;
    assert_eq!(pruned, 1, "the passed job is pruned");
    sql(
        url,
        &["VACUUM FULL".into(), "REINDEX SCHEMA leasewright".into()],
    )
    .await;
    let since = audit_with(url, Some((&token, &witness))).await;
    assert!(since.is_clean(), "{:#?}", since.violations);
    let full = audit_with(url, None).await;
    assert!(full.is_clean(), "{:#?}", full.violations);
}

/// Issue 37 item 3: the lease ttl raised 1000 times together with the policy row (the row's
/// history records the raise at its own ledger position, migration 0019), and every chain
/// recomputed: the claim's ttl is above the policy in force at its position, in a full run and
/// under `--since`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_raised_with_the_policy_row_is_judged_by_the_policy_at_its_claim() {
    let l = build().await;
    let job = l.uncertain.0;
    let edit = [
        format!(
            "UPDATE attempts SET claim_lease_expiry = claimed_at + (claim_lease_expiry - \
             claimed_at) * 1000, lease_expiry = claimed_at + (claim_lease_expiry - claimed_at) \
             * 1000 WHERE job_id = '{job}'"
        ),
        "UPDATE lease_policy SET max_lease_ttl = max_lease_ttl * 1000".to_string(),
    ];
    let (full, _) = forged(&l, &edit, l.uncertain, Kind::LeaseTtl).await;
    assert!(full.contains(&Kind::LeaseTtl), "{full:?}");
}
