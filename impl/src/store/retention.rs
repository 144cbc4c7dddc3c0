//! Retention: finished jobs older than an operator's retention are deleted with everything they
//! own, in small batches (docs/impl.md, "Retention"; docs/audit.md, "Pruning audited jobs").
//! Not a protocol rule: a terminal job takes no further transition, and a message naming a pruned
//! job is answered as one naming a job that does not exist (`unknown_job`).

use super::Store;
use crate::error::Error;
use crate::sql;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

/// What one prune may delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrunePolicy {
    /// Jobs that finished before this time are pruned.
    pub finished_before: DateTime<Utc>,
    /// Delete jobs with records above the audit watermark (or any job when no watermark is
    /// recorded) too; each one is counted in [`PruneReport::unaudited`].
    pub unaudited: bool,
    /// The most jobs one batch (one transaction) deletes.
    pub batch: u32,
    /// The most batches this call runs (`None`: until no job is left to prune).
    pub max_batches: Option<u32>,
}

/// The rows one prune deleted, by table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Batches run (transactions committed, including a last one that found nothing).
    pub batches: u64,
    pub jobs: u64,
    /// Of [`PruneReport::jobs`], those with a record above the audit watermark (only with
    /// [`PrunePolicy::unaudited`]).
    pub unaudited: u64,
    pub attempts: u64,
    pub observations: u64,
    pub reconciliations: u64,
    pub cancels: u64,
    pub expiry_sweeps: u64,
    pub log_chunks: u64,
    pub artifacts: u64,
    pub target_mutations: u64,
}

impl PruneReport {
    fn add(&mut self, other: &PruneReport) {
        self.batches += other.batches;
        self.jobs += other.jobs;
        self.unaudited += other.unaudited;
        self.attempts += other.attempts;
        self.observations += other.observations;
        self.reconciliations += other.reconciliations;
        self.cancels += other.cancels;
        self.expiry_sweeps += other.expiry_sweeps;
        self.log_chunks += other.log_chunks;
        self.artifacts += other.artifacts;
        self.target_mutations += other.target_mutations;
    }
}

/// How long one batch may wait for a lock before it gives up (its transaction is rolled back and
/// the prune fails; the next run picks the jobs again). A batch locks its own jobs with
/// `SKIP LOCKED` and waits for nothing else in the protocol's tables; this bounds a wait on
/// another schema's rows that a job's deletion reaches (the server's source blobs).
const BATCH_LOCK_TIMEOUT: &str = "5s";

fn count(row: &sqlx::postgres::PgRow, column: &str) -> Result<u64, Error> {
    let n: i64 = row.try_get(column)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

impl Store {
    /// The recorded audit watermark: the highest ledger sequence value an audit covered, as the
    /// operator recorded it ([`Store::record_audit_watermark`]); `None` if none was.
    pub async fn audit_watermark(&self) -> Result<Option<i64>, Error> {
        Ok(
            sqlx::query_scalar::<_, i64>(self.sql(sql::AUDIT_WATERMARK_SELECT))
                .fetch_optional(self.pool())
                .await?,
        )
    }

    /// Record that the ledger is audited through `watermark` (what `leasewright audit` printed).
    /// The recorded value never goes back; returns the value recorded now.
    pub async fn record_audit_watermark(&self, watermark: i64) -> Result<i64, Error> {
        if watermark < 0 {
            return Err(Error::InvalidArgument("an audit watermark is 0 or more"));
        }
        sqlx::query(self.sql(sql::AUDIT_WATERMARK_RECORD))
            .bind(watermark)
            .bind(self.now())
            .execute(self.pool())
            .await?;
        Ok(self.audit_watermark().await?.unwrap_or(watermark))
    }

    /// Delete finished jobs with everything they own, batch after batch, each batch one short
    /// transaction ([`Store::prune_batch_in`]), until a batch finds nothing (or
    /// `policy.max_batches` ran).
    pub async fn prune_finished_jobs(&self, policy: PrunePolicy) -> Result<PruneReport, Error> {
        let mut total = PruneReport::default();
        loop {
            let mut tx = self.begin().await?;
            let batch = self.prune_batch_in(&mut tx, policy).await?;
            tx.commit().await?;
            total.add(&batch);
            let done = batch.jobs == 0
                || policy
                    .max_batches
                    .is_some_and(|max| total.batches >= u64::from(max));
            if done {
                return Ok(total);
            }
        }
    }

    /// One batch of [`Store::prune_finished_jobs`] in the caller's transaction: lock at most
    /// `policy.batch` of the oldest finished jobs that finished before `policy.finished_before`,
    /// skipping any job another transaction holds (never waiting for one), audited ones only
    /// unless `policy.unaudited`, and delete them with their attempts, ledgers, logs, artifacts
    /// and target mutations. The jobs stay locked until the caller ends the transaction; nothing
    /// else in the protocol's tables is locked (a claim never waits for a prune). Kept: cache
    /// entries (the project's), the slots' rows and token counters, the targets' state.
    pub async fn prune_batch_in(
        &self,
        conn: &mut sqlx::PgConnection,
        policy: PrunePolicy,
    ) -> Result<PruneReport, Error> {
        if policy.batch == 0 {
            return Err(Error::InvalidArgument("a prune batch is at least one job"));
        }
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(BATCH_LOCK_TIMEOUT)
            .execute(&mut *conn)
            .await?;
        let watermark: Option<i64> =
            sqlx::query_scalar::<_, i64>(self.sql(sql::AUDIT_WATERMARK_SELECT))
                .fetch_optional(&mut *conn)
                .await?;
        let picked = sqlx::query(self.sql(sql::JOB_LOCK_FINISHED_BEFORE))
            .bind(policy.finished_before)
            .bind(watermark)
            .bind(policy.unaudited)
            .bind(i64::from(policy.batch))
            .fetch_all(&mut *conn)
            .await?;
        let mut jobs: Vec<Uuid> = Vec::with_capacity(picked.len());
        let mut unaudited = 0u64;
        for row in &picked {
            jobs.push(row.try_get("id")?);
            if !row.try_get::<bool, _>("audited")? {
                unaudited += 1;
            }
        }
        let mut report = PruneReport {
            batches: 1,
            unaudited,
            ..PruneReport::default()
        };
        if jobs.is_empty() {
            return Ok(report);
        }
        let row = sqlx::query(self.sql(sql::JOB_DELETE_WITH_LEDGER))
            .bind(&jobs)
            .fetch_one(&mut *conn)
            .await?;
        report.jobs = count(&row, "jobs")?;
        if report.jobs != jobs.len() as u64 {
            return Err(Error::Invariant(
                "a finished job locked for pruning was not deleted",
            ));
        }
        report.attempts = count(&row, "attempts")?;
        report.observations = count(&row, "observations")?;
        report.reconciliations = count(&row, "reconciliations")?;
        report.cancels = count(&row, "cancels")?;
        report.expiry_sweeps = count(&row, "expiry_sweeps")?;
        report.log_chunks = count(&row, "log_chunks")?;
        report.artifacts = count(&row, "artifacts")?;
        report.target_mutations = count(&row, "target_mutations")?;
        Ok(report)
    }

    /// The number of finished jobs that finished before `finished_before` and are kept because
    /// their ledgers are not audited yet (a record above the recorded watermark, or no watermark).
    pub async fn unaudited_finished_jobs(
        &self,
        finished_before: DateTime<Utc>,
    ) -> Result<u64, Error> {
        let mut tx = self.begin().await?;
        let watermark: Option<i64> =
            sqlx::query_scalar::<_, i64>(self.sql(sql::AUDIT_WATERMARK_SELECT))
                .fetch_optional(&mut *tx)
                .await?;
        let n: i64 = sqlx::query_scalar(self.sql(sql::JOB_COUNT_FINISHED_BEFORE_UNAUDITED))
            .bind(finished_before)
            .bind(watermark)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
