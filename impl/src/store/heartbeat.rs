//! Rule R2 `heartbeat`.

use super::not_accepted;
use super::precedence::{Check, Observation};
use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::Row;

impl Store {
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
                lease_expiry: match &verdict {
                    Verdict::Accepted(answer) => Some(answer.lease_expiry),
                    _ => None,
                },
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }
}
