//! The HTTP control plane (docs/http.md). Every protocol decision comes from the impl
//! [`Store`]; this module only authenticates, translates JSON to the Store's API and back, and
//! keeps the content-addressed source store.

mod budget;
mod clock_skew;
mod database;
mod error;
mod extract;
mod failover;
mod health;
mod jobs;
mod listen;
mod log_stream;
mod openapi;
mod projects;
mod prune;
mod runner;
mod slots;
mod targets;
mod time;

pub use budget::DEFAULT_PROJECT_SHARE;
pub use clock_skew::{
    measure_against_database, recorded_policy, set_recorded_max_clock_skew, ClockOffset,
    MeasureClockOffset, RecordedPolicy, DEFAULT_MAX_CLOCK_SKEW, MAX_MAX_CLOCK_SKEW,
};
pub use database::session_options;
pub use error::ApiError;
pub use extract::{
    JsonBody, OperatorAuth, OptionalJsonBody, QueryParams, RunnerAuth, Segments,
    MAX_IDENTIFIER_BYTES,
};
pub use jobs::{DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT};
pub use listen::ConnectionLimits;
pub use runner::{MAX_CLAIM_CAPACITY, MAX_RESULTS_PER_BATCH};
pub use slots::{DEFAULT_MAX_REQUESTS_IN_FLIGHT, DEFAULT_REQUEST_PROJECT_SHARE};
pub use targets::MAX_TARGET_MUTATIONS_PER_ATTEMPT;

use crate::metrics::Metrics;
use crate::source::Limits;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use chrono::Utc;
use extract::digest32;
use leasewright_impl::{
    Clock, ManualClock, ProjectId, PrunePolicy, PruneReport, RunnerId, Store, SweepVerdict,
};
use std::sync::Arc;
use std::time::Duration;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

/// The control routes' body limit (tuples, names, small JSON).
const CONTROL_BODY_LIMIT: usize = 64 * 1024;

/// How the HTTP server behaves (no `Debug`: it holds the operator token).
#[derive(Clone)]
pub struct ServerConfig {
    /// The operator token; generated when `None`.
    pub operator_token: Option<String>,
    /// Whether `POST /v1/test/clock` exists (the server then runs on a manual clock).
    pub manual_clock: bool,
    /// How often the expiry sweep runs; `None`: never by itself (only `POST /v1/sweep`).
    pub sweep_interval: Option<Duration>,
    /// The body limit of the payload routes (source submission, logs, artifacts, cache).
    pub max_payload_bytes: usize,
    /// Limits of a submitted source archive.
    pub source_limits: Limits,
    /// Timeouts and caps of the HTTP connections (slow or hostile clients).
    pub connections: ConnectionLimits,
    /// The size of the store's connection pool (what one replica may hold of the database's
    /// `max_connections`).
    pub max_connections: u32,
    /// The most bytes one attempt may hold in logs, artifacts and the cache entries it stored
    /// (`None`: no bound); past it a write is `413 quota_exceeded`.
    pub attempt_quota_bytes: Option<u64>,
    /// The schema of the tables (`--schema`).
    pub schema: String,
    /// The most payload bytes (logs, artifacts, cache entries, sources) all requests together may
    /// be reading or holding at once; a payload request that would go past it is answered
    /// `503 payload_budget_exhausted` before its body is read (the runner retries a 503).
    pub payload_in_flight_bytes: usize,
    /// How often the database watcher asks the current host whether it is still a primary (and
    /// at once after a request met a database failure); app/database.rs.
    pub database_check_interval: Duration,
    /// How long connecting to one host of the database URL may take when the server looks for
    /// the primary (the URL's `connect_timeout` overrides it).
    pub database_connect_timeout: Duration,
    /// Whether the server applies pending migrations at start (`serve --no-migrate`: no, and
    /// it refuses to start on a schema that lacks one). Either way an up-to-date schema gets no
    /// DDL, so a data-only role (docs/roles.md) can serve it.
    pub migrate: bool,
    /// The most of [`ServerConfig::payload_in_flight_bytes`] one project's requests may hold at
    /// once, as a fraction (0 to 1; default [`DEFAULT_PROJECT_SHARE`], half): a project that
    /// floods the payload routes leaves the rest to the others.
    pub payload_project_share: f64,
    /// The most requests to `/v1/` routes served at once (`--max-requests-in-flight`); past it a
    /// request is `503 request_slots_exhausted` (app/slots.rs).
    pub max_requests_in_flight: usize,
    /// The most of [`ServerConfig::max_requests_in_flight`] one project's runners (or the
    /// operator, or unauthenticated requests) may hold at once, as a fraction (0 to 1; default
    /// [`DEFAULT_REQUEST_PROJECT_SHARE`], half): a project that floods the routes leaves the rest
    /// to the others.
    pub request_project_share: f64,
    /// Prune finished jobs older than this, with everything they own (`None`: never; never on a
    /// manual clock). See [`Retention`].
    pub retention: Option<Retention>,
    /// The bound on this replica's clock's distance from the database server's
    /// (docs/protocol.md §3.1; `serve --max-clock-skew`, default [`DEFAULT_MAX_CLOCK_SKEW`]):
    /// recorded in the database (the sweep and the wait after an epoch change act 2δ past a
    /// lease), and checked against the database's clock at start and every
    /// [`ServerConfig::database_check_interval`]; outside it the server answers
    /// `503 clock_skew_exceeded`. Not checked on a manual clock.
    pub max_clock_skew: Duration,
    /// How the offset is measured (`None`: against the database, app/clock_skew.rs); tests
    /// inject one.
    pub measure_clock_offset: Option<MeasureClockOffset>,
    /// Whether `POST /v1/targets/{slot}/deploy` (the demonstration targets, rule R9) is routed
    /// (`serve --demo-targets`; a manual-clock server routes it too). Off: it answers 404.
    pub demo_targets: bool,
}

/// How `serve --retain-finished-jobs` prunes (docs/http.md, "Retention").
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// Jobs that finished longer ago than this are pruned.
    pub finished_jobs: Duration,
    /// Prune jobs whose ledger is not audited yet (a record above the recorded audit watermark,
    /// or no watermark) too; otherwise they are kept and counted in the log.
    pub unaudited: bool,
    /// How often a prune runs.
    pub interval: Duration,
    /// The most jobs one batch (one transaction) deletes.
    pub batch: u32,
}

/// The default prune batch: 100 jobs per transaction.
pub const DEFAULT_PRUNE_BATCH: u32 = 100;

/// The default bound of payload bytes in flight: 256 MiB (four bodies at the 64 MiB limit).
pub const DEFAULT_PAYLOAD_IN_FLIGHT_BYTES: usize = 256 * 1024 * 1024;

/// The default per-attempt quota: 1 GiB.
pub const DEFAULT_ATTEMPT_QUOTA_BYTES: u64 = 1024 * 1024 * 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            operator_token: None,
            manual_clock: false,
            sweep_interval: Some(Duration::from_secs(1)),
            max_payload_bytes: 64 * 1024 * 1024,
            source_limits: Limits::submission(),
            connections: ConnectionLimits::default(),
            max_connections: leasewright_impl::StoreConfig::default().max_connections,
            attempt_quota_bytes: Some(DEFAULT_ATTEMPT_QUOTA_BYTES),
            schema: leasewright_impl::DEFAULT_SCHEMA.to_owned(),
            payload_in_flight_bytes: DEFAULT_PAYLOAD_IN_FLIGHT_BYTES,
            database_check_interval: Duration::from_secs(1),
            database_connect_timeout: Duration::from_secs(5),
            migrate: true,
            payload_project_share: DEFAULT_PROJECT_SHARE,
            max_requests_in_flight: DEFAULT_MAX_REQUESTS_IN_FLIGHT,
            request_project_share: DEFAULT_REQUEST_PROJECT_SHARE,
            retention: None,
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
            measure_clock_offset: None,
            demo_targets: false,
        }
    }
}

struct Inner {
    store: Store,
    manual_clock: Option<ManualClock>,
    operator_token_sha256: [u8; 32],
    metrics: Arc<Metrics>,
    source_limits: Limits,
    /// The database the server follows (`None`: a state made over a store by a test).
    database: Option<Arc<database::Database>>,
    /// The project of each bearer token the database verified, by the token's SHA-256 (a
    /// runner's project never changes): whose share of the request slots and of the payload
    /// budget a runner's request takes, read without the database. Only a token the database
    /// verified is kept, so made-up tokens cannot fill it (app/slots.rs).
    verified_tokens: std::sync::Mutex<std::collections::HashMap<[u8; 32], ProjectId>>,
    /// The watermark and witness of the last clean `POST /v1/test/audit` (manual clock only).
    audited: std::sync::Mutex<prune::Audited>,
    /// This replica's clock against the database's (`None`: not checked, on a manual clock or
    /// a state made over a store by a test).
    clock_check: Option<Arc<clock_skew::ClockCheck>>,
    /// Whether the demonstration targets' deploy route is routed ([`ServerConfig::demo_targets`]).
    demo_targets: bool,
}

/// The most verified tokens kept in memory; past it the map is emptied and read again.
const VERIFIED_TOKENS_KEPT: usize = 100_000;

/// The shared state of the handlers.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// A fresh random token.
pub fn random_token(prefix: &str) -> anyhow::Result<String> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|_| anyhow::anyhow!("no system randomness"))?;
    Ok(format!("{prefix}{}", hex::encode(secret)))
}

/// The server's own tables (the content-addressed source store, the job specs, the submissions'
/// idempotency keys): server/migrations, versions from 1001 on, applied by the same migrator as
/// impl/migrations into the same schema (one `_sqlx_migrations` table).
pub static SERVER_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Every migration, in the order they apply: the protocol's (impl/migrations), then the server's.
pub fn migrators() -> [&'static sqlx::migrate::Migrator; 2] {
    [&leasewright_impl::schema::MIGRATOR, &SERVER_MIGRATOR]
}

/// Apply the server's migrations in the store's schema (the store applied the protocol's).
pub async fn ensure_schema(store: &Store) -> Result<(), ApiError> {
    leasewright_impl::schema::migrate(store.pool(), &[&SERVER_MIGRATOR]).await?;
    Ok(())
}

/// A pool on `database_url` whose connections select `schema` (created if missing).
pub async fn schema_pool(
    database_url: &str,
    schema: &str,
) -> Result<sqlx::PgPool, leasewright_impl::Error> {
    let pool = reading_pool(database_url, schema).await?;
    leasewright_impl::schema::create_schema(&pool, schema).await?;
    Ok(pool)
}

/// A pool of one connection on `database_url` selecting `schema`, which may not exist.
async fn reading_pool(
    database_url: &str,
    schema: &str,
) -> Result<sqlx::PgPool, leasewright_impl::Error> {
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(leasewright_impl::schema::connect_options(
            database_url,
            schema,
        )?)
        .await?)
}

/// `leasewright migrate`: apply every migration to `schema` of `database_url`; the versions
/// applied now (none when the schema was up to date). A schema that holds another
/// application's tables is refused before anything is written
/// ([`leasewright_impl::schema::refuse_foreign_schema`]); an up-to-date one gets no DDL.
pub async fn migrate(
    database_url: &str,
    schema: &str,
) -> Result<Vec<i64>, leasewright_impl::Error> {
    let pool = reading_pool(database_url, schema).await?;
    let ready = leasewright_impl::schema::up_to_date(&pool, &migrators()).await;
    if !matches!(ready, Ok(true)) {
        if let Err(error) = leasewright_impl::schema::refuse_foreign_schema(&pool).await {
            pool.close().await;
            return Err(error);
        }
        leasewright_impl::schema::create_schema(&pool, schema).await?;
    }
    let applied = leasewright_impl::schema::migrate(&pool, &migrators()).await;
    pool.close().await;
    applied
}

/// `leasewright migrate --status`: every migration and whether `schema` has it. Reads only (a
/// missing schema has every migration pending), so any role that may connect can ask.
pub async fn migration_status(
    database_url: &str,
    schema: &str,
) -> Result<Vec<leasewright_impl::schema::MigrationStatus>, leasewright_impl::Error> {
    let pool = reading_pool(database_url, schema).await?;
    let status = leasewright_impl::schema::status(&pool, &migrators()).await;
    pool.close().await;
    status
}

impl AppState {
    /// The state over `store`. `manual_clock` must be the clock the store reads, if any; the
    /// demonstration targets are routed only on a manual clock.
    pub fn new(
        store: Store,
        manual_clock: Option<ManualClock>,
        operator_token: &str,
        source_limits: Limits,
    ) -> Self {
        let demo_targets = manual_clock.is_some();
        Self::with_database(
            store,
            manual_clock,
            operator_token,
            source_limits,
            None,
            None,
            demo_targets,
        )
    }

    fn with_database(
        store: Store,
        manual_clock: Option<ManualClock>,
        operator_token: &str,
        source_limits: Limits,
        database: Option<Arc<database::Database>>,
        clock_check: Option<Arc<clock_skew::ClockCheck>>,
        demo_targets: bool,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        // The job duration histogram: every accepted result, claim to outcome (server time).
        let observed = Arc::clone(&metrics);
        let store = store.with_result_observer(Arc::new(move |outcome, ran| {
            observed.job_finished(outcome.as_str(), ran.to_std().unwrap_or_default());
        }));
        AppState(Arc::new(Inner {
            store,
            manual_clock,
            operator_token_sha256: digest32(operator_token.as_bytes()),
            metrics,
            source_limits,
            database,
            verified_tokens: Default::default(),
            audited: Default::default(),
            clock_check,
            demo_targets,
        }))
    }

    /// Whether `token` is the operator token.
    fn is_operator_token(&self, token: &str) -> bool {
        extract::constant_time_eq(&digest32(token.as_bytes()), &self.0.operator_token_sha256)
    }

    /// The project of `token`'s runner if the database verified the token before (no database
    /// read; `None`: not verified yet, or forgotten).
    fn verified_token(&self, token: &str) -> Option<ProjectId> {
        self.0
            .verified_tokens
            .lock()
            .expect("verified tokens")
            .get(&digest32(token.as_bytes()))
            .copied()
    }

    /// Look `token` up in the database: the runner it authenticates and that runner's project
    /// (`None`: it authenticates no runner). A verified token is kept
    /// ([`AppState::verified_token`]).
    async fn verify_token(&self, token: &str) -> Result<Option<(RunnerId, ProjectId)>, ApiError> {
        let Some(runner) = self.0.store.authenticate(token).await? else {
            return Ok(None);
        };
        let Some(project) = self.0.store.project_of_runner(runner).await? else {
            return Ok(None);
        };
        let mut kept = self.0.verified_tokens.lock().expect("verified tokens");
        if kept.len() >= VERIFIED_TOKENS_KEPT {
            kept.clear();
        }
        kept.insert(digest32(token.as_bytes()), project);
        Ok(Some((runner, project)))
    }

    /// `token` authenticates no runner any more (revoked): its next request is looked up again.
    fn forget_token(&self, token: &str) {
        self.0
            .verified_tokens
            .lock()
            .expect("verified tokens")
            .remove(&digest32(token.as_bytes()));
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.0.store
    }

    /// Run the expiry sweep once (rule R4).
    pub async fn sweep(&self) -> Result<SweepVerdict, ApiError> {
        self.sweep_in(None).await
    }

    /// Run the expiry sweep once over the jobs of `project` (`None`: every project).
    pub async fn sweep_in(&self, project: Option<ProjectId>) -> Result<SweepVerdict, ApiError> {
        let verdict = self.0.store.sweep_expired_in(project).await?;
        let expired = match &verdict {
            SweepVerdict::Uncertain(jobs) => jobs.len(),
            SweepVerdict::Accepted => 0,
        };
        if expired > 0 {
            tracing::info!(expired, "expiry sweep: jobs became uncertain");
        }
        self.0.metrics.sweep(expired);
        Ok(verdict)
    }

    /// Prune the jobs that finished more than `retention.finished_jobs` ago (by the server's
    /// clock), batch after batch, with everything they own: the protocol's rows
    /// ([`Store::prune_finished_jobs`]) and, by their foreign keys, the server's (the job's spec
    /// and idempotency key, its source snapshot when no other job uses it).
    pub async fn prune(&self, retention: &Retention) -> Result<PruneReport, ApiError> {
        let age = chrono::Duration::from_std(retention.finished_jobs)
            .map_err(|_| ApiError::bad_request("the retention is too long"))?;
        let finished_before = self.0.store_clock_now() - age;
        let report = self
            .0
            .store
            .prune_finished_jobs(PrunePolicy {
                finished_before,
                unaudited: retention.unaudited,
                batch: retention.batch,
                max_batches: None,
            })
            .await?;
        self.0.metrics.prune(&report);
        if report.jobs > 0 {
            tracing::info!(
                jobs = report.jobs,
                unaudited = report.unaudited,
                observations = report.observations,
                batches = report.batches,
                "retention: pruned finished jobs"
            );
        }
        if !retention.unaudited {
            let kept = self
                .0
                .store
                .unaudited_finished_jobs(finished_before)
                .await?;
            if kept > 0 {
                tracing::warn!(
                    kept,
                    "retention: finished jobs past the retention are kept: their ledgers are not \
                     audited yet (record the watermark with `leasewright prune --audited-through`, \
                     or serve --prune-unaudited)"
                );
            }
        }
        Ok(report)
    }
}

impl Inner {
    /// The server's clock, as the store reads it.
    fn store_clock_now(&self) -> chrono::DateTime<Utc> {
        match &self.manual_clock {
            Some(clock) => clock.now(),
            None => Utc::now(),
        }
    }
}

/// The routes, each registered from its handler's `#[utoipa::path]` annotation (method and path),
/// with the document they make. `test_clock`: whether `POST /v1/test/clock` is routed (only on a
/// manual-clock server; the document always describes it); `demo_targets`: whether
/// `POST /v1/targets/{slot}/deploy` is (`serve --demo-targets`, or a manual clock; the document
/// always describes it). A route is added here only as `.routes(routes!(..))` (app/openapi.rs;
/// server/tests/openapi.rs checks it).
fn api(
    max_payload_bytes: usize,
    test_clock: bool,
    demo_targets: bool,
    budget: &budget::PayloadBudget,
) -> OpenApiRouter<AppState> {
    let control = DefaultBodyLimit::max(CONTROL_BODY_LIMIT);
    let payload = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            budget.clone(),
            budget::admit,
        ))
        .layer(DefaultBodyLimit::max(max_payload_bytes));
    let mut api = OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(health::healthz))
        .routes(routes!(health::metrics))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(runner::claim).layer(control))
        .routes(routes!(runner::heartbeat).layer(control))
        .routes(routes!(runner::rejoin).layer(control))
        .routes(routes!(runner::source).layer(control))
        .routes(routes!(runner::logs).layer(payload.clone()))
        .routes(routes!(runner::artifact_put).layer(payload.clone()))
        .routes(routes!(runner::artifact_get).layer(control))
        .routes(routes!(runner::cache_put).layer(payload.clone()))
        .routes(routes!(runner::cache_get).layer(control))
        .routes(routes!(runner::result).layer(control))
        .routes(routes!(runner::results).layer(control))
        .routes(routes!(targets::target_get))
        .routes(routes!(projects::create_project).layer(control))
        .routes(routes!(projects::create_runner, projects::list_runners).layer(control))
        .routes(routes!(projects::revoke_runner).layer(control))
        .routes(routes!(jobs::submit_job).layer(payload))
        .routes(routes!(jobs::list_jobs))
        .routes(routes!(jobs::get_security_log))
        .routes(routes!(jobs::get_job))
        .routes(routes!(jobs::get_attempts))
        .routes(routes!(jobs::get_observations))
        .routes(routes!(jobs::get_reconciliations))
        .routes(routes!(jobs::get_logs))
        .routes(routes!(jobs::get_log_chunks))
        .routes(routes!(jobs::get_artifact))
        .routes(routes!(jobs::get_cache_entry))
        .routes(routes!(jobs::cancel).layer(control))
        .routes(routes!(jobs::reconcile).layer(control))
        .routes(routes!(time::sweep).layer(control));
    let hooks = [
        routes!(time::test_clock).layer(control),
        routes!(failover::test_replicate).layer(control),
        routes!(failover::test_failover).layer(control),
        routes!(prune::test_audit).layer(control),
        routes!(prune::test_prune).layer(control),
    ];
    for hook in hooks {
        if test_clock {
            api = api.routes(hook);
        } else {
            // Described, not routed: a server without `--manual-clock` answers 404.
            let (_, paths, _) = hook;
            api.get_openapi_mut().paths.paths.extend(paths.paths);
        }
    }
    let deploy = routes!(targets::target_deploy).layer(control);
    if demo_targets {
        api = api.routes(deploy);
    } else {
        // Described, not routed: a server without `--demo-targets` answers 404.
        let (_, paths, _) = deploy;
        api.get_openapi_mut().paths.paths.extend(paths.paths);
    }
    api
}

/// The OpenAPI 3.1 document of every route (served at `GET /openapi.json`; docs/openapi.json).
pub fn openapi() -> utoipa::openapi::OpenApi {
    static DOCUMENT: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let budget = budget::PayloadBudget::new(
                CONTROL_BODY_LIMIT,
                CONTROL_BODY_LIMIT,
                DEFAULT_PROJECT_SHARE,
                None,
            );
            let mut document = api(CONTROL_BODY_LIMIT, true, true, &budget).into_openapi();
            openapi::add_shared_answers(&mut document);
            document
        })
        .clone()
}

/// The router. The `POST /v1/test/clock` route exists only when the state has a manual clock,
/// which only the process's command line can give it.
pub fn router(state: AppState, max_payload_bytes: usize) -> Router {
    router_with_budget(
        state,
        max_payload_bytes,
        DEFAULT_PAYLOAD_IN_FLIGHT_BYTES,
        DEFAULT_PROJECT_SHARE,
    )
}

/// [`router`] with its bound of payload bytes in flight
/// ([`ServerConfig::payload_in_flight_bytes`]) and each project's share of it
/// ([`ServerConfig::payload_project_share`]).
pub fn router_with_budget(
    state: AppState,
    max_payload_bytes: usize,
    payload_in_flight_bytes: usize,
    payload_project_share: f64,
) -> Router {
    router_with_slots(
        state,
        max_payload_bytes,
        payload_in_flight_bytes,
        payload_project_share,
        DEFAULT_MAX_REQUESTS_IN_FLIGHT,
        DEFAULT_REQUEST_PROJECT_SHARE,
    )
}

/// [`router_with_budget`] with the request slots' bound
/// ([`ServerConfig::max_requests_in_flight`]) and each account's share of them
/// ([`ServerConfig::request_project_share`]).
fn router_with_slots(
    state: AppState,
    max_payload_bytes: usize,
    payload_in_flight_bytes: usize,
    payload_project_share: f64,
    max_requests_in_flight: usize,
    request_project_share: f64,
) -> Router {
    let budget = budget::PayloadBudget::new(
        payload_in_flight_bytes,
        max_payload_bytes,
        payload_project_share,
        Some(state.clone()),
    );
    let manual_clock = state.0.manual_clock.is_some();
    let demo_targets = state.0.demo_targets;
    let (mut router, _) =
        api(max_payload_bytes, manual_clock, demo_targets, &budget).split_for_parts();
    if manual_clock {
        // Test mode only: a request may carry a time of its own (time::request_time).
        router = router.layer(axum::middleware::from_fn(time::request_time));
    }
    let slots =
        slots::RequestSlots::new(state.clone(), max_requests_in_flight, request_project_share);
    router
        .fallback(health::fallback)
        .method_not_allowed_fallback(health::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(slots, slots::admit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            database::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            health::track,
        ))
        .with_state(state)
}

/// How long `serve` waits, after [`Server::stop`], for the database pool to close (its connections are
/// given back by then: every request was answered).
pub const POOL_CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A running server (in-process).
pub struct Server {
    pub addr: std::net::SocketAddr,
    pub state: AppState,
    pub manual_clock: Option<ManualClock>,
    pub operator_token: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
    watcher: Option<tokio::task::JoinHandle<()>>,
    pruner: Option<tokio::task::JoinHandle<()>>,
    clock_watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        self.state.store()
    }

    /// Stop serving and wait for the server to finish: take no more work (the sweep, the
    /// prune and the watchers stop, no connection is accepted), let the requests under way
    /// finish within [`ConnectionLimits::shutdown_grace`] and answer the rest
    /// `503 shutting_down`. The database pool stays open (a caller may hold the store);
    /// `serve` closes it (for at most [`POOL_CLOSE_TIMEOUT`]).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.abort();
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        if let Some(pruner) = self.pruner.take() {
            pruner.abort();
        }
        if let Some(clock_watcher) = self.clock_watcher.take() {
            clock_watcher.abort();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await??;
        }
        Ok(())
    }

    /// Wait until the server stops (it stops on its own only on an I/O error).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        if let Some(task) = self.task.take() {
            task.await??;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.abort();
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        if let Some(pruner) = self.pruner.take() {
            pruner.abort();
        }
        if let Some(clock_watcher) = self.clock_watcher.take() {
            clock_watcher.abort();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Connect a store to `database_url` and serve on `listener`.
pub async fn start(
    database_url: &str,
    lease_ttl: Duration,
    listener: tokio::net::TcpListener,
    config: ServerConfig,
) -> anyhow::Result<Server> {
    let manual_clock = config.manual_clock.then(|| ManualClock::new(Utc::now()));
    let clock: Arc<dyn Clock> = match &manual_clock {
        Some(manual) => Arc::new(manual.clone()),
        None => Arc::new(leasewright_impl::SystemClock),
    };
    // The primary among the URL's hosts (a standby alone is refused), every session durable.
    // Every new connection records this server's lease policy before serving, once the store
    // has recorded it (`policy_recorded`).
    let policy = (
        lease_ttl,
        manual_clock.is_none().then_some(config.max_clock_skew),
    );
    let (database, pool, policy_recorded) =
        database::connect(database_url, &config, policy).await?;
    let store_config = leasewright_impl::StoreConfig {
        lease_ttl,
        max_connections: config.max_connections,
        schema: config.schema.clone(),
        ..Default::default()
    };
    let store = if config.migrate {
        // Creates the schema only when it is missing: an up-to-date schema gets no DDL.
        leasewright_impl::schema::create_schema(&pool, &config.schema).await?;
        let store = Store::from_pool(pool, clock, store_config).await?;
        ensure_schema(&store)
            .await
            .map_err(|e| anyhow::anyhow!("creating the server's tables: {}", e.message))?;
        store
    } else {
        let store = Store::from_migrated_pool(pool, clock, store_config).await?;
        if !leasewright_impl::schema::up_to_date(store.pool(), &[&SERVER_MIGRATOR]).await? {
            anyhow::bail!(
                "the schema {0} lacks the server's migrations, and this server does not migrate \
                 (--no-migrate): run `leasewright migrate --schema {0}` as the schema's owner",
                config.schema
            );
        }
        store
    }
    .with_attempt_quota(config.attempt_quota_bytes);
    // Every replica's clock within max_clock_skew of the database's (docs/protocol.md §3.1): the
    // database keeps the largest δ, and this replica checks its own clock. On a manual clock
    // there is one clock: nothing to record or check.
    let clock_check = if manual_clock.is_none() {
        store.record_max_clock_skew(config.max_clock_skew).await?;
        Some(Arc::new(clock_skew::ClockCheck::new(
            config.max_clock_skew,
            config.measure_clock_offset.clone(),
        )))
    } else {
        None
    };
    policy_recorded.store(true, std::sync::atomic::Ordering::Release);
    let operator_token = match &config.operator_token {
        Some(token) => token.clone(),
        None => random_token("lwop_")?,
    };
    let state = AppState::with_database(
        store,
        manual_clock.clone(),
        &operator_token,
        config.source_limits,
        Some(database.clone()),
        clock_check,
        config.demo_targets || manual_clock.is_some(),
    );
    if let Some(check) = &state.0.clock_check {
        // Before serving: a replica outside the bound answers 503 from its first request on.
        check.check(&state).await;
    }
    let app = router_with_slots(
        state.clone(),
        config.max_payload_bytes,
        config.payload_in_flight_bytes,
        config.payload_project_share,
        config.max_requests_in_flight,
        config.request_project_share,
    );
    let addr = listener.local_addr()?;
    let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
    let limits = config.connections;
    let task = tokio::spawn(listen::serve(listener, app, limits, async move {
        let _ = rx.await;
    }));
    let sweeper = config.sweep_interval.map(|interval| {
        let state = state.clone();
        let database = database.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if state
                    .0
                    .clock_check
                    .as_ref()
                    .is_some_and(|check| !check.within())
                {
                    // Outside the bound this replica decides nothing (docs/protocol.md §3.1).
                    continue;
                }
                if let Err(error) = state.sweep().await {
                    tracing::warn!(code = %error.code, "expiry sweep failed");
                    if error.code == error::DATABASE_UNAVAILABLE {
                        database.failed();
                    }
                }
            }
        })
    });
    let watcher = Some(tokio::spawn(database::watch_primary(state.clone())));
    let clock_watcher = state.0.clock_check.is_some().then(|| {
        tokio::spawn(clock_skew::watch_clock(
            state.clone(),
            config.database_check_interval,
        ))
    });
    // Never on a manual clock: time moves only when a test moves it.
    let pruner = config
        .retention
        .filter(|_| manual_clock.is_none())
        .map(|retention| {
            let state = state.clone();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(retention.interval);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticker.tick().await;
                    if let Err(error) = state.prune(&retention).await {
                        tracing::warn!(code = %error.code, message = %error.message, "retention: prune failed");
                    }
                }
            })
        });
    Ok(Server {
        addr,
        state,
        manual_clock,
        operator_token,
        shutdown: Some(shutdown),
        task: Some(task),
        sweeper,
        watcher,
        pruner,
        clock_watcher,
    })
}
