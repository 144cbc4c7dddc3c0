//! Rule R6 `cancel` by an operator (docs/protocol.md §6.3).

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;

impl Store {
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
                match &locked {
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
        // Recorded in the same transaction (the audit's ledger: docs/audit.md).
        let attempt = locked
            .as_ref()
            .filter(|locked| locked.project == project)
            .and_then(|locked| locked.current_attempt);
        sqlx::query(self.sql(sql::CANCEL_RECORD))
            .bind(project.0)
            .bind(job.0)
            .bind(attempt.map(|attempt| attempt.0))
            .bind(verdict.as_str())
            .bind(verdict.reason().map(Reason::as_str))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(verdict)
    }
}
