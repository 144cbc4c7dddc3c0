//! The runner agent (`leasewright runner`): claims jobs, verifies their immutable source, runs
//! their shell command in an isolated workspace, streams the logs, heartbeats, uploads the
//! declared artifacts and reports the result.
//!
//! The agent decides nothing about ownership: it obeys the server's verdicts. A rejection of any
//! call about a lease (its tuple is no longer current, its lease expired) makes it kill the
//! command and report what it observed (kept by the server as a late observation). After a
//! network loss it rejoins with its original tuple and obeys the instruction (`continue`,
//! `cancel`, `stop`).
//!
//! It rides out an outage of the control plane or its database (docs/http.md, "The runner"):
//! heartbeats go out every sixth of the lease TTL, and a heartbeat that gets no decision is
//! retried with backoff (honouring `Retry-After`) for as long as the lease can still be valid by
//! the runner's own conservative reckoning: the TTL measured from when the last accepted claim
//! or heartbeat was *sent*, on the runner's monotonic clock (never the runner's wall clock
//! against the server's). Log chunks, artifacts and the result are kept and retried until the
//! server decides them, the result even past that reckoning (an identical committed result is
//! `acknowledged`; a late one is kept as evidence). When the lease runs out by that reckoning with
//! no decision at all (an outage longer than the lease), the runner stops the work itself, as a
//! rejection would make it: docs/protocol.md §12 relies on it after a failover that forgot a claim.

use crate::client::{CallError, RunnerClient};
use crate::source::{self, Limits};
use crate::wire::{LeaseBody, ResultAnswer, TupleBody, VerdictResponse};
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::time::Instant;

/// A future the agent's clock hands out (`Send`, owning what it needs).
pub type ClockFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The runner's own sense of time, injected as the server's `Clock` is: monotonic, never compared
/// with the server's. Every wait of the agent goes through it (heartbeat intervals, backoffs,
/// idle claim polls, each request's limit and the lease's end by the runner's reckoning), so a
/// test that holds a [`ManualAgentClock`] decides when the runner's lease runs out.
pub trait AgentClock: Send + Sync + 'static {
    /// Now, on the runner's monotonic clock.
    fn now(&self) -> Instant;
    /// A future that completes once [`AgentClock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Instant) -> ClockFuture;
    /// A future that completes once `duration` has passed from now.
    fn sleep(&self, duration: Duration) -> ClockFuture {
        self.sleep_until(self.now() + duration)
    }
}

/// The production clock: tokio's monotonic time.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemAgentClock;

impl AgentClock for SystemAgentClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> ClockFuture {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// A clock that stands still until a test moves it (tests only: nothing in the binary builds
/// one). It starts at the instant it was made, and knows the deadline of every wait on it that
/// has not ended yet, so that a test can let the agent act on each deadline it moved the clock
/// past before moving it again ([`ManualAgentClock::due`]).
#[derive(Debug)]
pub struct ManualAgentClock {
    start: Instant,
    elapsed: watch::Sender<Duration>,
    waits: Arc<Mutex<Waits>>,
}

/// The deadlines (from the clock's start) of the waits that have not ended, by a number each.
#[derive(Debug, Default)]
struct Waits {
    next: u64,
    pending: std::collections::BTreeMap<u64, Duration>,
}

/// A wait's place in [`Waits`], given up when the wait ends or is dropped.
struct Pending {
    waits: Arc<Mutex<Waits>>,
    id: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.waits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .remove(&self.id);
    }
}

impl ManualAgentClock {
    /// A clock standing at the instant it was made.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            elapsed: watch::channel(Duration::ZERO).0,
            waits: Arc::default(),
        })
    }

    /// How far the clock has been moved.
    pub fn elapsed(&self) -> Duration {
        *self.elapsed.borrow()
    }

    /// Moves the clock forward by `by` (never back).
    pub fn advance(&self, by: Duration) {
        self.elapsed.send_modify(|elapsed| *elapsed += by);
    }

    /// Moves the clock to `elapsed` after its start, if that is later than where it stands.
    pub fn advance_to(&self, elapsed: Duration) {
        self.elapsed.send_if_modified(|current| {
            let later = elapsed > *current;
            if later {
                *current = elapsed;
            }
            later
        });
    }

    /// The deadlines (from the clock's start) of the waits not ended yet, earliest first.
    pub fn pending(&self) -> Vec<Duration> {
        let waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        let mut pending: Vec<Duration> = waits.pending.values().copied().collect();
        pending.sort();
        pending
    }

    /// How many waits the clock has reached that have not ended yet: their tasks have still to
    /// run. Zero once the agent has acted on every deadline the clock was moved past (a wait it
    /// starts in doing so is on the clock as it stands).
    pub fn due(&self) -> usize {
        let now = self.elapsed();
        self.pending().iter().filter(|&&at| at <= now).count()
    }
}

impl AgentClock for ManualAgentClock {
    fn now(&self) -> Instant {
        self.start + *self.elapsed.borrow()
    }

    fn sleep_until(&self, deadline: Instant) -> ClockFuture {
        let start = self.start;
        let mut elapsed = self.elapsed.subscribe();
        let pending = {
            let mut waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
            let id = waits.next;
            waits.next += 1;
            waits
                .pending
                .insert(id, deadline.saturating_duration_since(start));
            Pending {
                waits: self.waits.clone(),
                id,
            }
        };
        Box::pin(async move {
            let _pending = pending;
            // The sender lives as long as the clock; a dropped clock never wakes anyone.
            let _ = elapsed
                .wait_for(|elapsed| start + *elapsed >= deadline)
                .await;
            if start + *elapsed.borrow() < deadline {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The runner's duties broken on purpose, one at a time (feature `mutants` only; docs/runner-suite.md):
/// each named mutant is the flaw issue 40 found, and `leasewright runner-suite` must fail on it.
/// Chosen by `LEASEWRIGHT_AGENT_MUTANT=NAME` in a build with the feature; without the feature
/// [`mutant`] is the constant `false` and no mutant exists in the binary.
pub const AGENT_MUTANTS: &[&str] = &[
    // The lease reckoned from when the heartbeat's answer came, not when it was sent.
    "reckon-from-answer",
    // A 401 on a message about a held lease logged and ignored.
    "ignore-401",
    // The runner returns on a shutdown or a fatal claim error without stopping its commands.
    "exit-with-live-command",
    // A heartbeat is cut only by the request timeout and a third of the TTL, not at the lease's end.
    "request-not-cut",
    // A renewal's rejoin limited by the time the lease had left before it waited for another
    // call's rejoin, not when it goes out.
    "limit-before-wait",
];

#[cfg(feature = "mutants")]
fn mutant(name: &str) -> bool {
    debug_assert!(AGENT_MUTANTS.contains(&name));
    std::env::var("LEASEWRIGHT_AGENT_MUTANT").is_ok_and(|chosen| chosen == name)
}

#[cfg(not(feature = "mutants"))]
const fn mutant(_name: &str) -> bool {
    false
}

/// backon's waits on the agent's clock.
struct ClockSleeper(Arc<dyn AgentClock>);

impl backon::Sleeper for ClockSleeper {
    type Sleep = ClockFuture;

    fn sleep(&self, wait: Duration) -> ClockFuture {
        self.0.sleep(wait)
    }
}

/// `call`, cut after `limit` on `clock` (a cut call got no answer: `CallError::Network`).
fn cut<T, F>(
    clock: &dyn AgentClock,
    limit: Duration,
    call: F,
) -> impl Future<Output = Result<T, CallError>>
where
    F: Future<Output = Result<T, CallError>>,
{
    // The deadline is taken now, and the future borrows no clock.
    let deadline = clock.sleep(limit);
    async move {
        tokio::select! {
            answer = call => answer,
            () = deadline => Err(timed_out(limit)),
        }
    }
}

/// A request the runner cut after `limit`: it got no answer.
fn timed_out(limit: Duration) -> CallError {
    CallError::Network(format!(
        "timed out: no answer within {} ms (the runner's request timeout, or the time left on its lease)",
        limit.as_millis()
    ))
}

/// How the agent behaves. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct AgentConfig {
    /// The control plane's base URL.
    pub server: String,
    /// The runner's bearer token (never logged).
    pub token: String,
    /// How many jobs at once.
    pub capacity: u32,
    /// Where the per-lease workspaces live.
    pub workdir: PathBuf,
    /// The base URL of the deployment targets given to commands (default: `server`).
    pub target_url: Option<String>,
    /// How long to wait after a claim that found no work (or failed); the wait doubles, with
    /// jitter, after each further empty claim, up to `max_poll_interval`, and starts again at
    /// this after a claim that got work.
    pub poll_interval: Duration,
    /// The longest wait between claims when there is no work.
    pub max_poll_interval: Duration,
    /// The timeout of one HTTP call.
    pub request_timeout: Duration,
    /// Extraction limits.
    pub limits: Limits,
    /// Stop after this many jobs have finished (tests, one-shot use).
    pub max_jobs: Option<usize>,
    /// The runner's clock ([`SystemAgentClock`] unless a test injects another).
    pub clock: Arc<dyn AgentClock>,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("server", &self.server)
            .field("token", &"<redacted>")
            .field("capacity", &self.capacity)
            .field("workdir", &self.workdir)
            .field("target_url", &self.target_url)
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// The defaults for `server` and `token`.
    pub fn new(server: &str, token: &str, workdir: PathBuf) -> Self {
        Self {
            server: server.to_owned(),
            token: token.to_owned(),
            capacity: 1,
            workdir,
            target_url: None,
            poll_interval: Duration::from_millis(500),
            max_poll_interval: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            max_jobs: None,
            clock: Arc::new(SystemAgentClock),
        }
    }
}

/// Why a job's execution must stop before its command ends.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stop {
    /// The server requested cancellation: stop and report `cancelled`.
    Cancel,
    /// A call was rejected with this reason (or a rejoin answered `stop`): stop, report what was
    /// observed.
    Revoked(String),
}

/// The reason the runner gives itself when its lease ran out, by its own reckoning, with no
/// renewal and no decision from the control plane (an outage longer than the lease): not a
/// protocol reason code, only the runner's log line.
const LEASE_RAN_OUT: &str = "lease ran out without renewal";

/// The reason the runner gives itself when the control plane refused its token (`401`) on a
/// message about a lease it holds: the lease can no longer be renewed or reported, so the work
/// stops at once, as on a rejection (docs/protocol.md §6.4, "401").
const UNAUTHORIZED: &str = "unauthorized (401): the runner's token was refused";

/// The reason the runner gives itself when it shuts down (SIGTERM, SIGINT, a fatal claim error)
/// while the job runs: it never leaves a command running behind it.
const SHUTTING_DOWN: &str = "the runner is shutting down";

/// What every task of one job shares.
struct JobContext {
    client: RunnerClient,
    lease: LeaseBody,
    /// The runner's clock: every wait and every lease reckoning of this job.
    clock: Arc<dyn AgentClock>,
    /// The longest any one request may take (`AgentConfig::request_timeout`).
    request_timeout: Duration,
    stop_tx: watch::Sender<Option<Stop>>,
    /// `false` after a network error, until a rejoin answers.
    connected_tx: watch::Sender<bool>,
    /// Set once the result is being reported: a heartbeat's rejection then stops the
    /// heartbeats quietly (the result's own answer decides; a result that commits ends the
    /// lease, and a heartbeat racing it is told `job_finished`).
    reporting: AtomicBool,
    /// Held while a rejoin is in flight: the job's tasks rejoin once, not each on its own.
    rejoining: tokio::sync::Mutex<()>,
    /// The runner's conservative reckoning of the lease's end: when the last accepted claim or
    /// heartbeat was sent, plus the TTL. The server granted `its receipt time + TTL`, and it
    /// received the request after it was sent, so the lease cannot end before this instant
    /// (monotonic time on the runner alone: the server's clock stays the authority).
    lease_end: Mutex<Instant>,
}

/// Exponential backoff with jitter (backon): steps of `first` doubling up to `longest`, each wait
/// drawn from the upper half of its step, so that runners cut off together do not all come back
/// at once. backon adds its jitter above the delay (`[d, 2d)`), so its delays are half steps.
fn backoff(first: Duration, longest: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first / 2)
        .with_max_delay(longest.max(first) / 2)
        .with_jitter()
        .without_max_times()
}

/// The waits between retries of a message about a lease: 100 ms doubling up to 5 s.
fn delivery_backoff() -> ExponentialBuilder {
    backoff(Duration::from_millis(100), Duration::from_secs(5))
}

/// How often a lease of `ttl` is renewed: every sixth of it (5 s for the default 30 s), so that
/// a heartbeat that gets no decision leaves five more intervals of retries before the lease can
/// end.
pub fn heartbeat_interval(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(50))
}

/// The waits between retries of a heartbeat: 100 ms (less for very short leases) doubling up to
/// the heartbeat interval.
fn heartbeat_backoff(ttl: Duration) -> ExponentialBuilder {
    let interval = heartbeat_interval(ttl);
    backoff(Duration::from_millis(100).min(interval / 4), interval)
}

/// The wait before the next retry: the backoff's, or longer when the answer said `Retry-After`.
fn honour_retry_after(error: &CallError, backoff: Duration) -> Duration {
    error
        .retry_after()
        .map_or(backoff, |asked| asked.max(backoff))
}

impl JobContext {
    fn tuple(&self) -> TupleBody {
        self.lease.tuple(Some(chrono::Utc::now()))
    }

    fn stop(&self, stop: Stop) {
        self.stop_tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(stop);
                true
            } else {
                false
            }
        });
    }

    fn stopped(&self) -> Option<Stop> {
        self.stop_tx.borrow().clone()
    }

    /// Classify a failed call: a transient failure (no answer, `503`, ...) marks the lease
    /// disconnected, so the next call rejoins first; rejections stop.
    fn on_error(&self, what: &str, error: &CallError) {
        match error {
            error if error.is_transient() => {
                tracing::warn!(job = %self.lease.job, what, %error, "no decision from the control plane");
                self.connected_tx.send_replace(false);
            }
            CallError::Rejected { code, .. } => {
                tracing::warn!(job = %self.lease.job, what, %code, "rejected");
                if code == "cancel_requested" {
                    self.stop(Stop::Cancel);
                } else {
                    self.stop(Stop::Revoked(code.clone()));
                }
            }
            CallError::Http { status: 401, .. } if !mutant("ignore-401") => {
                // The token was refused: nothing about this lease can be renewed or reported
                // any more, so it is over for this runner, as on a rejection.
                tracing::warn!(job = %self.lease.job, what, "the runner's token was refused (401): stopping the work");
                self.stop(Stop::Revoked(UNAUTHORIZED.to_owned()));
            }
            other => tracing::warn!(job = %self.lease.job, what, %other, "call failed"),
        }
    }

    /// The most a request about the lease may take: the request timeout, cut at the lease's end
    /// by the runner's own reckoning while the lease lasts, so that no request outlives the
    /// lease (afterwards, for the result and the logs still to deliver, the request timeout).
    fn request_limit(&self) -> Duration {
        let left = self.lease_left();
        if left.is_zero() {
            self.request_timeout
        } else {
            self.request_timeout.min(left)
        }
    }

    /// After lost contact: rejoin with the original tuple and obey (`continue`, `cancel`, or
    /// `stop`). Nothing when connected. When the rejoin itself gets no decision the lease stays
    /// disconnected (the next call tries again) and its error is returned.
    async fn rejoin_if_disconnected(&self) -> Result<(), CallError> {
        self.rejoin_within(None).await
    }

    /// [`JobContext::rejoin_if_disconnected`], for a renewal of a lease of `renewal_ttl` when
    /// given: the rejoin then takes at most [`renewal_limit`]. Each limit is taken once the
    /// rejoin holds the lock, as it goes out: a limit taken before would let a renewal that waited
    /// for another call's rejoin (a log append's, cut at the lease's end) send its own with the
    /// time the lease had left before that wait, and outlive the lease.
    async fn rejoin_within(&self, renewal_ttl: Option<Duration>) -> Result<(), CallError> {
        let early = renewal_ttl
            .filter(|_| mutant("limit-before-wait"))
            .map(|ttl| renewal_limit(self, ttl));
        let _one_at_a_time = self.rejoining.lock().await;
        if *self.connected_tx.borrow() {
            return Ok(());
        }
        let limit = early.unwrap_or_else(|| {
            renewal_ttl.map_or_else(|| self.request_limit(), |ttl| renewal_limit(self, ttl))
        });
        match cut(&*self.clock, limit, self.client.rejoin(&self.tuple())).await {
            Ok(answer) => {
                tracing::info!(job = %self.lease.job, instruction = %answer.instruction, "rejoined");
                if answer.instruction == "cancel" {
                    self.stop(Stop::Cancel);
                }
                self.connected_tx.send_replace(true);
                Ok(())
            }
            Err(CallError::Rejected { code, .. }) => {
                tracing::warn!(job = %self.lease.job, %code, "rejoin answered stop");
                self.stop(Stop::Revoked(code));
                self.connected_tx.send_replace(true);
                Ok(())
            }
            Err(error) => {
                self.on_error("rejoin", &error);
                Err(error)
            }
        }
    }

    /// The lease was renewed by a request sent at `sent` (on the runner's clock): the lease
    /// cannot end before `sent + TTL`, since the server received the request after it was sent.
    /// Never the instant the answer came: a late answer would stretch the lease past the
    /// server's (docs/protocol.md §6.4, "accepted").
    fn renewed(&self, sent: Instant) {
        let ttl = Duration::from_millis(self.lease.lease_ttl_ms);
        let mut end = self
            .lease_end
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *end = (*end).max(sent + ttl);
    }

    /// How long the lease can still be valid by the runner's conservative reckoning.
    fn lease_left(&self) -> Duration {
        self.lease_end
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saturating_duration_since(self.clock.now())
    }

    /// Send a message about the lease until the server decides it: a transient failure (no
    /// answer, a timeout, `5xx`, `408`, `429`) is retried (every runner message is idempotent:
    /// the same tuple and content again is `acknowledged` if the first one committed) after a
    /// backoff with jitter, or the answer's `Retry-After` if longer, and a rejoin. There is no
    /// deadline: log chunks, artifacts and the result are delivered after an outage however long
    /// (the result even after the lease ran out: it is then acknowledged if it committed, or
    /// kept as a late observation). The answer, or the error that is a decision (a rejection,
    /// another 4xx).
    async fn deliver<T, F, Fut>(&self, what: &str, call: F) -> Result<T, CallError>
    where
        F: Fn(TupleBody) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let call = &call;
        let clock = self.clock.clone();
        (|| async move {
            // The rejoin's own failure changes nothing here: the call goes out and decides.
            let _ = self.rejoin_if_disconnected().await;
            let limit = self.request_limit();
            let deadline = self.clock.sleep(limit);
            tokio::select! {
                answer = call(self.tuple()) => answer,
                () = deadline => Err(timed_out(limit)),
            }
        })
        .retry(delivery_backoff())
        .sleep(ClockSleeper(clock))
        .when(CallError::is_transient)
        .adjust(|error, wait| wait.map(|wait| honour_retry_after(error, wait)))
        .notify(|error, _| self.on_error(what, error))
        .await
        .inspect_err(|error| self.on_error(what, error))
    }
}

/// A result waiting to be sent, and where its answer goes.
struct PendingResult {
    tuple: TupleBody,
    outcome: &'static str,
    result_digest: String,
    answer: oneshot::Sender<Result<VerdictResponse, CallError>>,
}

/// Sends the results of jobs that finish at about the same time together: whatever is waiting
/// when the sender is free goes out as one batch result (`POST /v1/runner/results`, one database
/// statement for every accepted item), a lone result as a single one. Each job still gets its own
/// answer, the same as a single result's (a rejection is `CallError::Rejected` with its code), and
/// retries it through `JobContext::deliver` as before: every item is idempotent.
#[derive(Clone)]
struct ResultSender {
    tx: mpsc::UnboundedSender<PendingResult>,
}

impl ResultSender {
    fn spawn(client: RunnerClient) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<PendingResult>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < crate::app::MAX_RESULTS_PER_BATCH {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                send_results(&client, batch).await;
            }
        });
        Self { tx }
    }

    async fn send(
        &self,
        tuple: TupleBody,
        outcome: &'static str,
        result_digest: &str,
    ) -> Result<VerdictResponse, CallError> {
        let (answer, answered) = oneshot::channel();
        let pending = PendingResult {
            tuple,
            outcome,
            result_digest: result_digest.to_owned(),
            answer,
        };
        if self.tx.send(pending).is_err() {
            return Err(CallError::Network("the result sender stopped".into()));
        }
        answered
            .await
            .unwrap_or_else(|_| Err(CallError::Network("the result sender stopped".into())))
    }
}

/// One batch: a lone result as a single result; several as a batch result, whose per-item
/// answers become what a single result would have answered. When the batch call itself gets no
/// decision, each item is sent alone, so that each job sees its own error and retries.
async fn send_results(client: &RunnerClient, mut batch: Vec<PendingResult>) {
    if batch.len() > 1 {
        let items: Vec<(TupleBody, String, String)> = batch
            .iter()
            .map(|p| (p.tuple, p.outcome.to_owned(), p.result_digest.clone()))
            .collect();
        if let Ok(answers) = client.results(&items).await {
            if answers.len() == batch.len() {
                tracing::debug!(items = batch.len(), "batch result");
                for (pending, answer) in batch.into_iter().zip(answers) {
                    let _ = pending.answer.send(single_answer(answer));
                }
                return;
            }
        }
    }
    for pending in batch.drain(..) {
        let answer = client
            .result(&pending.tuple, pending.outcome, &pending.result_digest)
            .await;
        let _ = pending.answer.send(answer);
    }
}

/// A batch item's answer as the single result's: a rejection is `CallError::Rejected`.
fn single_answer(answer: ResultAnswer) -> Result<VerdictResponse, CallError> {
    match answer.reason {
        Some(code) => Err(CallError::Rejected {
            code,
            instruction: None,
        }),
        None => Ok(VerdictResponse {
            verdict: answer.verdict,
        }),
    }
}

/// Run the agent until `max_jobs` jobs finished (forever when `None`).
pub async fn run(config: AgentConfig) -> anyhow::Result<()> {
    run_until(config, std::future::pending()).await
}

/// What the jobs of one agent share with it: the signal to stop every job (a shutdown), and how
/// many commands it started are still running.
#[derive(Clone)]
struct Supervisor {
    shutdown: watch::Receiver<bool>,
    live_commands: Arc<watch::Sender<usize>>,
}

/// Run the agent until `max_jobs` jobs finished, or until `shutdown` completes (SIGTERM, SIGINT),
/// or a claim fails for good (`401`: the token was refused). However it ends, it never returns
/// while a command it started is running (docs/protocol.md §6.4, "shutdown"): it stops every
/// job's command first (killing its process group and reaping it), gives each job up to the
/// request timeout to report what it observed, and only then returns.
pub async fn run_until(
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let client = RunnerClient::new(&config.server, &config.token, config.request_timeout)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run_id = crate::app::random_token("run-")?[..16].to_owned();
    std::fs::create_dir_all(&config.workdir)?;
    let (stop_all, shutdown_rx) = watch::channel(false);
    let supervisor = Supervisor {
        shutdown: shutdown_rx,
        live_commands: Arc::new(watch::channel(0usize).0),
    };
    let mut tasks = tokio::task::JoinSet::new();
    let claimed = {
        let claims = claim_loop(&config, &client, &run_id, &supervisor, &mut tasks);
        tokio::pin!(claims);
        tokio::pin!(shutdown);
        tokio::select! {
            ended = &mut claims => ended,
            () = &mut shutdown => {
                tracing::info!("shutting down: stopping every job's command first");
                Ok(())
            }
        }
    };
    if mutant("exit-with-live-command") {
        return claimed;
    }
    // Stop every job still running; wait until no command of ours is left, then let the jobs
    // report (bounded: a control plane that is gone does not hold the process).
    stop_all.send_replace(true);
    let mut live = supervisor.live_commands.subscribe();
    let _ = live.wait_for(|live| *live == 0).await;
    let grace = config.clock.sleep(config.request_timeout);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            () = &mut grace => {
                tasks.shutdown().await;
                break;
            }
        }
    }
    claimed
}

/// Claim and start jobs until `max_jobs` were started and have finished; an error when a claim
/// fails for good (the token refused).
async fn claim_loop(
    config: &AgentConfig,
    client: &RunnerClient,
    run_id: &str,
    supervisor: &Supervisor,
    tasks: &mut tokio::task::JoinSet<()>,
) -> anyhow::Result<()> {
    let capacity = config.capacity.max(1);
    let slots = Arc::new(Semaphore::new(capacity as usize));
    let mut started = 0usize;
    let results = ResultSender::spawn(client.clone());
    tracing::info!(server = %config.server, capacity, %run_id, "runner started");
    // Claims that find no work back off from poll_interval to max_poll_interval.
    let idle_backoff = backoff(config.poll_interval, config.max_poll_interval);
    let mut idle = idle_backoff.build();
    let clock = config.clock.clone();
    loop {
        if let Some(max) = config.max_jobs {
            if started >= max {
                while tasks.join_next().await.is_some() {}
                return Ok(());
            }
        }
        // Wait for a free slot.
        let first = slots.clone().acquire_owned().await?;
        let free = slots.available_permits() as u32 + 1;
        let want = match config.max_jobs {
            Some(max) => free.min((max - started) as u32),
            None => free,
        }
        .min(crate::app::MAX_CLAIM_CAPACITY);
        let claim_sent = clock.now();
        match cut(&*clock, config.request_timeout, client.claim(want)).await {
            Ok(leases) if !leases.is_empty() => {
                idle = idle_backoff.build();
                let mut permit = Some(first);
                for lease in leases {
                    let slot = match permit.take() {
                        Some(slot) => slot,
                        None => slots.clone().acquire_owned().await?,
                    };
                    started += 1;
                    tracing::info!(job = %lease.job, attempt = %lease.attempt, fence = lease.fence, "claimed");
                    let job_client = client.clone();
                    let config = config.clone();
                    let run_id = run_id.to_owned();
                    let results = results.clone();
                    let supervisor = supervisor.clone();
                    tasks.spawn(async move {
                        run_job(
                            &config,
                            job_client,
                            &results,
                            &run_id,
                            lease,
                            claim_sent,
                            &supervisor,
                        )
                        .await;
                        drop(slot);
                    });
                }
            }
            Ok(_) => {
                drop(first);
                clock.sleep(idle.next().unwrap_or_default()).await;
            }
            Err(CallError::Http { status: 401, .. }) => {
                anyhow::bail!("the server refused the runner token (401)");
            }
            Err(error) => {
                drop(first);
                tracing::warn!(%error, "claim failed");
                clock.sleep(idle.next().unwrap_or_default()).await;
            }
        }
        while let Some(joined) = tasks.try_join_next() {
            if let Err(error) = joined {
                tracing::error!(%error, "a job task failed");
            }
        }
    }
}

/// The log pipeline: chunks in, sequence-numbered appends out, with idempotent retries.
struct LogSink {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    digest: Arc<Mutex<Sha256>>,
    /// Bytes queued and not yet uploaded (shared with the uploader).
    queued: Arc<AtomicUsize>,
    truncated: AtomicBool,
}

/// At most this much log waits for upload (e.g. while disconnected); beyond it output is dropped
/// and the log says so.
const MAX_QUEUED_LOG_BYTES: usize = 64 * 1024 * 1024;

/// How long a log chunk waits for more output before it is sent: what a follower of the log
/// waits at most beyond the upload itself.
const LOG_FLUSH_INTERVAL: Duration = Duration::from_millis(250);

impl LogSink {
    fn send(&self, chunk: Vec<u8>) {
        if self.queued.load(Ordering::SeqCst) + chunk.len() > MAX_QUEUED_LOG_BYTES {
            if !self.truncated.swap(true, Ordering::SeqCst) {
                let note = b"[leasewright] log output dropped: upload backlog full\n".to_vec();
                self.queue(note);
            }
            return;
        }
        self.truncated.store(false, Ordering::SeqCst);
        self.queue(chunk);
    }

    fn queue(&self, chunk: Vec<u8>) {
        self.digest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .update(&chunk);
        self.queued.fetch_add(chunk.len(), Ordering::SeqCst);
        let _ = self.tx.send(chunk);
    }

    fn line(&self, text: &str) {
        self.send(format!("[leasewright] {text}\n").into_bytes());
    }
}

/// Upload the log chunks in order, each under the next sequence number. A chunk is retried until
/// the server decides it, and the number moves on only past a stored chunk, so the stored log
/// has no gap. After a rejection (the lease is no longer ours) nothing more is sent.
async fn upload_logs(
    ctx: Arc<JobContext>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
) {
    let mut seq: i64 = 0;
    while let Some(mut chunk) = rx.recv().await {
        // Coalesce what comes within LOG_FLUSH_INTERVAL of the first chunk, up to 256 KiB; the
        // job's end (the sink dropped) sends what is queued at once. A short job's whole log is
        // then one append, not one per line its runner wrote (docs/benchmarks.md).
        let window = ctx.clock.sleep(LOG_FLUSH_INTERVAL);
        tokio::pin!(window);
        while chunk.len() < 256 * 1024 {
            tokio::select! {
                more = rx.recv() => match more {
                    Some(more) => chunk.extend_from_slice(&more),
                    None => break,
                },
                () = &mut window => break,
            }
        }
        queued.fetch_sub(chunk.len(), Ordering::SeqCst);
        if ctx.stopped().is_some_and(|stop| stop != Stop::Cancel) {
            continue;
        }
        let (client, chunk) = (&ctx.client, &chunk);
        let sent = ctx
            .deliver("log append", |tuple| async move {
                client.log_append(&tuple, seq, chunk).await
            })
            .await;
        match sent {
            Ok(_) => seq += 1,
            Err(CallError::Rejected { .. }) => {}
            Err(error) => {
                // A refusal that is not the protocol's (a bug): stop here rather than leave a
                // gap.
                tracing::error!(job = %ctx.lease.job, seq, %error, "log append refused; the rest of the log is not uploaded");
                return;
            }
        }
    }
}

/// Renew the lease every `heartbeat_interval` until the job is done or its lease revoked; and
/// stop the work when the lease runs out by the runner's own reckoning, whatever the network
/// does: every wait here, and every request, ends at the lease's end at the latest.
async fn heartbeats(ctx: Arc<JobContext>, mut done: watch::Receiver<bool>) {
    let ttl = Duration::from_millis(ctx.lease.lease_ttl_ms);
    let interval = heartbeat_interval(ttl);
    loop {
        let left = ctx.lease_left();
        tokio::select! {
            () = ctx.clock.sleep(interval.min(left)) => {}
            _ = done.changed() => return,
        }
        if *done.borrow() || matches!(ctx.stopped(), Some(Stop::Revoked(_))) {
            return;
        }
        if ctx.lease_left().is_zero() {
            lease_ran_out(&ctx);
            return;
        }
        if !renew(&ctx, ttl, &mut done).await {
            return;
        }
    }
}

/// The lease ran out by the runner's reckoning with no renewal: stop the work now, as a
/// rejection would make it. Nothing the runner does from here can be accepted; and a failover
/// that forgot its claim lets another attempt start once this lease has expired
/// (docs/protocol.md §12): an execution that outlived its lease unseen would run beside it.
fn lease_ran_out(ctx: &JobContext) {
    if ctx.reporting.load(Ordering::SeqCst) {
        // The command is done; the result's own delivery goes on and decides.
        return;
    }
    tracing::warn!(job = %ctx.lease.job, "no renewal of the lease within it: stopping the work");
    ctx.stop(Stop::Revoked(LEASE_RAN_OUT.to_owned()));
}

/// The most one heartbeat or rejoin may take: the request timeout, a third of the lease (so a
/// hung request leaves time to retry), and never past the lease's end by the runner's reckoning.
fn renewal_limit(ctx: &JobContext, ttl: Duration) -> Duration {
    ctx.request_timeout
        .min(ttl / 3)
        .max(Duration::from_millis(50))
        .min(if mutant("request-not-cut") {
            Duration::MAX
        } else {
            ctx.lease_left()
        })
}

/// One renewal: after lost contact a rejoin first (obeyed), then the heartbeat. What gets no
/// decision is retried with backoff, honouring `Retry-After`, while the lease can still be valid
/// by the runner's reckoning; at its end the work stops. Whether the heartbeats go on (`false`:
/// the lease was revoked or ran out, or the job is done).
async fn renew(ctx: &JobContext, ttl: Duration, done: &mut watch::Receiver<bool>) -> bool {
    let mut waits = heartbeat_backoff(ttl).build();
    loop {
        if ctx.lease_left().is_zero() {
            lease_ran_out(ctx);
            return false;
        }
        let error = match ctx.rejoin_within(Some(ttl)).await {
            // No decision on the rejoin (already noted): retry below.
            Err(error) => error,
            Ok(()) if matches!(ctx.stopped(), Some(Stop::Revoked(_))) => return false,
            Ok(()) => {
                let sent = ctx.clock.now();
                let limit = renewal_limit(ctx, ttl);
                match cut(&*ctx.clock, limit, ctx.client.heartbeat(&ctx.tuple())).await {
                    Ok(answer) => {
                        ctx.renewed(if mutant("reckon-from-answer") {
                            ctx.clock.now()
                        } else {
                            sent
                        });
                        if answer.cancel_requested {
                            ctx.stop(Stop::Cancel);
                        }
                        return true;
                    }
                    Err(error) if !error.is_transient() && ctx.reporting.load(Ordering::SeqCst) => {
                        // The result's own answer decides (a committed result ends the lease).
                        tracing::debug!(job = %ctx.lease.job, %error, "heartbeat while reporting");
                        return false;
                    }
                    Err(error) => {
                        ctx.on_error("heartbeat", &error);
                        if !error.is_transient() {
                            // A rejection or a 401 stops the work at once; another 4xx is not
                            // retried (the lease then runs out unless a later heartbeat renews it).
                            return !matches!(ctx.stopped(), Some(Stop::Revoked(_)));
                        }
                        error
                    }
                }
            }
        };
        // Retry while the lease can still be valid; the last retry goes out before its end.
        let left = ctx.lease_left();
        let wait = honour_retry_after(&error, waits.next().unwrap_or(ttl));
        let wait = if wait < left {
            wait
        } else {
            let margin = heartbeat_interval(ttl) / 10;
            if left <= margin {
                lease_ran_out(ctx);
                return false;
            }
            left - margin
        };
        tokio::select! {
            () = ctx.clock.sleep(wait) => {}
            _ = done.changed() => return false,
        }
        if *done.borrow() {
            return false;
        }
    }
}

/// A declared artifact path, checked to stay inside the workspace.
fn artifact_path(src: &Path, declared: &str) -> Option<PathBuf> {
    let path = Path::new(declared);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    let full = src.join(path);
    let canonical = full.canonicalize().ok()?;
    let root = src.canonicalize().ok()?;
    canonical.starts_with(&root).then_some(canonical)
}

fn kill_group(pid: Option<u32>) {
    // The command runs in its own process group (its pgid is its pid): kill all of it, with
    // killpg(2) directly. Never a negative pid through kill(1): procps-ng 4.0.2 reads
    // `kill -KILL -<pgid>` as "every process".
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 1) else {
        return;
    };
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut reader: R, tx: mpsc::UnboundedSender<Vec<u8>>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(buffer[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

/// How many verified source archives a runner keeps (`<workdir>/sources`, by blob digest), the
/// least recently used removed first.
const CACHED_SOURCES: usize = 16;

/// Fetch and verify the source into `src`. Nothing is executed when this fails.
///
/// An archive this runner already fetched for the same blob digest is reused from
/// `<workdir>/sources` instead of fetched again (docs/protocol.md §7.2): it is verified exactly as
/// a download is (its SHA-256 against the lease's blob digest, then the bounded extraction and the
/// manifest digest), and a copy whose digest no longer matches is removed and fetched afresh.
async fn prepare_source(
    ctx: &JobContext,
    workdir: &Path,
    job_dir: &Path,
    src: &Path,
    limits: Limits,
) -> Result<(), String> {
    let expected_blob = ctx
        .lease
        .source_blob_sha256
        .clone()
        .ok_or("the lease names no source blob")?;
    let expected_manifest = ctx.lease.source_digest.clone();
    // Only a digest's own characters name a file.
    let cached = (expected_blob.len() == 64
        && expected_blob.bytes().all(|b| b.is_ascii_hexdigit()))
    .then(|| {
        workdir
            .join("sources")
            .join(format!("{expected_blob}.tar.gz"))
    });
    let archive = job_dir.join("source.tar.gz");
    if let Some(cached) = cached.clone() {
        let (linked, blob, manifest, dest) = (
            archive.clone(),
            expected_blob.clone(),
            expected_manifest.clone(),
            src.to_owned(),
        );
        // Like every file operation of a job, off the runtime's threads: a slow disk delays this
        // job, not the heartbeats and uploads of the others.
        let reused = tokio::task::spawn_blocking(move || {
            // A hard link, not the kept path: a concurrent job's eviction or replacement of the
            // kept copy does not change the file this job verifies and then extracts (two opens).
            // No kept copy (or none that links): fetched below.
            std::fs::hard_link(&cached, &linked).ok()?;
            let result = source::verify_and_extract(&linked, &blob, &manifest, &dest, limits);
            let _ = std::fs::remove_file(&linked);
            match result {
                Err(source::SourceError::BlobDigestMismatch { .. }) => {
                    let _ = std::fs::remove_file(&cached);
                    None
                }
                other => {
                    // Touched: the least recently used copy goes first.
                    let _ = std::fs::File::options()
                        .append(true)
                        .open(&cached)
                        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                    Some(other)
                }
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        if let Some(result) = reused {
            return result.map_err(|e| e.to_string());
        }
    }
    let max_bytes = limits.max_total_bytes.saturating_mul(2);
    let download = ctx
        .deliver("source fetch", |tuple| {
            let (client, archive) = (&ctx.client, &archive);
            async move { client.source_to_file(&tuple, archive, max_bytes).await }
        })
        .await
        .map_err(|error| format!("source fetch failed: {error}"))?;
    if download.source_digest.as_deref() != Some(ctx.lease.source_digest.as_str()) {
        return Err("the served source identity is not the leased one".into());
    }
    let src = src.to_owned();
    tokio::task::spawn_blocking(move || {
        let result =
            source::verify_and_extract(&archive, &expected_blob, &expected_manifest, &src, limits);
        match (&result, cached) {
            (Ok(()), Some(cached)) => keep_source(&archive, &cached),
            _ => {
                let _ = std::fs::remove_file(&archive);
            }
        }
        result
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

/// Keep a verified archive as `cached` (a rename: a concurrent job's copy of the same digest has
/// the same bytes), and remove the least recently used beyond [`CACHED_SOURCES`].
fn keep_source(archive: &Path, cached: &Path) {
    let Some(dir) = cached.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() || std::fs::rename(archive, cached).is_err() {
        let _ = std::fs::remove_file(archive);
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if kept.len() > CACHED_SOURCES {
        kept.sort();
        for (_, path) in &kept[..kept.len() - CACHED_SOURCES] {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn deploy_json(lease: &LeaseBody) -> String {
    serde_json::json!({
        "kind": lease.target_kind,
        "job": lease.job,
        "attempt": lease.attempt,
        "slot_token": lease.slot_token,
        "deployment_id": lease.job.to_string(),
    })
    .to_string()
}

/// Run one leased job to its reported result.
async fn run_job(
    config: &AgentConfig,
    client: RunnerClient,
    results: &ResultSender,
    run_id: &str,
    lease: LeaseBody,
    claim_sent: Instant,
    supervisor: &Supervisor,
) {
    let (stop_tx, mut stop_rx) = watch::channel(None);
    // The lease is reckoned from when the claim was sent, never from its answer.
    let lease_end = claim_sent + Duration::from_millis(lease.lease_ttl_ms);
    let (connected_tx, _) = watch::channel(true);
    let ctx = Arc::new(JobContext {
        client,
        lease,
        clock: config.clock.clone(),
        request_timeout: config.request_timeout,
        stop_tx,
        connected_tx,
        reporting: AtomicBool::new(false),
        rejoining: tokio::sync::Mutex::new(()),
        lease_end: Mutex::new(lease_end),
    });
    let lease = &ctx.lease;
    // The workspace is keyed by (run, job, lease).
    let job_dir = config
        .workdir
        .join(run_id)
        .join(lease.job.to_string())
        .join(lease.lease_id.to_string());
    let src = job_dir.join("src");

    let (log_tx, log_rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let sink = LogSink {
        tx: log_tx,
        digest: Arc::new(Mutex::new(Sha256::new())),
        queued: queued.clone(),
        truncated: AtomicBool::new(false),
    };
    let uploader = tokio::spawn(upload_logs(ctx.clone(), log_rx, queued));
    let (done_tx, done_rx) = watch::channel(false);
    let heartbeat = tokio::spawn(heartbeats(ctx.clone(), done_rx));
    // A shutdown of the runner stops this job as a rejection would.
    let shutdown = {
        let ctx = ctx.clone();
        let mut shutdown = supervisor.shutdown.clone();
        tokio::spawn(async move {
            if shutdown.wait_for(|down| *down).await.is_ok() {
                ctx.stop(Stop::Revoked(SHUTTING_DOWN.to_owned()));
            }
        })
    };

    sink.line(&format!(
        "job {} attempt {} fence {} slot {} token {} source {} ({})",
        lease.job,
        lease.attempt,
        lease.fence,
        lease.target,
        lease.slot_token,
        lease.source_digest,
        lease.source_revision
    ));
    let mut exit_code: Option<i32> = None;
    // Off the runtime's threads, as the workspace's removal below.
    let dir = job_dir.clone();
    let created = tokio::task::spawn_blocking(move || std::fs::create_dir_all(dir))
        .await
        .map_err(|error| error.to_string())
        .and_then(|created| created.map_err(|error| error.to_string()));
    let prepared = match created {
        Ok(()) => prepare_source(&ctx, &config.workdir, &job_dir, &src, config.limits).await,
        Err(error) => Err(format!("cannot create the workspace: {error}")),
    };
    match prepared {
        Err(error) => {
            sink.line(&format!("refusing to execute: {error}"));
        }
        Ok(()) if ctx.stopped().is_some() => {
            sink.line("stopped before the command started");
        }
        Ok(()) => {
            sink.line("source verified; running the command");
            let target_base = config.target_url.as_deref().unwrap_or(&config.server);
            let mut command = tokio::process::Command::new("sh");
            command
                .arg("-c")
                .arg(&lease.command)
                .current_dir(&src)
                .env("LEASEWRIGHT_JOB", lease.job.to_string())
                .env("LEASEWRIGHT_ATTEMPT", lease.attempt.to_string())
                .env("LEASEWRIGHT_LEASE_ID", lease.lease_id.to_string())
                .env("LEASEWRIGHT_FENCE", lease.fence.to_string())
                .env("LEASEWRIGHT_SOURCE_REVISION", &lease.source_revision)
                .env("LEASEWRIGHT_SOURCE_DIGEST", &lease.source_digest)
                .env("LEASEWRIGHT_WORKSPACE", &src)
                .env("LEASEWRIGHT_TARGET", &lease.target)
                .env("LEASEWRIGHT_TARGET_KIND", &lease.target_kind)
                .env("LEASEWRIGHT_SLOT_TOKEN", lease.slot_token.to_string())
                .env(
                    "LEASEWRIGHT_EPOCH",
                    leasewright_impl::epoch::epoch_of(lease.slot_token).to_string(),
                )
                .env(
                    "LEASEWRIGHT_TARGET_URL",
                    format!(
                        "{}/v1/targets/{}/deploy",
                        target_base.trim_end_matches('/'),
                        lease.target
                    ),
                )
                .env("LEASEWRIGHT_DEPLOY_JSON", deploy_json(lease))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(!mutant("exit-with-live-command"))
                .process_group(0);
            // Counted before it starts, so the runner never returns between its start and the
            // count (`run_until` waits for the count to reach 0).
            supervisor.live_commands.send_modify(|live| *live += 1);
            let spawned = if ctx.stopped().is_some() {
                Err(std::io::Error::other("stopped before the command started"))
            } else {
                command.spawn()
            };
            match spawned {
                Err(error) => {
                    supervisor.live_commands.send_modify(|live| *live -= 1);
                    sink.line(&format!("cannot start the command: {error}"));
                }
                Ok(mut child) => {
                    let pid = child.id();
                    let (chunk_tx, mut chunk_rx) = mpsc::unbounded_channel();
                    let mut pumps = Vec::new();
                    if let Some(out) = child.stdout.take() {
                        pumps.push(tokio::spawn(pump(out, chunk_tx.clone())));
                    }
                    if let Some(err) = child.stderr.take() {
                        pumps.push(tokio::spawn(pump(err, chunk_tx.clone())));
                    }
                    drop(chunk_tx);
                    let status = loop {
                        tokio::select! {
                            status = child.wait() => break status.ok(),
                            chunk = chunk_rx.recv() => if let Some(chunk) = chunk { sink.send(chunk) },
                            changed = stop_rx.changed() => {
                                if changed.is_ok() && stop_rx.borrow().is_some() {
                                    kill_group(pid);
                                    break child.wait().await.ok();
                                }
                            }
                        }
                    };
                    // Whatever ended it, nothing of its process group stays behind (a
                    // background grandchild included).
                    kill_group(pid);
                    supervisor.live_commands.send_modify(|live| *live -= 1);
                    // Drain what the command printed (bounded: a background grandchild may keep
                    // the pipes open).
                    let drain = async {
                        while let Some(chunk) = chunk_rx.recv().await {
                            sink.send(chunk);
                        }
                    };
                    tokio::select! {
                        () = drain => {}
                        () = ctx.clock.sleep(Duration::from_secs(2)) => {}
                    }
                    for p in pumps {
                        p.abort();
                    }
                    exit_code = status.and_then(|s| s.code());
                    match &status {
                        Some(status) => sink.line(&format!("command ended: {status}")),
                        None => sink.line("command ended: unknown status"),
                    }
                }
            }
        }
    }
    let stopped = ctx.stopped();
    if let Some(stop) = &stopped {
        match stop {
            Stop::Cancel => sink.line("cancelled by the control plane"),
            Stop::Revoked(code) => sink.line(&format!(
                "the control plane rejected this lease ({code}): execution stopped"
            )),
        }
    }
    // Artifacts (only while the lease is still ours).
    if stopped.is_none() && exit_code.is_some() {
        for declared in &lease.artifacts {
            let Some(path) = artifact_path(&src, declared) else {
                sink.line(&format!("artifact {declared}: not found in the workspace"));
                continue;
            };
            match tokio::fs::read(&path).await {
                Ok(content) => {
                    let (client, content) = (&ctx.client, &content);
                    let put = ctx
                        .deliver("artifact put", |tuple| async move {
                            client.artifact_put(&tuple, declared, content).await
                        })
                        .await;
                    match put {
                        Ok(_) => sink.line(&format!(
                            "artifact {declared}: uploaded ({} bytes)",
                            content.len()
                        )),
                        Err(error) => sink.line(&format!("artifact {declared}: {error}")),
                    }
                }
                Err(error) => sink.line(&format!("artifact {declared}: {error}")),
            }
        }
    }
    let stopped = ctx.stopped();
    let outcome = match (&stopped, exit_code) {
        (Some(Stop::Cancel), _) => "cancelled",
        (None, Some(0)) => "passed",
        _ => "failed",
    };
    sink.line(&format!("reporting {outcome}"));
    let log_digest = hex::encode(
        sink.digest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .finalize(),
    );
    let result_digest = hex::encode(Sha256::digest(
        format!("exit={exit_code:?}\nlog_sha256={log_digest}\n").as_bytes(),
    ));
    // Flush the logs before the result (a result ends the lease).
    drop(sink);
    let _ = uploader.await;
    ctx.reporting.store(true, Ordering::SeqCst);
    let reported = ctx
        .deliver("result", |tuple| {
            let result_digest = &result_digest;
            async move { results.send(tuple, outcome, result_digest).await }
        })
        .await;
    match reported {
        Ok(answer) => {
            tracing::info!(job = %lease.job, outcome, verdict = %answer.verdict, "result reported");
        }
        Err(CallError::Rejected { code, .. }) => {
            tracing::warn!(job = %lease.job, outcome, %code, "result rejected (kept as a late observation)");
        }
        Err(error) => tracing::error!(job = %lease.job, %error, "result failed"),
    }
    let _ = done_tx.send(true);
    let _ = heartbeat.await;
    shutdown.abort();
    // The workspace goes with the job: its source, outputs and artifacts are on the server.
    let removed = tokio::task::spawn_blocking(move || {
        let removed = std::fs::remove_dir_all(&job_dir);
        // The job's directory, if this was its only lease here (a non-empty one stays).
        if let Some(parent) = job_dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        removed
    })
    .await;
    if !matches!(removed, Ok(Ok(()))) {
        tracing::warn!(job = %lease.job, "could not remove the job's workspace");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_every_sixth_of_the_lease_and_a_retry_after_only_lengthens_a_wait() {
        assert_eq!(
            heartbeat_interval(Duration::from_secs(30)),
            Duration::from_secs(5)
        );
        let unavailable = |seconds: Option<u64>| CallError::Http {
            status: 503,
            code: "database_unavailable".into(),
            message: String::new(),
            retry_after: seconds.map(Duration::from_secs),
        };
        let backoff = Duration::from_millis(300);
        assert_eq!(honour_retry_after(&unavailable(None), backoff), backoff);
        assert_eq!(
            honour_retry_after(&unavailable(Some(2)), backoff),
            Duration::from_secs(2)
        );
        assert_eq!(honour_retry_after(&unavailable(Some(0)), backoff), backoff);
    }
}
