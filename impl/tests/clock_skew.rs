//! Replica clocks (docs/protocol.md §3.1; migration 0016) against real PostgreSQL: with a recorded
//! `max_clock_skew` δ, the expiry sweep makes a job `uncertain` only once `now >= lease_expiry +
//! 2δ` (while every check already rejects the expired lease), and claims wait after an epoch
//! change until `began_at` + the largest lease ttl + 2δ. Without a recorded δ (one clock) both act
//! at the lease's expiry, as before.

mod common;

use chrono::Duration;
use common::{World, LEASE_TTL_SECS};
use leasewright_impl::epoch::{advance_epoch, epoch_of};
use leasewright_impl::*;

const SKEW: std::time::Duration = std::time::Duration::from_secs(1);

async fn claim_accepted(w: &World) -> Lease {
    match w.store.claim(w.runner, None).await.expect("claim") {
        Verdict::Accepted(lease) => lease,
        other => panic!("the claim must take a job: {other:?}"),
    }
}

#[tokio::test]
async fn a_sweep_acts_only_once_the_lease_is_over_by_twice_the_max_clock_skew() {
    let w = World::new().await;
    w.store.record_max_clock_skew(SKEW).await.expect("record δ");
    let job = w.submit().await.expect("job");
    let lease = claim_accepted(&w).await;
    let margin = Duration::from_std(SKEW * 2).expect("margin");
    let epsilon = Duration::microseconds(1);
    // Past the lease's expiry: every check rejects the lease already...
    w.clock.set(lease.lease_expiry);
    assert_eq!(
        w.store
            .heartbeat(&lease.tuple, None)
            .await
            .expect("heartbeat"),
        Verdict::Rejected(Reason::LeaseExpired)
    );
    // ...but up to 2δ past it no sweep makes the job uncertain.
    w.clock.set(lease.lease_expiry + margin - epsilon);
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Accepted,
        "a sweep at lease_expiry + 2δ - ε"
    );
    assert_eq!(
        w.store.job(job).await.expect("job").expect("the job").state,
        JobState::Running
    );
    // At lease_expiry + 2δ it does.
    w.clock.set(lease.lease_expiry + margin);
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Uncertain(vec![job]),
        "a sweep at lease_expiry + 2δ"
    );
}

#[tokio::test]
async fn without_a_recorded_max_clock_skew_the_sweep_acts_at_the_lease_expiry() {
    let w = World::new().await;
    let job = w.submit().await.expect("job");
    let lease = claim_accepted(&w).await;
    w.clock.set(lease.lease_expiry - Duration::microseconds(1));
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Accepted
    );
    w.clock.set(lease.lease_expiry);
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Uncertain(vec![job])
    );
}

#[tokio::test]
async fn the_largest_recorded_max_clock_skew_is_kept() {
    let w = World::new().await;
    w.store
        .record_max_clock_skew(SKEW * 3)
        .await
        .expect("record 3 s");
    w.store
        .record_max_clock_skew(SKEW)
        .await
        .expect("record 1 s");
    let job = w.submit().await.expect("job");
    let lease = claim_accepted(&w).await;
    w.clock
        .set(lease.lease_expiry + Duration::seconds(6) - Duration::microseconds(1));
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Accepted,
        "the margin is 2 × the largest δ recorded (3 s), not the last one"
    );
    w.clock.set(lease.lease_expiry + Duration::seconds(6));
    assert_eq!(
        w.store.sweep_expired().await.expect("sweep"),
        SweepVerdict::Uncertain(vec![job])
    );
}

#[tokio::test]
async fn after_an_epoch_change_claims_wait_the_largest_ttl_plus_twice_the_max_clock_skew() {
    let w = World::new().await;
    w.store.record_max_clock_skew(SKEW).await.expect("record δ");
    w.submit().await.expect("job");
    claim_accepted(&w).await;
    let queued = w.submit().await.expect("job");
    advance_epoch(w.store.pool()).await.expect("advance");
    let began = w.clock.now();
    assert_eq!(
        w.store.claim(w.runner, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob),
        "the first claim of the new epoch takes nothing"
    );
    let wait = Duration::seconds(LEASE_TTL_SECS) + Duration::from_std(SKEW * 2).expect("2δ");
    w.clock.set(began + wait - Duration::microseconds(1));
    assert_eq!(
        w.store.claim(w.runner, None).await.expect("claim"),
        Verdict::Rejected(Reason::NoQueuedJob),
        "at began_at + ttl + 2δ - ε claims still wait"
    );
    w.clock.set(began + wait);
    let lease = claim_accepted(&w).await;
    assert_eq!(lease.tuple.job, queued);
    assert_eq!(epoch_of(lease.tuple.fence), 1);
}
