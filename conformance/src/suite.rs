//! Running many traces against one driver, in parallel, with progress and a summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasewright_model::LeaseModel;
use tokio::sync::Semaphore;

use crate::driver::Driver;
use crate::generate::Generated;
use crate::junit;
use crate::replay::{replay_fresh, Divergence, Tally};

/// How to run a suite.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Traces replayed at once (each in its own namespace).
    pub parallel: usize,
    /// Stop at the first divergence (the mutant table needs only whether a mutant is killed).
    pub stop_at_first: bool,
}

/// What a suite run found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Traces replayed to the end or to their divergence.
    pub traces: u64,
    /// What the agreeing traces exercised.
    pub tally: Tally,
    /// Divergences, shortest trace first.
    pub divergences: Vec<Divergence>,
    /// One JUnit case per trace.
    pub cases: Vec<junit::Case>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Replays every trace of `traces` (all of one `model`) on `driver`. `progress` is called after
/// each trace with the number done.
pub async fn run<D>(
    driver: Arc<D>,
    model: Arc<LeaseModel>,
    traces: Vec<Generated<LeaseModel>>,
    options: &RunOptions,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Outcome
where
    D: Driver + 'static,
{
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(options.parallel.max(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(progress);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut results = Vec::new();
    for trace in traces {
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (driver, model, stop, progress, done) = (
            Arc::clone(&driver),
            Arc::clone(&model),
            Arc::clone(&stop),
            Arc::clone(&progress),
            Arc::clone(&done),
        );
        let stop_at_first = options.stop_at_first;
        tasks.spawn(async move {
            let _permit = permit;
            let t0 = Instant::now();
            let result = replay_fresh(driver.as_ref(), &model, &trace).await;
            if result.is_err() && stop_at_first {
                stop.store(true, Ordering::Relaxed);
            }
            progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            (trace, result, t0.elapsed())
        });
        // Reap finished tasks as we go so the set of live tasks stays small on large suites.
        while let Some(joined) = tasks.try_join_next() {
            results.push(joined.expect("a trace task panicked"));
        }
    }
    while let Some(joined) = tasks.join_next().await {
        results.push(joined.expect("a trace task panicked"));
    }
    let mut outcome = Outcome::default();
    for (trace, result, took) in results {
        outcome.traces += 1;
        let failure = match result {
            Ok(tally) => {
                outcome.tally.absorb(&tally);
                None
            }
            Err(divergence) => {
                let report = divergence.render();
                outcome.divergences.push(divergence);
                Some(report)
            }
        };
        outcome.cases.push(junit::Case {
            name: trace.name.clone(),
            suite: trace.generator.to_string(),
            seconds: took.as_secs_f64(),
            failure,
        });
    }
    outcome
        .divergences
        .sort_by_key(|d| (d.step, d.trace.clone()));
    outcome.elapsed = started.elapsed();
    outcome
}
