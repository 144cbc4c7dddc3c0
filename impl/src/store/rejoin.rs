//! Rule R5 `rejoin`.

use super::not_accepted;
use super::precedence::{Check, Observation};
use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::Row;

impl Store {
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
                lease_expiry: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(answer)
    }
}
