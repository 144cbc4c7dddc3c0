//! Rule R3 `result`.

use super::precedence::{Check, Observation};
use super::Store;
use super::{not_accepted, sha256_hex};
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::Row;

impl Store {
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
        let payload_sha256 =
            sha256_hex(format!("{}:{}", outcome.as_str(), result_digest).as_bytes());
        // The accept path: one statement, one round trip (it locks the job, commits the outcome
        // to the attempt and the job, releases the target and records the result).
        let row = sqlx::query(self.sql(sql::ATTEMPT_COMMIT_RESULT_IF_CURRENT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .bind(outcome.as_str())
            .bind(result_digest)
            .bind(now)
            .bind(runner_time)
            .bind(&payload_sha256)
            .fetch_one(self.pool())
            .await?;
        let committed: i64 = row.try_get("committed")?;
        let finished: i64 = row.try_get("finished")?;
        match (committed, finished) {
            (1, 1) => return Ok(Verdict::Accepted(())),
            (0, 0) => {}
            _ => {
                return Err(Error::Invariant(
                    "a committed attempt's job did not take the outcome",
                ))
            }
        }
        // Not accepted: nothing was changed or recorded. Classify with the job locked, and
        // record the answer, in a transaction of its own.
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
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
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Result,
                attributed: classified.attributed,
                now,
                runner_time,
                verdict,
                outcome: Some(outcome),
                payload_sha256: Some(payload_sha256),
                lease_expiry: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    #[cfg(feature = "mutants")]
    async fn mutate_result_verdict(
        &self,
        conn: &mut sqlx::PgConnection,
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
}
