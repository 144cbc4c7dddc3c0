//! What is measured: the implementation's operations and the two baselines, each as one closed-loop
//! operation of one worker.

use crate::baseline;
use crate::fixture::{BenchError, Fixture};
use crate::measure::{closed_loop, counted_loop, Round};
use leasewright_impl::{Outcome, Tuple, Verdict};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// One operation of worker `w`: how many units of work it did (0: nothing to do).
pub type Op =
    Arc<dyn Fn(i32) -> Pin<Box<dyn Future<Output = Result<u64, BenchError>> + Send>> + Send + Sync>;

/// One thing to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// R1 `claim` of the implementation (one job per transaction).
    Fenced,
    /// R1 `claim` of the implementation, up to `k` jobs per transaction.
    FencedBatch(usize),
    /// Yardstick: the fenced claim's three writes and nothing else ([`crate::floor`]).
    FencedFloor,
    /// Yardstick: the fenced floor of up to `k` jobs in one statement.
    FencedFloorBatch(usize),
    /// Yardstick: `ClaimResult`'s writes and nothing else, the floor's claim then its result.
    FloorClaimResult,
    /// Baseline: a bare single-statement `FOR UPDATE SKIP LOCKED` claim on a minimal table.
    SkipLocked,
    /// Baseline: the bare claim of up to `k` rows in one statement.
    SkipLockedBatch(usize),
    /// Baseline: a one-row `UPDATE` per transaction on the worker's own row.
    CommitRate,
    /// R2 `heartbeat` of the implementation, each worker on its own lease.
    Heartbeat,
    /// The whole life of a job: claim, one heartbeat, result (passed), three transactions.
    Lifecycle,
    /// The shortest life of a job: claim, then result (passed), two transactions.
    ClaimResult,
    /// Baseline: a typical PostgreSQL queue's job, a bare claim then one `UPDATE` completing it.
    TypicalQueue,
    /// `ClaimResult` over HTTP: the runner client against the server of `leasewright serve`
    /// ([`Fixture::start_http`]).
    HttpClaimResult,
}

impl Contender {
    /// The name printed in reports (and used as criterion's function id).
    pub fn name(self) -> String {
        match self {
            Contender::Fenced => "fenced claim".into(),
            Contender::FencedBatch(k) => format!("fenced claim K={k}"),
            Contender::FencedFloor => "fenced floor".into(),
            Contender::FencedFloorBatch(k) => format!("fenced floor K={k}"),
            Contender::FloorClaimResult => "fenced floor: claim->result".into(),
            Contender::SkipLocked => "skip-locked".into(),
            Contender::SkipLockedBatch(k) => format!("skip-locked K={k}"),
            Contender::CommitRate => "commit-rate".into(),
            Contender::Heartbeat => "heartbeat".into(),
            Contender::Lifecycle => "claim->heartbeat->result".into(),
            Contender::ClaimResult => "claim->result".into(),
            Contender::TypicalQueue => "typical queue".into(),
            Contender::HttpClaimResult => "HTTP claim->result".into(),
        }
    }

    /// Whether it takes jobs from a queue (which then needs topping up).
    pub fn consumes_jobs(self) -> bool {
        !matches!(self, Contender::CommitRate | Contender::Heartbeat)
    }

    /// Runs the contender on `concurrency` workers for `duration`. Each worker `w` acts as runner
    /// `w` (the fixture must have at least `concurrency` runners). `Round::ops` counts jobs (or
    /// heartbeats, or commits); `Round::latencies_us` has one entry per operation.
    pub async fn run(
        self,
        fixture: &Fixture,
        concurrency: usize,
        duration: Duration,
    ) -> Result<Round, BenchError> {
        let op = self.op(fixture, concurrency).await?;
        closed_loop(concurrency, duration, move |w| op(w)).await
    }

    /// Runs `total` operations of the contender on `concurrency` workers; the wall time.
    pub async fn run_counted(
        self,
        fixture: &Fixture,
        concurrency: usize,
        total: u64,
    ) -> Result<Duration, BenchError> {
        let op = self.op(fixture, concurrency).await?;
        counted_loop(concurrency, total, move |w| op(w)).await
    }

    /// One operation of worker `w` as a boxed closure (all contenders pay the same boxing).
    /// Setup that must not be timed (the heartbeat's leases) happens here.
    pub async fn op(self, fixture: &Fixture, concurrency: usize) -> Result<Op, BenchError> {
        if concurrency == 0 || concurrency > fixture.runners.len() {
            return Err(BenchError::Invalid(format!(
                "concurrency {concurrency} needs between 1 and {} workers",
                fixture.runners.len()
            )));
        }
        let store = fixture.store.clone();
        let pool = fixture.pool.clone();
        let runners = Arc::new(fixture.runners.clone());
        Ok(match self {
            Contender::Fenced | Contender::FencedBatch(_) => {
                let k = match self {
                    Contender::FencedBatch(k) => k,
                    _ => 1,
                };
                Arc::new(move |w| {
                    let store = store.clone();
                    let runner = runners[w as usize];
                    Box::pin(async move {
                        Ok(match store.claim_batch(runner, k, None).await? {
                            Verdict::Accepted(leases) => leases.len() as u64,
                            _ => 0,
                        })
                    })
                })
            }
            Contender::FencedFloorBatch(k) => {
                let project = fixture.project;
                Arc::new(move |w| {
                    let pool = pool.clone();
                    let runner = runners[w as usize];
                    Box::pin(async move {
                        let now = chrono::Utc::now();
                        let expiry = now + chrono::Duration::hours(1);
                        let claimed = crate::floor::claim_batch(
                            &pool, runner, project, k as i64, now, expiry,
                        );
                        Ok(claimed.await?.len() as u64)
                    })
                })
            }
            Contender::FencedFloor | Contender::FloorClaimResult => {
                let project = fixture.project;
                let with_result = self == Contender::FloorClaimResult;
                Arc::new(move |w| {
                    let pool = pool.clone();
                    let runner = runners[w as usize];
                    Box::pin(async move {
                        let now = chrono::Utc::now();
                        let expiry = now + chrono::Duration::hours(1);
                        let claimed = crate::floor::claim(&pool, runner, project, now, expiry);
                        let Some(lease) = claimed.await? else {
                            return Ok(0);
                        };
                        if !with_result {
                            return Ok(1);
                        }
                        let done =
                            crate::floor::result(&pool, runner, &lease, chrono::Utc::now()).await?;
                        Ok(u64::from(done))
                    })
                })
            }
            Contender::SkipLocked => Arc::new(move |w| {
                let pool = pool.clone();
                Box::pin(async move { Ok(u64::from(baseline::bare_claim(&pool, w).await?)) })
            }),
            Contender::SkipLockedBatch(k) => Arc::new(move |w| {
                let pool = pool.clone();
                Box::pin(async move { Ok(baseline::bare_claim_batch(&pool, w, k as i64).await?) })
            }),
            Contender::CommitRate => Arc::new(move |w| {
                let pool = pool.clone();
                Box::pin(async move { Ok(u64::from(baseline::one_row_update(&pool, w).await?)) })
            }),
            Contender::Heartbeat => {
                // Each worker heartbeats a lease of its own, claimed before the clock starts.
                let mut leases: Vec<Tuple> = Vec::with_capacity(concurrency);
                for runner in runners.iter().take(concurrency) {
                    match store.claim(*runner, None).await? {
                        Verdict::Accepted(lease) => leases.push(lease.tuple),
                        other => {
                            return Err(BenchError::Invalid(format!(
                                "heartbeat setup: no job to claim ({})",
                                other.as_str()
                            )))
                        }
                    }
                }
                let leases = Arc::new(leases);
                Arc::new(move |w| {
                    let store = store.clone();
                    let tuple = leases[w as usize];
                    Box::pin(async move {
                        Ok(u64::from(
                            store.heartbeat(&tuple, None).await?.is_accepted(),
                        ))
                    })
                })
            }
            Contender::ClaimResult => Arc::new(move |w| {
                let store = store.clone();
                let runner = runners[w as usize];
                Box::pin(async move {
                    let Verdict::Accepted(lease) = store.claim(runner, None).await? else {
                        return Ok(0);
                    };
                    let done = store
                        .report_result(&lease.tuple, Outcome::Passed, "bench", None)
                        .await?;
                    Ok(u64::from(done.is_accepted()))
                })
            }),
            Contender::TypicalQueue => Arc::new(move |w| {
                let pool = pool.clone();
                Box::pin(
                    async move { Ok(u64::from(baseline::claim_and_complete(&pool, w).await?)) },
                )
            }),
            Contender::HttpClaimResult => {
                if fixture.clients.len() < concurrency {
                    return Err(BenchError::Invalid(
                        "the HTTP contender needs Fixture::start_http first".into(),
                    ));
                }
                let clients = Arc::new(fixture.clients.clone());
                Arc::new(move |w| {
                    let clients = Arc::clone(&clients);
                    Box::pin(async move {
                        let client = &clients[w as usize];
                        let http = |e: leasewright_server::client::CallError| {
                            BenchError::Invalid(format!("an HTTP call failed: {e}"))
                        };
                        let Some(lease) = client.claim(1).await.map_err(http)?.pop() else {
                            return Ok(0);
                        };
                        let answer = client
                            .result(&lease.tuple(None), "passed", "bench")
                            .await
                            .map_err(http)?;
                        Ok(u64::from(answer.verdict == "accepted"))
                    })
                })
            }
            Contender::Lifecycle => Arc::new(move |w| {
                let store = store.clone();
                let runner = runners[w as usize];
                Box::pin(async move {
                    let Verdict::Accepted(lease) = store.claim(runner, None).await? else {
                        return Ok(0);
                    };
                    let beat = store.heartbeat(&lease.tuple, None).await?;
                    let done = store
                        .report_result(&lease.tuple, Outcome::Passed, "bench", None)
                        .await?;
                    Ok(u64::from(beat.is_accepted() && done.is_accepted()))
                })
            }),
        })
    }
}
