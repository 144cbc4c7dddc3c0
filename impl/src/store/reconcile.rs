//! Rule R7 `reconcile` by an operator (docs/protocol.md §6.3).

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use sqlx::Row;
use uuid::Uuid;

impl Store {
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
}
