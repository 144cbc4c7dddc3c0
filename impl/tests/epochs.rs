//! Epochs (docs/protocol.md §2, "Epochs"; migration 0012) against real PostgreSQL: after an event
//! that can forget commits, every fence and slot token is above every one issued before it, the
//! forgotten ones included, and no job is claimed until every earlier lease has expired.
//!
//! The epoch change is the operator's step after a restore that keeps the WAL timeline
//! (`advance_epoch`, `leasewright migrate --advance-epoch`): the same rise of the epoch a
//! promotion makes, without a second cluster. The forgotten claim is a real claim whose
//! transaction is rolled back after its tokens were read: what an asynchronous failover does to a
//! claim whose answer the runner already has.

mod common;

use common::{World, LEASE_TTL_SECS};
use leasewright_impl::epoch::{advance_epoch, current_epoch, epoch_of, generation_of};
use leasewright_impl::*;
use sqlx::{Connection, PgConnection, Row};
use std::sync::Arc;

/// The first token of epoch 1: 2^32 + 1.
const EPOCH_1_FIRST: i64 = (1 << 32) + 1;

async fn submit_on(w: &World, slot: &str) -> JobId {
    let mut job = NewJob::new("abc123", "sha256:src", "make");
    job.target = Some(slot.to_string());
    job.target_kind = TargetKind::Fenced;
    w.store.submit_job(w.project, job).await.expect("a job")
}

/// A claim of `runner` at the clock's time whose commit is then forgotten: the claim statement
/// runs in a transaction that is rolled back after its answer was read. Its fence and slot token.
async fn forgotten_claim(w: &World, runner: RunnerId) -> (i64, i64) {
    let mut conn = PgConnection::connect(w.db.url()).await.expect("connect");
    let now = w.clock.now();
    let mut tx = conn.begin().await.expect("begin");
    let row = sqlx::query("SELECT fence, slot_token FROM claim($1, 1, $2, $3)")
        .bind(runner.0)
        .bind(now)
        .bind(now + chrono::Duration::seconds(LEASE_TTL_SECS))
        .fetch_one(&mut *tx)
        .await
        .expect("the forgotten claim took a job");
    let tokens = (row.get("fence"), row.get("slot_token"));
    tx.rollback().await.expect("rollback");
    tokens
}

async fn claim_accepted(w: &World) -> Lease {
    match w.store.claim(w.runner, None).await.expect("claim") {
        Verdict::Accepted(lease) => lease,
        other => panic!("the claim must take a job: {other:?}"),
    }
}

async fn epoch_began_at(w: &World, epoch: i64) -> Option<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar("SELECT began_at FROM epochs WHERE epoch = $1")
        .bind(epoch)
        .fetch_optional(w.store.pool())
        .await
        .expect("epochs")
}

#[tokio::test]
async fn a_fresh_database_is_at_epoch_zero_and_its_claims_never_wait() {
    let w = World::new().await;
    assert_eq!(current_epoch(w.store.pool()).await.expect("epoch"), 0);
    let began: Option<String> =
        sqlx::query_scalar("SELECT began_at::text FROM epochs WHERE epoch = 0")
            .fetch_optional(w.store.pool())
            .await
            .expect("epochs");
    assert_eq!(began.as_deref(), Some("-infinity"));
    let job = w.submit().await.expect("job");
    let lease = claim_accepted(&w).await;
    assert_eq!(lease.tuple.job, job);
    assert_eq!((lease.tuple.fence, lease.slot_token), (1, 1));
}

#[tokio::test]
async fn after_an_epoch_change_fences_and_slot_tokens_are_above_every_earlier_one_even_forgotten() {
    let w = World::new().await;
    // Epoch 0: job J deploys to `prod` (fence 1, slot token 1) and passes.
    let j = submit_on(&w, "prod").await;
    let first = claim_accepted(&w).await;
    assert_eq!(
        (first.tuple.job, first.tuple.fence, first.slot_token),
        (j, 1, 1)
    );
    let verdict = w
        .store
        .report_result(&first.tuple, Outcome::Passed, "digest", None)
        .await
        .expect("result");
    assert_eq!(verdict, Verdict::Accepted(()));
    // Job K is claimed, the runner told fence 1 and slot token 2, and the claim is forgotten.
    let k = submit_on(&w, "prod").await;
    let (forgotten_fence, forgotten_token) = forgotten_claim(&w, w.runner).await;
    assert_eq!((forgotten_fence, forgotten_token), (1, 2));
    // In the same epoch the database issues them again: the failure epochs exist for.
    let (again_fence, again_token) = forgotten_claim(&w, w.runner).await;
    assert_eq!(
        (again_fence, again_token),
        (forgotten_fence, forgotten_token)
    );

    // The epoch rises.
    let advanced = advance_epoch(w.store.pool()).await.expect("advance");
    assert_eq!((advanced.before, advanced.after), (0, 1));
    assert_eq!(current_epoch(w.store.pool()).await.expect("epoch"), 1);
    w.advance_secs(LEASE_TTL_SECS);
    assert_eq!(
        w.store.claim(w.runner, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob),
        "the first claim of the epoch starts its wait"
    );
    w.advance_secs(LEASE_TTL_SECS);
    let after = claim_accepted(&w).await;
    assert_eq!(after.tuple.job, k);
    assert!(
        after.tuple.fence > forgotten_fence && after.slot_token > forgotten_token,
        "fence {} and slot token {} must be above the forgotten {forgotten_fence} and \
         {forgotten_token}",
        after.tuple.fence,
        after.slot_token
    );
    // Above every token epoch 0 can have issued, forgotten or not: its epoch is 1.
    assert_eq!(
        (after.tuple.fence, after.slot_token),
        (EPOCH_1_FIRST, EPOCH_1_FIRST)
    );
    assert_eq!(epoch_of(after.slot_token), 1);
    assert_eq!(generation_of(after.slot_token), 1);
    // A fenced target that applied the forgotten token still applies the new one, and refuses
    // the forgotten one after it.
    let target = w
        .store
        .demo_target(TargetKind::Fenced, "prod")
        .await
        .expect("a target");
    let forgotten_mutation = TargetMutation {
        job: k,
        attempt: AttemptId::new_random(),
        slot_token: forgotten_token,
        deployment_id: k.to_string(),
    };
    assert_eq!(
        target.mutate(&forgotten_mutation).await.expect("mutate"),
        Verdict::Accepted(())
    );
    let mutation = TargetMutation {
        job: k,
        attempt: after.tuple.attempt,
        slot_token: after.slot_token,
        deployment_id: k.to_string(),
    };
    assert_eq!(
        target.mutate(&mutation).await.expect("mutate"),
        Verdict::Accepted(())
    );
    assert_eq!(
        target.mutate(&forgotten_mutation).await.expect("mutate"),
        Verdict::Rejected(Reason::StaleFence)
    );

    // Within the epoch the counters go on: the next reservation of `prod` is 2^32 + 2, and K's
    // next attempt has fence 2^32 + 2.
    let verdict = w
        .store
        .report_result(&after.tuple, Outcome::Passed, "digest", None)
        .await
        .expect("result");
    assert_eq!(verdict, Verdict::Accepted(()));
    submit_on(&w, "prod").await;
    let next = claim_accepted(&w).await;
    assert_eq!(next.slot_token, EPOCH_1_FIRST + 1);
    assert_eq!(next.tuple.fence, EPOCH_1_FIRST, "a new job's first fence");
    w.lose_and_retry(next.tuple.job).await.expect("retry");
    let retried = claim_accepted(&w).await;
    assert_eq!(retried.tuple.job, next.tuple.job);
    assert_eq!(retried.tuple.fence, EPOCH_1_FIRST + 1);
    assert_eq!(retried.slot_token, EPOCH_1_FIRST + 2);
}

#[tokio::test]
async fn after_an_epoch_change_no_job_is_claimed_until_the_longest_lease_ever_granted_expired() {
    let w = World::new().await;
    // Another server of this database grants 90 s leases: the wait must cover them.
    let longer =
        w.db.store(
            Arc::new(w.clock.clone()),
            StoreConfig {
                lease_ttl: std::time::Duration::from_secs(90),
                ..StoreConfig::default()
            },
        )
        .await
        .expect("a store with 90 s leases");
    longer.close().await;
    // A server started later with 30 s leases does not shorten the wait.
    let shorter =
        w.db.store(Arc::new(w.clock.clone()), StoreConfig::default())
            .await
            .expect("a store with 30 s leases");
    shorter.close().await;
    // Epoch 0: job R runs (a lease the new epoch remembers); job Q waits in the queue.
    w.submit().await.expect("job");
    let remembered = claim_accepted(&w).await;
    let queued = w.submit().await.expect("job");

    advance_epoch(w.store.pool()).await.expect("advance");
    let began = w.clock.now();
    assert_eq!(
        w.store.claim(w.runner, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob),
        "the first claim of the new epoch takes nothing"
    );
    assert_eq!(
        epoch_began_at(&w, 1).await,
        Some(chrono::SubsecRound::trunc_subsecs(began, 6)),
        "and records when the epoch began"
    );
    // A remembered lease stays valid until it expires.
    w.advance_secs(10);
    let heartbeat = w
        .store
        .heartbeat(&remembered.tuple, None)
        .await
        .expect("heartbeat");
    assert!(heartbeat.is_accepted(), "{heartbeat:?}");
    // Past this store's ttl (30 s) but not the longest ever granted (90 s): still nothing.
    w.clock
        .set(began + chrono::Duration::seconds(90) - chrono::Duration::microseconds(1));
    assert_eq!(
        w.store.claim(w.runner, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob)
    );
    assert_eq!(
        w.store.claim_batch(w.runner, 4, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob)
    );
    // From began_at + 90 s on, claims take jobs again, in the new epoch.
    w.clock.set(began + chrono::Duration::seconds(90));
    let lease = claim_accepted(&w).await;
    assert_eq!(lease.tuple.job, queued);
    assert_eq!(epoch_of(lease.tuple.fence), 1);
    assert_eq!(epoch_of(lease.slot_token), 1);
}

#[tokio::test]
async fn advancing_the_epoch_goes_above_every_epoch_found_in_the_tokens() {
    let w = World::new().await;
    w.submit().await.expect("job");
    let lease = claim_accepted(&w).await;
    assert_eq!(lease.tuple.fence, 1);
    // A restored database whose tokens came from epoch 5 (a logical restore starts at timeline 1).
    sqlx::query("UPDATE target_slots SET slot_token = 5 * 4294967296 + 9 WHERE slot = $1")
        .bind(&lease.target)
        .execute(w.store.pool())
        .await
        .expect("update");
    let advanced = advance_epoch(w.store.pool()).await.expect("advance");
    assert_eq!((advanced.before, advanced.after), (0, 6));
    assert_eq!(current_epoch(w.store.pool()).await.expect("epoch"), 6);
    // Each run raises it again.
    let again = advance_epoch(w.store.pool()).await.expect("advance");
    assert_eq!((again.before, again.after), (6, 7));
}
