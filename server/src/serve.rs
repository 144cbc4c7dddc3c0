//! `leasewright serve` and `leasewright runner`: the process-level entry points (database
//! selection, logging, signals). The CLI only parses arguments.

use crate::app::{self, ConnectionLimits, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What `leasewright serve` was given (no `Debug`: it holds the operator token).
#[derive(Clone)]
pub struct ServeOptions {
    /// `None`: start a throwaway PostgreSQL cluster, removed when the process exits.
    pub database_url: Option<String>,
    pub listen: SocketAddr,
    pub lease_ttl: Duration,
    pub manual_clock: bool,
    pub operator_token: Option<String>,
    pub sweep_interval: Duration,
    /// Timeouts and caps of the HTTP connections.
    pub connections: ConnectionLimits,
    /// The per-attempt quota on logs, artifacts and cache entries, in bytes (`None`: none).
    pub attempt_quota_bytes: Option<u64>,
    /// The most payload bytes all requests together may be receiving at once.
    pub payload_in_flight_bytes: usize,
    /// The schema of the tables (`--schema`).
    pub schema: String,
    /// The size of the database connection pool (what this replica may hold of the server's
    /// `max_connections`; several replicas share one database).
    pub database_connections: u32,
    /// Apply pending migrations at start (`false`: `--no-migrate`, refuse a schema that lacks
    /// one).
    pub migrate: bool,
    /// The most of the payload budget one project may hold (a fraction).
    pub payload_project_share: f64,
    /// The most requests to `/v1/` routes served at once.
    pub max_requests_in_flight: usize,
    /// The most of them one project may hold (a fraction).
    pub request_project_share: f64,
    /// `--retain-finished-jobs`: prune finished jobs periodically (`None`: never).
    pub retention: Option<crate::app::Retention>,
    /// `--max-clock-skew-ms`: the bound on this replica's clock's distance from the database's
    /// (docs/protocol.md §3.1).
    pub max_clock_skew: Duration,
    /// `--demo-targets`: route `POST /v1/targets/{slot}/deploy`, the demonstration targets.
    pub demo_targets: bool,
}

/// Log to stderr (`RUST_LOG` filters; default `info`). Tokens are never logged.
pub fn init_logging(json: bool) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `--log-format json`: one JSON object per line, for log collectors. Otherwise text, with
    // colour only on a terminal (escape codes in a CI log or a file are noise).
    let _ = if json {
        logs.json().try_init()
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).try_init()
    };
}

/// Raise the soft open-file limit to the hard one: every connection is a file descriptor, and
/// the connection cap is never more than the soft limit leaves room for.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, "cannot raise the open-file limit");
        }
    }
}

/// Serve until SIGINT or SIGTERM; then stop within the shutdown bound (docs/http.md,
/// "Shutdown") and return `Ok` (exit 0).
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    raise_open_file_limit();
    // The signals are caught from the start: a SIGTERM that came before the server was ready
    // (while it migrated, or right after it printed where it listens) would otherwise kill the
    // process with the signal's default action, and exit not 0.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let database_url = match &options.database_url {
        Some(url) => url.clone(),
        None => {
            let cluster =
                tokio::task::spawn_blocking(leasewright_impl::database::throwaway_cluster)
                    .await??;
            eprintln!(
                "leasewright: no --database-url and no DATABASE_URL: started a throwaway PostgreSQL cluster in {} \
                 (it is removed when this process exits, with all its data)",
                cluster.dir().display()
            );
            cluster.url("postgres")
        }
    };
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    let config = ServerConfig {
        operator_token: options.operator_token.clone(),
        manual_clock: options.manual_clock,
        // On a manual clock time moves only when a test moves it, and the sweep runs only when
        // a test asks for it (`POST /v1/sweep`): a periodic sweep would expire leases at moments
        // no replay can control.
        sweep_interval: (!options.manual_clock).then_some(options.sweep_interval),
        connections: options.connections,
        attempt_quota_bytes: options.attempt_quota_bytes,
        payload_in_flight_bytes: options.payload_in_flight_bytes,
        schema: options.schema.clone(),
        max_connections: options.database_connections,
        migrate: options.migrate,
        payload_project_share: options.payload_project_share,
        max_requests_in_flight: options.max_requests_in_flight,
        request_project_share: options.request_project_share,
        retention: options.retention,
        max_clock_skew: options.max_clock_skew,
        demo_targets: options.demo_targets,
        ..ServerConfig::default()
    };
    let server = app::start(&database_url, options.lease_ttl, listener, config).await?;
    if options.manual_clock {
        eprintln!(
            "leasewright: TEST MODE: manual clock; POST /v1/test/clock moves the time and the \
             expiry sweep runs only on POST /v1/sweep"
        );
    }
    if options.operator_token.is_none() {
        eprintln!("leasewright: operator token: {}", server.operator_token);
    }
    eprintln!("leasewright: listening on {}", server.url());
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("leasewright: shutting down");
    let pool = server.store().pool().clone();
    server.stop().await?;
    if tokio::time::timeout(app::POOL_CLOSE_TIMEOUT, pool.close())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: the database pool did not close in time; leaving it");
    }
    eprintln!("leasewright: stopped");
    Ok(())
}

/// What `leasewright runner` was given (no `Debug`: it holds the runner token).
#[derive(Clone)]
pub struct RunnerOptions {
    pub server: String,
    pub token: String,
    pub capacity: u32,
    pub workdir: Option<PathBuf>,
    pub target_url: Option<String>,
    pub max_jobs: Option<usize>,
    pub poll_interval: Duration,
    pub max_poll_interval: Duration,
}

/// Run the agent until SIGINT/SIGTERM (or `max_jobs`).
pub async fn runner(options: RunnerOptions) -> anyhow::Result<()> {
    let workdir = match options.workdir {
        Some(dir) => dir,
        None => std::env::temp_dir().join("leasewright-runner"),
    };
    let mut config = crate::agent::AgentConfig::new(&options.server, &options.token, workdir);
    config.capacity = options.capacity;
    config.target_url = options.target_url;
    config.max_jobs = options.max_jobs;
    config.poll_interval = options.poll_interval;
    config.max_poll_interval = options.max_poll_interval;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // A signal stops every job's command before the runner exits (docs/protocol.md §6.4).
    let signalled = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    };
    crate::agent::run_until(config, signalled).await
}
