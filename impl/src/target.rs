//! Deployment targets (docs/protocol.md §8). The control plane's tuple is deliberately NOT
//! checked here: a target applies only its own rule, over the slot token a mutation carries (never
//! a job fence: job fences of different jobs are not comparable). The control plane's protection
//! is the slot's reservation, held from claim until a reconciliation or a committed outcome.

use crate::clock::Clock;
use crate::error::Error;
use crate::sql;
use crate::types::{AttemptId, JobId, Reason, TargetKind, Verdict};
use chrono::SubsecRound;
use sqlx::{PgPool, Row};
use std::future::Future;
use std::sync::Arc;

/// A mutation a runner sends to a target directly (rule R9), not through the control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetMutation {
    pub job: JobId,
    pub attempt: AttemptId,
    /// The slot token of the attempt's reservation of the slot ([`crate::Lease::slot_token`]).
    pub slot_token: i64,
    /// The deployment's durable identity (the job, in docs/protocol.md §8).
    pub deployment_id: String,
}

/// A deployment target with its own rule for mutations.
pub trait TargetAdapter: Send + Sync {
    /// The kind of rule the target applies.
    fn kind(&self) -> TargetKind;

    /// Rule R9 `target mutation`: `fenced` → accepted or rejected `stale_fence`; `idempotent` →
    /// accepted or acknowledged; `unfenced` → accepted.
    fn mutate(
        &self,
        mutation: &TargetMutation,
    ) -> impl Future<Output = Result<Verdict<()>, Error>> + Send;
}

/// What a target holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetState {
    pub kind: TargetKind,
    /// The highest slot token applied (`fenced` only).
    pub highest_slot_token: Option<i64>,
    /// How many mutations were applied.
    pub applied_count: i64,
}

/// A demonstration target of any kind, backed by the `targets` table of the store's database.
#[derive(Clone)]
pub struct DemoTarget {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    slot: String,
    kind: TargetKind,
    /// The store's mutant (feature `mutants` only): the target's statements are the store's.
    #[cfg(feature = "mutants")]
    mutant: Option<crate::mutants::Mutant>,
}

impl std::fmt::Debug for DemoTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoTarget")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl DemoTarget {
    /// The target in `slot`, which must exist (see [`crate::Store::demo_target`]).
    pub(crate) async fn open(
        pool: PgPool,
        clock: Arc<dyn Clock>,
        slot: String,
        kind: TargetKind,
    ) -> Result<Self, Error> {
        let target = Self {
            pool,
            clock,
            slot,
            kind,
            #[cfg(feature = "mutants")]
            mutant: None,
        };
        if target.state().await?.kind != kind {
            return Err(Error::InvalidArgument(
                "the target slot exists with another kind",
            ));
        }
        Ok(target)
    }

    /// The same target with the store's `mutant` planted in its statements.
    #[cfg(feature = "mutants")]
    pub(crate) fn with_mutant(mut self, mutant: Option<crate::mutants::Mutant>) -> Self {
        self.mutant = mutant;
        self
    }

    /// The text of `statement` to send (and counted), as the store's `sql()`: without the
    /// `mutants` feature always the statement itself.
    #[cfg(not(feature = "mutants"))]
    fn sql(&self, statement: sql::Statement) -> &'static str {
        statement.issue()
    }

    #[cfg(feature = "mutants")]
    fn sql(&self, statement: sql::Statement) -> &'static str {
        statement.count();
        crate::mutants::statement_text(self.mutant, statement)
    }

    /// The slot's name.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// What the target holds now.
    pub async fn state(&self) -> Result<TargetState, Error> {
        let mut tx = crate::transaction::begin(&self.pool, None).await?;
        let state = self.lock(&mut tx).await?;
        tx.commit().await?;
        Ok(state)
    }

    async fn lock(&self, conn: &mut sqlx::PgConnection) -> Result<TargetState, Error> {
        let row = sqlx::query(self.sql(sql::TARGET_LOCK))
            .bind(&self.slot)
            .fetch_one(conn)
            .await?;
        let kind: &str = row.try_get("kind")?;
        Ok(TargetState {
            kind: TargetKind::from_code(kind).ok_or(Error::Invariant(
                "a target kind in the database is not the spec's",
            ))?,
            highest_slot_token: row.try_get("highest_slot_token")?,
            applied_count: row.try_get("applied_count")?,
        })
    }

    async fn apply(&self, mutation: &TargetMutation) -> Result<Verdict<()>, Error> {
        let now = self.clock.now().trunc_subsecs(6);
        let mut tx = crate::transaction::begin(&self.pool, None).await?;
        self.lock(&mut tx).await?;
        let verdict = match self.kind {
            TargetKind::Fenced => {
                let applied = sqlx::query(self.sql(sql::TARGET_FENCED_APPLY_IF_NOT_STALE))
                    .bind(&self.slot)
                    .bind(mutation.slot_token)
                    .fetch_optional(&mut *tx)
                    .await?;
                if applied.is_some() {
                    Verdict::Accepted(())
                } else {
                    Verdict::Rejected(Reason::StaleFence)
                }
            }
            TargetKind::Idempotent => {
                let first = sqlx::query(self.sql(sql::TARGET_IDEMPOTENT_APPLY_ONCE))
                    .bind(&self.slot)
                    .bind(&mutation.deployment_id)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                if first.is_some() {
                    sqlx::query(self.sql(sql::TARGET_COUNT_APPLICATION))
                        .bind(&self.slot)
                        .execute(&mut *tx)
                        .await?;
                    Verdict::Accepted(())
                } else {
                    Verdict::Acknowledged
                }
            }
            TargetKind::Unfenced => {
                sqlx::query(self.sql(sql::TARGET_COUNT_APPLICATION))
                    .bind(&self.slot)
                    .execute(&mut *tx)
                    .await?;
                Verdict::Accepted(())
            }
        };
        sqlx::query(self.sql(sql::TARGET_MUTATION_RECORD))
            .bind(&self.slot)
            .bind(mutation.job.0)
            .bind(mutation.attempt.0)
            .bind(mutation.slot_token)
            .bind(&mutation.deployment_id)
            .bind(verdict.as_str())
            .bind(verdict.reason().map(Reason::as_str))
            .bind(verdict.is_accepted())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(verdict)
    }
}

impl TargetAdapter for DemoTarget {
    fn kind(&self) -> TargetKind {
        self.kind
    }

    async fn mutate(&self, mutation: &TargetMutation) -> Result<Verdict<()>, Error> {
        self.apply(mutation).await
    }
}
