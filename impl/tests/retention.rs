//! Retention (docs/impl.md, "Retention"): a prune deletes exactly the old finished jobs with
//! every row they own, keeps everything else (live and young jobs, cache entries, slot counters),
//! respects the audit watermark, and never makes a claim wait.

mod common;

use chrono::{DateTime, Utc};
use common::{send, Op, World, LEASE_TTL_SECS};
use leasewright_impl::*;
use sqlx::postgres::PgPoolOptions;
use sqlx::Executor as _;
use std::sync::Arc;
use uuid::Uuid;

const DAY: i64 = 86_400;

/// The tables whose rows a job owns, each with the query counting the rows of job `$1`.
const OWNED: [(&str, &str); 9] = [
    ("jobs", "SELECT count(*) FROM jobs WHERE id = $1"),
    ("attempts", "SELECT count(*) FROM attempts WHERE job_id = $1"),
    (
        "observations",
        "SELECT count(*) FROM observations WHERE named_job_id = $1",
    ),
    (
        "reconciliations",
        "SELECT count(*) FROM reconciliations WHERE job_id = $1",
    ),
    ("cancels", "SELECT count(*) FROM cancels WHERE job_id = $1"),
    (
        "expiry_sweeps",
        "SELECT count(*) FROM expiry_sweeps WHERE job_id = $1",
    ),
    (
        "logs",
        "SELECT count(*) FROM logs WHERE attempt_id IN (SELECT id FROM attempts WHERE job_id = $1)",
    ),
    (
        "artifacts",
        "SELECT count(*) FROM artifacts WHERE attempt_id IN (SELECT id FROM attempts WHERE job_id = $1)",
    ),
    (
        "target_mutations",
        "SELECT count(*) FROM target_mutations WHERE job_id = $1",
    ),
];

/// The rows job `job` owns, table by table (tables with none left out).
async fn owned(store: &Store, job: JobId) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for (table, query) in OWNED {
        let n: i64 = sqlx::query_scalar(query)
            .bind(job.0)
            .fetch_one(store.pool())
            .await
            .expect(table);
        if n > 0 {
            out.push((table, n));
        }
    }
    out
}

fn policy(finished_before: DateTime<Utc>, unaudited: bool) -> PrunePolicy {
    PrunePolicy {
        finished_before,
        unaudited,
        batch: 2,
        max_batches: None,
    }
}

async fn submit_to(w: &World, slot: &str) -> JobId {
    w.store
        .submit_job(
            w.project,
            NewJob {
                target: Some(slot.into()),
                target_kind: TargetKind::Fenced,
                ..NewJob::new("r", "d", "deploy")
            },
        )
        .await
        .expect("submit")
}

async fn slot_tokens(store: &Store) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT slot, slot_token FROM target_slots ORDER BY slot")
        .fetch_all(store.pool())
        .await
        .expect("slots")
}

/// The highest ledger sequence value drawn so far: an audit run now would print it.
async fn ledger_high(store: &Store) -> i64 {
    sqlx::query_scalar("SELECT last_value FROM ledger_seq")
        .fetch_one(store.pool())
        .await
        .expect("ledger_seq")
}

struct Jobs {
    /// Old and finished: passed after every kind of side effect and a deployment; failed after a
    /// lost lease, a sweep and a retry; cancelled while queued (a cancel record).
    old: Vec<JobId>,
    /// Not to be pruned: uncertain and running (both old), a young passed job, a queued job.
    kept: Vec<JobId>,
}

/// Old finished jobs of every kind, live jobs, and one young finished job; the clock ends ten
/// days after the old jobs finished.
async fn history(w: &World) -> Jobs {
    // Passed, with a log chunk, an artifact, a cache entry and a deployment on a shared slot.
    let passed = submit_to(w, "shared").await;
    let lease = w.claim().await.expect("claim passed");
    assert_eq!(lease.tuple.job, passed);
    for op in [
        Op::Heartbeat,
        Op::SourceFetch,
        Op::LogAppend,
        Op::ArtifactPut,
        Op::ArtifactGet,
        Op::CachePut,
        Op::CacheGet,
    ] {
        let verdict = send(&w.store, op, &lease.tuple, None).await.expect("op");
        assert!(verdict.is_accepted(), "{op:?}: {verdict:?}");
    }
    let target = w
        .store
        .demo_target(TargetKind::Fenced, "shared")
        .await
        .expect("target");
    let deployed = target
        .mutate(&TargetMutation {
            job: passed,
            attempt: lease.tuple.attempt,
            slot_token: lease.slot_token,
            deployment_id: passed.to_string(),
        })
        .await
        .expect("mutate");
    assert_eq!(deployed, Verdict::Accepted(()));
    let verdict = send(&w.store, Op::Result, &lease.tuple, None)
        .await
        .expect("result");
    assert!(verdict.is_accepted(), "{verdict:?}");
    // A late message after the outcome: recorded, rejected, owned by the job.
    send(&w.store, Op::Heartbeat, &lease.tuple, None)
        .await
        .expect("late heartbeat");

    // Failed, after a lost lease, the sweep and a retry (two attempts, a sweep, a reconciliation).
    let failed = w.submit().await.expect("submit");
    let first = w.claim().await.expect("claim");
    assert_eq!(first.tuple.job, failed);
    w.lose_and_retry(failed).await.expect("retry");
    let second = w.claim().await.expect("claim again");
    let verdict = w
        .store
        .report_result(&second.tuple, Outcome::Failed, "sha256:f", None)
        .await
        .expect("result");
    assert!(verdict.is_accepted(), "{verdict:?}");

    // Cancelled while queued.
    let cancelled = w.submit().await.expect("submit");
    let verdict = w.store.cancel(w.project, cancelled).await.expect("cancel");
    assert!(verdict.is_accepted(), "{verdict:?}");

    // Live jobs, old too: uncertain, running; and a job on the shared slot that passes later.
    let uncertain = w.submit().await.expect("submit");
    let lost = w.claim().await.expect("claim");
    assert_eq!(lost.tuple.job, uncertain);
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await.expect("sweep");
    let running = w.submit().await.expect("submit");
    let held = w.claim().await.expect("claim");
    assert_eq!(held.tuple.job, running);
    let young = submit_to(w, "shared").await;

    // Ten days later the young job passes; another is submitted and stays queued.
    w.advance_secs(10 * DAY);
    let beat = w.store.heartbeat(&held.tuple, None).await.expect("beat");
    assert!(!beat.is_accepted(), "the old lease expired: {beat:?}");
    let lease = w.claim_by(w.second_runner).await.expect("claim young");
    assert_eq!(lease.tuple.job, young);
    let verdict = send(&w.store, Op::Result, &lease.tuple, None)
        .await
        .expect("result");
    assert!(verdict.is_accepted(), "{verdict:?}");
    let queued = w.submit().await.expect("submit");
    Jobs {
        old: vec![passed, failed, cancelled],
        kept: vec![uncertain, running, young, queued],
    }
}

#[tokio::test]
async fn a_prune_deletes_exactly_the_old_finished_jobs_and_everything_they_own() {
    let w = World::new().await;
    let jobs = history(&w).await;
    for job in &jobs.old {
        assert!(!owned(&w.store, *job).await.is_empty());
    }
    let kept_before: Vec<_> = {
        let mut v = Vec::new();
        for job in &jobs.kept {
            v.push(owned(&w.store, *job).await);
        }
        v
    };
    let slots_before = slot_tokens(&w.store).await;
    let cache_before: i64 = sqlx::query_scalar("SELECT count(*) FROM cache_entries")
        .fetch_one(w.store.pool())
        .await
        .expect("cache");
    assert_eq!(cache_before, 1);
    let cutoff = w.clock.now() - chrono::Duration::days(5);
    assert!(cutoff < w.clock.now(), "{cutoff}");

    // Nothing audited: nothing pruned, and the report says how many are kept for it.
    let report = w
        .store
        .prune_finished_jobs(policy(cutoff, false))
        .await
        .expect("prune");
    assert_eq!(report.jobs, 0, "{report:?}");
    assert_eq!(
        w.store
            .unaudited_finished_jobs(cutoff)
            .await
            .expect("count"),
        3
    );

    // Audited through now: the three old finished jobs go, with every row they own.
    let high = ledger_high(&w.store).await;
    assert_eq!(
        w.store.record_audit_watermark(high).await.expect("record"),
        high
    );
    let report = w
        .store
        .prune_finished_jobs(policy(cutoff, false))
        .await
        .expect("prune");
    assert_eq!(report.jobs, 3, "{report:?}");
    assert_eq!(report.unaudited, 0, "{report:?}");
    assert_eq!(
        report.batches, 3,
        "2 + 1 jobs, then an empty batch: {report:?}"
    );
    assert_eq!(report.attempts, 3, "{report:?}");
    assert_eq!(report.reconciliations, 1, "{report:?}");
    assert_eq!(report.cancels, 1, "{report:?}");
    assert_eq!(report.expiry_sweeps, 1, "{report:?}");
    assert_eq!(report.log_chunks, 1, "{report:?}");
    assert_eq!(report.artifacts, 1, "{report:?}");
    assert_eq!(report.target_mutations, 1, "{report:?}");
    assert!(report.observations >= 8, "{report:?}");
    for job in &jobs.old {
        assert_eq!(owned(&w.store, *job).await, vec![], "{job}");
        assert!(w.store.job(*job).await.expect("read").is_none());
    }
    for (job, before) in jobs.kept.iter().zip(kept_before) {
        assert_eq!(owned(&w.store, *job).await, before, "{job}");
    }
    // The project's cache entry and every slot's token counter stay.
    let cache_after: i64 = sqlx::query_scalar("SELECT count(*) FROM cache_entries")
        .fetch_one(w.store.pool())
        .await
        .expect("cache");
    assert_eq!(cache_after, 1);
    assert_eq!(slot_tokens(&w.store).await, slots_before);
    let shared_before = slots_before
        .iter()
        .find(|(s, _)| s == "shared")
        .expect("shared")
        .1;
    // The slot's next reservation issues the next token, never an earlier one.
    let next = submit_to(&w, "shared").await;
    let leases = match w.store.claim_batch(w.runner, 2, None).await.expect("claim") {
        Verdict::Accepted(leases) => leases,
        other => panic!("claim after prune: {other:?}"),
    };
    let lease = leases
        .into_iter()
        .find(|l| l.tuple.job == next)
        .expect("the shared slot's job claimed");
    assert_eq!(lease.slot_token, shared_before + 1);
    // A message naming a pruned job is one naming a job that does not exist.
    let gone = Tuple {
        job: jobs.old[0],
        ..lease.tuple
    };
    let verdict = w.store.heartbeat(&gone, None).await.expect("beat");
    assert_eq!(verdict, Verdict::Rejected(Reason::UnknownJob));
    // Nothing left to prune: a run deletes nothing.
    let report = w
        .store
        .prune_finished_jobs(policy(cutoff, false))
        .await
        .expect("prune");
    assert_eq!(report.jobs, 0, "{report:?}");
}

#[tokio::test]
async fn an_unaudited_job_is_kept_unless_the_prune_is_told_and_then_it_is_counted() {
    let w = World::new().await;
    let jobs = history(&w).await;
    // Audited through the first old job's records only.
    let first_done: i64 = sqlx::query_scalar(
        "SELECT greatest((SELECT max(ledger_seq) FROM observations WHERE named_job_id = $1),
                         (SELECT max(ledger_seq) FROM attempts WHERE job_id = $1))",
    )
    .bind(jobs.old[0].0)
    .fetch_one(w.store.pool())
    .await
    .expect("first job's last record");
    w.store
        .record_audit_watermark(first_done)
        .await
        .expect("record");
    // A smaller watermark never moves it back.
    assert_eq!(
        w.store.record_audit_watermark(1).await.expect("record"),
        first_done
    );
    let cutoff = w.clock.now() - chrono::Duration::days(5);
    let report = w
        .store
        .prune_finished_jobs(policy(cutoff, false))
        .await
        .expect("prune");
    assert_eq!((report.jobs, report.unaudited), (1, 0), "{report:?}");
    assert_eq!(owned(&w.store, jobs.old[0]).await, vec![]);
    assert_eq!(
        w.store
            .unaudited_finished_jobs(cutoff)
            .await
            .expect("count"),
        2
    );
    let report = w
        .store
        .prune_finished_jobs(policy(cutoff, true))
        .await
        .expect("prune");
    assert_eq!((report.jobs, report.unaudited), (2, 2), "{report:?}");
    for job in &jobs.old {
        assert_eq!(owned(&w.store, *job).await, vec![], "{job}");
    }
    for job in &jobs.kept {
        assert!(w.store.job(*job).await.expect("read").is_some(), "{job}");
    }
}

/// A store on `w`'s database whose connections give up on any lock wait after `timeout`: a
/// claim that would wait for a prune fails instead of hanging.
async fn impatient_store(w: &World, timeout: &'static str) -> Store {
    let options =
        leasewright_impl::schema::connect_options(w.db.url(), DEFAULT_SCHEMA).expect("options");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(format!("SET lock_timeout = '{timeout}'").as_str())
                    .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .expect("pool");
    Store::from_pool(
        pool,
        Arc::new(w.clock.clone()),
        StoreConfig {
            lease_ttl: std::time::Duration::from_secs(LEASE_TTL_SECS as u64),
            ..StoreConfig::default()
        },
    )
    .await
    .expect("store")
}

/// While a prune batch holds its locks (its transaction open), claims of every kind proceed:
/// a single claim, a batch claim, a claim of the slot a pruned job held, results and heartbeats,
/// and a second prune, which skips the held jobs and deletes the others. Each of these runs with
/// a lock timeout, so a wait for the open batch fails the test instead of hanging it.
#[tokio::test]
async fn claims_proceed_while_a_prune_batch_holds_its_locks() {
    let w = World::new().await;
    let jobs = history(&w).await;
    w.store
        .record_audit_watermark(ledger_high(&w.store).await)
        .await
        .expect("record");
    let cutoff = w.clock.now() - chrono::Duration::days(5);
    // Work waiting to be claimed: on the slot of the pruned passed job, and on fresh slots.
    let mut fresh = Vec::new();
    for slot in ["shared", "x", "y", "z"] {
        fresh.push(submit_to(&w, slot).await);
    }
    let impatient = impatient_store(&w, "2s").await;

    let mut held = w.store.pool().begin().await.expect("begin");
    let first = w
        .store
        .prune_batch_in(
            &mut held,
            PrunePolicy {
                batch: 2,
                ..policy(cutoff, false)
            },
        )
        .await
        .expect("the held batch");
    assert_eq!(first.jobs, 2, "{first:?}");

    let single = match impatient.claim(w.runner, None).await.expect("claim") {
        Verdict::Accepted(lease) => lease,
        other => panic!("claim: {other:?}"),
    };
    assert_eq!(single.tuple.job, jobs.kept[3], "the earliest queued job");
    let batch = match impatient
        .claim_batch(w.second_runner, 8, None)
        .await
        .expect("batch claim")
    {
        Verdict::Accepted(leases) => leases,
        other => panic!("batch claim: {other:?}"),
    };
    let mut claimed: Vec<JobId> = batch.iter().map(|l| l.tuple.job).collect();
    claimed.sort();
    let mut want = fresh.clone();
    want.sort();
    assert_eq!(claimed, want);
    for lease in std::iter::once(&single).chain(&batch) {
        let verdict = impatient
            .report_result(&lease.tuple, Outcome::Passed, "sha256:r", None)
            .await
            .expect("result");
        assert!(verdict.is_accepted(), "{verdict:?}");
    }
    // Another prune meanwhile skips the two held jobs and takes the third.
    let other = impatient
        .prune_finished_jobs(policy(cutoff, false))
        .await
        .expect("a concurrent prune");
    assert_eq!(other.jobs, 1, "{other:?}");
    held.commit().await.expect("commit");
    for job in &jobs.old {
        assert_eq!(owned(&w.store, *job).await, vec![], "{job}");
    }
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM jobs WHERE finished_at < $1")
        .bind(cutoff)
        .fetch_all(w.store.pool())
        .await
        .expect("left");
    assert_eq!(left, Vec::<Uuid>::new());
    impatient.close().await;
}
