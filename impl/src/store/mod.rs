//! The store: every rule of docs/protocol.md §7 as exactly one PostgreSQL transaction.
//!
//! The shape of every rule that a runner message triggers:
//!
//! 1. `job_lock` locks the named job's row (rules on one job are serialized; lock order is always
//!    jobs, then attempts);
//! 2. one conditional statement, named after the rule, carries every check as a predicate;
//! 3. if it touched zero rows, the same transaction walks the precedence of §6 to name the first
//!    failing check (it never retries the statement without its predicates);
//! 4. the message is recorded as an observation, attributed to the attempt it names when §6.1
//!    checks 1-5 pass;
//! 5. commit.

use crate::clock::Clock;
use crate::error::Error;
use crate::sql::Statement;
use crate::types::*;
use chrono::{DateTime, SubsecRound, Utc};
use sha2::{Digest, Sha256};
use sqlx::{PgPool, Postgres, Transaction};
use std::sync::Arc;
use std::time::Duration;

use crate::schema::MIGRATOR;

mod cancel;
mod claim;
mod heartbeat;
#[cfg(test)]
mod plan;
mod precedence;
mod reads;
mod reconcile;
mod rejoin;
mod result;
mod retention;
pub use retention::{PrunePolicy, PruneReport};
mod setup;
mod side_effects;
mod sweep;

/// How a [`Store`] behaves.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `lease_expiry = now + lease_ttl` at claim and at every accepted heartbeat.
    pub lease_ttl: Duration,
    /// The size of the connection pool [`Store::connect`] opens.
    pub max_connections: u32,
    /// How long [`Store::connect`] and every operation wait for a database connection.
    pub acquire_timeout: Duration,
    /// The schema [`Store::connect`] keeps the tables in (created if missing; `search_path` of
    /// every connection). Default [`crate::DEFAULT_SCHEMA`].
    pub schema: String,
}

/// How long a runner's token hash read by [`Store::authenticate`] is used before it is read
/// again, by the store's clock, unless [`Store::with_token_recheck`] says otherwise: the bound
/// within which a revocation made through another store (another replica) is honoured.
pub const DEFAULT_TOKEN_RECHECK: Duration = Duration::from_secs(5);

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            schema: crate::DEFAULT_SCHEMA.to_owned(),
        }
    }
}

/// The PostgreSQL implementation of the protocol. Cheap to clone (a pool and a clock).
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    lease_ttl: chrono::Duration,
    /// The most bytes one attempt may hold in logs, artifacts and the cache entries it stored
    /// (`None`: no bound). See [`Store::with_attempt_quota`].
    attempt_quota: Option<i64>,
    /// The stored token hashes of the runners that presented a token here (see
    /// [`Store::authenticate`]), shared by every clone of the store.
    token_hashes: Arc<setup::TokenHashes>,
    /// Told of every accepted result: its outcome and how long its attempt ran, claim to result
    /// (see [`Store::with_result_observer`]).
    result_observer: Option<ResultObserver>,
    #[cfg(feature = "mutants")]
    mutant: Option<crate::mutants::Mutant>,
}

/// What [`Store::with_result_observer`] calls: an accepted result's outcome and how long its
/// attempt ran, from its claim to the result's receipt (server time).
pub type ResultObserver = Arc<dyn Fn(Outcome, chrono::Duration) + Send + Sync>;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

fn parse<T>(code: &str, from_code: fn(&str) -> Option<T>) -> Result<T, Error> {
    from_code(code).ok_or(Error::Invariant(
        "a state name in the database is not the spec's",
    ))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A zero-row conditional statement can only be rejected (or, for a result, acknowledged).
fn not_accepted<T>(verdict: Verdict<()>) -> Result<Verdict<T>, Error> {
    match verdict {
        Verdict::Accepted(()) => Err(Error::Invariant(
            "a conditional statement matched no row but every check passed",
        )),
        Verdict::Acknowledged => Ok(Verdict::Acknowledged),
        Verdict::Rejected(reason) => Ok(Verdict::Rejected(reason)),
    }
}

impl Store {
    /// Connect to `database_url` with `search_path` set to `config.schema` on every connection,
    /// create the schema if missing, apply the migrations of impl/migrations into it (safe when
    /// many stores connect at once: the migrator holds an advisory lock) and return the store.
    pub async fn connect(
        database_url: &str,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        let pool = crate::schema::pool_options()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_with(crate::schema::connect_options(
                database_url,
                &config.schema,
            )?)
            .await?;
        crate::schema::create_schema(&pool, &config.schema).await?;
        Self::from_pool(pool, clock, config).await
    }

    /// Like [`Store::connect`], but on a schema its owner migrated ahead of time
    /// (`leasewright migrate`; `serve --no-migrate`): creates nothing and applies nothing, so the
    /// role needs no more than the data-only grants of docs/roles.md. A schema that is missing or
    /// lacks a migration is an [`Error::Schema`] saying to run `leasewright migrate`.
    pub async fn connect_migrated(
        database_url: &str,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        let pool = crate::schema::pool_options()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_with(crate::schema::connect_options(
                database_url,
                &config.schema,
            )?)
            .await?;
        Self::from_migrated_pool(pool, clock, config).await
    }

    /// [`Store::connect_migrated`] over an existing pool whose connections select the schema: a
    /// schema that is missing or lacks a migration is an [`Error::Schema`].
    pub async fn from_migrated_pool(
        pool: PgPool,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        if !crate::schema::up_to_date(&pool, &[&MIGRATOR]).await? {
            pool.close().await;
            return Err(Error::Schema(format!(
                "the schema {0} is missing, lacks migrations or has functions that are out of \
                 date, and this server does not migrate (--no-migrate): run `leasewright migrate \
                 --schema {0}` as the schema's owner",
                config.schema
            )));
        }
        Self::over_pool(pool, clock, &config).await
    }

    /// A store over an existing pool, whose connections select the schema
    /// ([`crate::schema::connect_options`]; created as `config.schema` when the pool's
    /// `search_path` names no existing schema); applies the migrations there.
    pub async fn from_pool(
        pool: PgPool,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        // A pool whose search_path names a schema that does not exist yet (a `TestDatabase`'s
        // URL names `config.schema`): create it, so the migrations have a place to go.
        let current: Option<String> = sqlx::query_scalar("SELECT current_schema()::text")
            .fetch_one(&pool)
            .await?;
        if current.is_none() {
            crate::schema::create_schema(&pool, &config.schema).await?;
        }
        crate::schema::migrate(&pool, &[&MIGRATOR]).await?;
        Self::over_pool(pool, clock, &config).await
    }

    /// The store over a pool whose schema is ready.
    async fn over_pool(
        pool: PgPool,
        clock: Arc<dyn Clock>,
        config: &StoreConfig,
    ) -> Result<Store, Error> {
        let lease_ttl = chrono::Duration::from_std(config.lease_ttl)
            .map_err(|_| Error::InvalidArgument("lease_ttl is too large"))?;
        if lease_ttl <= chrono::Duration::zero() {
            return Err(Error::InvalidArgument("lease_ttl must be positive"));
        }
        // The database keeps the largest lease ttl any store granted leases with: after an epoch
        // change claims wait that long, so that every lease the forgotten commits granted has
        // expired (docs/protocol.md §2, "Epochs").
        record_lease_policy_on(&mut *pool.acquire().await?, config.lease_ttl, None).await?;
        Ok(Store {
            pool,
            clock,
            lease_ttl,
            attempt_quota: None,
            token_hashes: Arc::new(setup::TokenHashes::new(DEFAULT_TOKEN_RECHECK)),
            result_observer: None,
            #[cfg(feature = "mutants")]
            mutant: None,
        })
    }

    /// The same database and pool with another clock and lease ttl (no migrations are run, and the
    /// ttl is not recorded as the database's lease policy: the wait after an epoch change covers
    /// only the ttls of stores made by [`Store::connect`] or [`Store::from_pool`]): for callers
    /// that replay many independent histories on one database, each with its own time.
    pub fn with_clock(&self, clock: Arc<dyn Clock>, lease_ttl: Duration) -> Result<Store, Error> {
        let lease_ttl = chrono::Duration::from_std(lease_ttl)
            .map_err(|_| Error::InvalidArgument("lease_ttl is too large"))?;
        if lease_ttl <= chrono::Duration::zero() {
            return Err(Error::InvalidArgument("lease_ttl must be positive"));
        }
        Ok(Store {
            clock,
            lease_ttl,
            ..self.clone()
        })
    }

    /// The same store reading a runner's token hash again after `recheck` by its clock
    /// ([`Store::authenticate`]; default [`DEFAULT_TOKEN_RECHECK`]): the bound within which a
    /// revocation made by another store on the database is honoured here. Hashes kept so far are
    /// forgotten.
    pub fn with_token_recheck(mut self, recheck: Duration) -> Store {
        self.token_hashes = Arc::new(setup::TokenHashes::new(recheck));
        self
    }

    /// Records `max_clock_skew` (δ, docs/protocol.md §3.1) as this database's bound on how far a
    /// replica's clock may be from the database server's: the database keeps the largest δ any
    /// server recorded, and from then on the expiry sweep makes a job `uncertain` only once
    /// `now >= lease_expiry + 2δ`, and claims wait after an epoch change until `began_at` + the
    /// largest lease ttl + 2δ (migration 0016). A store that never records one works with one
    /// clock (δ = 0): tests, replays, a single server. `serve` records its `--max-clock-skew`.
    pub async fn record_max_clock_skew(&self, max_clock_skew: Duration) -> Result<(), Error> {
        self.record_lease_policy(Some(max_clock_skew)).await
    }

    /// Records this store's lease policy again (issue 39, item 3): its lease ttl and, when given,
    /// its `max_clock_skew`, each kept as the largest any store recorded. A failover or restore
    /// can lose the `lease_policy` row with the commits it forgets, and the wait after the next
    /// epoch change reads it: a server records its policy on every new connection, before the
    /// connection serves anything ([`record_lease_policy_on`], server/src/app/database.rs).
    pub async fn record_lease_policy(&self, max_clock_skew: Option<Duration>) -> Result<(), Error> {
        let mut connection = self.pool.acquire().await?;
        let ttl = self
            .lease_ttl
            .to_std()
            .map_err(|_| Error::InvalidArgument("lease_ttl is too large"))?;
        record_lease_policy_on(&mut connection, ttl, max_clock_skew).await
    }

    /// The same store with a per-attempt quota: a `log append`, `artifact put` or `cache put`
    /// that would make the attempt hold more than `bytes` (its log chunks, its artifacts, and the
    /// cache entries it stored last, counting what the write replaces as gone) fails with
    /// [`Error::QuotaExceeded`] and changes nothing. The sum is taken in the write's transaction
    /// under the job's row lock, so concurrent writes of one attempt cannot overshoot it. A
    /// service limit, not a protocol rule: it is checked only once the tuple passed §6.1, and a
    /// log chunk already stored is still `acknowledged` (or `sequence_conflict`).
    pub fn with_attempt_quota(mut self, bytes: Option<u64>) -> Store {
        self.attempt_quota = bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        self
    }

    /// The same store telling `observer` of every accepted result (the server's job duration
    /// metric). Called after the result's transaction committed, with the claim time the
    /// accepting statement returned; never for an acknowledged or rejected result.
    pub fn with_result_observer(mut self, observer: ResultObserver) -> Store {
        self.result_observer = Some(observer);
        self
    }

    /// Tell the result observer, if any, of an accepted result.
    fn observe_result(
        &self,
        outcome: Outcome,
        claimed_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        if let (Some(observer), Some(claimed_at)) = (&self.result_observer, claimed_at) {
            observer(outcome, now - claimed_at);
        }
    }

    /// The same store with one rule deliberately broken (feature `mutants` only).
    #[cfg(feature = "mutants")]
    pub fn with_mutant(mut self, mutant: crate::mutants::Mutant) -> Store {
        self.mutant = Some(mutant);
        self
    }

    /// The connection pool (for read-only inspection in tests and tools).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The lease time-to-live.
    pub fn lease_ttl(&self) -> chrono::Duration {
        self.lease_ttl
    }

    /// Close the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The server's receipt time, at the database's precision (microseconds).
    fn now(&self) -> DateTime<Utc> {
        self.clock.now().trunc_subsecs(6)
    }

    /// The statement's text (with one guard removed under a mutant), counted as one execution
    /// ([`crate::statement_counts`]): call it where the statement is sent.
    #[cfg(not(feature = "mutants"))]
    fn sql(&self, statement: Statement) -> &'static str {
        statement.issue()
    }

    #[cfg(feature = "mutants")]
    fn sql(&self, statement: Statement) -> &'static str {
        statement.count();
        crate::mutants::statement_text(self.mutant, statement)
    }

    /// The time a lease is judged by: the server's receipt time.
    #[cfg(not(feature = "mutants"))]
    fn judge_time(&self, now: DateTime<Utc>, _runner_time: Option<DateTime<Utc>>) -> DateTime<Utc> {
        now
    }

    #[cfg(feature = "mutants")]
    fn judge_time(&self, now: DateTime<Utc>, runner_time: Option<DateTime<Utc>>) -> DateTime<Utc> {
        match (self.mutant, runner_time) {
            (Some(crate::mutants::Mutant::RunnerClockDecidesExpiry), Some(runner_time)) => {
                runner_time.trunc_subsecs(6)
            }
            _ => now,
        }
    }

    #[cfg(feature = "mutants")]
    fn mutant_is(&self, mutant: crate::mutants::Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, Error> {
        Ok(crate::transaction::begin(&self.pool, None).await?)
    }
}

/// Records a lease policy on `connection` (docs/protocol.md §2 "Epochs", §3.1): `lease_ttl` and,
/// when given, `max_clock_skew`, each kept as the largest any store of the database recorded
/// (a statement writes only when its value is larger). A failover or a restore can lose the
/// `lease_policy` row with the commits it forgets, and the wait after the next epoch change
/// reads it: a server runs this on every new connection of its pool before the connection
/// serves anything, so no request reaches a primary (a new one behind the same address
/// included) that has not recorded this server's policy.
pub async fn record_lease_policy_on(
    connection: &mut sqlx::PgConnection,
    lease_ttl: Duration,
    max_clock_skew: Option<Duration>,
) -> Result<(), Error> {
    let micros = |value: Duration, what: &'static str| {
        i64::try_from(value.as_micros()).map_err(|_| Error::InvalidArgument(what))
    };
    let ttl = micros(lease_ttl, "lease_ttl is too large")?;
    sqlx::query(crate::sql::LEASE_POLICY_RECORD.issue())
        .bind(ttl)
        .execute(&mut *connection)
        .await?;
    if let Some(skew) = max_clock_skew {
        sqlx::query(crate::sql::LEASE_POLICY_RECORD_CLOCK_SKEW.issue())
            .bind(ttl)
            .bind(micros(skew, "max_clock_skew is too large")?)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}
