//! Rule R1 `claim` (docs/protocol.md §6.2, §7).

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

impl Store {
    /// Rule R1 `claim`: the earliest-submitted queued job of the runner's project whose target
    /// slot is free (reserved by no job of any project), under a new attempt with
    /// `fence = job.fence + 1`; the claim reserves the slot and issues the attempt's slot token.
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

    /// Rule R1 `claim`, batched: up to `k` jobs in one transaction, at most one per target slot.
    /// Rejected `no_queued_job` when not even one job could be claimed.
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
            let slot_token: Option<i64> = sqlx::query_scalar(self.sql(sql::TARGET_RESERVE_IF_FREE))
                .bind(project.0)
                .bind(&target)
                .bind(job)
                .bind(attempt.0)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(slot_token) = slot_token else {
                skipped.push(job);
                continue;
            };
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
                .bind(slot_token)
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
                slot_token,
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
}
