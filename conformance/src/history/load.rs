//! The load generator: runner tasks against the `Store` with random delays, duplicated, late and
//! forged messages, an expiry sweeper, an operator that reconciles uncertain jobs truthfully, a
//! canceller, and faults injected during the load. Everything goes through [`Recorded`], and the
//! run ends with the checker.
//!
//! A runner task loops: claim → heartbeats at random intervals (sometimes a pause longer than
//! the lease, after which it sends `rejoin` instead) → result. It obeys every answer like the real
//! agent: a rejection stops its execution (it then reports `failed`, kept as a late observation),
//! a cancel request makes it report `cancelled`, an error makes it `rejoin` with its tuple. Some of
//! its messages are sent twice at once (duplicates), some again after the lease is over (late
//! copies, from a separate task), some with a forged fence, lease or attempt, and some results
//! are followed by a conflicting one.
//!
//! The operator only reconciles what it can know: it reads the job's current attempt and asks
//! the runners' shared execution table whether that execution is still going on (then it waits,
//! or asks to reconcile `still_running` and is refused), stopped, or finished with an outcome
//! (then it may adopt it). A claim whose answer was lost never started executing: its attempt is
//! `stopped` once no claim of its runner is in flight.

use super::check::{self, CheckConfig, Ledger, Report};
use super::{FaultCounts, MonotonicClock, Op, Recorded, Recorder};
use crate::generate::SplitMix64;
use backon::Retryable;
use chrono::{DateTime, Utc};
use imp::{AttemptId, Decision, Finding, JobId, Outcome, Reason, RejoinAnswer, RunnerId, Verdict};
use leasewright_impl as imp;
use serde::Serialize;
use sqlx::Connection;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Faults to inject during the load.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Every this often, `pg_terminate_backend` on every client connection of the database, at a
    /// moment when one of them is running a statement or is inside a transaction.
    pub kill_connections: Option<Duration>,
    /// Runner observed times this far off (alternately ahead and behind).
    pub runner_skew: Option<Duration>,
    /// Every this often, one runner task is killed abruptly (dropped mid-operation), and a new
    /// task of the same runner starts.
    pub kill_runners: Option<Duration>,
    /// Every this often, the PostgreSQL server is restarted (`pg_ctl restart -m fast`).
    pub restart_postgres: Option<(Duration, Arc<imp::database::Cluster>)>,
}

impl Faults {
    /// The names of the faults that are on.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.kill_connections.is_some() {
            names.push("kill-connections");
        }
        if self.runner_skew.is_some() {
            names.push("clock-skew");
        }
        if self.kill_runners.is_some() {
            names.push("kill-runner");
        }
        if self.restart_postgres.is_some() {
            names.push("restart-postgres");
        }
        names
    }
}

/// How to run the load.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The schema the tables live in (`stress --schema`; created if missing).
    pub schema: String,
    /// Runner tasks (each its own runner identity).
    pub runners: usize,
    /// Stop starting new work once this many calls were recorded.
    pub ops: usize,
    /// The seed of every random choice (delays, duplicates, outcomes, decisions). Scheduling is
    /// not seeded, so two runs with one seed are alike, not identical.
    pub seed: u64,
    /// The store's lease ttl.
    pub lease_ttl: Duration,
    /// The operator retries a job while it has fewer attempts than this.
    pub max_attempts: usize,
    /// Percent of heartbeats and results sent twice at once.
    pub duplicate_percent: usize,
    /// Percent of heartbeats and results sent again after the lease (late copies).
    pub late_percent: usize,
    /// Percent of heartbeats accompanied by a forged copy (wrong fence, lease or attempt).
    pub forge_percent: usize,
    /// Percent of heartbeat intervals that last longer than the lease (lost contact).
    pub pause_percent: usize,
    /// Percent of operator rounds that cancel a recently claimed job.
    pub cancel_percent: usize,
    pub faults: Faults,
    /// Connections in the store's pool.
    pub pool_size: u32,
    /// Stop after this long even if fewer calls were recorded.
    pub max_duration: Duration,
    /// Print progress on stderr every second.
    pub progress: bool,
    /// Run against an implementation with one rule removed (the checker must catch it).
    #[cfg(feature = "mutants")]
    pub mutant: Option<imp::mutants::Mutant>,
}

impl LoadConfig {
    /// A short profile: `runners` runners, `ops` calls, a 300 ms lease.
    pub fn short(runners: usize, ops: usize, seed: u64) -> Self {
        Self {
            schema: imp::DEFAULT_SCHEMA.to_owned(),
            runners,
            ops,
            seed,
            lease_ttl: Duration::from_millis(300),
            max_attempts: 3,
            duplicate_percent: 10,
            late_percent: 5,
            forge_percent: 3,
            pause_percent: 8,
            cancel_percent: 5,
            faults: Faults::default(),
            pool_size: 10,
            max_duration: Duration::from_secs(120),
            progress: false,
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }
}

/// Why a run could not be made (not a violation: those are in the report).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("setting up the run: {0}")]
    Setup(#[from] imp::Error),
    #[error("{0}")]
    Other(String),
}

/// What a run did and what the checker found.
#[derive(Debug, Serialize)]
pub struct RunSummary {
    pub runners: usize,
    pub seed: u64,
    pub lease_ttl_ms: u128,
    pub faults_on: Vec<&'static str>,
    pub faults: FaultCounts,
    /// Faults injected in all (kill rounds, restarts, runner kills, skewed runners).
    pub faults_injected: u64,
    pub load_seconds: f64,
    pub check_seconds: f64,
    pub report: Report,
}

impl RunSummary {
    /// A readable summary.
    pub fn render(&self, max_violations: usize) -> String {
        format!(
            "runners: {}, seed: {}, lease ttl: {} ms, faults: {} ({} injected: {:?})\n\
             load: {:.1} s, check: {:.1} s\n{}",
            self.runners,
            self.seed,
            self.lease_ttl_ms,
            if self.faults_on.is_empty() {
                "none".to_string()
            } else {
                self.faults_on.join(", ")
            },
            self.faults_injected,
            self.faults,
            self.load_seconds,
            self.check_seconds,
            self.report.render(max_violations)
        )
    }
}

/// A run's outcome: the summary, and the history and ledger it was checked on.
#[derive(Debug)]
pub struct RunOutcome {
    pub summary: RunSummary,
    pub history: Vec<Op>,
    pub ledger: Ledger,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exec {
    Executing,
    Stopped,
    Finished(Outcome),
}

/// The protocol calls of a run: on the `Store` in-process (recorded here), or over HTTP
/// (recorded at the proxy, which sees every delivery, and at the operator's client).
#[derive(Clone, Debug)]
pub(crate) enum Api {
    Store(Recorded),
    Http(Arc<super::net::HttpApi>),
}

/// A call failed: its outcome is unknown.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failed;

impl From<imp::Error> for Failed {
    fn from(_: imp::Error) -> Self {
        Failed
    }
}

impl Api {
    pub(crate) async fn claim(
        &self,
        client: &str,
        runner: RunnerId,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::Lease>, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.claim(client, runner, runner_time).await?),
            Api::Http(http) => http.claim(runner, runner_time).await,
        }
    }

    pub(crate) async fn heartbeat(
        &self,
        client: &str,
        tuple: &imp::Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::HeartbeatAnswer>, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.heartbeat(client, tuple, runner_time).await?),
            Api::Http(http) => http.heartbeat(tuple, runner_time).await,
        }
    }

    pub(crate) async fn rejoin(
        &self,
        client: &str,
        tuple: &imp::Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<RejoinAnswer, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.rejoin(client, tuple, runner_time).await?),
            Api::Http(http) => http.rejoin(tuple, runner_time).await,
        }
    }

    pub(crate) async fn result(
        &self,
        client: &str,
        tuple: &imp::Tuple,
        outcome: Outcome,
        digest: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Failed> {
        match self {
            Api::Store(rec) => Ok(rec
                .result(client, tuple, outcome, digest, runner_time)
                .await?),
            Api::Http(http) => http.result(tuple, outcome, digest, runner_time).await,
        }
    }

    pub(crate) async fn sweep(&self, client: &str) -> Result<imp::SweepVerdict, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.sweep(client).await?),
            Api::Http(http) => http.sweep(client).await,
        }
    }

    pub(crate) async fn cancel(&self, client: &str, job: JobId) -> Result<Verdict<()>, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.cancel(client, job).await?),
            Api::Http(http) => http.cancel(client, job).await,
        }
    }

    pub(crate) async fn reconcile(
        &self,
        client: &str,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Result<Verdict<()>, Failed> {
        match self {
            Api::Store(rec) => Ok(rec.reconcile(client, job, finding, decision).await?),
            Api::Http(http) => http.reconcile(client, job, finding, decision).await,
        }
    }

    /// Submit one job; `false` if the submission failed.
    async fn submit(&self, reader: &imp::Store, project: imp::ProjectId) -> bool {
        match self {
            Api::Store(_) => {
                let job = imp::NewJob::new("rev", "sha256:source", "true");
                reader.submit_job(project, job).await.is_ok()
            }
            Api::Http(http) => http.submit().await,
        }
    }
}

/// What a run drives: the calls, the recorder, a store to read (and, in-process, submit) with,
/// the project and its runners, and the flag and counters the fault tasks share.
pub(crate) struct Setup {
    pub api: Api,
    pub recorder: Arc<Recorder>,
    pub reader: imp::Store,
    pub project: imp::ProjectId,
    pub runners: Vec<RunnerId>,
    pub stop_background: Arc<AtomicBool>,
    pub faults: Arc<Mutex<FaultCounts>>,
    /// Fault tasks of the caller's own (they stop when `stop_background` is set).
    pub background: Vec<JoinHandle<()>>,
    /// Deliveries still under way elsewhere (the proxy's): the drain waits for them.
    pub in_flight: Vec<Arc<AtomicUsize>>,
    /// The names of the caller's own faults, for the summary.
    pub fault_names: Vec<&'static str>,
}

struct Shared {
    rec: Api,
    reader: imp::Store,
    recorder: Arc<Recorder>,
    project: imp::ProjectId,
    config: LoadConfig,
    runners: Vec<RunnerId>,
    /// Runners stop starting new work.
    stop: AtomicBool,
    /// Background tasks (sweeper, operator, submitter, faults) stop.
    stop_background: Arc<AtomicBool>,
    executions: Mutex<HashMap<AttemptId, (RunnerId, Exec)>>,
    claiming: Mutex<HashMap<RunnerId, usize>>,
    recent_jobs: Mutex<Vec<JobId>>,
    late_in_flight: AtomicUsize,
    faults: Arc<Mutex<FaultCounts>>,
    uncertain: Mutex<BTreeSet<JobId>>,
    slots: Mutex<Vec<Option<JoinHandle<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn scaled(d: Duration, lo_percent: u64, hi_percent: u64, rng: &mut SplitMix64) -> Duration {
    let span = hi_percent.saturating_sub(lo_percent).max(1);
    let percent = lo_percent + rng.next_u64() % span;
    d.mul_f64(percent as f64 / 100.0)
}

fn chance(rng: &mut SplitMix64, percent: usize) -> bool {
    rng.below(100) < percent
}

/// The digest a runner reports for an outcome of an attempt: identical results have identical
/// digests (the model's "identical result" is "same outcome").
pub fn digest(attempt: AttemptId, outcome: Outcome) -> String {
    format!("sha256:{}:{}", attempt.0.simple(), outcome.as_str())
}

impl Shared {
    fn runner_time(&self, index: usize) -> Option<DateTime<Utc>> {
        let now = self.recorder.clock().now();
        let skew = self
            .config
            .faults
            .runner_skew
            .and_then(|skew| chrono::Duration::from_std(skew).ok());
        Some(match skew {
            Some(skew) if index.is_multiple_of(2) => now + skew,
            Some(skew) => now - skew,
            None => now,
        })
    }

    fn set_exec(&self, attempt: AttemptId, runner: RunnerId, exec: Exec) {
        lock(&self.executions).insert(attempt, (runner, exec));
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Run the load against a fresh database at `database_url`, then check it.
pub async fn run(database_url: &str, config: &LoadConfig) -> Result<RunOutcome, LoadError> {
    let clock = Arc::new(MonotonicClock::new());
    let store = imp::Store::connect(
        database_url,
        clock.clone(),
        imp::StoreConfig {
            lease_ttl: config.lease_ttl,
            max_connections: config.pool_size,
            acquire_timeout: Duration::from_secs(3),
            schema: config.schema.clone(),
        },
    )
    .await?;
    #[cfg(feature = "mutants")]
    let store = match config.mutant {
        Some(mutant) => store.with_mutant(mutant),
        None => store,
    };
    let recorder = Recorder::new(clock.clone());
    let project = store.create_project("history").await?;
    let mut runners = Vec::new();
    for i in 0..config.runners {
        runners.push(
            store
                .create_runner(project, &format!("runner-{i}"))
                .await?
                .0,
        );
    }
    let setup = Setup {
        api: Api::Store(Recorded {
            store: store.clone(),
            recorder: recorder.clone(),
            project,
        }),
        recorder,
        reader: store,
        project,
        runners,
        stop_background: Arc::new(AtomicBool::new(false)),
        faults: Arc::new(Mutex::new(FaultCounts::default())),
        background: Vec::new(),
        in_flight: Vec::new(),
        fault_names: Vec::new(),
    };
    drive(setup, database_url, config, true).await
}

/// Drive the runners, sweeper, operator and faults of `setup` until `config.ops` calls were
/// recorded, drain, sweep once more, read the ledger and check.
pub(crate) async fn drive(
    setup: Setup,
    database_url: &str,
    config: &LoadConfig,
    time_authority: bool,
) -> Result<RunOutcome, LoadError> {
    let Setup {
        api,
        recorder,
        reader: store,
        project,
        runners,
        stop_background,
        faults,
        background: extra_background,
        in_flight,
        fault_names,
    } = setup;
    if config.faults.runner_skew.is_some() {
        lock(&faults).skewed_runners = config.runners as u64;
    }
    let shared = Arc::new(Shared {
        rec: api,
        reader: store.clone(),
        recorder: recorder.clone(),
        project,
        config: config.clone(),
        runners: runners.clone(),
        stop: AtomicBool::new(false),
        stop_background,
        executions: Mutex::new(HashMap::new()),
        claiming: Mutex::new(HashMap::new()),
        recent_jobs: Mutex::new(Vec::new()),
        late_in_flight: AtomicUsize::new(0),
        faults,
        uncertain: Mutex::new(BTreeSet::new()),
        slots: Mutex::new(Vec::new()),
    });
    submit(&shared, config.runners * 3).await;
    let started = Instant::now();
    for (i, runner) in runners.iter().enumerate() {
        let handle = spawn_runner(&shared, i, *runner, 0);
        lock(&shared.slots).push(Some(handle));
    }
    let mut background = vec![
        tokio::spawn(sweeper(shared.clone())),
        tokio::spawn(operator(shared.clone())),
        tokio::spawn(submitter(shared.clone())),
    ];
    background.extend(extra_background);
    if let Some(every) = config.faults.kill_connections {
        background.push(tokio::spawn(kill_connections(
            shared.clone(),
            database_url.to_owned(),
            every,
        )));
    }
    if let Some(every) = config.faults.kill_runners {
        background.push(tokio::spawn(kill_runners(shared.clone(), every)));
    }
    if let Some((every, cluster)) = &config.faults.restart_postgres {
        background.push(tokio::spawn(restart_postgres(
            shared.clone(),
            cluster.clone(),
            *every,
        )));
    }
    let mut last_progress = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ops = recorder.len();
        if config.progress && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "stress: {ops} calls ({:.0}/s), {} faults injected, {:.0} s",
                ops as f64 / secs.max(0.001),
                lock(&shared.faults).total(),
                secs
            );
        }
        if ops >= config.ops || started.elapsed() >= config.max_duration {
            break;
        }
    }
    // Drain: runners finish what they hold, late copies arrive, faults stop.
    shared.stop.store(true, Ordering::SeqCst);
    loop {
        let handle = {
            let mut slots = lock(&shared.slots);
            slots.iter_mut().find_map(Option::take)
        };
        let Some(handle) = handle else { break };
        let _ = handle.await;
    }
    while shared.late_in_flight.load(Ordering::SeqCst) > 0
        || in_flight.iter().any(|n| n.load(Ordering::SeqCst) > 0)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shared.stop_background.store(true, Ordering::SeqCst);
    for task in background {
        let _ = task.await;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    // Every lease still held is over now, by the sweep's margin past a lease too (twice the
    // servers' recorded max_clock_skew, docs/protocol.md §3.1); the final sweep must take it.
    let sweep_margin = (|| check::sweep_margin(&store))
        .retry(super::retries(Duration::from_millis(200), 49))
        .await
        .map_err(|_| LoadError::Other("could not read the sweep's margin".into()))?;
    tokio::time::sleep(
        config.lease_ttl + sweep_margin.to_std().unwrap_or_default() + Duration::from_millis(50),
    )
    .await;
    let final_sweep_at = (|| async {
        let before = recorder.len();
        shared.rec.sweep("final-sweep").await?;
        Ok::<_, Failed>(recorder.snapshot().get(before).map(|op| op.invoked_at))
    })
    .retry(super::retries(Duration::from_millis(200), 99))
    .await
    .ok()
    .flatten();
    if final_sweep_at.is_none() {
        return Err(LoadError::Other(
            "the final sweep failed: the database did not come back".into(),
        ));
    }
    let check_started = Instant::now();
    let mut ledger = (|| check::read_ledger(&store, project, 4))
        .retry(super::retries(Duration::from_millis(200), 49))
        .await
        .map_err(|_| LoadError::Other("could not read the final ledger".into()))?;
    ledger.final_sweep_at = final_sweep_at;
    ledger.sweep_margin = sweep_margin;
    store.close().await;
    let history = recorder.snapshot();
    let mut check_config = CheckConfig::new(
        chrono::Duration::from_std(config.lease_ttl).unwrap_or(chrono::Duration::seconds(1)),
    );
    check_config.time_authority = time_authority;
    let (history, ledger, report) = tokio::task::spawn_blocking(move || {
        let report = check::check(&history, &ledger, &check_config);
        (history, ledger, report)
    })
    .await
    .map_err(|e| LoadError::Other(format!("the checker panicked: {e}")))?;
    let faults = lock(&shared.faults).clone();
    Ok(RunOutcome {
        summary: RunSummary {
            runners: config.runners,
            seed: config.seed,
            lease_ttl_ms: config.lease_ttl.as_millis(),
            faults_on: {
                let mut names = config.faults.names();
                names.extend(fault_names);
                names
            },
            faults_injected: faults.total(),
            faults,
            load_seconds,
            check_seconds: check_started.elapsed().as_secs_f64(),
            report,
        },
        history,
        ledger,
    })
}

/// Submit `n` jobs, 8 at a time (a submission over HTTP stores a source snapshot).
async fn submit(shared: &Arc<Shared>, n: usize) {
    let lanes: Vec<JoinHandle<()>> = (0..8.min(n))
        .map(|lane| {
            let shared = shared.clone();
            tokio::spawn(async move {
                for _ in (lane..n).step_by(8) {
                    let _ = shared.rec.submit(&shared.reader, shared.project).await;
                }
            })
        })
        .collect();
    for lane in lanes {
        let _ = lane.await;
    }
}

async fn submitter(shared: Arc<Shared>) {
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if shared.stopping() {
            continue;
        }
        // The queue as it is (claims whose answer was lost, or that a proxy delivered twice,
        // take jobs no runner counted).
        let queued: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE project_id = $1 AND state = 'queued'",
        )
        .bind(shared.project.0)
        .fetch_one(shared.reader.pool())
        .await;
        let backlog = match queued {
            Ok(queued) => usize::try_from(queued).unwrap_or(0),
            Err(_) => continue,
        };
        if backlog < shared.config.runners * 2 {
            submit(&shared, shared.config.runners).await;
        }
    }
}

fn spawn_runner(shared: &Arc<Shared>, index: usize, runner: RunnerId, life: u64) -> JoinHandle<()> {
    let seed = shared
        .config
        .seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((index as u64) << 20)
        .wrapping_add(life);
    tokio::spawn(runner_loop(shared.clone(), index, runner, seed))
}

async fn runner_loop(shared: Arc<Shared>, index: usize, runner: RunnerId, seed: u64) {
    let client = format!("runner-{index}");
    let mut rng = SplitMix64::new(seed);
    while !shared.stopping() {
        *lock(&shared.claiming).entry(runner).or_insert(0) += 1;
        let claimed = shared
            .rec
            .claim(&client, runner, shared.runner_time(index))
            .await;
        let lease = match &claimed {
            Ok(Verdict::Accepted(lease)) => {
                shared.set_exec(lease.tuple.attempt, runner, Exec::Executing);
                Some(lease.clone())
            }
            _ => None,
        };
        if let Some(n) = lock(&shared.claiming).get_mut(&runner) {
            *n = n.saturating_sub(1);
        }
        match lease {
            Some(lease) => {
                {
                    let mut recent = lock(&shared.recent_jobs);
                    recent.push(lease.tuple.job);
                    if recent.len() > 64 {
                        recent.remove(0);
                    }
                }
                execute(&shared, index, &client, &lease.tuple, &mut rng).await;
            }
            None => {
                // No work (or no answer): wait before asking again.
                let wait = if claimed.is_err() {
                    50
                } else {
                    10 + rng.below(30) as u64
                };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
}

/// What a heartbeat or rejoin told the runner.
enum Told {
    Continue,
    Cancel,
    Stop,
    Unreachable,
}

async fn beat(
    shared: &Arc<Shared>,
    index: usize,
    client: &str,
    tuple: &imp::Tuple,
    rejoin: bool,
    rng: &mut SplitMix64,
) -> Told {
    let duplicate = chance(rng, shared.config.duplicate_percent);
    if chance(rng, shared.config.late_percent) {
        late_copy(shared, index, tuple, None, rng);
    }
    if chance(rng, shared.config.forge_percent) {
        let mut forged = *tuple;
        match rng.below(3) {
            0 => forged.fence += 1,
            1 => forged.lease_id = imp::LeaseId::new_random(),
            _ => forged.attempt = AttemptId::new_random(),
        }
        let runner_time = shared.runner_time(index);
        if chance(rng, 50) {
            let _ = shared.rec.heartbeat("forger", &forged, runner_time).await;
        } else {
            let digest = digest(forged.attempt, Outcome::Passed);
            let _ = shared
                .rec
                .result("forger", &forged, Outcome::Passed, &digest, runner_time)
                .await;
        }
    }
    if rejoin {
        let call = || shared.rec.rejoin(client, tuple, shared.runner_time(index));
        let answer = if duplicate {
            tokio::join!(call(), call()).0
        } else {
            call().await
        };
        return match answer {
            Ok(RejoinAnswer::Continue) => Told::Continue,
            Ok(RejoinAnswer::Cancel) => Told::Cancel,
            Ok(RejoinAnswer::Stop(_)) => Told::Stop,
            Err(_) => Told::Unreachable,
        };
    }
    let call = || {
        shared
            .rec
            .heartbeat(client, tuple, shared.runner_time(index))
    };
    let answer = if duplicate {
        tokio::join!(call(), call()).0
    } else {
        call().await
    };
    match answer {
        Ok(Verdict::Accepted(answer)) if answer.cancel_requested => Told::Cancel,
        Ok(Verdict::Accepted(_)) => Told::Continue,
        Ok(_) => Told::Stop,
        Err(_) => Told::Unreachable,
    }
}

/// A copy of a heartbeat (or result) that arrives after the lease is over.
fn late_copy(
    shared: &Arc<Shared>,
    index: usize,
    tuple: &imp::Tuple,
    outcome: Option<Outcome>,
    rng: &mut SplitMix64,
) {
    let delay = scaled(shared.config.lease_ttl, 120, 250, rng);
    let shared = shared.clone();
    let tuple = *tuple;
    shared.late_in_flight.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let runner_time = shared.runner_time(index);
        match outcome {
            Some(outcome) => {
                let digest = digest(tuple.attempt, outcome);
                let _ = shared
                    .rec
                    .result("late", &tuple, outcome, &digest, runner_time)
                    .await;
            }
            None => {
                let _ = shared.rec.heartbeat("late", &tuple, runner_time).await;
            }
        }
        shared.late_in_flight.fetch_sub(1, Ordering::SeqCst);
    });
}

async fn execute(
    shared: &Arc<Shared>,
    index: usize,
    client: &str,
    tuple: &imp::Tuple,
    rng: &mut SplitMix64,
) {
    let ttl = shared.config.lease_ttl;
    let beats = rng.below(4);
    let mut outcome = if chance(rng, 80) {
        Outcome::Passed
    } else {
        Outcome::Failed
    };
    let mut stopped = false;
    for _ in 0..beats {
        let pause = chance(rng, shared.config.pause_percent);
        let delay = if pause {
            scaled(ttl, 110, 200, rng)
        } else {
            scaled(ttl, 10, 35, rng)
        };
        tokio::time::sleep(delay).await;
        // After a pause a runner that noticed it lost contact rejoins; one that was merely slow
        // (a stalled process) just heartbeats.
        let rejoin = pause && chance(rng, 50);
        let mut told = beat(shared, index, client, tuple, rejoin, rng).await;
        // Lost contact: rejoin with the original tuple, a few times.
        let mut tries = 0;
        while matches!(told, Told::Unreachable) && tries < 3 {
            tries += 1;
            tokio::time::sleep(scaled(ttl, 5, 20, rng)).await;
            told = beat(shared, index, client, tuple, true, rng).await;
        }
        match told {
            Told::Continue => {}
            Told::Cancel => {
                outcome = Outcome::Cancelled;
                break;
            }
            Told::Stop | Told::Unreachable => {
                stopped = true;
                break;
            }
        }
    }
    let runner = tuple.runner;
    if stopped {
        // Told to stop (or cut off): kill the execution, report what was observed. The server
        // keeps it as a late observation.
        shared.set_exec(tuple.attempt, runner, Exec::Stopped);
        let digest = digest(tuple.attempt, Outcome::Failed);
        let _ = shared
            .rec
            .result(
                client,
                tuple,
                Outcome::Failed,
                &digest,
                shared.runner_time(index),
            )
            .await;
        return;
    }
    if outcome != Outcome::Cancelled {
        tokio::time::sleep(scaled(ttl, 5, 30, rng)).await;
    }
    shared.set_exec(tuple.attempt, runner, Exec::Finished(outcome));
    let digest = digest(tuple.attempt, outcome);
    let duplicate = chance(rng, shared.config.duplicate_percent);
    if chance(rng, shared.config.late_percent) {
        late_copy(shared, index, tuple, Some(outcome), rng);
    }
    for attempt in 0..5 {
        let call = || {
            shared
                .rec
                .result(client, tuple, outcome, &digest, shared.runner_time(index))
        };
        let answer = if duplicate && attempt == 0 {
            tokio::join!(call(), call()).0
        } else {
            call().await
        };
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(scaled(ttl, 10, 30, rng)).await;
    }
    if chance(rng, 3) && outcome != Outcome::Cancelled {
        let conflicting = if outcome == Outcome::Passed {
            Outcome::Failed
        } else {
            Outcome::Passed
        };
        let conflicting_digest = self::digest(tuple.attempt, conflicting);
        let _ = shared
            .rec
            .result(
                client,
                tuple,
                conflicting,
                &conflicting_digest,
                shared.runner_time(index),
            )
            .await;
    }
}

async fn sweeper(shared: Arc<Shared>) {
    let mut rng = SplitMix64::new(shared.config.seed ^ 0x5eed_5eee);
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(scaled(shared.config.lease_ttl, 15, 35, &mut rng)).await;
        if let Ok(imp::SweepVerdict::Uncertain(jobs)) = shared.rec.sweep("sweeper").await {
            lock(&shared.uncertain).extend(jobs);
        }
    }
}

async fn operator(shared: Arc<Shared>) {
    let mut rng = SplitMix64::new(shared.config.seed ^ 0x0be7_a70e);
    let store = shared.reader.clone();
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(scaled(shared.config.lease_ttl, 15, 35, &mut rng)).await;
        if chance(&mut rng, shared.config.cancel_percent) {
            let job = {
                let recent = lock(&shared.recent_jobs);
                // The most recently claimed jobs: most likely still running.
                let k = recent.len().min(8);
                (k > 0).then(|| recent[recent.len() - 1 - rng.below(k)])
            };
            if let Some(job) = job {
                let _ = shared.rec.cancel("operator", job).await;
            }
        }
        let pending: Vec<JobId> = lock(&shared.uncertain).iter().copied().collect();
        for job in pending {
            let Ok(Some(view)) = store.job(job).await else {
                continue;
            };
            if view.state != imp::JobState::Uncertain {
                lock(&shared.uncertain).remove(&job);
                continue;
            }
            let Some(current) = view.current_attempt else {
                continue;
            };
            let Ok(attempts) = store.attempts(job).await else {
                continue;
            };
            let Some(attempt) = attempts.iter().find(|a| a.id == current) else {
                continue;
            };
            let known = lock(&shared.executions).get(&current).map(|(_, e)| *e);
            let exec = match known {
                Some(exec) => exec,
                None => {
                    let claiming = lock(&shared.claiming)
                        .get(&attempt.runner)
                        .copied()
                        .unwrap_or(0);
                    if claiming > 0 {
                        continue; // its answer may still be on its way to the runner
                    }
                    Exec::Stopped // the claim's answer was lost: it never started
                }
            };
            let (finding, decision) = match exec {
                Exec::Executing => {
                    if chance(&mut rng, 10) {
                        (Finding::StillRunning, Decision::Abort)
                    } else {
                        continue;
                    }
                }
                Exec::Stopped | Exec::Finished(Outcome::Cancelled) => {
                    let decision = if view.cancel_requested {
                        if chance(&mut rng, 10) {
                            Decision::Retry // refused: cancel_requested
                        } else {
                            Decision::Abort
                        }
                    } else if attempts.len() >= shared.config.max_attempts {
                        Decision::Abort
                    } else {
                        match rng.below(100) {
                            0..75 => Decision::Retry,
                            75..95 => Decision::Abort,
                            _ => Decision::Adopt, // refused: nothing_to_adopt
                        }
                    };
                    (Finding::Stopped, decision)
                }
                Exec::Finished(outcome) => {
                    let finding = if outcome == Outcome::Passed {
                        Finding::ObservedPassed
                    } else {
                        Finding::ObservedFailed
                    };
                    let decision = if view.cancel_requested {
                        Decision::Abort
                    } else if attempts.len() >= shared.config.max_attempts {
                        Decision::Adopt
                    } else {
                        match rng.below(100) {
                            0..40 => Decision::Retry,
                            40..60 => Decision::Abort,
                            _ => Decision::Adopt,
                        }
                    };
                    (finding, decision)
                }
            };
            match shared
                .rec
                .reconcile("operator", job, finding, decision)
                .await
            {
                Ok(Verdict::Accepted(())) => {
                    lock(&shared.uncertain).remove(&job);
                }
                Ok(Verdict::Rejected(
                    Reason::ExecutionNotStopped | Reason::NothingToAdopt | Reason::CancelRequested,
                )) => {}
                Ok(_) => {
                    lock(&shared.uncertain).remove(&job);
                }
                Err(_) => {}
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Faults.

async fn kill_connections(shared: Arc<Shared>, url: String, every: Duration) {
    let mut rng = SplitMix64::new(shared.config.seed ^ 0x0c0f_fee0);
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(scaled(every, 50, 150, &mut rng)).await;
        if shared.stop_background.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut admin) = sqlx::PgConnection::connect(&url).await else {
            continue;
        };
        // A kill lands while some call is in flight: the admin connection polls (for at most
        // `every`) until a client backend is running a statement or sits in a transaction, then
        // terminates every client backend in the same statement. Killing only idle connections
        // would test nothing (the pool replaces them before handing them out), and how often a
        // blind kill finds a call in flight depends on the machine's speed.
        let deadline = tokio::time::Instant::now() + every;
        let killed: Result<i64, _> = loop {
            let killed: Result<i64, _> = sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND backend_type = 'client backend' \
                 AND EXISTS (SELECT 1 FROM pg_stat_activity AS busy \
                     WHERE busy.datname = current_database() AND busy.pid <> pg_backend_pid() \
                     AND busy.backend_type = 'client backend' AND busy.state <> 'idle')) AS killed",
            )
            .fetch_one(&mut admin)
            .await;
            let done = shared.stop_background.load(Ordering::SeqCst)
                || tokio::time::Instant::now() >= deadline;
            match killed {
                Ok(0) if !done => tokio::time::sleep(Duration::from_millis(1)).await,
                other => break other,
            }
        };
        let _ = admin.close().await;
        if let Ok(killed) = killed {
            let mut faults = lock(&shared.faults);
            faults.connection_kills += 1;
            faults.connections_killed += killed.max(0) as u64;
        }
    }
}

async fn kill_runners(shared: Arc<Shared>, every: Duration) {
    let mut rng = SplitMix64::new(shared.config.seed ^ 0x0dea_d000);
    let mut life = 1;
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(scaled(every, 50, 150, &mut rng)).await;
        if shared.stopping() {
            continue;
        }
        let index = rng.below(shared.runners.len());
        let runner = shared.runners[index];
        let handle = lock(&shared.slots)[index].take();
        let Some(handle) = handle else { continue };
        handle.abort();
        let _ = handle.await;
        // The process is gone: so is every execution it ran.
        for (r, exec) in lock(&shared.executions).values_mut() {
            if *r == runner && *exec == Exec::Executing {
                *exec = Exec::Stopped;
            }
        }
        lock(&shared.claiming).remove(&runner);
        lock(&shared.faults).runner_kills += 1;
        // A new process of the same runner (it knows nothing of the old one's leases).
        tokio::time::sleep(scaled(shared.config.lease_ttl, 10, 50, &mut rng)).await;
        life += 1;
        let mut slots = lock(&shared.slots);
        if !shared.stopping() {
            slots[index] = Some(spawn_runner(&shared, index, runner, life));
        }
    }
}

async fn restart_postgres(
    shared: Arc<Shared>,
    cluster: Arc<imp::database::Cluster>,
    every: Duration,
) {
    let mut rng = SplitMix64::new(shared.config.seed ^ 0x9e57_a27e);
    while !shared.stop_background.load(Ordering::SeqCst) {
        tokio::time::sleep(scaled(every, 70, 130, &mut rng)).await;
        if shared.stop_background.load(Ordering::SeqCst) {
            break;
        }
        let cluster = cluster.clone();
        let restarted = tokio::task::spawn_blocking(move || cluster.restart()).await;
        match restarted {
            Ok(Ok(())) => lock(&shared.faults).postgres_restarts += 1,
            Ok(Err(error)) => eprintln!("restarting PostgreSQL failed: {error}"),
            Err(error) => eprintln!("restarting PostgreSQL panicked: {error}"),
        }
    }
}
