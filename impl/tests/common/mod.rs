//! Shared by tests/protocol.rs and tests/mutants.rs: a fresh world per check, and the scenario
//! checks themselves. A check returns `Err` naming the first expectation that failed, so the
//! mutants test can show that a broken rule makes some check fail.
#![allow(dead_code)]

pub mod checks;

use chrono::Duration;
use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Why a check failed.
#[derive(Debug)]
pub struct Fail(pub String);

impl From<Error> for Fail {
    fn from(error: Error) -> Self {
        Fail(format!("store error: {error:?}"))
    }
}

pub type Check = Result<(), Fail>;
pub type CheckFn = fn(World) -> Pin<Box<dyn Future<Output = Check> + Send>>;

/// `ensure_eq!(actual, expected, "what")`: fail the check unless equal.
#[macro_export]
macro_rules! ensure_eq {
    ($actual:expr, $expected:expr, $($what:tt)+) => {{
        let actual = $actual;
        let expected = $expected;
        if actual != expected {
            return Err($crate::common::Fail(format!(
                "{}: got {:?}, expected {:?}",
                format!($($what)+),
                actual,
                expected
            )));
        }
    }};
}

/// `ensure!(condition, "what")`.
#[macro_export]
macro_rules! ensure {
    ($condition:expr, $($what:tt)+) => {{
        if !$condition {
            return Err($crate::common::Fail(format!($($what)+)));
        }
    }};
}

pub const LEASE_TTL_SECS: i64 = 30;

/// Two projects, each with runners; a manual clock; a fresh database.
pub struct World {
    pub db: TestDatabase,
    pub store: Store,
    pub clock: ManualClock,
    pub project: ProjectId,
    pub runner: RunnerId,
    /// Another runner of the same project.
    pub second_runner: RunnerId,
    pub other_project: ProjectId,
    /// A runner of the other project.
    pub other_runner: RunnerId,
}

impl World {
    pub async fn new() -> World {
        Self::with_store(|store| store, 10).await
    }

    pub async fn with_store(transform: impl FnOnce(Store) -> Store, connections: u32) -> World {
        let db = TestDatabase::create().await.expect("a test database");
        let clock = ManualClock::at_fixed_start();
        let config = StoreConfig {
            lease_ttl: std::time::Duration::from_secs(LEASE_TTL_SECS as u64),
            max_connections: connections,
            ..StoreConfig::default()
        };
        let store = db
            .store(Arc::new(clock.clone()), config)
            .await
            .expect("a store");
        let store = transform(store);
        let project = store.create_project("alpha").await.expect("project");
        let (runner, _) = store
            .create_runner(project, "runner-a")
            .await
            .expect("runner");
        let (second_runner, _) = store
            .create_runner(project, "runner-b")
            .await
            .expect("runner");
        let other_project = store.create_project("beta").await.expect("project");
        let (other_runner, _) = store
            .create_runner(other_project, "runner-z")
            .await
            .expect("runner");
        World {
            db,
            store,
            clock,
            project,
            runner,
            second_runner,
            other_project,
            other_runner,
        }
    }

    pub fn advance_secs(&self, secs: i64) {
        self.clock.advance(Duration::seconds(secs));
    }

    pub async fn submit(&self) -> Result<JobId, Fail> {
        Ok(self
            .store
            .submit_job(self.project, NewJob::new("abc123", "sha256:src", "make"))
            .await?)
    }

    pub async fn claim_by(&self, runner: RunnerId) -> Result<Lease, Fail> {
        match self.store.claim(runner, None).await? {
            Verdict::Accepted(lease) => Ok(lease),
            other => Err(Fail(format!("claim: {other:?}"))),
        }
    }

    pub async fn claim(&self) -> Result<Lease, Fail> {
        self.claim_by(self.runner).await
    }

    pub async fn job(&self, job: JobId) -> Result<JobView, Fail> {
        self.store
            .job(job)
            .await?
            .ok_or_else(|| Fail("job missing".into()))
    }

    pub async fn attempt(&self, job: JobId, attempt: AttemptId) -> Result<AttemptView, Fail> {
        self.store
            .attempts(job)
            .await?
            .into_iter()
            .find(|a| a.id == attempt)
            .ok_or_else(|| Fail("attempt missing".into()))
    }

    /// Expire the lease, sweep, reconcile `stopped` + `retry`.
    pub async fn lose_and_retry(&self, job: JobId) -> Check {
        self.advance_secs(LEASE_TTL_SECS);
        self.store.sweep_expired().await?;
        let verdict = self
            .store
            .reconcile(self.project, job, Finding::Stopped, Decision::Retry)
            .await?;
        ensure_eq!(verdict, Verdict::Accepted(()), "reconcile stopped + retry");
        Ok(())
    }
}

/// Every message that carries the ownership tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Heartbeat,
    SourceFetch,
    LogAppend,
    ArtifactPut,
    ArtifactGet,
    CacheGet,
    CachePut,
    Result,
    Rejoin,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Heartbeat,
        Op::SourceFetch,
        Op::LogAppend,
        Op::ArtifactPut,
        Op::ArtifactGet,
        Op::CacheGet,
        Op::CachePut,
        Op::Result,
        Op::Rejoin,
    ];
}

/// Send `op` with `tuple`; the verdict without its value (a rejoin's answer as its verdict).
pub async fn send(
    store: &Store,
    op: Op,
    tuple: &Tuple,
    runner_time: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<Verdict<()>, Fail> {
    Ok(match op {
        Op::Heartbeat => store.heartbeat(tuple, runner_time).await?.without_value(),
        Op::SourceFetch => store
            .fetch_source(tuple, runner_time)
            .await?
            .without_value(),
        Op::LogAppend => store.append_log(tuple, 0, b"line 0\n", runner_time).await?,
        Op::ArtifactPut => {
            store
                .put_artifact(tuple, "out.tar", b"bits", runner_time)
                .await?
        }
        Op::ArtifactGet => store
            .get_artifact(tuple, "out.tar", runner_time)
            .await?
            .without_value(),
        Op::CacheGet => store
            .cache_get(tuple, "deps", runner_time)
            .await?
            .without_value(),
        Op::CachePut => {
            store
                .cache_put(tuple, "deps", b"cached", runner_time)
                .await?
        }
        Op::Result => {
            store
                .report_result(tuple, Outcome::Passed, "sha256:r", runner_time)
                .await?
        }
        Op::Rejoin => store.rejoin(tuple, runner_time).await?.verdict(),
    })
}

/// Run one check in a fresh world; panic with its failure.
pub async fn run(check: CheckFn) {
    let world = World::new().await;
    if let Err(Fail(why)) = check(world).await {
        panic!("{why}");
    }
}
