//! The server's database: the host it writes to among its URL's hosts (one, or the list a
//! high-availability manager hands out), every session made durable whatever the server's default
//! (`synchronous_commit=on`), what that server is (primary or standby, synchronous standbys,
//! epoch), and following the primary after a failover without a restart (docs/reliability.md,
//! "The server knows its database").
//!
//! A watcher connection (one beyond the pool) asks the current host every
//! [`ServerConfig::database_check_interval`], and at once when a request met a database error,
//! whether it is still a primary. When it is not (dead, unreachable, or in recovery), the gate
//! closes: every request, and every request still waiting in the pool, is answered
//! `503 database_unavailable` with `Retry-After` (never a verdict: a write cut off mid-commit may
//! or may not have committed, and every runner message is idempotent); the hosts are tried again
//! in order until one is a primary, the pool is pointed at it (`Pool::set_connect_options`) and
//! the gate opens. A PostgreSQL server never turns from primary into standby without a restart,
//! so a connection to a primary stays one to a primary, or breaks; a new connection that lands on
//! a standby is refused by the pool's `after_connect` check.

use super::{AppState, ServerConfig};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasewright_impl::hosts::{self, DatabaseUrl, ReplicationState, TargetSessionAttrs};
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions as _, PgConnection};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// Marks a response that met a database failure (`503 database_unavailable`): the gate then
/// wakes the watcher at once.
#[derive(Clone, Copy, Debug)]
pub(super) struct DatabaseFailed;

/// The options of every session of the pool: the URL's host, `search_path` our schema, and
/// `synchronous_commit=on` whatever the server's (or the role's, or the database's) default: an
/// answer is given only after its commit is flushed to disk here, and to every synchronous
/// standby's disk when `synchronous_standby_names` names some (docs/reliability.md).
pub fn session_options(
    options: PgConnectOptions,
    schema: &str,
) -> Result<PgConnectOptions, leasewright_impl::Error> {
    Ok(leasewright_impl::schema::select_schema(options, schema)?
        .options([("synchronous_commit", "on")]))
}

/// Where the pool's sessions go now.
#[derive(Clone, Debug)]
struct Current {
    address: String,
    database: String,
}

/// The server's database and its watcher's state.
pub(super) struct Database {
    url: DatabaseUrl,
    wanted: TargetSessionAttrs,
    schema: String,
    pool: PgPool,
    available: watch::Sender<bool>,
    wake: Notify,
    current: Mutex<Current>,
    watcher: tokio::sync::Mutex<Option<PgConnection>>,
    check_interval: Duration,
    connect_timeout: Duration,
}

/// The store's pool on the primary among `database_url`'s hosts, and the [`Database`] that
/// follows it. Refuses a URL whose hosts hold no primary (a standby alone, every host down) with
/// the reason per host.
///
/// Once the returned flag is set (the store recorded the policy itself), every new connection
/// of the pool records `policy` (this server's lease ttl and, off a manual
/// clock, its `max_clock_skew`) before it serves anything: a failover can forget the
/// `lease_policy` row, and one behind the same address may pass between two of the watcher's
/// checks, but it cannot keep a connection of the old primary open (docs/protocol.md §2).
pub(super) async fn connect(
    database_url: &str,
    config: &ServerConfig,
    policy: (Duration, Option<Duration>),
) -> anyhow::Result<(Arc<Database>, PgPool, Arc<AtomicBool>)> {
    let url = DatabaseUrl::parse(database_url)
        .map_err(|error| anyhow::anyhow!("the database URL: {error}"))?;
    let wanted = url
        .target_session_attrs()
        .for_writes()
        .map_err(|error| anyhow::anyhow!("the database URL: {error}"))?;
    let (resolved, watcher) = hosts::resolve(&url, wanted, config.database_connect_timeout)
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    let options = session_options(resolved.options.clone(), &config.schema)?;
    let policy_recorded = Arc::new(AtomicBool::new(false));
    let after_connect_ready = policy_recorded.clone();
    let pool = leasewright_impl::schema::pool_options()
        .max_connections(config.max_connections)
        .acquire_timeout(leasewright_impl::StoreConfig::default().acquire_timeout)
        .after_connect(move |connection, _| {
            let ready = after_connect_ready.clone();
            Box::pin(async move {
                // A new session on a standby (the host was demoted and restarted) is refused:
                // the watcher finds the primary.
                let state = hosts::replication_state(&mut *connection)
                    .await
                    .map_err(|error| sqlx::Error::Protocol(error.to_string()))?;
                if !wanted.accepts(&state) {
                    return Err(sqlx::Error::Protocol(
                        "the database host is a standby or read-only now".into(),
                    ));
                }
                // Until the store has recorded the policy itself (the first connections, before
                // the schema may exist) there is nothing to record on.
                if !ready.load(Ordering::Acquire) {
                    return Ok(());
                }
                let (lease_ttl, max_clock_skew) = policy;
                leasewright_impl::record_lease_policy_on(connection, lease_ttl, max_clock_skew)
                    .await
                    .map_err(|error| {
                        sqlx::Error::Protocol(format!(
                            "recording the lease policy on a new connection: {error}"
                        ))
                    })
            })
        })
        .connect_with(options)
        .await?;
    let state = &resolved.state;
    let database = resolved.options.get_database().unwrap_or("").to_owned();
    tracing::info!(
        address = %resolved.address,
        database = %database,
        schema = %config.schema,
        hosts = url.hosts().len(),
        target_session_attrs = wanted.as_str(),
        role = state.role().as_str(),
        synchronous_commit = "on",
        synchronous_standbys = ?state.synchronous_standbys,
        synchronous_standby_names = %state.synchronous_standby_names,
        epoch = ?state.epoch,
        "database"
    );
    let (available, _) = watch::channel(true);
    let database = Arc::new(Database {
        url,
        wanted,
        schema: config.schema.clone(),
        pool: pool.clone(),
        available,
        wake: Notify::new(),
        current: Mutex::new(Current {
            address: resolved.address,
            database,
        }),
        watcher: tokio::sync::Mutex::new(Some(watcher)),
        check_interval: config.database_check_interval,
        connect_timeout: config.database_connect_timeout,
    });
    Ok((database, pool, policy_recorded))
}

impl Database {
    /// Wake the watcher now (a request met a database failure).
    pub(super) fn failed(&self) {
        self.wake.notify_one();
    }

    /// Whether the current host answers as a primary: on the watcher connection, else on one
    /// fresh connection (a single lost connection is no failover).
    async fn check(&self) -> bool {
        let mut watcher = self.watcher.lock().await;
        if let Some(connection) = watcher.as_mut() {
            let state =
                tokio::time::timeout(self.connect_timeout, hosts::replication_state(connection))
                    .await;
            if matches!(&state, Ok(Ok(state)) if self.wanted.accepts(state)) {
                return true;
            }
            *watcher = None;
        }
        let options = self.pool.connect_options();
        let fresh = tokio::time::timeout(self.connect_timeout, async {
            let mut connection = options.connect().await.ok()?;
            let state = hosts::replication_state(&mut connection).await.ok()?;
            Some((connection, state))
        })
        .await;
        match fresh {
            Ok(Some((connection, state))) if self.wanted.accepts(&state) => {
                *watcher = Some(connection);
                true
            }
            _ => false,
        }
    }

    /// Try the hosts in order until one is a primary, point the pool at it and open the gate
    /// (each new connection of the pool records this server's lease policy before it serves:
    /// [`connect`]).
    async fn follow(&self, state: &AppState) {
        let lost = self.current.lock().map(|c| c.clone()).ok();
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        let mut last_warning: Option<Instant> = None;
        loop {
            match hosts::resolve(&self.url, self.wanted, self.connect_timeout).await {
                Ok((resolved, connection)) => {
                    let Ok(options) = session_options(resolved.options.clone(), &self.schema)
                    else {
                        // The schema was validated when the server started.
                        return;
                    };
                    self.pool.set_connect_options(options);
                    *self.watcher.lock().await = Some(connection);
                    let moved = lost
                        .as_ref()
                        .is_some_and(|lost| lost.address != resolved.address);
                    if let Ok(mut current) = self.current.lock() {
                        current.address = resolved.address.clone();
                    }
                    if moved {
                        state.0.metrics.primary_change();
                    }
                    self.available.send_replace(true);
                    tracing::warn!(
                        address = %resolved.address,
                        moved,
                        epoch = ?resolved.state.epoch,
                        unavailable_ms = started.elapsed().as_millis() as u64,
                        "the database answers as a primary again: serving"
                    );
                    return;
                }
                Err(error) => {
                    if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        last_warning = Some(Instant::now());
                        tracing::warn!(%error, "no primary among the database URL's hosts yet");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// The current host's address and database name (for logs).
    fn current(&self) -> Option<Current> {
        self.current.lock().ok().map(|c| c.clone())
    }
}

/// The watcher: checks the current host, closes the gate when it is lost, follows the primary.
pub(super) async fn watch_primary(state: AppState) {
    let Some(database) = state.0.database.clone() else {
        return;
    };
    loop {
        tokio::select! {
            () = tokio::time::sleep(database.check_interval) => {}
            () = database.wake.notified() => {}
        }
        if database.check().await {
            continue;
        }
        database.available.send_replace(false);
        if let Some(current) = database.current() {
            tracing::warn!(
                address = %current.address,
                database = %current.database,
                "the database no longer answers as a primary: requests get 503 until a primary \
                 is found among the URL's hosts"
            );
        }
        database.follow(&state).await;
    }
}

/// What the server's database is now, read through the pool (`/healthz`, `/metrics`).
pub(super) async fn replication_state(
    state: &AppState,
) -> Result<ReplicationState, super::ApiError> {
    Ok(hosts::replication_state(state.0.store.pool()).await?)
}

/// The gate: while no primary is known every request is answered
/// `503 database_unavailable` at once (and a request in flight when the primary is lost is
/// answered so then, not when its connection times out); a response that met a database failure
/// wakes the watcher.
///
/// The same gate answers `503 clock_skew_exceeded` (with `Retry-After`) to every request but
/// `/healthz` and `/metrics` while this replica's clock is not known to be within
/// `max_clock_skew` of the database's (app/clock_skew.rs, docs/protocol.md §3.1).
pub(super) async fn gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(check) = &state.0.clock_check {
        if !check.within() && !super::clock_skew::exempt(request.uri().path()) {
            let mut response = super::clock_skew::clock_skew_exceeded().into_response();
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(super::error::DATABASE_RETRY_AFTER_SECONDS),
            );
            return response;
        }
    }
    let Some(database) = state.0.database.clone() else {
        return next.run(request).await;
    };
    let mut available = database.available.subscribe();
    if !*available.borrow_and_update() {
        return super::error::database_unavailable().into_response();
    }
    let response = tokio::select! {
        response = next.run(request) => response,
        () = async {
            if available.wait_for(|up| !*up).await.is_err() {
                std::future::pending::<()>().await;
            }
        } => super::error::database_unavailable().into_response(),
    };
    if response.extensions().get::<DatabaseFailed>().is_some() {
        database.failed();
    }
    response
}
