//! The `leasewright-batched` contender: Leasewright in-process, driven the way the runner agent
//! (server/src/agent.rs) drives the protocol, without HTTP and without commands.
//!
//! Each agent has `capacity` job slots. Its claim loop waits for a free slot, then claims as many
//! jobs as slots are free in one batch claim (at most `MAX_CLAIM_CAPACITY`, the server's limit,
//! which the agent keeps, as it keeps `MAX_RESULTS_PER_BATCH` per batch result); a claim that
//! finds no job is tried again, as the agent polls. Every job is a no-op that finishes at once,
//! and its result waits for the agent's result sender, which sends whatever results are waiting
//! as one batch result and frees their slots when the answer is back. The claim loop and the
//! result sender run at the same time, each on a connection of its own, as the agent's do: a
//! claim is not held back while the last batch's results are on their way.

use crate::fixture::{BenchError, Fixture};
use leasewright_impl::{Lease, Outcome, ResultReport, Verdict};
use leasewright_server::app::{MAX_CLAIM_CAPACITY, MAX_RESULTS_PER_BATCH};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// A claimed job whose result waits to be sent, with its slot.
struct Finished {
    lease: Lease,
    claimed: Instant,
    _slot: OwnedSemaphorePermit,
}

/// Runs `agents` agents of `capacity` slots each until `jobs` results were accepted (the jobs
/// claimed by then are still reported and count) or `max` passed: the jobs done, the wall time,
/// one latency per job (from its claim being sent to its result's answer).
pub async fn run(
    fixture: &Fixture,
    agents: usize,
    capacity: usize,
    jobs: u64,
    max: Duration,
) -> Result<(u64, Duration, Vec<u32>), BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + max;
    let mut tasks = Vec::with_capacity(agents);
    for agent in 0..agents {
        let store = fixture.store.clone();
        let runner = fixture.runners[agent];
        let done = Arc::clone(&done);
        let slots = Arc::new(Semaphore::new(capacity));
        let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
        let claims = {
            let store = store.clone();
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while done.load(Ordering::Relaxed) < jobs && Instant::now() < deadline {
                    let first = acquire(&slots).await;
                    // As the agent: no more than a claim may ask for (over HTTP the server
                    // refuses more).
                    let free = (slots.available_permits() + 1).min(MAX_CLAIM_CAPACITY as usize);
                    let claimed = Instant::now();
                    // No job now (the rest are locked by the other agents' claims, or in
                    // flight): claim again, until the jobs are done or the time is up.
                    let Verdict::Accepted(leases) = store.claim_batch(runner, free, None).await?
                    else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let mut permit = Some(first);
                    for lease in leases {
                        let slot = match permit.take() {
                            Some(slot) => slot,
                            None => acquire(&slots).await,
                        };
                        let finished = Finished {
                            lease,
                            claimed,
                            _slot: slot,
                        };
                        if tx.send(finished).is_err() {
                            return Ok(());
                        }
                    }
                }
                Ok::<(), BenchError>(())
            })
        };
        let results = tokio::spawn(async move {
            let mut latencies = Vec::new();
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_RESULTS_PER_BATCH {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                let items: Vec<ResultReport> = batch
                    .iter()
                    .map(|f| ResultReport {
                        tuple: f.lease.tuple,
                        outcome: Outcome::Passed,
                        result_digest: "bench".into(),
                        runner_time: None,
                    })
                    .collect();
                let verdicts = store.report_results(&items).await?;
                for (f, verdict) in batch.iter().zip(&verdicts) {
                    if verdict.is_accepted() {
                        let us = f.claimed.elapsed().as_micros().min(u128::from(u32::MAX));
                        latencies.push(us as u32);
                    }
                }
                done.fetch_add(
                    verdicts.iter().filter(|v| v.is_accepted()).count() as u64,
                    Ordering::Relaxed,
                );
            }
            Ok::<Vec<u32>, BenchError>(latencies)
        });
        tasks.push((claims, results));
    }
    let mut latencies = Vec::new();
    for (claims, results) in tasks {
        let claimed = claims
            .await
            .expect("a benchmark agent's claim loop panicked");
        let reported = results
            .await
            .expect("a benchmark agent's result sender panicked");
        claimed?;
        latencies.extend(reported?);
    }
    Ok((done.load(Ordering::Relaxed), started.elapsed(), latencies))
}

/// A free slot of the agent (its semaphore is never closed).
async fn acquire(slots: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    Arc::clone(slots)
        .acquire_owned()
        .await
        .expect("an agent's slots are never closed")
}
