//! The HTTP driver: the same replays as the in-process driver ([`super::pg`]), against one or more
//! running servers over HTTP (docs/http.md), each started with a test clock
//! (`leasewright serve --manual-clock`).
//!
//! What the driver needs of a server (docs/conformance.md, "What the HTTP driver needs") is the
//! protocol's own routes (projects, runners and jobs to set a trace up; the runner routes; cancel
//! and reconcile; a target's deploy route) and a minimal test hook: `POST /v1/test/clock` (set or
//! advance the server's time) and `POST /v1/sweep` (run the expiry sweep now, answering the jobs it
//! made uncertain). Everything else it reads to compare the state (a job's view, its attempts, its
//! observations, a target slot's state) is optional: a read the server does not offer (404) is
//! found when the driver connects, not compared, and named in the summary.
//!
//! Time: a server has one clock for all its clients, so one server runs one trace at a time. Traces
//! run in parallel on several servers (`--http URL` given several times), each with its own clock
//! and its own database, one trace on each at a time. A trace sets its server's clock to the trace
//! epoch ([`crate::driver::trace_epoch`]) when it opens; ticks are sent lazily, merged into one
//! `set` before the next request that reads the time. Rows of earlier traces stay in the database,
//! in other projects; the sweep runs over every project, and the driver counts only the trace's own
//! jobs among the jobs it made uncertain (earlier traces are over, so a sweep that makes their jobs
//! uncertain changes nothing any trace compares).
//!
//! One model tick is the server's lease ttl divided by the model's `lease_ttl`: the driver reads
//! the ttl once, when it connects, from the lease expiry a claim of a probe job answers.
//!
//! Replica clocks: a server's database records the δ its sweep acts 2δ past a lease by (a
//! manual-clock server records none; an operator sets one with `migrate
//! --set-max-clock-skew-ms`). The driver reads it from each server's `GET /metrics` when it
//! connects, and runs a trace only on a server whose δ is the trace's (`replica_skew` ticks; 0
//! for every trace without replica clocks): each `replica_clock` step moves the time the next
//! requests carry by the replica's offset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use leasewright_model as model;
use leasewright_server::client::{
    path_segment, CallError, Http, OperatorClient, RunnerClient, TestTime,
};
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::{
    CacheEntryBody, ClockRequest, DeployRequest, GetRequest, GetResponse, LogChunkBody,
    ResultAnswer, SubmitJobRequest, TupleBody,
};
use model::{Action, Expected, LeaseModel, MessageKind, State};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::driver::{
    code, model_runner_time, result_digest, result_echo, runner_time, trace_epoch, FORGED_LEASE,
};
use crate::driver::{implementation_stored, BatchResults, ResultBatches, Stored, UnknownIds};
use crate::driver::{
    payload_label, rejoin_instruction, Answer, AttemptProjection, Details, Driver, DriverError,
    JobProjection, ObservationDetails, ObservationProjection, Observed, Part, PayloadDigests,
    Projection, Session, TargetProjection,
};
use crate::driver::{token_to_impl, token_to_model, ClaimedJob};
use crate::drivers::pg::{global_sweep_epoch, sends_batch_results, sweeps_globally};
use crate::drivers::{failover, prune};
use crate::generate::Generated;

/// What an unknown id stands for ([`HttpSession::unknown`]), as in-process.
const RUNNER: u8 = UnknownIds::RUNNER;
const JOB: u8 = UnknownIds::JOB;
const ATTEMPT: u8 = UnknownIds::ATTEMPT;

/// Why the driver cannot run against a server (a setup failure, not a divergence).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// No answer.
    #[error("cannot reach the server at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// The operator token was refused.
    #[error(
        "the server at {url} refused the operator token (401 unauthorized): pass the token the \
         server was started with (`leasewright serve --operator-token TOKEN`) as --operator-token"
    )]
    Unauthorized { url: String },
    /// The server has no test clock.
    #[error(
        "the server at {url} has no test clock (POST /v1/test/clock is 404): replays over HTTP \
         must move the server's time, so start the server with `leasewright serve --manual-clock` \
         (a test-only mode, off by default)"
    )]
    NoManualClock { url: String },
    /// The server's lease ttl is not a whole number of model ticks.
    #[error(
        "the server's lease ttl ({ttl_ms} ms) is not a whole number of milliseconds per model \
         tick for a model lease of {ticks} ticks: start the server with a --lease-ttl whose \
         milliseconds divide by {ticks} (the default 30 s does)"
    )]
    LeaseTtl { ttl_ms: u64, ticks: u8 },
    /// Two servers disagree on something every trace depends on.
    #[error("the servers disagree: {0}")]
    Mismatch(String),
    /// Two of the servers share a database: their sweeps would expire each other's leases.
    #[error(
        "the servers at {a} and {b} share a database (each sees the other's probe job): \
         traces on one would be swept by the other's expiry sweep; give each server its own \
         database (`leasewright serve --database-url` with another database)"
    )]
    SharedDatabase { a: String, b: String },
    /// Any other answer.
    #[error("the server at {url} answered unexpectedly while {doing}: {detail}")]
    Unexpected {
        url: String,
        doing: &'static str,
        detail: String,
    },
}

/// One server the driver replays on.
#[derive(Clone)]
struct Server {
    operator: OperatorClient,
    /// The same server's test hooks of failovers and prunes, which work on the whole database
    /// (the first prune of a database holding a whole suite's jobs deletes them all), with
    /// [`HOOK_TIMEOUT`].
    hooks: OperatorClient,
    /// The target's deploy and state routes (the server's own URL unless `--target-url`).
    target: Http,
    /// Whether the server handles a request at the time its `Leasewright-Test-Time` header
    /// names (docs/http.md, "Test clock"): then several traces replay on it at once, each
    /// request at its trace's time, and a trace's sweep is scoped to its projects.
    own_time: bool,
    /// The `max_clock_skew` (δ) its database records, in milliseconds, as its `GET /metrics`
    /// says (`leasewright_database_max_clock_skew_seconds`; 0 when none is recorded, or the
    /// server has no metrics): the sweep acts 2δ past a lease there. Traces with replica
    /// clocks run only on a server whose δ is the trace's, the others only where it is 0.
    clock_skew_ms: i64,
    /// Whether it offers the failover's test hooks (`POST /v1/test/replicate` and
    /// `POST /v1/test/failover`, docs/http.md "Test clock").
    failover_hooks: bool,
    /// Whether it offers the prune's test hooks (`POST /v1/test/audit` and `POST /v1/test/prune`).
    prune_hooks: bool,
}

impl Server {
    /// The same server, every request carrying `time`.
    fn at(&self, time: &TestTime) -> Self {
        Self {
            operator: OperatorClient {
                http: self.operator.http.with_test_time(time.clone()),
            },
            hooks: OperatorClient {
                http: self.hooks.http.with_test_time(time.clone()),
            },
            target: self.target.with_test_time(time.clone()),
            own_time: self.own_time,
            clock_skew_ms: self.clock_skew_ms,
            failover_hooks: self.failover_hooks,
            prune_hooks: self.prune_hooks,
        }
    }
}

/// How long a test hook of failovers and prunes may take: they work on the whole database,
/// which holds every trace replayed there before (the server does not bound them by its
/// `--request-timeout-ms` either).
const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The HTTP driver over one or more running servers.
pub struct HttpDriver {
    servers: Vec<Server>,
    /// The places to replay a trace, by the δ (in milliseconds) their servers' databases record.
    lanes: BTreeMap<i64, Lane>,
    /// Traces at once on each server: 1 unless every server takes a time per request.
    per_server: usize,
    /// The servers' lease ttl.
    lease_ttl_ms: u64,
    /// The source every job is submitted with (base64 of a one-file snapshot).
    archive_base64: String,
    /// What the servers do not let the driver read (not compared).
    unread: Vec<Part>,
    /// The `?limit=` of every list the driver reads (it reads every page).
    page_limit: i64,
    /// Held by a trace that sweeps over every project on a server that takes a time per request
    /// (`sweeps_globally`), for its whole replay: such traces run one at a time.
    global_lane: Arc<tokio::sync::Mutex<()>>,
    /// How far after [`trace_epoch`] every trace runs, and each server's epoch, read by each
    /// trace for its whole replay; a trace with a failover holds it alone, and moves it on when
    /// it ends ([`Floor`]).
    floor: Arc<tokio::sync::RwLock<Timeline>>,
    /// The target mutations go to each server's own demonstration targets (no `--target-url`).
    demo_targets: bool,
}

/// What the failovers replayed so far have made of the servers: how far after [`trace_epoch`]
/// every trace runs, and each server's epoch (its tokens' high 32 bits: a trace's fences and
/// slot tokens are counted from its server's epoch when it opens, `driver::token_to_model`).
#[derive(Clone, Debug)]
struct Timeline {
    floor: Duration,
    epochs: Vec<i64>,
}

/// How far a trace with a failover moves every later trace's time on: past the wait its
/// failover began (a wait blocks every claim received before its end, as a real server's
/// clock never goes back), with a day to spare for the traces that sweep over every project,
/// which run a day before the others ([`HttpDriver::open_on`]).
fn failover_step() -> Duration {
    Duration::days(2)
}

/// The floor every trace on a server runs after, so that its traces run after the wait of the
/// last failover an earlier replay left it in (`claims_wait_until` of `POST /v1/test/replicate`):
/// whole [`failover_step`]s, the traces that sweep over every project a day after that wait.
fn floor_after(wait_until: Option<DateTime<Utc>>) -> Duration {
    let Some(until) = wait_until else {
        return Duration::zero();
    };
    let step = failover_step();
    let mut floor = Duration::zero();
    while trace_epoch() + floor - Duration::days(1) <= until {
        floor += step;
    }
    floor
}

/// Whether a demonstration target a server offers (`POST /v1/targets/{slot}/deploy`) judges a
/// target mutation of `trace` otherwise than the model's target, a system outside the control
/// plane that compares slot tokens only (`suite::LeftOut::DemoTarget`). A demonstration target
/// records only the slot token the server's database issued to the attempt named (a copied or
/// forged token, or an attempt no one created, is refused `403 slot_token_not_issued`), and it
/// keeps its state in that database, which a failover takes back: a mutation sent after the
/// first step a failover loses is judged against what the failover left.
pub fn judged_otherwise_by_a_demo_target(trace: &Generated<LeaseModel>) -> bool {
    let after_a_lost_step = failover::snapshot_steps(trace)
        .and_then(|s| s.first().copied())
        .unwrap_or(usize::MAX);
    let mut before = &trace.init;
    for (i, (action, after)) in trace.steps.iter().enumerate() {
        let message = match action {
            Action::Deliver { message } | Action::Replay { message, .. } => Some(message),
            _ => None,
        };
        if let Some(m) = message.filter(|m| m.kind == MessageKind::TargetMutation) {
            let issued = before.attempts.get(usize::from(m.attempt)).map(|a| a.token);
            if issued != Some(m.token) || i >= after_a_lost_step {
                return true;
            }
        }
        before = after;
    }
    false
}

/// A trace's hold on the driver's [`HttpDriver::floor`]: shared by the traces without a
/// failover, alone by a trace with one, which moves it on by a [`failover_step`] when it ends
/// (however it ends: diverged or not, its failover may have begun a wait).
enum Floor {
    Shared(tokio::sync::OwnedRwLockReadGuard<Timeline>),
    Alone(tokio::sync::OwnedRwLockWriteGuard<Timeline>),
}

impl Floor {
    fn get(&self) -> &Timeline {
        match self {
            Floor::Shared(guard) => guard,
            Floor::Alone(guard) => guard,
        }
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        if let Floor::Alone(guard) = self {
            guard.floor += failover_step();
        }
    }
}

/// The places of the servers whose databases record one δ.
struct Lane {
    /// Free places to replay a trace: a server's index once per trace it may run at once.
    idle: Arc<Mutex<Vec<usize>>>,
    /// One permit per place in `idle`.
    free: Arc<Semaphore>,
}

/// The lanes of `servers`, each server `per_server` times.
fn lanes(servers: &[Server], per_server: usize) -> BTreeMap<i64, Lane> {
    let mut places: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for _ in 0..per_server {
        for (i, server) in servers.iter().enumerate().rev() {
            places.entry(server.clock_skew_ms).or_default().push(i);
        }
    }
    places
        .into_iter()
        .map(|(skew, idle)| {
            let lane = Lane {
                free: Arc::new(Semaphore::new(idle.len())),
                idle: Arc::new(Mutex::new(idle)),
            };
            (skew, lane)
        })
        .collect()
}

/// A lease as a claim answers it: the fields the driver reads.
#[derive(Deserialize)]
struct LeaseRead {
    job: Uuid,
    attempt: Uuid,
    lease_id: Uuid,
    fence: i64,
    lease_expiry: DateTime<Utc>,
    slot_token: i64,
}

#[derive(Deserialize)]
struct ClaimRead {
    verdict: String,
    leases: Vec<LeaseRead>,
}

#[derive(Deserialize)]
struct VerdictRead {
    verdict: String,
}

#[derive(Deserialize)]
struct HeartbeatRead {
    verdict: String,
    #[serde(default)]
    lease_expiry: Option<DateTime<Utc>>,
    #[serde(default)]
    cancel_requested: Option<bool>,
}

#[derive(Deserialize)]
struct RejoinRead {
    verdict: String,
    #[serde(default)]
    instruction: Option<String>,
}

#[derive(Deserialize)]
struct SweepRead {
    verdict: String,
    #[serde(default)]
    jobs: Vec<Uuid>,
}

#[derive(Deserialize)]
struct JobRead {
    state: String,
    current_attempt: Option<Uuid>,
    fence: i64,
    cancel_requested: bool,
    #[serde(default)]
    target_reserved_by: Option<Uuid>,
}

#[derive(Deserialize)]
struct AttemptRead {
    attempt: Uuid,
    runner: Uuid,
    fence: i64,
    state: String,
}

#[derive(Deserialize)]
struct ObservationRead {
    #[serde(default)]
    id: i64,
    #[serde(default)]
    named_job: Option<Uuid>,
    kind: String,
    runner: Uuid,
    named_attempt: Uuid,
    attempt: Option<Uuid>,
    verdict: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    named_lease_id: Option<Uuid>,
    #[serde(default)]
    named_fence: Option<i64>,
    #[serde(default)]
    runner_time: Option<DateTime<Utc>>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    payload_sha256: Option<String>,
}

/// One page of a list route (attempts, observations, the security log): its items, under the
/// list's own name, and the cursor of the next page (absent on the last page).
#[derive(Deserialize)]
struct Page<T> {
    #[serde(alias = "attempts", alias = "observations")]
    items: Vec<T>,
    #[serde(default)]
    next: Option<i64>,
}

/// Every item of the list at `path`, page after page (`?limit=&after=`), so that a trace with
/// more records than one page still compares.
async fn every_page<T: serde::de::DeserializeOwned>(
    http: &Http,
    path: &str,
    limit: i64,
) -> Result<Vec<T>, CallError> {
    let mut all = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let page: Page<T> = http
            .get(&match after {
                Some(after) => format!("{path}?limit={limit}&after={after}"),
                None => format!("{path}?limit={limit}"),
            })
            .await?;
        all.extend(page.items);
        match page.next {
            None => return Ok(all),
            Some(next) if after.is_some_and(|after| next <= after) => {
                return Err(CallError::Network(format!(
                    "{path}: the next page's cursor {next} does not move past {}",
                    after.unwrap_or_default()
                )))
            }
            Some(next) => after = Some(next),
        }
    }
}

#[derive(Deserialize)]
struct TargetRead {
    applied_count: i64,
    #[serde(default)]
    highest_slot_token: Option<i64>,
}

/// The fields of an observation that only [`Part::ObservationDetails`] compares.
const DETAIL_FIELDS: [&str; 5] = [
    "named_lease_id",
    "named_fence",
    "runner_time",
    "outcome",
    "payload_sha256",
];

fn job_path(project: Uuid, job: Uuid) -> String {
    format!("/v1/projects/{project}/jobs/{job}")
}

fn target_path(slot: &str) -> String {
    format!("/v1/targets/{}", path_segment(slot))
}

/// What [`HttpDriver::connect_one`] learns of one server.
struct Connected {
    server: Server,
    lease_ttl_ms: u64,
    unread: Vec<Part>,
    /// The probe job's project and id (to find servers that share a database).
    probe: (Uuid, Uuid),
    /// How far after the trace epoch its traces must run ([`floor_after`]).
    floor: Duration,
    /// Its database's epoch (0 where it has no failover hooks to say it).
    epoch: i64,
}

impl HttpDriver {
    /// Connects to the server at `url`: see [`HttpDriver::connect_all`].
    pub async fn connect(url: &str, operator_token: &str) -> Result<Self, SetupError> {
        Self::connect_all(&[url.to_owned()], operator_token, None).await
    }

    /// Connects to every server of `urls` with the operator token: checks the token and the test
    /// clock, reads the lease ttl from a claim of a probe job (in a probe project of its own,
    /// finished at once) and which optional reads each server offers. Every server must have the
    /// same lease ttl and a database of its own. `target_url`: where the targets' routes are
    /// (default: each server's own URL).
    pub async fn connect_all(
        urls: &[String],
        operator_token: &str,
        target_url: Option<&str>,
    ) -> Result<Self, SetupError> {
        if urls.is_empty() {
            return Err(SetupError::Mismatch("no server to replay on".into()));
        }
        let mut connected = Vec::with_capacity(urls.len());
        for url in urls {
            connected.push(Self::connect_one(url, operator_token, target_url).await?);
        }
        let lease_ttl_ms = connected.first().map(|c| c.lease_ttl_ms).unwrap_or(0);
        for c in &connected {
            if c.lease_ttl_ms != lease_ttl_ms {
                return Err(SetupError::Mismatch(format!(
                    "the server at {} has a lease ttl of {} ms, the one at {} {} ms",
                    c.server.operator.http.base(),
                    c.lease_ttl_ms,
                    connected[0].server.operator.http.base(),
                    lease_ttl_ms
                )));
            }
        }
        let mut unread: Vec<Part> = connected.iter().flat_map(|c| c.unread.clone()).collect();
        unread.sort();
        unread.dedup();
        // Servers that share a database would expire each other's leases when their sweeps run
        // over every project at their own clocks: each must not see the other's probe job
        // (checkable only where jobs can be read). Servers that take a time per request sweep
        // each trace's projects at the trace's time only, so they may share one.
        let own_time = connected.iter().all(|c| c.server.own_time);
        if !own_time && !unread.contains(&Part::Jobs) {
            for a in &connected {
                for b in &connected {
                    let (aurl, burl) =
                        (a.server.operator.http.base(), b.server.operator.http.base());
                    if aurl == burl {
                        continue;
                    }
                    let (project, job) = a.probe;
                    let seen: Result<Value, CallError> =
                        b.server.operator.http.get(&job_path(project, job)).await;
                    if seen.is_ok() {
                        return Err(SetupError::SharedDatabase {
                            a: aurl.into(),
                            b: burl.into(),
                        });
                    }
                }
            }
        }
        // The traces without replica clocks need a server whose database records no δ.
        if connected.iter().all(|c| c.server.clock_skew_ms != 0) {
            return Err(SetupError::Mismatch(format!(
                "the database of every server records a max_clock_skew (the one at {}: {} ms): \
                 the traces without replica clocks need a server whose database records none \
                 (a manual-clock server records none; `leasewright migrate \
                 --set-max-clock-skew-ms` set it)",
                connected[0].server.operator.http.base(),
                connected[0].server.clock_skew_ms
            )));
        }
        let snapshot = probe_snapshot();
        let timeline = Timeline {
            floor: connected
                .iter()
                .map(|c| c.floor)
                .max()
                .unwrap_or_else(Duration::zero),
            epochs: connected.iter().map(|c| c.epoch).collect(),
        };
        let servers: Vec<Server> = connected.into_iter().map(|c| c.server).collect();
        Ok(Self {
            floor: Arc::new(tokio::sync::RwLock::new(timeline)),
            demo_targets: target_url.is_none(),
            lanes: lanes(&servers, 1),
            servers,
            per_server: 1,
            lease_ttl_ms,
            archive_base64: snapshot,
            unread,
            page_limit: leasewright_server::app::MAX_PAGE_LIMIT,
            global_lane: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// Runs up to `traces` traces at once on each server when every server takes a time per
    /// request (`Leasewright-Test-Time`); otherwise one per server, whatever is asked (a server
    /// with one shared clock can run one trace at a time).
    pub fn with_traces_per_server(mut self, traces: usize) -> Self {
        let own_time = self.servers.iter().all(|s| s.own_time);
        self.per_server = if own_time { traces.max(1) } else { 1 };
        self.lanes = lanes(&self.servers, self.per_server);
        self
    }

    /// Whether every server takes a time per request (then traces run
    /// [`HttpDriver::traces_per_server`] at once on each).
    pub fn own_time(&self) -> bool {
        self.servers.iter().all(|s| s.own_time)
    }

    /// Traces at once on each server.
    pub fn traces_per_server(&self) -> usize {
        self.per_server
    }

    /// Reads every list in pages of `limit` items (1 to the server's largest page, 1000; the
    /// default is the largest): a small page makes every trace read several pages, which the
    /// tests use to check that the driver follows them.
    pub fn with_page_limit(mut self, limit: i64) -> Self {
        self.page_limit = limit;
        self
    }

    async fn connect_one(
        url: &str,
        operator_token: &str,
        target_url: Option<&str>,
    ) -> Result<Connected, SetupError> {
        let url = url.trim_end_matches('/').to_owned();
        let unexpected = |doing: &'static str| {
            let url = url.clone();
            move |error: CallError| match error {
                CallError::Network(detail) => SetupError::Unreachable {
                    url: url.clone(),
                    detail,
                },
                CallError::Http { status: 401, .. } => {
                    SetupError::Unauthorized { url: url.clone() }
                }
                other => SetupError::Unexpected {
                    url: url.clone(),
                    doing,
                    detail: other.to_string(),
                },
            }
        };
        let operator =
            OperatorClient::new(&url, operator_token).map_err(unexpected("building a client"))?;
        let hooks = OperatorClient::with_timeout(&url, operator_token, HOOK_TIMEOUT)
            .map_err(unexpected("building a client"))?;
        let target = match target_url {
            Some(t) => Http::new(t, operator_token, std::time::Duration::from_secs(60))
                .map_err(unexpected("building a client of the target"))?,
            None => operator.http.clone(),
        };
        // The test hook first: it checks the token (401) and the clock (404) at once.
        let epoch = trace_epoch();
        match operator
            .clock(&ClockRequest {
                set: Some(epoch),
                advance_ms: None,
            })
            .await
        {
            Ok(_) => {}
            Err(CallError::Http { status: 404, .. }) => {
                // No test clock, or a server that answers 404 before it looks at the token:
                // a read names the token's fault first.
                let read: Result<Value, CallError> =
                    operator.http.get(&job_path(Uuid::nil(), Uuid::nil())).await;
                return Err(match read {
                    Err(CallError::Http { status: 401, .. }) => {
                        SetupError::Unauthorized { url: url.clone() }
                    }
                    _ => SetupError::NoManualClock { url: url.clone() },
                });
            }
            Err(error) => return Err(unexpected("setting the test clock")(error)),
        }
        // The failover's test hooks (optional): the standby catches up (nothing is lost by it),
        // and says until when claims wait after the last failover an earlier replay began.
        let (failover_hooks, floor, database_epoch) = match hooks.replicate().await {
            Ok(answer) => (true, floor_after(answer.claims_wait_until), answer.epoch),
            Err(CallError::Http {
                status: 404 | 405, ..
            }) => (false, Duration::zero(), 0),
            Err(error) => return Err(unexpected("replicating the server's database")(error)),
        };
        let epoch = epoch + floor;
        if floor > Duration::zero() {
            operator
                .clock(&ClockRequest {
                    set: Some(epoch),
                    advance_ms: None,
                })
                .await
                .map_err(unexpected("setting the test clock"))?;
        }
        // A time per request (optional): the clock route read with the header must answer the
        // header's time. A server without it answers its shared clock's (or refuses the header).
        let probe_time = epoch + Duration::milliseconds(7);
        let own_time = matches!(
            OperatorClient { http: operator.http.with_test_time(TestTime::new(probe_time)) }
                .clock(&ClockRequest::default())
                .await,
            Ok(answer) if answer.now == probe_time
        );
        let archive_base64 = probe_snapshot();
        // The lease ttl: claim a probe job at the epoch, read its lease expiry, finish the job.
        let unique = Uuid::new_v4().simple().to_string();
        let doing = "claiming a probe job to read the lease ttl";
        let project = operator
            .create_project(&format!("conform-probe-{unique}"))
            .await
            .map_err(unexpected(doing))?;
        let runner = operator
            .create_runner(project, "probe")
            .await
            .map_err(unexpected(doing))?;
        let slot = format!("conform-probe-{unique}");
        let submitted = operator
            .submit(
                project,
                &submit_request(&archive_base64, "probe", &slot, "fenced"),
            )
            .await
            .map_err(unexpected(doing))?;
        let client = RunnerClient {
            http: operator.http.with_token(&runner.token),
        };
        let claimed: ClaimRead = client
            .http
            .post("/v1/runner/claim", &json!({"capacity": 1}))
            .await
            .map_err(unexpected(doing))?;
        let lease = claimed
            .leases
            .into_iter()
            .next()
            .ok_or_else(|| SetupError::Unexpected {
                url: url.clone(),
                doing,
                detail: format!("a claim answered `{}` without a lease", claimed.verdict),
            })?;
        let ttl = (lease.lease_expiry - epoch).num_milliseconds();
        let lease_ttl_ms =
            u64::try_from(ttl)
                .ok()
                .filter(|t| *t > 0)
                .ok_or_else(|| SetupError::Unexpected {
                    url: url.clone(),
                    doing,
                    detail: format!(
                        "the lease expires at {}, not after the test clock's {epoch}",
                        lease.lease_expiry
                    ),
                })?;
        // A mutation of the probe's slot, so that its state can be read below.
        let deploy = DeployRequest {
            kind: "fenced".into(),
            job: lease.job,
            attempt: lease.attempt,
            slot_token: lease.slot_token,
            deployment_id: "probe".into(),
        };
        let deployed: Result<VerdictRead, CallError> = target
            .post(&format!("{}/deploy", target_path(&slot)), &deploy)
            .await;
        deployed.map_err(unexpected("deploying the probe job to its target"))?;
        let tuple = TupleBody {
            job: lease.job,
            attempt: lease.attempt,
            lease_id: lease.lease_id,
            fence: lease.fence,
            runner_time: None,
        };
        client
            .result(&tuple, "passed", "sha256:probe")
            .await
            .map_err(unexpected(doing))?;
        // The optional reads: a 404 (or 405) on the probe's own job means the read is not there.
        let mut unread = Vec::new();
        let job = submitted.job;
        let read =
            |result: Result<Value, CallError>, part: Part, unread: &mut Vec<Part>| match result {
                Ok(value) => Ok(Some(value)),
                Err(CallError::Http {
                    status: 404 | 405, ..
                }) => {
                    unread.push(part);
                    Ok(None)
                }
                Err(error) => Err(unexpected("reading the probe job")(error)),
            };
        let base = job_path(project, job);
        read(operator.http.get(&base).await, Part::Jobs, &mut unread)?;
        read(
            operator.http.get(&format!("{base}/attempts")).await,
            Part::Ledger,
            &mut unread,
        )?;
        let observations = read(
            operator.http.get(&format!("{base}/observations")).await,
            Part::Observation,
            &mut unread,
        )?;
        if let Some(list) = observations {
            // The result's observation names every field the details compare, or they are not
            // compared.
            let complete = list["observations"]
                .as_array()
                .and_then(|all| all.last())
                .and_then(Value::as_object)
                .is_some_and(|o| DETAIL_FIELDS.iter().all(|f| o.contains_key(*f)));
            if !complete {
                unread.push(Part::ObservationDetails);
            }
        }
        read(
            target.get(&target_path(&slot)).await,
            Part::Targets,
            &mut unread,
        )?;
        // What the side effects stored: a server that reads an attempt's log chunk by chunk
        // also reads a cache entry with its storer (docs/http.md; an unknown route and a
        // missing entry both answer 404 `not_found`, so only the log chunks can be probed).
        read(
            operator.http.get(&format!("{base}/log-chunks")).await,
            Part::Stored,
            &mut unread,
        )?;
        // The prune's test hooks (optional), found without running them: a route that exists
        // answers a GET with 405 (it takes POST only), one that does not with 404.
        let prune_hooks = matches!(
            operator.http.get::<Value>("/v1/test/prune").await,
            Err(CallError::Http { status: 405, .. })
        );
        // The δ its database records (replica clocks): read where the server has metrics.
        let clock_skew_ms = match operator.http.get_bytes("/metrics").await {
            Ok(text) => recorded_clock_skew_ms(&String::from_utf8_lossy(&text)),
            Err(CallError::Http {
                status: 404 | 405, ..
            }) => 0,
            Err(error) => return Err(unexpected("reading the server's metrics")(error)),
        };
        Ok(Connected {
            server: Server {
                operator,
                hooks,
                target,
                own_time,
                clock_skew_ms,
                failover_hooks,
                prune_hooks,
            },
            lease_ttl_ms,
            unread,
            probe: (project, job),
            floor,
            epoch: database_epoch,
        })
    }

    /// Whether a server replays the traces of `model` with replica clocks: one whose database
    /// records δ = the model's `replica_skew` ticks (traces without replica clocks: δ = 0).
    pub fn replays_clock_skew_of(&self, model: &LeaseModel) -> bool {
        let skew = self
            .tick_ms(model.config.lease_ttl)
            .map(|tick| tick * i64::from(model.config.replica_skew));
        skew.is_ok_and(|skew| self.lanes.contains_key(&skew))
    }

    /// Whether target mutations go to the servers' own demonstration targets (no `--target-url`):
    /// then the traces a demonstration target judges otherwise than the model's target are left
    /// out ([`judged_otherwise_by_a_demo_target`]).
    pub fn judges_on_demo_targets(&self) -> bool {
        self.demo_targets
    }

    /// Whether every server offers the prune's test hooks (`POST /v1/test/audit` and
    /// `POST /v1/test/prune`): the walks pruned between their jobs (`random-prune-*`) are then
    /// audited and pruned as in-process ([`super::prune`]); elsewhere they replay unpruned.
    pub fn prunes_between_jobs(&self) -> bool {
        self.servers.iter().all(|s| s.prune_hooks)
    }

    /// Whether every server offers the failover's test hooks (`POST /v1/test/replicate` and
    /// `POST /v1/test/failover`): the traces with a failover then replay.
    pub fn replays_failovers(&self) -> bool {
        self.servers.iter().all(|s| s.failover_hooks)
    }

    /// The δ (in milliseconds) each server's database records, in the order given.
    pub fn clock_skews_ms(&self) -> Vec<i64> {
        self.servers.iter().map(|s| s.clock_skew_ms).collect()
    }

    /// The servers' lease ttl.
    pub fn lease_ttl_ms(&self) -> u64 {
        self.lease_ttl_ms
    }

    /// How many servers the driver replays on.
    pub fn servers(&self) -> usize {
        self.servers.len()
    }

    /// How many traces it replays at once: [`HttpDriver::traces_per_server`] on each server.
    pub fn places(&self) -> usize {
        self.servers.len() * self.per_server
    }

    /// What the servers do not let the driver read: not compared.
    pub fn unread(&self) -> &[Part] {
        &self.unread
    }

    /// The server time of one tick of a model whose leases last `lease_ttl` ticks: the server's
    /// lease ttl must be a whole number of milliseconds per tick.
    pub fn tick_ms(&self, lease_ttl: u8) -> Result<i64, SetupError> {
        let error = SetupError::LeaseTtl {
            ttl_ms: self.lease_ttl_ms,
            ticks: lease_ttl,
        };
        let ticks = u64::from(lease_ttl);
        let tick = self.lease_ttl_ms.checked_div(ticks).unwrap_or(0);
        if tick == 0 || tick * ticks != self.lease_ttl_ms {
            return Err(error);
        }
        i64::try_from(tick).map_err(|_| error)
    }

    /// The first server's base URL.
    pub fn url(&self) -> &str {
        self.servers[0].operator.http.base()
    }

    /// Every server's base URL.
    pub fn urls(&self) -> Vec<&str> {
        self.servers
            .iter()
            .map(|s| s.operator.http.base())
            .collect()
    }
}

/// The δ a server's metrics say its database records (`leasewright_database_max_clock_skew_seconds`),
/// in milliseconds: 0 when it records none (-1) or the metric is not there.
fn recorded_clock_skew_ms(metrics: &str) -> i64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix("leasewright_database_max_clock_skew_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map_or(0, |s| (s * 1000.0).round() as i64)
}

/// The base64 of the one-file source snapshot every job is submitted with.
fn probe_snapshot() -> String {
    let snapshot = build_snapshot(vec![SourceFile {
        path: "README".into(),
        mode: 0o644,
        content: b"a job of a conformance trace; its command is `true`\n".to_vec(),
    }])
    .expect("a one-file snapshot builds");
    base64::engine::general_purpose::STANDARD.encode(&snapshot.archive)
}

fn submit_request(
    archive_base64: &str,
    revision: &str,
    slot: &str,
    kind: &str,
) -> SubmitJobRequest {
    SubmitJobRequest {
        command: "true".into(),
        source_revision: revision.into(),
        source_archive_base64: archive_base64.into(),
        artifacts: Vec::new(),
        target: Some(slot.into()),
        target_kind: Some(kind.into()),
    }
}

/// A server taken by a session; given back when the session ends.
struct Taken {
    index: usize,
    idle: Arc<Mutex<Vec<usize>>>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.idle.lock().expect("the idle list").push(self.index);
    }
}

impl Driver for HttpDriver {
    type Session = HttpSession;

    fn name(&self) -> String {
        match self.servers.len() {
            1 => format!("http ({})", self.url()),
            n => format!("http ({} and {} more)", self.url(), n - 1),
        }
    }

    async fn open(&self, model: &LeaseModel, trace: &str) -> Result<HttpSession, DriverError> {
        self.open_on(model, trace, Sharing::Shared).await
    }

    /// A trace with a failover replays on servers with the failover's test hooks, alone: the
    /// hooks copy and restore the server's whole database, and the wait its failover begins
    /// holds every claim received before its end, so every later trace runs after it
    /// ([`Floor`]).
    async fn open_trace(
        &self,
        model: &LeaseModel,
        trace: &Generated<LeaseModel>,
    ) -> Result<HttpSession, DriverError> {
        if prune::is_prune_walk(&trace.name) && self.prunes_between_jobs() {
            let plan = prune::plan(trace)
                .ok_or_else(|| unmappable("a prune walk with no step to prune before"))?;
            let mut session = self
                .open_on(model, &trace.name, Sharing::Alone(BTreeSet::new()))
                .await?;
            // As in-process: no other job's earlier result beside a result (that item would
            // write into a finished job's ledger at a step that names no such job, and the
            // model's plan of what the prune must delete would not hold).
            session.batches = std::mem::take(&mut session.batches).without_other_jobs();
            session.prune = Some(HttpPrune {
                plan,
                audited: false,
                pruned: BTreeSet::new(),
            });
            return Ok(session);
        }
        if !failover::has_failover(trace) {
            return self.open_on(model, &trace.name, Sharing::Shared).await;
        }
        if !self.replays_failovers() {
            return Err(unmappable(crate::select::FAILOVER));
        }
        let snapshot_before = failover::snapshot_steps(trace).ok_or_else(|| {
            unmappable(
                "a failover whose state to go back to is not the state before one of the \
                 trace's steps",
            )
        })?;
        self.open_on(model, &trace.name, Sharing::Alone(snapshot_before))
            .await
    }
}

/// How a trace shares its server's database with the other traces ([`HttpDriver::open_on`]).
enum Sharing {
    /// Beside the others, after the waits earlier failovers began.
    Shared,
    /// Alone on every server (a trace with a failover or a prune: the standby's copy, the wait
    /// and the audit's watermark are the whole database's), the standby catching up before the
    /// steps named ([`failover::snapshot_steps`]; none for a walk pruned between its jobs).
    Alone(BTreeSet<usize>),
}

impl HttpDriver {
    /// [`Driver::open`], beside the other traces or alone ([`Sharing`]).
    async fn open_on(
        &self,
        model: &LeaseModel,
        trace: &str,
        sharing: Sharing,
    ) -> Result<HttpSession, DriverError> {
        let config = &model.config;
        let tick_ms = self.tick_ms(config.lease_ttl).map_err(unmappable)?;
        // One trace per place: one per server when the clock is the server's, several when each
        // request carries its trace's time; on a server whose database records the trace's δ.
        let skew = tick_ms * i64::from(config.replica_skew);
        let lane = self.lanes.get(&skew).ok_or_else(|| {
            unmappable(format!(
                "a trace with δ = {skew} ms: no server's database records it"
            ))
        })?;
        let permit = Arc::clone(&lane.free)
            .acquire_owned()
            .await
            .map_err(|_| failed("the driver is closed"))?;
        let index = lane
            .idle
            .lock()
            .expect("the idle list")
            .pop()
            .expect("a permit means a free server");
        let taken = Taken {
            index,
            idle: Arc::clone(&lane.idle),
            _permit: permit,
        };
        // Every trace after the waits earlier failovers began; one with a failover alone.
        let floor = match &sharing {
            Sharing::Alone(_) => Floor::Alone(Arc::clone(&self.floor).write_owned().await),
            Sharing::Shared => Floor::Shared(Arc::clone(&self.floor).read_owned().await),
        };
        // A trace that sweeps over every project, as the server's background sweeper does, on a
        // server where traces run at once (each at its own time): alone among such traces, at a
        // time long before every other trace's, as in-process (`pg::sweeps_globally`). On a
        // shared clock every sweep is over every project already (one trace per server).
        // A trace alone on the servers (a failover or a prune) sweeps as in-process, where it
        // has a schema of its own: its sweeps are scoped to its projects.
        let global = if self.servers[index].own_time
            && sweeps_globally(trace)
            && matches!(sharing, Sharing::Shared)
        {
            Some(Arc::clone(&self.global_lane).lock_owned().await)
        } else {
            None
        };
        // A day before the floor once a failover moved it (the wait it began holds every claim
        // before its end), ten years before the trace epoch until then.
        let first_epoch = floor.get().epochs[index];
        let epoch = match (global.is_some(), floor.get().floor) {
            (false, floor) => trace_epoch() + floor,
            (true, floor) if floor == Duration::zero() => global_sweep_epoch(),
            (true, floor) => trace_epoch() + floor - Duration::days(1),
        };
        // The trace's own time, sent with every request, where the server takes it.
        let time = self.servers[index].own_time.then(|| TestTime::new(epoch));
        let server = match &time {
            Some(time) => self.servers[index].at(time),
            None => self.servers[index].clone(),
        };
        let op = &server.operator;
        let unique = Uuid::new_v4().simple().to_string();
        let outsider = model.outsider().is_some();
        // The clock (unless the trace carries its own) and both projects at once.
        let (_, project, outsider_project) = tokio::try_join!(
            async {
                if time.is_some() {
                    return Ok(None);
                }
                op.clock(&ClockRequest {
                    set: Some(epoch),
                    advance_ms: None,
                })
                .await
                .map(Some)
                .map_err(http_failed)
            },
            async {
                op.create_project(&format!("{trace}-{unique}"))
                    .await
                    .map_err(http_failed)
            },
            async {
                if outsider {
                    op.create_project(&format!("{trace}-{unique}-outsider"))
                        .await
                        .map(Some)
                        .map_err(http_failed)
                } else {
                    Ok(None)
                }
            },
        )?;
        // Runners and jobs at once (jobs in submission order: claim order follows it). Model slot
        // `s` is the slot named `{trace}-{unique}-{s}`: fresh in every trace, and shared by every
        // job (of either project) the model puts on it, as in-process.
        let slots: Vec<String> = (0..config.slots())
            .map(|s| format!("{trace}-{unique}-{s}"))
            .collect();
        // Project 0's jobs first, then the outsider project's (the model's job order).
        let owners: Vec<Uuid> = (0..config.all_jobs())
            .map(|j| match outsider_project {
                Some(o) if j >= config.jobs => o,
                _ => project,
            })
            .collect();
        let (created, jobs) = tokio::try_join!(
            async {
                let mut tasks = tokio::task::JoinSet::new();
                for r in 0..config.runners + u8::from(outsider) {
                    let (op, p) = match outsider_project {
                        Some(o) if r == config.runners => (op.clone(), o),
                        _ => (op.clone(), project),
                    };
                    tasks.spawn(
                        async move { (r, op.create_runner(p, &format!("runner-{r}")).await) },
                    );
                }
                let mut created = BTreeMap::new();
                while let Some(joined) = tasks.join_next().await {
                    let (r, result) = joined.map_err(|e| failed(e.to_string()))?;
                    created.insert(r, result.map_err(http_failed)?);
                }
                Ok::<_, DriverError>(created)
            },
            async {
                let mut jobs = Vec::with_capacity(owners.len());
                for (j, owner) in owners.iter().enumerate() {
                    let slot = &slots[usize::from(config.slot_of(j as u8))];
                    let submitted = op
                        .submit(
                            *owner,
                            &submit_request(
                                &self.archive_base64,
                                &format!("rev-{j}"),
                                slot,
                                config.target.as_str(),
                            ),
                        )
                        .await
                        .map_err(http_failed)?;
                    jobs.push(submitted.job);
                }
                Ok(jobs)
            },
        )?;
        let mut runners = Vec::new();
        let mut clients = Vec::new();
        for created in created.into_values() {
            runners.push(created.runner);
            clients.push(RunnerClient {
                http: op.http.with_token(&created.token),
            });
        }
        Ok(HttpSession {
            model: model.clone(),
            tick_ms,
            ticks: 0,
            replica: 0,
            clock_at: Some(0),
            project,
            outsider_project: outsider_project.unwrap_or(project),
            runners,
            clients,
            // One more: the jobs no one created ([`HttpSession::unknown_job_observations`]).
            seen: vec![0; jobs.len() + 1],
            jobs,
            owners,
            attempts: Vec::new(),
            attempt_jobs: Vec::new(),
            leases: BTreeMap::new(),
            slots,
            target_kind: config.target,
            unread: self.unread.clone(),
            page_limit: self.page_limit,
            answer: None,
            sent_payload: None,
            payloads: PayloadDigests::default(),
            server,
            time,
            epoch,
            global,
            unknown_ids: UnknownIds::fresh(),
            unauthenticated: false,
            revoked: BTreeSet::new(),
            names_unknown_job: false,
            batch_results: sends_batch_results(trace),
            batches: ResultBatches::new(trace_hash_bit(trace)),
            echo_after: None,
            differences: Vec::new(),
            snapshot_before: match sharing {
                Sharing::Alone(steps) => steps,
                Sharing::Shared => BTreeSet::new(),
            },
            step_index: 0,
            first_epoch,
            floor,
            prune: None,
            _taken: taken,
        })
    }
}

/// A walk pruned between its jobs over HTTP ([`super::prune`]), through the server's test hooks.
struct HttpPrune {
    plan: prune::Plan,
    /// The audit before the prune was clean (its watermark recorded).
    audited: bool,
    /// The model jobs the prune deleted (compared on neither side from then on).
    pruned: BTreeSet<u8>,
}

/// One trace's namespace on one server.
pub struct HttpSession {
    server: Server,
    model: LeaseModel,
    /// One model tick, in milliseconds of server time.
    tick_ms: i64,
    /// Model ticks so far.
    ticks: i64,
    /// How many ticks off the true clock the replica serving the next steps reads
    /// (`replica_clock`): every request is received at the true time plus this.
    replica: i64,
    /// The ticks the server's clock shows (`None`: unknown), sent lazily.
    clock_at: Option<i64>,
    project: Uuid,
    /// The outsider's project (model project 1).
    outsider_project: Uuid,
    /// Model runner index → runner (the outsider last).
    runners: Vec<Uuid>,
    /// Model runner index → a client speaking with that runner's token.
    clients: Vec<RunnerClient>,
    /// Model job index → job.
    jobs: Vec<Uuid>,
    /// Model job index → the project that owns it (project 0's, or the outsider's).
    owners: Vec<Uuid>,
    /// Model job index → the observations of that job seen so far; last, those naming a job no
    /// one created.
    seen: Vec<usize>,
    /// Model attempt index → attempt.
    attempts: Vec<Uuid>,
    /// Model attempt index → its job (nil where the implementation made no attempt).
    attempt_jobs: Vec<Uuid>,
    /// Model lease id → lease id.
    leases: BTreeMap<u8, Uuid>,
    /// Model slot index → its target slot's name.
    slots: Vec<String>,
    target_kind: model::TargetKind,
    unread: Vec<Part>,
    /// The `?limit=` of every list read (every page is read).
    page_limit: i64,
    /// The value the last step's rule returned.
    answer: Option<Answer>,
    /// The payload the last step sent, as [`payload_label`] names it.
    sent_payload: Option<String>,
    payloads: PayloadDigests,
    /// The trace's own time, sent with every request (`None`: the server's shared clock,
    /// set by [`HttpSession::sync_clock`]).
    time: Option<TestTime>,
    /// The server time the trace starts at.
    epoch: DateTime<Utc>,
    /// The lane of traces that sweep over every project, held while this one does.
    global: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The trace's base of ids no one created ([`HttpSession::unknown`]): random, low 16 bits 0.
    unknown_ids: UnknownIds,
    /// The last step sent a message from a runner no one created: over HTTP its bearer token
    /// authenticates nobody, it is refused `401` before any check and nothing is recorded
    /// ([`HttpSession::deliver_unauthenticated`]).
    unauthenticated: bool,
    /// The model runners an operator revoked (`runner_revoke`): their token authenticates
    /// nothing from then on, so what they send is refused `401` and recorded nowhere.
    revoked: BTreeSet<u8>,
    /// A step has sent a message naming a job no one created: from then on the projects'
    /// security logs are read for its records.
    names_unknown_job: bool,
    /// Results go as one-item batches (`/v1/runner/results`), as in-process.
    batch_results: bool,
    /// The extra items of the result batches, as in-process ([`ResultBatches`]).
    batches: ResultBatches,
    /// The model's state after the current step (the extra items are judged in it).
    echo_after: Option<State>,
    /// What the driver found to differ from the model ([`Session::differences`]).
    differences: Vec<String>,
    /// The 0-based steps before which the standby catches up (a trace with a failover).
    snapshot_before: BTreeSet<usize>,
    /// The 0-based index of the next step.
    step_index: usize,
    /// The epoch of the trace's first fences and slot tokens: a model token `e * EPOCH_BASE + g`
    /// is the server's `(first_epoch + e) * 2^32 + g` (`driver::token_to_model`).
    first_epoch: i64,
    /// The trace's hold on the floor of its time (alone for a trace with a failover or a prune).
    floor: Floor,
    /// A walk pruned between its jobs: what the driver does and found.
    prune: Option<HttpPrune>,
    /// The server is this trace's until the session ends.
    _taken: Taken,
}

/// The bit of a trace's name that chooses a conflicting echo over a duplicate, as in-process.
fn trace_hash_bit(trace: &str) -> bool {
    crate::drivers::pg::conflicting_echo(trace)
}

impl HttpSession {
    /// The project whose operator takes an operator step: the job's own project's, or (the
    /// model's `outsider_*` actions) the other project's.
    fn operator_project(&self, action: &Action, job: u8) -> Uuid {
        let own = self.owners[usize::from(job)];
        let other = matches!(
            action,
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. }
        );
        match (other, own == self.project) {
            (false, _) => own,
            (true, true) => self.outsider_project,
            (true, false) => self.project,
        }
    }

    /// The project whose security log keeps what the other project's runners sent naming a job
    /// of `owner` (protocol §7): the other project of the trace, if there is one.
    fn other_project(&self, owner: Uuid) -> Option<Uuid> {
        if self.outsider_project == self.project {
            None
        } else if owner == self.project {
            Some(self.outsider_project)
        } else {
            Some(self.project)
        }
    }

    fn reads(&self, part: Part) -> bool {
        !self.unread.contains(&part)
    }

    /// The server's time now, by the clock of the replica serving the step.
    fn now(&self) -> DateTime<Utc> {
        self.epoch + Duration::milliseconds((self.ticks + self.replica) * self.tick_ms)
    }

    /// Whole ticks from now to `at`.
    fn ticks_until(&self, at: DateTime<Utc>) -> i64 {
        (at - self.now()).num_milliseconds() / self.tick_ms
    }

    /// Brings the server's clock to the trace's time (ticks are merged into one `set`).
    /// What each job's observations were so far: the next step's records begin after them.
    async fn mark_seen(&mut self) -> Result<(), DriverError> {
        if self.reads(Part::Observation) {
            for j in 0..=self.jobs.len() {
                if !self.is_pruned(j) {
                    self.seen[j] = self.observations(j).await?.len();
                }
            }
        }
        Ok(())
    }

    /// Whether the model job `j` was pruned (compared on neither side from then on).
    fn is_pruned(&self, j: usize) -> bool {
        self.prune
            .as_ref()
            .is_some_and(|p| u8::try_from(j).is_ok_and(|j| p.pruned.contains(&j)))
    }

    /// The audit before a prune between jobs (`POST /v1/test/audit`): a whole audit of the
    /// server's ledger, which must be clean; the server records its watermark.
    async fn audit_for_prune(&mut self) -> Result<(), DriverError> {
        self.sync_clock().await?;
        let audit = self.server.hooks.audit_hook().await.map_err(http_failed)?;
        if !audit.clean || audit.watermark.is_none() {
            self.differences.push(format!(
                "the audit of the ledger before the prune: {}",
                if audit.findings.is_empty() {
                    "no watermark recorded".to_owned()
                } else {
                    audit.findings.join("; ")
                }
            ));
            return Ok(());
        }
        if let Some(p) = self.prune.as_mut() {
            p.audited = true;
        }
        Ok(())
    }

    /// The prune between a walk's jobs (`POST /v1/test/prune`): every finished job the audit
    /// covered; then which of the trace's jobs it deleted (their reads answer 404), against what
    /// the model says it must and may delete, and the audit since the watermark, which must be
    /// clean.
    async fn prune_between_jobs(
        &mut self,
        before: &State,
        plan: &prune::Plan,
    ) -> Result<(), DriverError> {
        if !self.prune.as_ref().is_some_and(|p| p.audited) {
            // The audit before it found something (a difference already said).
            return Ok(());
        }
        self.sync_clock().await?;
        let pruned_report = self.server.hooks.prune_hook().await.map_err(http_failed)?;
        let mut pruned = BTreeSet::new();
        for (j, (job, owner)) in self.jobs.iter().zip(&self.owners).enumerate() {
            let read: Result<Value, CallError> =
                self.server.operator.http.get(&job_path(*owner, *job)).await;
            match read {
                Ok(_) => {}
                Err(CallError::Http { status: 404, .. }) => {
                    pruned.insert(j as u8);
                }
                Err(error) => return Err(http_failed(error)),
            }
        }
        self.differences
            .extend(prune::judge(plan, before, &pruned, pruned_report.kept));
        if !pruned_report.clean {
            self.differences.push(format!(
                "the audit --since the watermark after the prune: {}",
                pruned_report.findings.join("; ")
            ));
        }
        if let Some(p) = self.prune.as_mut() {
            p.pruned = pruned;
        }
        Ok(())
    }

    /// The model's failover, as the in-process driver replays it (`pg::PgSession::fail_over`),
    /// through the server's test hook `POST /v1/test/failover`: the database goes back to what
    /// the standby held (the step before which it caught up last, and everything since, is
    /// lost), the epoch advances and the server records its lease policy; then the new epoch's
    /// first claim, which takes nothing and starts the wait (runners poll, so in production it
    /// comes at once; the model's wait starts at the failover).
    async fn fail_over(&mut self) -> Result<(), DriverError> {
        let failed_over = self.server.hooks.failover().await.map_err(http_failed)?;
        if failed_over.epoch <= failed_over.epoch_before {
            return Err(DriverError::Implementation(format!(
                "the failover hook left the epoch at {} (it was {})",
                failed_over.epoch, failed_over.epoch_before
            )));
        }
        // The server's epoch from now on, for the traces after this one.
        if let Floor::Alone(timeline) = &mut self.floor {
            timeline.epochs[self._taken.index] = failed_over.epoch;
        }
        self.sync_clock().await?;
        let client = (0..self.clients.len())
            .find(|r| !self.revoked.contains(&(*r as u8)))
            .map(|r| self.clients[r].clone())
            .ok_or_else(|| unmappable("a failover in a trace with no runner"))?;
        let first: Result<ClaimRead, CallError> = client
            .http
            .post("/v1/runner/claim", &json!({"capacity": 1}))
            .await;
        match first {
            Err(CallError::Rejected { code, .. }) if code == "no_queued_job" => {}
            Ok(claimed) => {
                return Err(DriverError::Implementation(format!(
                    "the first claim of the epoch after a failover was answered `{}` with {} \
                     leases, not no_queued_job (it must wait)",
                    claimed.verdict,
                    claimed.leases.len()
                )))
            }
            Err(error) => {
                return Err(DriverError::Implementation(format!(
                    "the first claim of the epoch after a failover was answered {error}, not \
                     no_queued_job (it must wait)"
                )))
            }
        }
        // What the restored database recorded last is where the next step's records begin.
        self.mark_seen().await
    }

    async fn sync_clock(&mut self) -> Result<(), DriverError> {
        if let Some(time) = &self.time {
            // No request: the next one carries the time.
            time.set(self.now());
            self.clock_at = Some(self.ticks + self.replica);
            return Ok(());
        }
        if self.clock_at != Some(self.ticks + self.replica) {
            self.server
                .operator
                .clock(&ClockRequest {
                    set: Some(self.now()),
                    advance_ms: None,
                })
                .await
                .map_err(http_failed)?;
            self.clock_at = Some(self.ticks + self.replica);
        }
        Ok(())
    }

    fn tuple(&self, m: &model::Message) -> Result<TupleBody, DriverError> {
        // An index the trace never created (a probe's unknown job or attempt) is an id no one
        // created, sent through the same route: the server must find nothing under it (§6.1
        // checks 2 and 4), as in-process.
        let get = |v: &[Uuid], i: u8, what: u8| {
            v.get(usize::from(i))
                .copied()
                .unwrap_or_else(|| self.unknown(what, i))
        };
        Ok(TupleBody {
            job: get(&self.jobs, m.job, JOB),
            attempt: get(&self.attempts, m.attempt, ATTEMPT),
            lease_id: if m.lease == model::FORGED_LEASE {
                FORGED_LEASE
            } else {
                *self
                    .leases
                    .get(&m.lease)
                    .ok_or_else(|| unmappable(format!("lease {}", m.lease)))?
            },
            fence: token_to_impl(self.first_epoch, m.fence),
            runner_time: Some(runner_time(m.runner_time)),
        })
    }

    /// The id that stands for the model's never-created runner, job or attempt `index`: unique
    /// to the trace, created by no one (as in-process, `pg::PgSession::unknown`).
    fn unknown(&self, what: u8, index: u8) -> Uuid {
        self.unknown_ids.id(what, index)
    }

    /// The model index of a runner, job or attempt id, created or [`HttpSession::unknown`].
    fn model_index(&self, what: u8, v: &[Uuid], id: Uuid) -> Result<u8, DriverError> {
        self.unknown_ids.model_index(what, v, id)
    }

    /// A bearer token of the runner routes' form (`lw_{runner}_{secret}`, docs/http.md) for the
    /// model's never-created runner `index`: well formed, and it authenticates nobody.
    fn nobody(&self, index: u8) -> RunnerClient {
        let token = format!(
            "lw_{}_{}{}",
            self.unknown(RUNNER, index).simple(),
            Uuid::new_v4().simple(),
            Uuid::new_v4().simple()
        );
        RunnerClient {
            http: self.server.operator.http.with_token(&token),
        }
    }

    fn index_of<T: PartialEq>(v: &[T], x: &T, what: &str) -> Result<u8, DriverError> {
        v.iter()
            .position(|y| y == x)
            .map(|i| i as u8)
            .ok_or_else(|| {
                DriverError::Implementation(format!("the implementation shows an unknown {what}"))
            })
    }

    async fn deliver(&mut self, m: &model::Message) -> Result<Observed, DriverError> {
        if m.kind != MessageKind::TargetMutation {
            self.sync_clock().await?;
        }
        self.sent_payload = payload_label(m);
        let tuple = self.tuple(m)?;
        if usize::from(m.job) >= self.jobs.len() {
            self.names_unknown_job = true;
        }
        let client = match self.clients.get(usize::from(m.sender)) {
            Some(client) => client.clone(),
            // The target's route takes no runner token: the same for any sender.
            None if m.kind == MessageKind::TargetMutation => self.nobody(m.sender),
            None => {
                let nobody = self.nobody(m.sender);
                return self.deliver_unauthenticated(m, &tuple, nobody).await;
            }
        };
        if self.revoked.contains(&m.sender) && m.kind != MessageKind::TargetMutation {
            // The runner's own token, revoked: refused as nobody's is.
            return self.deliver_unauthenticated(m, &tuple, client).await;
        }
        match m.kind {
            MessageKind::Heartbeat => {
                let result: Result<HeartbeatRead, CallError> =
                    client.http.post("/v1/runner/heartbeat", &tuple).await;
                if let Ok(r) = &result {
                    if r.verdict == "accepted" {
                        let (Some(expiry), Some(cancel)) = (r.lease_expiry, r.cancel_requested)
                        else {
                            return Err(DriverError::Implementation(
                                "an accepted heartbeat without `lease_expiry` and \
                                 `cancel_requested`"
                                    .into(),
                            ));
                        };
                        self.answer = Some(Answer::Heartbeat {
                            lease_ticks: self.ticks_until(expiry),
                            cancel_requested: cancel,
                        });
                    }
                }
                answer(result, |r| &r.verdict)
            }
            MessageKind::Result(outcome) => {
                // As in-process: every result is followed by the extra items of its batch
                // ([`ResultBatches`]: its echo, another job's earlier result) through the batch
                // route (`/v1/runner/results`), in one batch with it when the trace sends
                // batches.
                let item = (
                    tuple,
                    outcome.as_str().to_owned(),
                    result_digest(outcome, m.digest),
                );
                let extra = self
                    .batches
                    .extra_items(&self.model, self.echo_after.as_ref(), m);
                let extra_items = extra
                    .iter()
                    .map(|(e, o)| {
                        Ok((
                            self.tuple(e)?,
                            o.as_str().to_owned(),
                            result_digest(*o, e.digest),
                        ))
                    })
                    .collect::<Result<Vec<_>, DriverError>>()?;
                let (verdict, extra_answers) = if self.batch_results {
                    let items: Vec<_> = std::iter::once(item).chain(extra_items).collect();
                    let mut answers = client.results(&items).await.map_err(http_failed)?;
                    if answers.len() != items.len() {
                        return Err(failed(format!(
                            "a batch result of {} items answered {} verdicts",
                            items.len(),
                            answers.len()
                        )));
                    }
                    let first = item_verdict(&answers.remove(0))?;
                    (first, answers)
                } else {
                    let verdict = answer(client.result(&item.0, &item.1, &item.2).await, |r| {
                        &r.verdict
                    })?;
                    let answers = if extra_items.is_empty() {
                        Vec::new()
                    } else {
                        client.results(&extra_items).await.map_err(http_failed)?
                    };
                    (verdict, answers)
                };
                let got = extra_answers
                    .iter()
                    .map(item_verdict)
                    .collect::<Result<Vec<_>, _>>()?;
                self.batches.check_verdicts(&got, self.batch_results);
                Ok(verdict)
            }
            MessageKind::Rejoin => {
                let result: Result<RejoinRead, CallError> =
                    client.http.post("/v1/runner/rejoin", &tuple).await;
                let instruction = match &result {
                    Ok(r) => r.instruction.as_deref(),
                    Err(CallError::Rejected { instruction, .. }) => {
                        Some(instruction.as_deref().unwrap_or("stop"))
                    }
                    Err(_) => None,
                };
                self.answer = instruction.map(|i| Answer::Rejoin {
                    instruction: match i {
                        "continue" => rejoin_instruction(true, false),
                        "cancel" => rejoin_instruction(true, true),
                        "stop" => rejoin_instruction(false, false),
                        _ => "(an instruction the spec does not name)",
                    },
                });
                answer(result, |r| &r.verdict)
            }
            MessageKind::SideEffect(effect) => {
                let (verdict, served) = side_effect(&client, &tuple, effect).await?;
                self.answer = served;
                Ok(verdict)
            }
            MessageKind::TargetMutation => {
                let slot = self
                    .slots
                    .get(usize::from(self.model.config.slot_of(m.job)))
                    .ok_or_else(|| unmappable(format!("the slot of job {}", m.job)))?;
                // The slot token the model's message carries, not the named attempt's own (the
                // target compares what it is sent, §8.4); the numbers are the implementation's,
                // as both count a fresh slot's reservations from 1.
                let slot_token = token_to_impl(self.first_epoch, m.token);
                let body = DeployRequest {
                    kind: self.target_kind.as_str().into(),
                    job: tuple.job,
                    attempt: tuple.attempt,
                    slot_token,
                    deployment_id: tuple.job.to_string(),
                };
                answer(
                    self.server
                        .target
                        .post::<_, VerdictRead>(&format!("{}/deploy", target_path(slot)), &body)
                        .await,
                    |r| &r.verdict,
                )
            }
        }
    }

    /// `m` from the model's runner `m.sender`, whom no one created, or whom an operator
    /// revoked. Over HTTP the sender is its bearer token, and a token that authenticates nobody
    /// is refused `401` before any check (docs/protocol.md §6.1 check 1, docs/http.md
    /// "Conventions"): the model's `unknown_runner`. Sent through the route a created runner's
    /// `m` takes, with the same body, under `client`: a well-formed token of no runner
    /// ([`HttpSession::nobody`]), or the revoked runner's own; nothing may be recorded
    /// ([`Session::project`] checks that the step recorded nothing).
    async fn deliver_unauthenticated(
        &mut self,
        m: &model::Message,
        tuple: &TupleBody,
        client: RunnerClient,
    ) -> Result<Observed, DriverError> {
        use crate::side_effects::{payload_bytes, ARTIFACT_NAME, CACHE_KEY};
        use model::SideEffect as E;
        self.unauthenticated = true;
        let tuple = *tuple;
        let sent: Result<(), CallError> = match m.kind {
            MessageKind::Heartbeat => client
                .http
                .post::<_, Value>("/v1/runner/heartbeat", &tuple)
                .await
                .map(drop),
            MessageKind::Rejoin => client
                .http
                .post::<_, Value>("/v1/runner/rejoin", &tuple)
                .await
                .map(drop),
            MessageKind::Result(outcome) => {
                // With its echo, as every result ([`HttpSession::deliver`]): the model refuses
                // the echo `unknown_runner` too, and records neither.
                let item = (
                    tuple,
                    outcome.as_str().to_owned(),
                    result_digest(outcome, m.digest),
                );
                let echo = self.echo_after.as_ref().and_then(|after| {
                    result_echo(&self.model, after, m, self.batches.conflicting())
                });
                let echo_item = echo.as_ref().map(|(e, _, _)| {
                    (
                        tuple,
                        outcome.as_str().to_owned(),
                        result_digest(outcome, e.digest),
                    )
                });
                let (sent, echo_got) = if self.batch_results {
                    // One request: its answer is both items'.
                    let items: Vec<_> = [Some(item), echo_item].into_iter().flatten().collect();
                    let sent = client.results(&items).await.map(drop);
                    let echo_got = echo.is_some().then(|| refused(&sent)).transpose()?;
                    (sent, echo_got)
                } else {
                    let sent = client.result(&item.0, &item.1, &item.2).await.map(drop);
                    let echo_got = match echo_item {
                        Some(e) => Some(refused(&client.results(&[e]).await.map(drop))?),
                        None => None,
                    };
                    (sent, echo_got)
                };
                if let (Some((e, expected, _)), Some(got)) = (echo, echo_got) {
                    if got != expected {
                        self.differences.push(format!(
                            "the batch result's second item for job {} ({}, right after the \
                             step's result) from a runner no one created: expected {expected}, \
                             observed {got}",
                            e.job,
                            result_digest(outcome, e.digest)
                        ));
                    }
                }
                sent
            }
            MessageKind::SideEffect(effect) => {
                let bytes = payload_bytes(effect).unwrap_or_default();
                let get = |path: &'static str, name: &str| {
                    let body = GetRequest {
                        tuple,
                        name: name.into(),
                    };
                    let http = client.http.clone();
                    async move { http.post::<_, Value>(path, &body).await.map(drop) }
                };
                match effect {
                    E::SourceFetch => client.source(&tuple).await.map(drop),
                    E::LogAppend { seq, .. } => client
                        .log_append(&tuple, i64::from(seq), &bytes)
                        .await
                        .map(drop),
                    E::ArtifactPut { .. } => client
                        .artifact_put(&tuple, ARTIFACT_NAME, &bytes)
                        .await
                        .map(drop),
                    E::CachePut { .. } => {
                        client.cache_put(&tuple, CACHE_KEY, &bytes).await.map(drop)
                    }
                    E::ArtifactGet => get("/v1/runner/artifacts/get", ARTIFACT_NAME).await,
                    E::CacheGet => get("/v1/runner/cache/get", CACHE_KEY).await,
                }
            }
            MessageKind::TargetMutation => {
                return Err(unmappable("a target mutation through a runner route"))
            }
        };
        refused(&sent)
    }

    /// The observations of model job `j`, in receipt order (every page); `j` one past the last
    /// job: those naming a job no one created ([`HttpSession::unknown_job_observations`]).
    async fn observations(&self, j: usize) -> Result<Vec<ObservationRead>, DriverError> {
        if j == self.jobs.len() {
            return self.unknown_job_observations().await;
        }
        let http = &self.server.operator.http;
        let path = format!("{}/observations", job_path(self.owners[j], self.jobs[j]));
        let mut all: Vec<ObservationRead> = every_page(http, &path, self.page_limit)
            .await
            .map_err(http_failed)?;
        // What a runner sent naming another project's job is its own project's security log,
        // never the job's ledger (protocol §7): the outsider naming the project's jobs, and the
        // project's runners naming the outsider's. The model records it as a message like any
        // other.
        if let Some(other) = self.other_project(self.owners[j]) {
            let path = format!("/v1/projects/{other}/security-log");
            let log: Vec<ObservationRead> = every_page(http, &path, self.page_limit)
                .await
                .map_err(http_failed)?;
            all.extend(
                log.into_iter()
                    .filter(|o| o.named_job == Some(self.jobs[j])),
            );
            all.sort_by_key(|o| o.id);
        }
        Ok(all)
    }

    /// What the trace's runners sent naming a job no one created, in receipt order: kept in the
    /// sender's project's security log (protocol §7; docs/http.md, the security log), never in
    /// a job's ledger. In-process, the same records are read by the id they name.
    async fn unknown_job_observations(&self) -> Result<Vec<ObservationRead>, DriverError> {
        if !self.names_unknown_job {
            // The trace's projects are its own: nothing names such a job yet.
            return Ok(Vec::new());
        }
        let http = &self.server.operator.http;
        let mut all = Vec::new();
        let mut projects = vec![self.project];
        if self.outsider_project != self.project {
            projects.push(self.outsider_project);
        }
        for project in projects {
            let path = format!("/v1/projects/{project}/security-log");
            let log: Vec<ObservationRead> = every_page(http, &path, self.page_limit)
                .await
                .map_err(http_failed)?;
            all.extend(log.into_iter().filter(|o| {
                o.named_job
                    .is_some_and(|job| self.unknown_ids.index(JOB, job).is_some())
            }));
        }
        all.sort_by_key(|o| o.id);
        Ok(all)
    }

    /// The projection of `o`, an observation of model job `job`.
    fn observation(
        &self,
        job: usize,
        o: &ObservationRead,
    ) -> Result<ObservationProjection, DriverError> {
        let verdict: model::Verdict = code(&o.verdict)?;
        let reason = match (&o.reason, verdict) {
            (Some(reason), model::Verdict::Rejected) => Some(code(reason)?),
            (None, model::Verdict::Rejected) => {
                return Err(DriverError::Implementation(
                    "a rejected observation without a reason".into(),
                ))
            }
            _ => None,
        };
        let kind = crate::side_effects::kind_name(&o.kind).ok_or_else(|| {
            DriverError::Implementation(format!(
                "an observation of kind {} in a trace that sends none",
                o.kind
            ))
        })?;
        Ok(ObservationProjection {
            attempt: match o.attempt {
                Some(a) => Some(Self::index_of(&self.attempts, &a, "attempt")?),
                None => None,
            },
            sender: self.model_index(RUNNER, &self.runners, o.runner)?,
            kind,
            job: u8::try_from(job).map_err(|_| unmappable(format!("job {job}")))?,
            named_attempt: self.model_index(ATTEMPT, &self.attempts, o.named_attempt)?,
            verdict,
            reason,
        })
    }

    /// The fields of `o` the core projection leaves out.
    fn observation_details(
        &mut self,
        o: &ObservationRead,
    ) -> Result<ObservationDetails, DriverError> {
        let (Some(lease_id), Some(fence)) = (o.named_lease_id, o.named_fence) else {
            return Err(DriverError::Implementation(
                "an observation without `named_lease_id` and `named_fence`".into(),
            ));
        };
        let lease = if lease_id == FORGED_LEASE {
            model::FORGED_LEASE
        } else {
            self.leases
                .iter()
                .find(|(_, id)| **id == lease_id)
                .map(|(m, _)| *m)
                .ok_or_else(|| {
                    DriverError::Implementation("an observation names an unknown lease id".into())
                })?
        };
        Ok(ObservationDetails {
            lease,
            fence: token_to_model(self.first_epoch, fence)?,
            outcome: match &o.outcome {
                Some(outcome) => Some(code(outcome)?),
                None => None,
            },
            runner_time: o.runner_time.map(model_runner_time),
            payload: self
                .payloads
                .label(o.payload_sha256.as_deref(), self.sent_payload.as_deref()),
        })
    }

    async fn job_projection(&self, j: usize) -> Result<JobProjection, DriverError> {
        let base = job_path(self.owners[j], self.jobs[j]);
        let http = &self.server.operator.http;
        let (view, attempts) = tokio::try_join!(
            async {
                if self.reads(Part::Jobs) {
                    http.get::<JobRead>(&base)
                        .await
                        .map(Some)
                        .map_err(http_failed)
                } else {
                    Ok(None)
                }
            },
            async {
                if self.reads(Part::Ledger) {
                    every_page::<AttemptRead>(http, &format!("{base}/attempts"), self.page_limit)
                        .await
                        .map_err(http_failed)
                } else {
                    Ok(Vec::new())
                }
            },
        )?;
        let mut ledger = Vec::with_capacity(attempts.len());
        for a in &attempts {
            ledger.push(AttemptProjection {
                attempt: Self::index_of(&self.attempts, &a.attempt, "attempt")?,
                runner: Self::index_of(&self.runners, &a.runner, "runner")?,
                fence: token_to_model(self.first_epoch, a.fence)?,
                state: code(&a.state)?,
            });
        }
        ledger.sort_by_key(|a| a.attempt);
        let Some(view) = view else {
            // Not read: blanked before the comparison.
            return Ok(JobProjection::blank(ledger));
        };
        let state: model::JobState = code(&view.state)?;
        let current_attempt = match view.current_attempt {
            Some(a) => Some(Self::index_of(&self.attempts, &a, "attempt")?),
            None => None,
        };
        let lease_holder = match current_attempt {
            Some(a) if state.is_leased() => {
                ledger.iter().find(|l| l.attempt == a).map(|l| l.runner)
            }
            _ => None,
        };
        Ok(JobProjection {
            state,
            current_attempt,
            fence: token_to_model(self.first_epoch, view.fence)?,
            lease_holder,
            cancel_requested: view.cancel_requested,
            target_reserved: view.target_reserved_by.is_some(),
            ledger,
        })
    }

    /// What the side effects stored, read as the in-process driver reads it: every attempt's
    /// log chunks and artifact, both projects' cache entries with the attempt that stored each.
    async fn stored(&self) -> Result<Stored, DriverError> {
        use crate::side_effects::{ARTIFACT_NAME, CACHE_KEY};
        let failed = |what: &str| {
            let what = what.to_owned();
            move |e: CallError| DriverError::Implementation(format!("reading {what}: {e}"))
        };
        let mut attempts = Vec::with_capacity(self.attempts.len());
        for (attempt, job) in self.attempts.iter().zip(&self.attempt_jobs) {
            let Some(j) = self.jobs.iter().position(|id| id == job) else {
                // No attempt of the implementation's: nothing it stored.
                attempts.push((Vec::new(), None));
                continue;
            };
            if self.is_pruned(j) {
                // Gone with its job; compared on neither side (`driver::blank_pruned`).
                attempts.push((Vec::new(), None));
                continue;
            }
            let base = job_path(self.owners[j], *job);
            let chunks: Vec<LogChunkBody> = self
                .server
                .operator
                .http
                .get(&format!("{base}/log-chunks?attempt={attempt}"))
                .await
                .map_err(failed("an attempt's log chunks"))?;
            let mut log = Vec::with_capacity(chunks.len());
            for c in chunks {
                log.push((c.seq, decode_base64(&c.content_base64)?));
            }
            let artifact = match self
                .server
                .operator
                .http
                .get_bytes(&format!(
                    "{base}/artifacts/{ARTIFACT_NAME}?attempt={attempt}"
                ))
                .await
            {
                Ok(bytes) => Some(bytes),
                Err(CallError::Http {
                    status: 404, code, ..
                }) if code == "not_found" => None,
                Err(e) => return Err(failed("an attempt's artifact")(e)),
            };
            attempts.push((log, artifact));
        }
        let mut cache = Vec::new();
        for project in [self.project, self.outsider_project] {
            let entry: Result<CacheEntryBody, CallError> = self
                .server
                .operator
                .http
                .get(&format!("/v1/projects/{project}/cache/{CACHE_KEY}"))
                .await;
            cache.push(match entry {
                Ok(e) => Some((
                    decode_base64(&e.content_base64)?,
                    Self::index_of(&self.attempts, &e.stored_by_attempt, "attempt")?,
                )),
                Err(CallError::Http {
                    status: 404, code, ..
                }) if code == "not_found" => None,
                Err(e) => return Err(failed("a cache entry")(e)),
            });
        }
        implementation_stored(attempts, cache)
    }

    async fn target_projection(&self, slot: &str) -> Result<TargetProjection, DriverError> {
        let (applied, highest) = match self
            .server
            .target
            .get::<TargetRead>(&target_path(slot))
            .await
        {
            Ok(state) => (state.applied_count, state.highest_slot_token),
            // A slot no mutation has reached yet.
            Err(CallError::Http { status: 404, .. }) => (0, None),
            Err(error) => return Err(http_failed(error)),
        };
        let cap = i64::from(crate::driver::applied_cap(self.target_kind));
        Ok(TargetProjection {
            applied: applied.clamp(0, cap) as u8,
            // A token no claim issued (a forged one) shows as the model's largest.
            highest_fence: match highest {
                Some(token) if self.target_kind == model::TargetKind::Fenced => {
                    token_to_model(self.first_epoch, token).unwrap_or(u8::MAX)
                }
                _ => 0,
            },
        })
    }
}

impl Session for HttpSession {
    async fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> Result<Option<Observed>, DriverError> {
        self.answer = None;
        self.sent_payload = None;
        self.unauthenticated = false;
        self.batches.clear();
        // Before the step a failover will lose: the standby catches up.
        let i = self.step_index;
        self.step_index += 1;
        if self.snapshot_before.contains(&i) {
            self.server.hooks.replicate().await.map_err(http_failed)?;
        }
        // A walk pruned between its jobs: the audit, then the prune, as its plan says.
        if let Some(plan) = self.prune.as_ref().map(|p| p.plan.clone()) {
            if i == plan.audit_before {
                self.audit_for_prune().await?;
            } else if i == plan.prune_before {
                self.prune_between_jobs(before, &plan).await?;
            }
        }
        self.echo_after =
            matches!(action, Action::Deliver { .. } | Action::Replay { .. }).then(|| after.clone());
        let verdict = match action {
            // The model's failover, through the server's test hooks ([`HttpSession::fail_over`]).
            Action::Failover if self.server.failover_hooks => {
                self.fail_over().await?;
                None
            }
            // Left out before replay where no server has the hooks (`suite::LeftOut::Failover`).
            // A second server starts only where servers differ in lease ttl
            // (`Config::policy_ttl`), which no suite replays.
            Action::Failover | Action::ServerStarts => {
                return Err(unmappable(crate::select::FAILOVER))
            }
            // The next steps are served by a replica whose clock reads `offset` ticks off the true
            // one: their requests carry (or the server's clock is set to) that time. The trace
            // runs on a server whose database records its δ (`HttpDriver::open`).
            Action::ReplicaClock { offset } => {
                self.replica = i64::from(*offset);
                None
            }
            Action::RunnerRevoke { runner } => {
                self.sync_clock().await?;
                let id = *self
                    .runners
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                let revoked: Value = self
                    .server
                    .operator
                    .http
                    .post(
                        &format!("/v1/projects/{}/runners/{id}/revoke", self.project),
                        &json!({}),
                    )
                    .await
                    .map_err(http_failed)?;
                if revoked.get("revoked_at").is_none_or(Value::is_null) {
                    return Err(DriverError::Implementation(format!(
                        "revoking runner {runner} answered no `revoked_at`: {revoked}"
                    )));
                }
                self.revoked.insert(*runner);
                None
            }
            Action::Claim { runner } | Action::ClaimBatch { runner, .. }
                if self.revoked.contains(runner) =>
            {
                // The revoked runner's own token: refused `401` before any check.
                self.sync_clock().await?;
                self.unauthenticated = true;
                let client = self
                    .clients
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                let sent: Result<(), CallError> = client
                    .http
                    .post::<_, Value>("/v1/runner/claim", &json!({"capacity": 1}))
                    .await
                    .map(drop);
                Some(refused(&sent)?)
            }
            Action::Claim { runner } => {
                self.sync_clock().await?;
                let client = self
                    .clients
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                // A batch claim of two jobs whenever the model leaves no second job to take
                // (then it takes what one claim takes), as in-process.
                let capacity = if self.model.claimable_job(after, *runner).is_none() {
                    2
                } else {
                    1
                };
                let result: Result<ClaimRead, CallError> = client
                    .http
                    .post("/v1/runner/claim", &json!({"capacity": capacity}))
                    .await;
                if let Ok(claimed) = &result {
                    let index = self.attempts.len();
                    let (Some(created), [lease]) =
                        (after.attempts.get(index), claimed.leases.as_slice())
                    else {
                        return Err(DriverError::Implementation(format!(
                            "the implementation accepted a claim of {} jobs where the model \
                             took {}",
                            claimed.leases.len(),
                            after.attempts.len() - index
                        )));
                    };
                    self.attempts.push(lease.attempt);
                    self.attempt_jobs.push(lease.job);
                    self.leases.insert(created.lease, lease.lease_id);
                    let job = Self::index_of(&self.jobs, &lease.job, "job")?;
                    let ticks = self.ticks_until(lease.lease_expiry);
                    let claimed = ClaimedJob::of_lease(
                        job,
                        i64::from(token_to_model(self.first_epoch, lease.fence)?),
                        ticks,
                        i64::from(token_to_model(self.first_epoch, lease.slot_token)?),
                    )?;
                    self.answer = Some(claimed.answer());
                }
                Some(answer(result, |r| &r.verdict)?)
            }
            Action::ClaimBatch { runner, limit } => {
                self.sync_clock().await?;
                let client = self
                    .clients
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                let result: Result<ClaimRead, CallError> = client
                    .http
                    .post("/v1/runner/claim", &json!({"capacity": limit}))
                    .await;
                if let Ok(claimed) = &result {
                    let mut taken = Vec::with_capacity(claimed.leases.len());
                    for lease in &claimed.leases {
                        taken.push((Self::index_of(&self.jobs, &lease.job, "job")?, lease));
                    }
                    // The model's new attempts, mapped by job to the implementation's; a job the
                    // implementation did not take leaves its attempt unmapped (the answer and the
                    // projection then differ from the model's).
                    let created = &after.attempts[self.attempts.len().min(after.attempts.len())..];
                    for a in created {
                        match taken.iter().find(|(job, _)| *job == a.job) {
                            Some((_, lease)) => {
                                self.attempts.push(lease.attempt);
                                self.attempt_jobs.push(lease.job);
                                self.leases.insert(a.lease, lease.lease_id);
                            }
                            None => {
                                self.attempts.push(Uuid::nil());
                                self.attempt_jobs.push(Uuid::nil());
                            }
                        }
                    }
                    let mut leases = Vec::with_capacity(taken.len());
                    for (job, lease) in taken {
                        leases.push(ClaimedJob::of_lease(
                            job,
                            i64::from(token_to_model(self.first_epoch, lease.fence)?),
                            self.ticks_until(lease.lease_expiry),
                            i64::from(token_to_model(self.first_epoch, lease.slot_token)?),
                        )?);
                    }
                    self.answer = Some(Answer::ClaimBatch { leases });
                }
                Some(answer(result, |r| &r.verdict)?)
            }
            // A heartbeat is a request the server answers at once (the model keeps none in
            // flight).
            Action::Heartbeat {
                runner,
                runner_time,
                attempt,
            } => Some(
                self.deliver(&crate::driver::heartbeat(
                    before,
                    *runner,
                    *attempt,
                    *runner_time,
                )?)
                .await?,
            ),
            Action::Deliver { message } => Some(self.deliver(message).await?),
            Action::Replay {
                runner,
                message,
                forge,
            } => Some(
                self.deliver(&LeaseModel::replayed(before, message, *runner, *forge))
                    .await?,
            ),
            Action::Tick => {
                // Sent with the next request that reads the time.
                self.ticks += 1;
                None
            }
            Action::ExpirySweep => {
                self.sync_clock().await?;
                // On a shared clock the sweep runs over every project (earlier traces are over);
                // with the trace's own time, over the trace's projects only (other traces run
                // at other times). Either way only this trace's jobs count.
                let bodies = match (&self.time, self.outsider_project == self.project) {
                    _ if self.global.is_some() => vec![json!({})],
                    (None, _) => vec![json!({})],
                    (Some(_), true) => vec![json!({ "project": self.project })],
                    (Some(_), false) => vec![
                        json!({ "project": self.project }),
                        json!({ "project": self.outsider_project }),
                    ],
                };
                let mut uncertain: Vec<u8> = Vec::new();
                for body in bodies {
                    let swept: SweepRead = self
                        .server
                        .operator
                        .http
                        .post("/v1/sweep", &body)
                        .await
                        .map_err(http_failed)?;
                    if !matches!(swept.verdict.as_str(), "uncertain" | "accepted") {
                        return Err(DriverError::Implementation(format!(
                            "the sweep answered `{}`",
                            swept.verdict
                        )));
                    }
                    uncertain.extend(
                        swept
                            .jobs
                            .iter()
                            .filter_map(|j| Self::index_of(&self.jobs, j, "job").ok()),
                    );
                }
                uncertain.sort_unstable();
                let verdict = if uncertain.is_empty() {
                    Expected::ACCEPTED
                } else {
                    Expected::UNCERTAIN
                };
                self.answer = Some(Answer::Sweep { uncertain });
                Some(verdict)
            }
            Action::Cancel { job } | Action::OutsiderCancel { job } => {
                self.sync_clock().await?;
                let project = self.operator_project(action, *job);
                let id = self.jobs[*job as usize];
                Some(answer(
                    self.server
                        .operator
                        .http
                        .post::<_, VerdictRead>(
                            &format!("{}/cancel", job_path(project, id)),
                            &json!({}),
                        )
                        .await,
                    |r| &r.verdict,
                )?)
            }
            Action::Reconcile {
                job,
                finding,
                decision,
            }
            | Action::OutsiderReconcile {
                job,
                finding,
                decision,
            } => {
                self.sync_clock().await?;
                let project = self.operator_project(action, *job);
                let id = self.jobs[*job as usize];
                Some(answer(
                    self.server
                        .operator
                        .http
                        .post::<_, VerdictRead>(
                            &format!("{}/reconcile", job_path(project, id)),
                            &json!({"finding": finding.as_str(), "decision": decision.as_str()}),
                        )
                        .await,
                    |r| &r.verdict,
                )?)
            }
            Action::SideEffect { runner, effect } => Some(
                self.deliver(&crate::driver::side_effect(before, *runner, *effect)?)
                    .await?,
            ),
            // Runner-local steps, as in-process: nothing reaches the server.
            Action::Result { .. }
            | Action::TargetMutation { .. }
            | Action::StopExecuting { .. }
            | Action::Disconnect { .. }
            | Action::Rejoin { .. } => None,
        };
        Ok(verdict)
    }

    async fn mark(&mut self) -> Result<(), DriverError> {
        self.mark_seen().await
    }

    async fn project(&mut self) -> Result<Projection, DriverError> {
        // Independent reads of committed state, all at once: the step before has finished.
        let this = &*self;
        let (jobs, observations, targets) = tokio::try_join!(
            async {
                let mut all = Vec::with_capacity(this.jobs.len());
                for j in 0..this.jobs.len() {
                    if this.is_pruned(j) {
                        // Compared on neither side (`driver::blank_pruned`).
                        all.push(JobProjection::blank(Vec::new()));
                        continue;
                    }
                    all.push(this.job_projection(j).await?);
                }
                Ok::<_, DriverError>(all)
            },
            async {
                let mut all = Vec::new();
                if this.reads(Part::Observation) {
                    // The trace's jobs, then the jobs no one created (a pruned job's are gone).
                    for j in 0..=this.jobs.len() {
                        all.push(if this.is_pruned(j) {
                            Vec::new()
                        } else {
                            this.observations(j).await?
                        });
                    }
                }
                Ok(all)
            },
            async {
                let mut all = Vec::with_capacity(this.slots.len());
                if this.reads(Part::Targets) {
                    for slot in &this.slots {
                        all.push(this.target_projection(slot).await?);
                    }
                }
                Ok(all)
            },
        )?;
        let mut recorded: Vec<(usize, ObservationRead)> = Vec::new();
        for (j, list) in observations.into_iter().enumerate() {
            let seen = self.seen[j];
            self.seen[j] = list.len();
            for o in list.into_iter().skip(seen) {
                // A job no one created: the model index its id stands for.
                let job = match o.named_job {
                    Some(id) if j == self.jobs.len() => {
                        self.unknown_ids.index(JOB, id).map_or(j, usize::from)
                    }
                    _ => j,
                };
                recorded.push((job, o));
            }
        }
        let mut unread = self.unread.clone();
        if self.unauthenticated {
            // A message whose bearer token authenticates nobody is refused `401` before any
            // check, and over HTTP nothing is recorded (docs/protocol.md §6.1 check 1), where
            // the model (and the in-process driver, which names the runner in the message)
            // records an `unknown_runner` observation: checked here to be nothing, and the
            // step's observation compared on neither side.
            if !recorded.is_empty() && self.reads(Part::Observation) {
                self.differences.push(format!(
                    "a message from a runner no one created, refused 401, recorded {} \
                     observation(s)",
                    recorded.len()
                ));
            }
            recorded.clear();
            self.batches.forget_records();
            if !unread.contains(&Part::Observation) {
                unread.push(Part::Observation);
            }
        }
        // The extra items' records are the step's last (they were judged after its message),
        // in receipt order across jobs (by id: a server without ids keeps the jobs' order).
        recorded.sort_by_key(|(_, o)| o.id);
        let mut batches = std::mem::take(&mut self.batches);
        if !self.reads(Part::Observation) {
            batches.forget_records();
        }
        let checked = batches.check_records(&mut recorded, |(j, o)| self.observation(*j, o));
        self.batches = batches;
        checked?;
        let (observation, observation_details) = match recorded.as_slice() {
            [] => (None, None),
            [(j, o)] => (
                Some(self.observation(*j, o)?),
                if self.reads(Part::ObservationDetails) {
                    Some(self.observation_details(o)?)
                } else {
                    None
                },
            ),
            many => {
                return Err(DriverError::Implementation(format!(
                    "one step recorded {} observations",
                    many.len()
                )))
            }
        };
        let stored = if self.model.config.side_effects && self.reads(Part::Stored) {
            Some(self.stored().await?)
        } else {
            None
        };
        Ok(Projection {
            jobs,
            targets,
            observation,
            details: Some(Details {
                observation: observation_details,
                answer: self.answer.clone(),
            }),
            stored,
            unread,
            pruned: self
                .prune
                .as_ref()
                .map(|p| p.pruned.iter().copied().collect())
                .unwrap_or_default(),
        })
    }

    fn differences(&mut self) -> Vec<String> {
        let mut all = std::mem::take(&mut self.differences);
        all.extend(self.batches.differences());
        all
    }

    fn batch_results(&mut self) -> BatchResults {
        self.batches.counts()
    }
}

/// The verdict of one item of a batch result's answer.
fn item_verdict(a: &ResultAnswer) -> Result<Observed, DriverError> {
    match a.verdict.as_str() {
        "accepted" => Ok(Expected::ACCEPTED),
        "acknowledged" => Ok(Expected::ACKNOWLEDGED),
        "rejected" => Ok(
            match a
                .reason
                .as_deref()
                .and_then(|r| r.parse::<model::Reason>().ok())
            {
                Some(reason) => Expected::rejected(reason),
                None => Expected {
                    verdict: model::Verdict::Rejected,
                    reason: None,
                },
            },
        ),
        other => Err(failed(format!(
            "a batch item answered the verdict `{other}`"
        ))),
    }
}

/// Rule R8 through the runner routes, as in-process ([`super::pg`]): the model's bounded
/// payloads as the bytes of [`crate::side_effects`]; an accepted get's content is the step's
/// answer.
async fn side_effect(
    client: &RunnerClient,
    tuple: &TupleBody,
    effect: model::SideEffect,
) -> Result<(Observed, Option<Answer>), DriverError> {
    use crate::side_effects::{payload_bytes, served_label, ARTIFACT_NAME, CACHE_KEY};
    use model::SideEffect as E;
    let bytes = payload_bytes(effect).unwrap_or_default();
    let name = match effect {
        E::SourceFetch => {
            // The snapshot itself is the source's business (server tests); the verdict is the
            // rule's.
            let fetched = client.source(tuple).await.map(|_| VerdictRead {
                verdict: "accepted".into(),
            });
            return Ok((answer(fetched, |r| &r.verdict)?, None));
        }
        E::LogAppend { seq, .. } => {
            let v = client.log_append(tuple, i64::from(seq), &bytes).await;
            return Ok((answer(v, |r| &r.verdict)?, None));
        }
        E::ArtifactPut { .. } => {
            let v = client.artifact_put(tuple, ARTIFACT_NAME, &bytes).await;
            return Ok((answer(v, |r| &r.verdict)?, None));
        }
        E::CachePut { .. } => {
            let v = client.cache_put(tuple, CACHE_KEY, &bytes).await;
            return Ok((answer(v, |r| &r.verdict)?, None));
        }
        E::ArtifactGet => ("/v1/runner/artifacts/get", ARTIFACT_NAME),
        E::CacheGet => ("/v1/runner/cache/get", CACHE_KEY),
    };
    let (path, name) = name;
    let got: Result<GetResponse, CallError> = client
        .http
        .post(
            path,
            &GetRequest {
                tuple: *tuple,
                name: name.into(),
            },
        )
        .await;
    let served = match &got {
        Ok(r) if r.verdict == "accepted" => {
            let content = base64::engine::general_purpose::STANDARD
                .decode(&r.content_base64)
                .map_err(|e| failed(format!("a served content that is not base64: {e}")))?;
            Some(Answer::Served {
                content: served_label(effect, &content),
            })
        }
        _ => None,
    };
    Ok((answer(got, |r| &r.verdict)?, served))
}

/// Stored content as a read route sends it (base64).
fn decode_base64(text: &str) -> Result<Vec<u8>, DriverError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| {
            DriverError::Implementation(format!("a stored content that is not base64: {e}"))
        })
}

/// The verdict of an answer: 200 with `accepted`/`acknowledged`, or a 409 rejection with the
/// spec's reason. Any other failure is the implementation's, not a verdict.
fn answer<T>(
    result: Result<T, CallError>,
    verdict: impl FnOnce(&T) -> &String,
) -> Result<Observed, DriverError> {
    match result {
        Ok(body) => match verdict(&body).as_str() {
            "accepted" => Ok(Expected::ACCEPTED),
            "acknowledged" => Ok(Expected::ACKNOWLEDGED),
            other => Err(DriverError::Implementation(format!(
                "a 200 answer with the verdict `{other}`"
            ))),
        },
        Err(CallError::Rejected { code, .. }) => Ok(match code.parse::<model::Reason>() {
            Ok(reason) => Expected::rejected(reason),
            // A reason the spec does not name: a rejection without a known reason, which never
            // equals an expected verdict.
            Err(_) => Expected {
                verdict: model::Verdict::Rejected,
                reason: None,
            },
        }),
        Err(error) => Err(http_failed(error)),
    }
}

/// The verdict of a message from a runner no one created ([`HttpSession::deliver_unauthenticated`]):
/// `401`, the HTTP form of §6.1 check 1, is `unknown_runner`; a 409 is the reason it names (a
/// server that checked the body first, a divergence); a `2xx` is the implementation's failure.
fn refused(sent: &Result<(), CallError>) -> Result<Observed, DriverError> {
    match sent {
        Err(CallError::Http { status: 401, .. }) => {
            Ok(Expected::rejected(model::Reason::UnknownRunner))
        }
        Err(CallError::Rejected { code, .. }) => Ok(match code.parse::<model::Reason>() {
            Ok(reason) => Expected::rejected(reason),
            Err(_) => Expected {
                verdict: model::Verdict::Rejected,
                reason: None,
            },
        }),
        Ok(()) => Err(DriverError::Implementation(
            "a runner route answered 2xx to a bearer token that authenticates nobody".into(),
        )),
        Err(error) => Err(DriverError::Implementation(format!("HTTP: {error}"))),
    }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn http_failed(error: CallError) -> DriverError {
    DriverError::Implementation(format!("HTTP: {error}"))
}

fn failed(detail: impl Into<String>) -> DriverError {
    DriverError::Implementation(detail.into())
}

fn unmappable(what: impl std::fmt::Display) -> DriverError {
    DriverError::Unmappable(what.to_string())
}
