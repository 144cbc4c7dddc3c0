//! Running many traces against one driver, in parallel, with progress and a summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasewright_model::LeaseModel;
use tokio::sync::Semaphore;

use crate::driver::Driver;
use crate::drivers::http::HttpDriver;
use crate::drivers::pg::PgDriver;
use crate::generate::Generated;
use crate::junit;
use crate::replay::{replay_fresh, Divergence, Tally};
use crate::select::Batch;

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

/// A driver of the suite: the in-process one or the HTTP one.
pub trait SuiteDriver: Driver + 'static {
    /// The summary's first line.
    fn heading(&self) -> String;
    /// Options of `conform` that select this driver, for replay commands.
    fn replay_options(&self) -> String;
    /// How many traces may run at once.
    fn parallel(&self, asked: usize) -> usize;
    /// Whether it can replay traces of `model`.
    fn accepts(&self, model: &LeaseModel) -> Result<(), String>;
    /// Why it does not replay `trace` (of `model`), if it does not; the suite leaves those out
    /// and says how many for each reason. The in-process driver replays every trace.
    fn leaves_out(&self, model: &LeaseModel, trace: &Generated<LeaseModel>) -> Option<LeftOut> {
        let _ = (model, trace);
        None
    }
    /// Why it leaves out the traces of `why` (the summary's left-out line).
    fn why_left_out(&self, why: LeftOut) -> &'static str {
        let _ = why;
        ""
    }
    /// How many times each of the implementation's SQL statements has run, when the
    /// implementation runs in this process (`None`: it runs in another one).
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>>;
    /// The parts of the projection this driver cannot read from its implementation: never
    /// compared, and named in the summary.
    fn not_compared(&self) -> Vec<crate::driver::Part> {
        Vec::new()
    }
}

impl SuiteDriver for PgDriver {
    fn heading(&self) -> String {
        "conformance: model against PostgreSQL (in-process driver)".into()
    }
    fn replay_options(&self) -> String {
        #[cfg(feature = "mutants")]
        if let Some(mutant) = self.mutant() {
            return format!(" --mutant {mutant:?}");
        }
        String::new()
    }
    fn parallel(&self, asked: usize) -> usize {
        asked
    }
    fn accepts(&self, _: &LeaseModel) -> Result<(), String> {
        Ok(())
    }
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>> {
        Some(leasewright_impl::statement_counts())
    }
}

impl SuiteDriver for HttpDriver {
    fn heading(&self) -> String {
        format!(
            "conformance: model against the HTTP server at {} (HTTP driver)",
            self.urls().join(", ")
        )
    }
    fn replay_options(&self) -> String {
        // The token is never printed: the replay reads it from LEASEWRIGHT_OPERATOR_TOKEN.
        format!(" --http {}", self.url())
    }
    fn parallel(&self, _: usize) -> usize {
        // One trace per server at a time on a shared clock, `--parallel` per server when each
        // request carries its trace's time (the driver enforces it anyway).
        self.places()
    }
    fn accepts(&self, model: &LeaseModel) -> Result<(), String> {
        self.tick_ms(model.config.lease_ttl)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>> {
        // The statements run in the server's process.
        None
    }
    fn not_compared(&self) -> Vec<crate::driver::Part> {
        self.unread().to_vec()
    }
    fn leaves_out(&self, model: &LeaseModel, trace: &Generated<LeaseModel>) -> Option<LeftOut> {
        let by_class = match in_process_only(model, trace) {
            // Failovers replay on servers with the failover's test hooks.
            Some(LeftOut::Failover) if !self.replays_failovers() => Some(LeftOut::Failover),
            // Replica clocks (a failover's wait among them) on a server whose database records
            // the trace's δ.
            Some(LeftOut::Failover | LeftOut::ReplicaClocks) => (model.config.replica_skew > 0
                && !self.replays_clock_skew_of(model))
            .then_some(LeftOut::ReplicaClocks),
            other => other,
        };
        by_class.or_else(|| {
            (self.judges_on_demo_targets()
                && crate::drivers::http::judged_otherwise_by_a_demo_target(trace))
            .then_some(LeftOut::DemoTarget)
        })
    }
    fn why_left_out(&self, why: LeftOut) -> &'static str {
        match why {
            LeftOut::DemoTarget => {
                "the server's demonstration targets keep their state in its database and record \
                 only the slot token that database issued to the attempt named: a copied or \
                 forged token is refused (403 slot_token_not_issued) where the model's target \
                 compares tokens only, and what a failover takes back they lose; give \
                 --target-url a target outside the server to replay them"
            }
            LeftOut::ReplicaClocks => {
                "replica clocks need a server whose database records the trace's δ (one tick of \
                 the model: the server's lease ttl divided by the model's; set it with \
                 `leasewright migrate --set-max-clock-skew-ms` on a manual-clock server's own \
                 database) beside one that records none, and no server given records it"
            }
            _ => {
                "a failover makes the implementation's database lose its last commit, which an \
                 HTTP driver asks of a server through the test hooks POST /v1/test/replicate and \
                 POST /v1/test/failover (a manual-clock server's), and a server given has none"
            }
        }
    }
    // Leaves out only the failovers where a server has no failover hooks, and the replica clocks
    // unless a server's database records their δ: shared slots, the outsider project's jobs, the side effects of R8 and identities
    // no one created are all replayed over HTTP (an unknown runner as a token that
    // authenticates nobody, refused 401: `drivers::http`).
}

/// Why a driver leaves a trace out (the in-process driver replays every trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeftOut {
    /// Several jobs on one target slot (`Config::shared_slot`): versions 1 and 2 of the
    /// `--driver-cmd` protocol map slot j to job j.
    SharedSlot,
    /// The outsider project's own jobs (`Config::outsider_jobs`): versions 1 and 2 of the
    /// `--driver-cmd` protocol have one project's jobs.
    OutsiderJobs,
    /// The side effects of R8 (`Config::side_effects`): not in versions 1 and 2 of the
    /// `--driver-cmd` protocol.
    SideEffects,
    /// A probe naming a runner, job or attempt no one created: versions 1 and 2 of the
    /// `--driver-cmd` protocol name only created identities.
    UnknownIdentity,
    /// The model's failover (the database loses its last commit, the epoch rises): the
    /// in-process driver makes its database lose a commit (`drivers::failover`), version 5 of
    /// the `--driver-cmd` protocol says it (`replicate`, `failover`), and the HTTP driver asks a
    /// server's test hooks (`POST /v1/test/replicate`, `POST /v1/test/failover`) where it has them.
    Failover,
    /// Replica clocks (`Config::replica_skew`: each server step judged by one of several
    /// replicas' clocks, the sweep and the wait acting 2δ late): the in-process driver runs a
    /// trace in a database of its own whose recorded δ is the trace's (`drivers::failover`),
    /// version 4 of the `--driver-cmd` protocol says δ and each replica's clock, and the HTTP
    /// driver replays them on a server whose database records their δ.
    ReplicaClocks,
    /// Over HTTP against the server's own demonstration targets (no `--target-url`): a target
    /// mutation the model's target (a system outside the control plane, which compares slot
    /// tokens only) applies and a demonstration target cannot judge alike, since it keeps its
    /// state in the server's database and records only the slot token that database issued to
    /// the attempt named: a mutation carrying another token (a copied or forged one), or one a
    /// failover reaches (`drivers::http::judged_otherwise_by_a_demo_target`). Not a class of the
    /// trace itself ([`classes`]): every other driver replays these traces.
    DemoTarget,
}

impl LeftOut {
    /// Every reason, in the order a trace is classified by (its first reason counts).
    pub const ALL: [LeftOut; 7] = [
        LeftOut::SharedSlot,
        LeftOut::OutsiderJobs,
        LeftOut::SideEffects,
        LeftOut::UnknownIdentity,
        LeftOut::Failover,
        LeftOut::ReplicaClocks,
        LeftOut::DemoTarget,
    ];

    /// What the traces left out for this reason are (the driver says why:
    /// [`SuiteDriver::why_left_out`]).
    pub fn what(self) -> &'static str {
        match self {
            LeftOut::SharedSlot => "with a shared target slot",
            LeftOut::OutsiderJobs => "with the outsider project's jobs",
            LeftOut::SideEffects => "with the side effects of R8",
            LeftOut::UnknownIdentity => "naming a runner, job or attempt no one created",
            LeftOut::Failover => "with a failover",
            LeftOut::ReplicaClocks => "with replica clocks",
            LeftOut::DemoTarget => {
                "with a target mutation a demonstration target cannot judge as the model's target"
            }
        }
    }
}

/// Whether a probe of `trace` names a runner, job or attempt no one created
/// ([`LeftOut::UnknownIdentity`]).
pub fn names_unknown_identity(trace: &Generated<LeaseModel>) -> bool {
    use leasewright_model::Action;
    let mut before = &trace.init;
    for (action, after) in &trace.steps {
        if let Action::Replay {
            runner, message, ..
        } = action
        {
            if usize::from(*runner) >= before.runners.len()
                || usize::from(message.job) >= before.jobs.len()
                || usize::from(message.attempt) >= before.attempts.len()
            {
                return true;
            }
        }
        before = after;
    }
    false
}

/// Every class of [`LeftOut::ALL`] `trace` (of `model`) is in, in that order (`--skip` leaves out
/// a trace in any class it names).
pub fn classes(model: &LeaseModel, trace: &Generated<LeaseModel>) -> Vec<LeftOut> {
    let c = &model.config;
    let mut classes = Vec::new();
    if c.shared_slot || c.slot_shared_by > 1 {
        classes.push(LeftOut::SharedSlot);
    }
    if c.outsider && c.outsider_jobs > 0 {
        classes.push(LeftOut::OutsiderJobs);
    }
    if c.side_effects {
        classes.push(LeftOut::SideEffects);
    }
    if names_unknown_identity(trace) {
        classes.push(LeftOut::UnknownIdentity);
    }
    classes.extend(in_process_only(model, trace));
    classes
}

/// Why a version 1 or 2 `--driver-cmd` driver leaves `trace` (of `model`) out, if it does: what
/// those versions of its JSON-lines protocol (docs/conformance-driver/) cannot say, the first
/// class of [`classes`]. A version 3 driver replays every trace but those with a failover or
/// replica clocks.
pub fn driver_cmd_leaves_out(model: &LeaseModel, trace: &Generated<LeaseModel>) -> Option<LeftOut> {
    classes(model, trace).into_iter().next()
}

/// Why a version 3 `--driver-cmd` driver leaves `trace` (of `model`) out: a failover
/// ([`LeftOut::Failover`]), which the in-process driver and version 5 of the driver protocol
/// replay, or replica clocks ([`LeftOut::ReplicaClocks`]), which the in-process driver, versions
/// 4 and 5 of the driver protocol and the HTTP driver (given a server whose database records
/// their δ) replay. The HTTP driver starts from it.
pub fn in_process_only(model: &LeaseModel, trace: &Generated<LeaseModel>) -> Option<LeftOut> {
    if crate::drivers::failover::has_failover(trace) {
        Some(LeftOut::Failover)
    } else if model.config.replica_skew > 0 {
        Some(LeftOut::ReplicaClocks)
    } else {
        None
    }
}

/// Replays every batch on `driver`, `parallel` traces at once (as the driver allows); `progress`
/// is called with the number of traces done over all batches.
pub async fn run_batches<D: SuiteDriver>(
    driver: Arc<D>,
    batches: &[Batch],
    parallel: usize,
    stop_at_first: bool,
    progress: impl Fn(u64) + Clone + Send + Sync + 'static,
) -> Outcome {
    let mut all = Outcome::default();
    let options = RunOptions {
        parallel: driver.parallel(parallel),
        stop_at_first,
    };
    let started = Instant::now();
    let mut offset = 0u64;
    for batch in batches {
        let batch_progress = {
            let progress = progress.clone();
            move |done: u64| progress(offset + done)
        };
        let outcome = run(
            Arc::clone(&driver),
            Arc::clone(&batch.model),
            batch.traces.clone(),
            &options,
            batch_progress,
        )
        .await;
        offset += batch.traces.len() as u64;
        all.traces += outcome.traces;
        all.tally.absorb(&outcome.tally);
        all.divergences.extend(outcome.divergences);
        all.cases.extend(outcome.cases);
        if stop_at_first && !all.divergences.is_empty() {
            break;
        }
    }
    all.divergences.sort_by_key(|d| (d.step, d.trace.clone()));
    all.elapsed = started.elapsed();
    all
}
