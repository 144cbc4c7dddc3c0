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
        let lease_expiry = now + self.lease_ttl;
        // The accept path: one statement, one round trip (it locks the job, extends the lease
        // and records the heartbeat).
        let row = sqlx::query(self.sql(sql::ATTEMPT_HEARTBEAT_IF_CURRENT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .bind(lease_expiry)
            .bind(now)
            .bind(runner_time)
            .fetch_optional(self.pool())
            .await?;
        if let Some(row) = row {
            return Ok(Verdict::Accepted(HeartbeatAnswer {
                lease_expiry: row.try_get("lease_expiry")?,
                cancel_requested: row.try_get("cancel_requested")?,
            }));
        }
        // Not accepted: nothing was changed or recorded. Classify with the job locked, and
        // record the rejection, in a transaction of its own.
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
        let classified = self
            .classify(&mut tx, tuple, job.as_ref(), Check::Heartbeat, judge_time)
            .await?;
        let verdict: Verdict<HeartbeatAnswer> = not_accepted(classified.verdict)?;
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Heartbeat,
                attributed: classified.attributed,
                now,
                runner_time,
                verdict: verdict.without_value(),
                outcome: None,
                payload_sha256: None,
                lease_expiry: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }
}
