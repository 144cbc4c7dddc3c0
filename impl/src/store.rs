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
use crate::sql::{self, Statement};
use crate::types::*;
use chrono::{DateTime, SubsecRound, Utc};
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnection, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// How a [`Store`] behaves.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `lease_expiry = now + lease_ttl` at claim and at every accepted heartbeat.
    pub lease_ttl: Duration,
    /// The size of the connection pool [`Store::connect`] opens.
    pub max_connections: u32,
    /// How long [`Store::connect`] and every operation wait for a database connection.
    pub acquire_timeout: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

/// The PostgreSQL implementation of the protocol. Cheap to clone (a pool and a clock).
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    lease_ttl: chrono::Duration,
    #[cfg(feature = "mutants")]
    mutant: Option<crate::mutants::Mutant>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

/// The job row as locked by `job_lock`.
#[derive(Clone, Debug)]
struct LockedJob {
    project: ProjectId,
    state: JobState,
    current_attempt: Option<AttemptId>,
    cancel_requested: bool,
}

/// What a §6.1 message asks for, as far as the precedence cares.
#[derive(Clone, Copy, Debug)]
enum Check<'a> {
    Heartbeat,
    Rejoin,
    SideEffect,
    Result {
        outcome: Outcome,
        result_digest: &'a str,
    },
}

/// The first failing check of §6.1 (or an acknowledged identical result), and the attribution.
struct Classified {
    verdict: Verdict<()>,
    attributed: Option<AttemptId>,
}

/// The gate of a side effect: `None` if the whole tuple passed, else the verdict to answer.
struct Gate {
    rejection: Option<Verdict<()>>,
    attributed: Option<AttemptId>,
}

/// One observation to record.
struct Observation<'a> {
    tuple: &'a Tuple,
    kind: MessageKind,
    attributed: Option<AttemptId>,
    now: DateTime<Utc>,
    runner_time: Option<DateTime<Utc>>,
    verdict: Verdict<()>,
    outcome: Option<Outcome>,
    payload_sha256: Option<String>,
}

fn parse<T>(code: &str, from_code: fn(&str) -> Option<T>) -> Result<T, Error> {
    from_code(code).ok_or(Error::Invariant(
        "a state name in the database is not the spec's",
    ))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether two byte strings are equal, in a time that depends only on their lengths (public:
/// both are SHA-256 digests), never on where they differ. `subtle` keeps the optimizer from
/// turning the comparison into an early exit.
fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    left.ct_eq(right).into()
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
    /// Connect to `database_url`, apply the migrations of impl/migrations (safe when many stores
    /// connect at once: the migrator holds an advisory lock) and return the store.
    pub async fn connect(
        database_url: &str,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect(database_url)
            .await?;
        Self::from_pool(pool, clock, config).await
    }

    /// A store over an existing pool; applies the migrations.
    pub async fn from_pool(
        pool: PgPool,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
    ) -> Result<Store, Error> {
        MIGRATOR.run(&pool).await?;
        let lease_ttl = chrono::Duration::from_std(config.lease_ttl)
            .map_err(|_| Error::InvalidArgument("lease_ttl is too large"))?;
        if lease_ttl <= chrono::Duration::zero() {
            return Err(Error::InvalidArgument("lease_ttl must be positive"));
        }
        Ok(Store {
            pool,
            clock,
            lease_ttl,
            #[cfg(feature = "mutants")]
            mutant: None,
        })
    }

    /// The same database and pool with another clock and lease ttl (no migrations are run): for
    /// callers that replay many independent histories on one database, each with its own time.
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
        Ok(self.pool.begin().await?)
    }

    // ---------------------------------------------------------------------------------------
    // Setup: projects, runners, jobs.

    /// Create a project.
    pub async fn create_project(&self, name: &str) -> Result<ProjectId, Error> {
        let id = ProjectId::new_random();
        sqlx::query(self.sql(sql::PROJECT_INSERT))
            .bind(id.0)
            .bind(name)
            .bind(self.now())
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    /// Create a runner of `project`. Returns its id and its bearer token; only the token's
    /// SHA-256 is stored, so the token cannot be recovered later.
    pub async fn create_runner(
        &self,
        project: ProjectId,
        name: &str,
    ) -> Result<(RunnerId, String), Error> {
        let id = RunnerId::new_random();
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|_| Error::Invariant("no system randomness"))?;
        let token = format!("lw_{}_{}", id.0.simple(), hex::encode(secret));
        let token_sha256 = Sha256::digest(token.as_bytes()).to_vec();
        sqlx::query(self.sql(sql::RUNNER_INSERT))
            .bind(id.0)
            .bind(project.0)
            .bind(name)
            .bind(token_sha256)
            .bind(self.now())
            .execute(&self.pool)
            .await?;
        Ok((id, token))
    }

    /// The runner a bearer token authenticates, if any. The token's hash is compared with the
    /// stored hash in constant time. Authentication is not ownership.
    pub async fn authenticate(&self, token: &str) -> Result<Option<RunnerId>, Error> {
        let Some(rest) = token.strip_prefix("lw_") else {
            return Ok(None);
        };
        let Some((id, _secret)) = rest.split_once('_') else {
            return Ok(None);
        };
        let Ok(id) = Uuid::try_parse(id) else {
            return Ok(None);
        };
        let stored: Option<Vec<u8>> = sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_TOKEN_HASH))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let presented = Sha256::digest(token.as_bytes());
        Ok(match stored {
            Some(stored) if constant_time_eq(&stored, presented.as_slice()) => Some(RunnerId(id)),
            _ => None,
        })
    }

    /// Submit a job to `project`: `queued`, fence 0, no attempt.
    pub async fn submit_job(&self, project: ProjectId, job: NewJob) -> Result<JobId, Error> {
        let id = JobId::new_random();
        let target = job.target.unwrap_or_else(|| id.0.to_string());
        sqlx::query(self.sql(sql::JOB_INSERT))
            .bind(id.0)
            .bind(project.0)
            .bind(self.now())
            .bind(&job.source_revision)
            .bind(&job.source_digest)
            .bind(&job.command)
            .bind(&target)
            .bind(job.target_kind.as_str())
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    // ---------------------------------------------------------------------------------------
    // R1 claim.

    /// Rule R1 `claim`: the earliest-submitted queued job of the runner's project whose target
    /// is free, under a new attempt with `fence = job.fence + 1`.
    pub async fn claim(
        &self,
        runner: RunnerId,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Lease>, Error> {
        Ok(match self.claim_batch(runner, 1, runner_time).await? {
            Verdict::Accepted(mut leases) => match leases.pop() {
                Some(lease) => Verdict::Accepted(lease),
                None => Verdict::Rejected(Reason::NoQueuedJob),
            },
            Verdict::Acknowledged => Verdict::Acknowledged,
            Verdict::Rejected(reason) => Verdict::Rejected(reason),
        })
    }

    /// Rule R1 `claim`, batched: up to `k` jobs in one transaction. Rejected `no_queued_job`
    /// when not even one job could be claimed.
    pub async fn claim_batch(
        &self,
        runner: RunnerId,
        k: usize,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<Lease>>, Error> {
        if k == 0 {
            return Err(Error::InvalidArgument(
                "a batch claim takes at least one job",
            ));
        }
        let now = self.now();
        tracing::debug!(%runner, ?runner_time, k, "claim");
        let mut tx = self.begin().await?;
        let Some(project) = self.runner_project(&mut tx, runner).await? else {
            return Ok(Verdict::Rejected(Reason::UnknownRunner));
        };
        let mut leases = Vec::new();
        let mut skipped: Vec<Uuid> = Vec::new();
        while leases.len() < k {
            let Some(picked) =
                sqlx::query(self.sql(sql::JOB_PICK_EARLIEST_QUEUED_WITH_FREE_TARGET))
                    .bind(project.0)
                    .bind(&skipped)
                    .fetch_optional(&mut *tx)
                    .await?
            else {
                break;
            };
            let job: Uuid = picked.try_get("id")?;
            let target: String = picked.try_get("target")?;
            let attempt = AttemptId::new_random();
            let reserved = sqlx::query(self.sql(sql::TARGET_RESERVE_IF_FREE))
                .bind(project.0)
                .bind(&target)
                .bind(job)
                .bind(attempt.0)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            if reserved.is_none() {
                skipped.push(job);
                continue;
            }
            let started = sqlx::query(self.sql(sql::JOB_START_IF_QUEUED))
                .bind(job)
                .bind(attempt.0)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::Invariant("a picked queued job was not queued"))?;
            let fence: i64 = started.try_get("fence")?;
            let lease_id = LeaseId::new_random();
            let lease_expiry = now + self.lease_ttl;
            sqlx::query(self.sql(sql::ATTEMPT_INSERT_ON_CLAIM))
                .bind(attempt.0)
                .bind(job)
                .bind(project.0)
                .bind(runner.0)
                .bind(lease_id.0)
                .bind(fence)
                .bind(lease_expiry)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            leases.push(Lease {
                tuple: Tuple {
                    runner,
                    job: JobId(job),
                    attempt,
                    lease_id,
                    fence,
                },
                lease_expiry,
                source_revision: started.try_get("source_revision")?,
                source_digest: started.try_get("source_digest")?,
                command: started.try_get("command")?,
            });
        }
        tx.commit().await?;
        Ok(if leases.is_empty() {
            Verdict::Rejected(Reason::NoQueuedJob)
        } else {
            Verdict::Accepted(leases)
        })
    }

    // ---------------------------------------------------------------------------------------
    // The precedence of §6.1.

    async fn runner_project(
        &self,
        conn: &mut PgConnection,
        runner: RunnerId,
    ) -> Result<Option<ProjectId>, Error> {
        let project: Option<Uuid> = sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_PROJECT))
            .bind(runner.0)
            .fetch_optional(conn)
            .await?;
        Ok(project.map(ProjectId))
    }

    async fn lock_job(
        &self,
        conn: &mut PgConnection,
        job: JobId,
    ) -> Result<Option<LockedJob>, Error> {
        let Some(row) = sqlx::query(self.sql(sql::JOB_LOCK))
            .bind(job.0)
            .fetch_optional(conn)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(LockedJob {
            project: ProjectId(row.try_get("project_id")?),
            state: parse(row.try_get("state")?, JobState::from_code)?,
            current_attempt: row
                .try_get::<Option<Uuid>, _>("current_attempt_id")?
                .map(AttemptId),
            cancel_requested: row.try_get("cancel_requested")?,
        }))
    }

    /// Walk §6.1 after a zero-row conditional statement, in the same transaction, with the job
    /// row locked. Returns the first failing check; `Accepted` only if none fails (a bug).
    async fn classify(
        &self,
        conn: &mut PgConnection,
        tuple: &Tuple,
        job: Option<&LockedJob>,
        check: Check<'_>,
        judge_time: DateTime<Utc>,
    ) -> Result<Classified, Error> {
        let rejected = |reason, attributed| Classified {
            verdict: Verdict::Rejected(reason),
            attributed,
        };
        // 1 unknown_runner
        let Some(runner_project) = self.runner_project(&mut *conn, tuple.runner).await? else {
            return Ok(rejected(Reason::UnknownRunner, None));
        };
        // 2 unknown_job
        let Some(job) = job else {
            return Ok(rejected(Reason::UnknownJob, None));
        };
        // 3 wrong_project
        if job.project != runner_project {
            return Ok(rejected(Reason::WrongProject, None));
        }
        // 4 unknown_attempt
        let Some(attempt) = sqlx::query(self.sql(sql::ATTEMPT_SELECT_OF_JOB))
            .bind(tuple.attempt.0)
            .bind(tuple.job.0)
            .fetch_optional(&mut *conn)
            .await?
        else {
            return Ok(rejected(Reason::UnknownAttempt, None));
        };
        // 5 runner_mismatch
        if attempt.try_get::<Uuid, _>("runner_id")? != tuple.runner.0 {
            return Ok(rejected(Reason::RunnerMismatch, None));
        }
        // From here on the message is the named attempt's: it is attributed to it.
        let attributed = Some(tuple.attempt);
        // 6 lease_mismatch
        if attempt.try_get::<Uuid, _>("lease_id")? != tuple.lease_id.0 {
            return Ok(rejected(Reason::LeaseMismatch, attributed));
        }
        // 7 fence_mismatch
        if attempt.try_get::<i64, _>("fence")? != tuple.fence {
            return Ok(rejected(Reason::FenceMismatch, attributed));
        }
        // 8 not_current (a late report)
        if job.current_attempt != Some(tuple.attempt) {
            return Ok(rejected(Reason::NotCurrent, attributed));
        }
        let attempt_state = parse(attempt.try_get("state")?, AttemptState::from_code)?;
        // 9 (result only) the attempt holds the committed outcome
        if let Check::Result {
            outcome,
            result_digest,
        } = check
        {
            if matches!(
                attempt_state,
                AttemptState::Passed | AttemptState::Failed | AttemptState::Cancelled
            ) {
                let committed: Option<String> = attempt.try_get("outcome")?;
                let committed_digest: Option<String> = attempt.try_get("result_digest")?;
                // An outcome adopted by a reconciliation has no digest: the same outcome is
                // identical to it.
                let identical = committed.as_deref() == Some(outcome.as_str())
                    && committed_digest
                        .as_deref()
                        .is_none_or(|digest| digest == result_digest);
                let verdict = if identical {
                    Verdict::Acknowledged
                } else {
                    Verdict::Rejected(Reason::ConflictingResult)
                };
                return Ok(Classified {
                    verdict,
                    attributed,
                });
            }
        }
        // 10 job_finished
        if job.state.is_terminal() {
            return Ok(rejected(Reason::JobFinished, attributed));
        }
        // 11 lease_expired: swept, or expired but not yet swept
        let lease_expiry: DateTime<Utc> = attempt.try_get("lease_expiry")?;
        if attempt_state == AttemptState::Uncertain || judge_time >= lease_expiry {
            return Ok(rejected(Reason::LeaseExpired, attributed));
        }
        // 12 cancel_requested
        let allowed_while_cancelling = matches!(
            check,
            Check::Heartbeat
                | Check::Rejoin
                | Check::Result {
                    outcome: Outcome::Cancelled,
                    ..
                }
        );
        if job.state == JobState::Cancelling && !allowed_while_cancelling {
            return Ok(rejected(Reason::CancelRequested, attributed));
        }
        // 13 cancel_not_requested
        if matches!(
            check,
            Check::Result {
                outcome: Outcome::Cancelled,
                ..
            }
        ) && job.state == JobState::Running
        {
            return Ok(rejected(Reason::CancelNotRequested, attributed));
        }
        Ok(Classified {
            verdict: Verdict::Accepted(()),
            attributed,
        })
    }

    async fn record(
        &self,
        conn: &mut PgConnection,
        observation: Observation<'_>,
    ) -> Result<(), Error> {
        #[cfg(feature = "mutants")]
        if self.mutant_is(crate::mutants::Mutant::LateReportDropped)
            && observation.verdict == Verdict::Rejected(Reason::NotCurrent)
        {
            return Ok(());
        }
        let tuple = observation.tuple;
        sqlx::query(self.sql(sql::OBSERVATION_RECORD))
            .bind(tuple.runner.0)
            .bind(observation.kind.as_str())
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(observation.attributed.map(|attempt| attempt.0))
            .bind(observation.now)
            .bind(observation.runner_time)
            .bind(observation.verdict.as_str())
            .bind(observation.verdict.reason().map(Reason::as_str))
            .bind(observation.outcome.map(Outcome::as_str))
            .bind(observation.payload_sha256)
            .execute(conn)
            .await?;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // R2 heartbeat, R5 rejoin.

    /// Rule R2 `heartbeat`: `lease_expiry = now + lease_ttl` for the exact current attempt with a
    /// valid lease. A heartbeat after expiry is `lease_expired` and changes nothing.
    pub async fn heartbeat(
        &self,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<HeartbeatAnswer>, Error> {
        let now = self.now();
        let judge_time = self.judge_time(now, runner_time);
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
        let row = sqlx::query(self.sql(sql::ATTEMPT_HEARTBEAT_IF_CURRENT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .bind(now + self.lease_ttl)
            .fetch_optional(&mut *tx)
            .await?;
        let (verdict, attributed) = match row {
            Some(row) => (
                Verdict::Accepted(HeartbeatAnswer {
                    lease_expiry: row.try_get("lease_expiry")?,
                    cancel_requested: row.try_get("cancel_requested")?,
                }),
                Some(tuple.attempt),
            ),
            None => {
                let classified = self
                    .classify(&mut tx, tuple, job.as_ref(), Check::Heartbeat, judge_time)
                    .await?;
                (not_accepted(classified.verdict)?, classified.attributed)
            }
        };
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Heartbeat,
                attributed,
                now,
                runner_time,
                verdict: verdict.without_value(),
                outcome: None,
                payload_sha256: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    /// Rule R5 `rejoin`: read-only. The heartbeat verdict the tuple would get, as an instruction;
    /// never extends the lease. Recorded.
    pub async fn rejoin(
        &self,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<RejoinAnswer, Error> {
        let now = self.now();
        let judge_time = self.judge_time(now, runner_time);
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
        let row = sqlx::query(self.sql(sql::ATTEMPT_AUTHORIZE_REJOIN))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .fetch_optional(&mut *tx)
            .await?;
        let (answer, attributed) = match row {
            Some(row) => {
                let cancel: bool = row.try_get("cancel")?;
                let answer = if cancel {
                    RejoinAnswer::Cancel
                } else {
                    RejoinAnswer::Continue
                };
                (answer, Some(tuple.attempt))
            }
            None => {
                let classified = self
                    .classify(&mut tx, tuple, job.as_ref(), Check::Rejoin, judge_time)
                    .await?;
                match not_accepted::<()>(classified.verdict)? {
                    Verdict::Rejected(reason) => {
                        (RejoinAnswer::Stop(reason), classified.attributed)
                    }
                    _ => return Err(Error::Invariant("rejoin cannot be acknowledged")),
                }
            }
        };
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Rejoin,
                attributed,
                now,
                runner_time,
                verdict: answer.verdict(),
                outcome: None,
                payload_sha256: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(answer)
    }

    // ---------------------------------------------------------------------------------------
    // R3 result.

    /// Rule R3 `result`: the exact current attempt with a valid lease commits `outcome`; the
    /// target is released. An identical repeat is `acknowledged` (even after the lease time, and
    /// renewing nothing); another result for a committed attempt is `conflicting_result`. A late
    /// report is rejected and kept in its own attempt's ledger.
    pub async fn report_result(
        &self,
        tuple: &Tuple,
        outcome: Outcome,
        result_digest: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        let now = self.now();
        let judge_time = self.judge_time(now, runner_time);
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
        let committed = sqlx::query(self.sql(sql::ATTEMPT_COMMIT_RESULT_IF_CURRENT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .bind(outcome.as_str())
            .bind(result_digest)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
        let (verdict, attributed) = if committed.is_some() {
            let updated = sqlx::query(self.sql(sql::JOB_COMMIT_OUTCOME))
                .bind(tuple.job.0)
                .bind(tuple.attempt.0)
                .bind(outcome.as_str())
                .bind(result_digest)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            if updated.rows_affected() != 1 {
                return Err(Error::Invariant(
                    "a committed attempt's job did not take the outcome",
                ));
            }
            sqlx::query(self.sql(sql::TARGET_RELEASE))
                .bind(tuple.job.0)
                .execute(&mut *tx)
                .await?;
            (Verdict::Accepted(()), Some(tuple.attempt))
        } else {
            let check = Check::Result {
                outcome,
                result_digest,
            };
            let classified = self
                .classify(&mut tx, tuple, job.as_ref(), check, judge_time)
                .await?;
            #[allow(unused_mut)]
            let mut verdict = not_accepted(classified.verdict)?;
            #[cfg(feature = "mutants")]
            {
                verdict = self
                    .mutate_result_verdict(&mut tx, tuple, outcome, result_digest, verdict)
                    .await?;
            }
            (verdict, classified.attributed)
        };
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Result,
                attributed,
                now,
                runner_time,
                verdict,
                outcome: Some(outcome),
                payload_sha256: Some(sha256_hex(
                    format!("{}:{}", outcome.as_str(), result_digest).as_bytes(),
                )),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    #[cfg(feature = "mutants")]
    async fn mutate_result_verdict(
        &self,
        conn: &mut PgConnection,
        tuple: &Tuple,
        outcome: Outcome,
        result_digest: &str,
        verdict: Verdict<()>,
    ) -> Result<Verdict<()>, Error> {
        use crate::mutants::Mutant;
        if self.mutant_is(Mutant::DuplicateNotAcknowledged) && verdict == Verdict::Acknowledged {
            return Ok(Verdict::Rejected(Reason::ConflictingResult));
        }
        if self.mutant_is(Mutant::ConflictOverwrites)
            && verdict == Verdict::Rejected(Reason::ConflictingResult)
        {
            sqlx::query(crate::mutants::ATTEMPT_OVERWRITE_OUTCOME)
                .bind(tuple.job.0)
                .bind(tuple.attempt.0)
                .bind(outcome.as_str())
                .bind(result_digest)
                .execute(conn)
                .await?;
            return Ok(Verdict::Accepted(()));
        }
        Ok(verdict)
    }

    // ---------------------------------------------------------------------------------------
    // R8 side effects.

    async fn gate_side_effect(
        &self,
        conn: &mut PgConnection,
        tuple: &Tuple,
        now: DateTime<Utc>,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Gate, Error> {
        let judge_time = self.judge_time(now, runner_time);
        let job = self.lock_job(&mut *conn, tuple.job).await?;
        let authorized = sqlx::query(self.sql(sql::ATTEMPT_AUTHORIZE_SIDE_EFFECT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .fetch_optional(&mut *conn)
            .await?;
        if authorized.is_some() {
            return Ok(Gate {
                rejection: None,
                attributed: Some(tuple.attempt),
            });
        }
        let classified = self
            .classify(conn, tuple, job.as_ref(), Check::SideEffect, judge_time)
            .await?;
        Ok(Gate {
            rejection: Some(not_accepted(classified.verdict)?),
            attributed: classified.attributed,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_side_effect<T>(
        &self,
        mut tx: Transaction<'static, Postgres>,
        tuple: &Tuple,
        kind: MessageKind,
        attributed: Option<AttemptId>,
        now: DateTime<Utc>,
        runner_time: Option<DateTime<Utc>>,
        payload_sha256: Option<String>,
        verdict: Verdict<T>,
    ) -> Result<Verdict<T>, Error> {
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind,
                attributed,
                now,
                runner_time,
                verdict: verdict.without_value(),
                outcome: None,
                payload_sha256,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    fn rejection<T>(gate: &Gate) -> Option<Verdict<T>> {
        gate.rejection.as_ref().map(|verdict| match verdict {
            Verdict::Rejected(reason) => Verdict::Rejected(*reason),
            _ => Verdict::Acknowledged,
        })
    }

    /// Rule R8 `source fetch`: the job's immutable source identity.
    pub async fn fetch_source(
        &self,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<SourceIdentity>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                let row = sqlx::query(self.sql(sql::JOB_SELECT_SOURCE))
                    .bind(tuple.job.0)
                    .fetch_one(&mut *tx)
                    .await?;
                Verdict::Accepted(SourceIdentity {
                    source_revision: row.try_get("source_revision")?,
                    source_digest: row.try_get("source_digest")?,
                    command: row.try_get("command")?,
                })
            }
        };
        let kind = MessageKind::SourceFetch;
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            None,
            verdict,
        )
        .await
    }

    /// Rule R8 `log append`: idempotent per (attempt, `seq`); the same content again is
    /// `acknowledged`, other content `sequence_conflict`.
    pub async fn append_log(
        &self,
        tuple: &Tuple,
        seq: i64,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        if seq < 0 {
            return Err(Error::InvalidArgument(
                "a log sequence number is not negative",
            ));
        }
        let now = self.now();
        let digest = sha256_hex(content);
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                let appended = sqlx::query(self.sql(sql::LOG_APPEND_ONCE))
                    .bind(tuple.attempt.0)
                    .bind(seq)
                    .bind(content)
                    .bind(&digest)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                if appended.is_some() {
                    Verdict::Accepted(())
                } else {
                    let existing: String =
                        sqlx::query_scalar(self.sql(sql::LOG_SELECT_CHUNK_DIGEST))
                            .bind(tuple.attempt.0)
                            .bind(seq)
                            .fetch_one(&mut *tx)
                            .await?;
                    if existing == digest {
                        Verdict::Acknowledged
                    } else {
                        Verdict::Rejected(Reason::SequenceConflict)
                    }
                }
            }
        };
        let kind = MessageKind::LogAppend;
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            Some(digest),
            verdict,
        )
        .await
    }

    /// Rule R8 `artifact put`: store (or replace) the attempt's artifact `name`.
    pub async fn put_artifact(
        &self,
        tuple: &Tuple,
        name: &str,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        let now = self.now();
        let digest = sha256_hex(content);
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                sqlx::query(self.sql(sql::ARTIFACT_PUT))
                    .bind(tuple.attempt.0)
                    .bind(name)
                    .bind(content)
                    .bind(&digest)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                Verdict::Accepted(())
            }
        };
        let kind = MessageKind::ArtifactPut;
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            Some(digest),
            verdict,
        )
        .await
    }

    /// Rule R8 `artifact get`: the attempt's artifact `name`, or `not_found`.
    pub async fn get_artifact(
        &self,
        tuple: &Tuple,
        name: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<u8>>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                let content: Option<Vec<u8>> = sqlx::query_scalar(self.sql(sql::ARTIFACT_GET))
                    .bind(tuple.attempt.0)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                content.map_or(Verdict::Rejected(Reason::NotFound), Verdict::Accepted)
            }
        };
        let kind = MessageKind::ArtifactGet;
        let payload = Some(sha256_hex(name.as_bytes()));
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            payload,
            verdict,
        )
        .await
    }

    /// Rule R8 `cache put`: store (or replace) the project's cache entry `key`.
    pub async fn cache_put(
        &self,
        tuple: &Tuple,
        key: &str,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        let now = self.now();
        let digest = sha256_hex(content);
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                sqlx::query(self.sql(sql::CACHE_ENTRY_PUT))
                    .bind(tuple.job.0)
                    .bind(key)
                    .bind(content)
                    .bind(&digest)
                    .bind(tuple.attempt.0)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                Verdict::Accepted(())
            }
        };
        let kind = MessageKind::CachePut;
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            Some(digest),
            verdict,
        )
        .await
    }

    /// Rule R8 `cache get`: the project's cache entry `key`, or `not_found`.
    pub async fn cache_get(
        &self,
        tuple: &Tuple,
        key: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<u8>>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => {
                let content: Option<Vec<u8>> = sqlx::query_scalar(self.sql(sql::CACHE_ENTRY_GET))
                    .bind(tuple.job.0)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
                content.map_or(Verdict::Rejected(Reason::NotFound), Verdict::Accepted)
            }
        };
        let kind = MessageKind::CacheGet;
        let payload = Some(sha256_hex(key.as_bytes()));
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            payload,
            verdict,
        )
        .await
    }

    // ---------------------------------------------------------------------------------------
    // R4 expiry sweep.

    /// Rule R4 `expiry sweep`: every `running`/`cancelling` job whose lease expired at `now`
    /// becomes `uncertain` (never `queued`).
    pub async fn sweep_expired(&self) -> Result<SweepVerdict, Error> {
        self.sweep_expired_in(None).await
    }

    /// Rule R4 `expiry sweep` restricted to the jobs of `project` (`None`: every project), for
    /// callers that share one database between independent worlds (the conformance suite).
    pub async fn sweep_expired_in(
        &self,
        project: Option<ProjectId>,
    ) -> Result<SweepVerdict, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        #[cfg(not(feature = "mutants"))]
        let statement = self.sql(sql::JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED);
        #[cfg(feature = "mutants")]
        let statement = if self.mutant_is(crate::mutants::Mutant::ExpiryRequeues) {
            crate::mutants::JOB_REQUEUE_IF_LEASE_EXPIRED
        } else {
            self.sql(sql::JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED)
        };
        let mut jobs: Vec<JobId> = sqlx::query_scalar::<_, Uuid>(statement)
            .bind(now)
            .bind(project.map(|project| project.0))
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(JobId)
            .collect();
        tx.commit().await?;
        jobs.sort();
        Ok(if jobs.is_empty() {
            SweepVerdict::Accepted
        } else {
            SweepVerdict::Uncertain(jobs)
        })
    }

    // ---------------------------------------------------------------------------------------
    // R6 cancel, R7 reconcile.

    /// Rule R6 `cancel` by an operator of `project` (§6.3): `queued` → `cancelled`; `running` →
    /// `cancelling` with `cancel requested`; `cancelling` again is `acknowledged`.
    pub async fn cancel(&self, project: ProjectId, job: JobId) -> Result<Verdict<()>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let locked = self.lock_job(&mut tx, job).await?;
        let cancelled = sqlx::query(self.sql(sql::JOB_CANCEL_IF_QUEUED))
            .bind(job.0)
            .bind(project.0)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
        let verdict = if cancelled.is_some() {
            Verdict::Accepted(())
        } else {
            let requested = sqlx::query(self.sql(sql::JOB_REQUEST_CANCEL_IF_RUNNING))
                .bind(job.0)
                .bind(project.0)
                .fetch_optional(&mut *tx)
                .await?;
            if requested.is_some() {
                Verdict::Accepted(())
            } else {
                match locked {
                    None => Verdict::Rejected(Reason::UnknownJob),
                    Some(locked) if locked.project != project => {
                        Verdict::Rejected(Reason::WrongProject)
                    }
                    Some(locked) if locked.state.is_terminal() => {
                        Verdict::Rejected(Reason::JobFinished)
                    }
                    Some(locked) if locked.state == JobState::Uncertain => {
                        Verdict::Rejected(Reason::ReconcileRequired)
                    }
                    Some(locked) if locked.state == JobState::Cancelling => Verdict::Acknowledged,
                    Some(_) => {
                        return Err(Error::Invariant(
                            "a cancel matched no row but passed every check",
                        ))
                    }
                }
            }
        };
        tx.commit().await?;
        Ok(verdict)
    }

    /// Rule R7 `reconcile` by an operator of `project` (§6.3). Recorded, accepted or rejected.
    pub async fn reconcile(
        &self,
        project: ProjectId,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Result<Verdict<()>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let locked = self.lock_job(&mut tx, job).await?;
        let decided: Option<AttemptId> = match decision {
            Decision::Retry | Decision::Abort => {
                let statement = if decision == Decision::Retry {
                    sql::JOB_REQUEUE_IF_UNCERTAIN_AND_STOPPED
                } else {
                    sql::JOB_ABORT_IF_UNCERTAIN_AND_STOPPED
                };
                let mut query = sqlx::query_scalar::<_, Uuid>(self.sql(statement))
                    .bind(job.0)
                    .bind(project.0);
                query = query.bind(finding.as_str());
                if decision == Decision::Abort {
                    query = query.bind(now);
                }
                let attempt = query.fetch_optional(&mut *tx).await?.map(AttemptId);
                if let Some(attempt) = attempt {
                    let stopped = sqlx::query(self.sql(sql::ATTEMPT_STOP_AFTER_RECONCILE))
                        .bind(attempt.0)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    if stopped.rows_affected() != 1 {
                        return Err(Error::Invariant(
                            "an uncertain job's attempt was not uncertain",
                        ));
                    }
                }
                attempt
            }
            Decision::Adopt => {
                let adopted = sqlx::query(self.sql(sql::JOB_ADOPT_IF_UNCERTAIN_AND_OBSERVED))
                    .bind(job.0)
                    .bind(project.0)
                    .bind(finding.as_str())
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                match adopted {
                    Some(row) => {
                        let attempt = AttemptId(row.try_get("current_attempt_id")?);
                        let outcome: String = row.try_get("outcome")?;
                        let updated = sqlx::query(self.sql(sql::ATTEMPT_ADOPT_OUTCOME))
                            .bind(attempt.0)
                            .bind(outcome)
                            .bind(now)
                            .execute(&mut *tx)
                            .await?;
                        if updated.rows_affected() != 1 {
                            return Err(Error::Invariant(
                                "an uncertain job's attempt was not uncertain",
                            ));
                        }
                        Some(attempt)
                    }
                    None => None,
                }
            }
        };
        let verdict = if decided.is_some() {
            sqlx::query(self.sql(sql::TARGET_RELEASE))
                .bind(job.0)
                .execute(&mut *tx)
                .await?;
            Verdict::Accepted(())
        } else {
            match &locked {
                None => Verdict::Rejected(Reason::UnknownJob),
                Some(locked) if locked.project != project => {
                    Verdict::Rejected(Reason::WrongProject)
                }
                Some(locked) if locked.state != JobState::Uncertain => {
                    Verdict::Rejected(Reason::NotUncertain)
                }
                Some(_) if finding == Finding::StillRunning => {
                    Verdict::Rejected(Reason::ExecutionNotStopped)
                }
                Some(_) if decision == Decision::Adopt && finding == Finding::Stopped => {
                    Verdict::Rejected(Reason::NothingToAdopt)
                }
                Some(locked) if decision == Decision::Retry && locked.cancel_requested => {
                    Verdict::Rejected(Reason::CancelRequested)
                }
                Some(_) => {
                    return Err(Error::Invariant(
                        "a reconcile matched no row but passed every check",
                    ))
                }
            }
        };
        let attempt = decided.or_else(|| {
            locked
                .as_ref()
                .filter(|locked| locked.project == project)
                .and_then(|l| l.current_attempt)
        });
        sqlx::query(self.sql(sql::RECONCILIATION_RECORD))
            .bind(project.0)
            .bind(job.0)
            .bind(attempt.map(|attempt| attempt.0))
            .bind(finding.as_str())
            .bind(decision.as_str())
            .bind(verdict.as_str())
            .bind(verdict.reason().map(Reason::as_str))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    // ---------------------------------------------------------------------------------------
    // Read views.

    /// The job, if it exists.
    pub async fn job(&self, job: JobId) -> Result<Option<JobView>, Error> {
        let Some(row) = sqlx::query(self.sql(sql::JOB_SELECT_VIEW))
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(JobView {
            id: JobId(row.try_get("id")?),
            project: ProjectId(row.try_get("project_id")?),
            state: parse(row.try_get("state")?, JobState::from_code)?,
            current_attempt: row
                .try_get::<Option<Uuid>, _>("current_attempt_id")?
                .map(AttemptId),
            fence: row.try_get("fence")?,
            cancel_requested: row.try_get("cancel_requested")?,
            outcome: match row.try_get::<Option<&str>, _>("outcome")? {
                Some(code) => Some(parse(code, JobState::from_code)?),
                None => None,
            },
            result_digest: row.try_get("result_digest")?,
            source_revision: row.try_get("source_revision")?,
            source_digest: row.try_get("source_digest")?,
            command: row.try_get("command")?,
            target: row.try_get("target")?,
            target_kind: parse(row.try_get("target_kind")?, TargetKind::from_code)?,
            submitted_at: row.try_get("submitted_at")?,
            finished_at: row.try_get("finished_at")?,
        }))
    }

    /// The job's attempts, in fence order.
    pub async fn attempts(&self, job: JobId) -> Result<Vec<AttemptView>, Error> {
        let rows = sqlx::query(self.sql(sql::ATTEMPT_SELECT_VIEWS_OF_JOB))
            .bind(job.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(attempt_view).collect()
    }

    /// Every observation that named the job (attributed to one of its attempts or not), in the
    /// order received.
    pub async fn observations(&self, job: JobId) -> Result<Vec<ObservationView>, Error> {
        let rows = sqlx::query(self.sql(sql::OBSERVATION_SELECT_OF_JOB))
            .bind(job.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(observation_view).collect()
    }

    /// The attempt's ledger: the observations attributed to it, in the order received.
    pub async fn attempt_observations(
        &self,
        attempt: AttemptId,
    ) -> Result<Vec<ObservationView>, Error> {
        let rows = sqlx::query(self.sql(sql::OBSERVATION_SELECT_OF_ATTEMPT))
            .bind(attempt.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(observation_view).collect()
    }

    /// The reconciliations asked for the job, in order.
    pub async fn reconciliations(&self, job: JobId) -> Result<Vec<ReconciliationView>, Error> {
        let rows = sqlx::query(self.sql(sql::RECONCILIATION_SELECT_OF_JOB))
            .bind(job.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let verdict = match row.try_get::<&str, _>("verdict")? {
                    "accepted" => Verdict::Accepted(()),
                    _ => Verdict::Rejected(parse(row.try_get("reason")?, Reason::from_code)?),
                };
                Ok(ReconciliationView {
                    id: row.try_get("id")?,
                    project: ProjectId(row.try_get("project_id")?),
                    job: JobId(row.try_get("job_id")?),
                    attempt: row.try_get::<Option<Uuid>, _>("attempt_id")?.map(AttemptId),
                    finding: parse(row.try_get("finding")?, Finding::from_code)?,
                    decision: parse(row.try_get("decision")?, Decision::from_code)?,
                    verdict,
                    decided_at: row.try_get("decided_at")?,
                })
            })
            .collect()
    }

    /// The attempt's log chunks, in sequence order.
    pub async fn logs(&self, attempt: AttemptId) -> Result<Vec<(i64, Vec<u8>)>, Error> {
        let rows = sqlx::query(self.sql(sql::LOG_SELECT_OF_ATTEMPT))
            .bind(attempt.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("seq")?, row.try_get("content")?)))
            .collect()
    }

    /// The job's target reservation: the target and the attempt holding it.
    pub async fn target_reservation(
        &self,
        job: JobId,
    ) -> Result<Option<(String, AttemptId)>, Error> {
        let row = sqlx::query(self.sql(sql::TARGET_RESERVATION_SELECT_OF_JOB))
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(Some((
                row.try_get("target")?,
                AttemptId(row.try_get("attempt_id")?),
            ))),
            None => Ok(None),
        }
    }

    /// A demonstration deployment target of `kind` in slot `slot` (docs/protocol.md §8), backed
    /// by this store's database. A slot keeps the kind it was first created with.
    pub async fn demo_target(
        &self,
        kind: TargetKind,
        slot: &str,
    ) -> Result<crate::target::DemoTarget, Error> {
        sqlx::query(self.sql(sql::TARGET_ENSURE))
            .bind(slot)
            .bind(kind.as_str())
            .execute(&self.pool)
            .await?;
        crate::target::DemoTarget::open(
            self.pool.clone(),
            self.clock.clone(),
            slot.to_owned(),
            kind,
        )
        .await
    }
}

fn attempt_view(row: &PgRow) -> Result<AttemptView, Error> {
    Ok(AttemptView {
        id: AttemptId(row.try_get("id")?),
        job: JobId(row.try_get("job_id")?),
        runner: RunnerId(row.try_get("runner_id")?),
        lease_id: LeaseId(row.try_get("lease_id")?),
        fence: row.try_get("fence")?,
        state: parse(row.try_get("state")?, AttemptState::from_code)?,
        lease_expiry: row.try_get("lease_expiry")?,
        outcome: match row.try_get::<Option<&str>, _>("outcome")? {
            Some(code) => Some(parse(code, Outcome::from_code)?),
            None => None,
        },
        result_digest: row.try_get("result_digest")?,
        claimed_at: row.try_get("claimed_at")?,
        ended_at: row.try_get("ended_at")?,
    })
}

fn observation_view(row: &PgRow) -> Result<ObservationView, Error> {
    let verdict = match row.try_get::<&str, _>("verdict")? {
        "accepted" => Verdict::Accepted(()),
        "acknowledged" => Verdict::Acknowledged,
        _ => Verdict::Rejected(parse(row.try_get("reason")?, Reason::from_code)?),
    };
    Ok(ObservationView {
        id: row.try_get("id")?,
        kind: parse(row.try_get("kind")?, MessageKind::from_code)?,
        named: Tuple {
            runner: RunnerId(row.try_get("sender_runner_id")?),
            job: JobId(row.try_get("named_job_id")?),
            attempt: AttemptId(row.try_get("named_attempt_id")?),
            lease_id: LeaseId(row.try_get("named_lease_id")?),
            fence: row.try_get("named_fence")?,
        },
        attempt: row.try_get::<Option<Uuid>, _>("attempt_id")?.map(AttemptId),
        received_at: row.try_get("received_at")?,
        runner_time: row.try_get("runner_time")?,
        verdict,
        outcome: match row.try_get::<Option<&str>, _>("outcome")? {
            Some(code) => Some(parse(code, Outcome::from_code)?),
            None => None,
        },
        payload_sha256: row.try_get("payload_sha256")?,
    })
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;
    use sha2::{Digest, Sha256};

    #[test]
    fn token_hashes_are_equal_only_when_every_byte_is() {
        let hash: [u8; 32] = Sha256::digest(b"lw_token").into();
        assert!(constant_time_eq(&hash, &hash.clone()));
        assert!(constant_time_eq(b"", b""));
        // A difference anywhere (first, middle, last byte, a single bit) is a difference.
        for at in [0, 15, 31] {
            for bit in [0x01, 0x80] {
                let mut other = hash;
                other[at] ^= bit;
                assert!(!constant_time_eq(&hash, &other), "byte {at} bit {bit:#x}");
            }
        }
        // Other lengths (a prefix, a longer string) are never equal.
        assert!(!constant_time_eq(&hash, &hash[..31]));
        assert!(!constant_time_eq(&hash[..31], &hash));
        assert!(!constant_time_eq(&hash, &[hash.as_slice(), &[0]].concat()));
        assert!(!constant_time_eq(&hash, b""));
    }
}
