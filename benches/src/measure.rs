//! Closed-loop throughput and latency measurement, alternating contenders (A B C A B C ...) so that
//! the machine's noise falls on every contender alike and only ratios from one run are compared.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one round of one contender measured.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Operations that did their work (a claim that got a job, an update that updated a row).
    pub ops: u64,
    /// Operations that found nothing to do (an empty queue): counted, not in the rate.
    pub empty: u64,
    /// Latency of every operation, in microseconds.
    pub latencies_us: Vec<u32>,
    /// Wall time of the round.
    pub elapsed: Duration,
    /// WAL bytes the server wrote during the round (`pg_current_wal_insert_lsn()` before and after;
    /// cluster-wide: on a shared server it includes other databases' writes).
    pub wal_bytes: u64,
}

/// The summary of one contender over all its rounds.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The contender's name as printed.
    pub name: String,
    /// Work units (jobs claimed) per operation: 1, or K for a batch claim.
    pub ops: u64,
    /// Operations that found nothing to do.
    pub empty: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Operations per second.
    pub per_second: f64,
    /// Median latency of one operation, microseconds.
    pub p50_us: u32,
    /// 99th percentile latency, microseconds.
    pub p99_us: u32,
    /// WAL bytes written over all rounds.
    pub wal_bytes: u64,
}

impl Summary {
    /// Summarises `rounds` of one contender.
    pub fn of(name: &str, rounds: &[Round]) -> Summary {
        let ops: u64 = rounds.iter().map(|r| r.ops).sum();
        let empty: u64 = rounds.iter().map(|r| r.empty).sum();
        let wal_bytes: u64 = rounds.iter().map(|r| r.wal_bytes).sum();
        let seconds: f64 = rounds.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        let mut latencies: Vec<u32> = rounds
            .iter()
            .flat_map(|r| r.latencies_us.iter().copied())
            .collect();
        latencies.sort_unstable();
        Summary {
            name: name.to_string(),
            ops,
            empty,
            seconds,
            per_second: if seconds > 0.0 {
                ops as f64 / seconds
            } else {
                0.0
            },
            p50_us: percentile(&latencies, 0.50),
            p99_us: percentile(&latencies, 0.99),
            wal_bytes,
        }
    }
}

/// The `q` quantile of sorted values (nearest rank); 0 for no values.
pub fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Runs `op(worker)` in a closed loop on `concurrency` tasks for `duration`. `op` answers how many
/// units of work it did (0: nothing to do).
pub async fn closed_loop<F, Fut, E>(
    concurrency: usize,
    duration: Duration,
    op: F,
) -> Result<Round, E>
where
    F: Fn(i32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, E>> + Send,
    E: Send + 'static,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let op = Arc::clone(&op);
        tasks.push(tokio::spawn(async move {
            let mut round = Round::default();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let done = op(worker as i32).await?;
                let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                if done == 0 {
                    round.empty += 1;
                } else {
                    round.ops += done;
                    round.latencies_us.push(us);
                }
            }
            Ok::<Round, E>(round)
        }));
    }
    let mut total = Round::default();
    for task in tasks {
        let round = task.await.expect("a benchmark worker panicked")?;
        total.ops += round.ops;
        total.empty += round.empty;
        total.latencies_us.extend(round.latencies_us);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Runs `op(worker)` on `concurrency` tasks until `total` operations have been started (a fixed
/// amount of work, as criterion's `iter_custom` asks for) and returns the wall time. Operations
/// that find nothing to do count as done.
pub async fn counted_loop<F, Fut, E>(concurrency: usize, total: u64, op: F) -> Result<Duration, E>
where
    F: Fn(i32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, E>> + Send,
    E: Send + 'static,
{
    let op = Arc::new(op);
    let tickets = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let op = Arc::clone(&op);
        let tickets = Arc::clone(&tickets);
        tasks.push(tokio::spawn(async move {
            while tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                op(worker as i32).await?;
            }
            Ok::<(), E>(())
        }));
    }
    for task in tasks {
        task.await.expect("a benchmark worker panicked")?;
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::{percentile, Round, Summary};
    use std::time::Duration;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn a_summary_adds_rounds_and_divides_by_their_time() {
        let rounds = [
            Round {
                ops: 100,
                empty: 1,
                latencies_us: vec![10; 100],
                elapsed: Duration::from_secs(1),
                wal_bytes: 1000,
            },
            Round {
                ops: 300,
                empty: 0,
                latencies_us: vec![30; 300],
                elapsed: Duration::from_secs(1),
                wal_bytes: 3000,
            },
        ];
        let s = Summary::of("x", &rounds);
        assert_eq!(s.ops, 400);
        assert_eq!(s.empty, 1);
        assert!((s.per_second - 200.0).abs() < 1e-9);
        assert_eq!(s.p50_us, 30);
        assert_eq!(s.wal_bytes, 4000);
    }
}
