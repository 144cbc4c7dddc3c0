//! Rule R3 `result`.

use super::precedence::{Check, Observation};
use super::Store;
use super::{not_accepted, sha256_hex};
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};

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
        let mut tx = self.begin().await?;
        let job = self.lock_job(&mut tx, tuple.job).await?;
        let committed = sqlx::query(self.sql(sql::ATTEMPT_COMMIT_RESULT_IF_CURRENT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .bind(outcome.as_str())
            .bind(result_digest)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
        let (verdict, attributed) = if committed.is_some() {
            let updated = sqlx::query(self.sql(sql::JOB_COMMIT_OUTCOME))
                .bind(tuple.job.0)
                .bind(tuple.attempt.0)
                .bind(outcome.as_str())
                .bind(result_digest)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            if updated.rows_affected() != 1 {
                return Err(Error::Invariant(
                    "a committed attempt's job did not take the outcome",
                ));
            }
            sqlx::query(self.sql(sql::TARGET_RELEASE))
                .bind(tuple.job.0)
                .execute(&mut *tx)
                .await?;
            (Verdict::Accepted(()), Some(tuple.attempt))
        } else {
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
            (verdict, classified.attributed)
        };
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind: MessageKind::Result,
                attributed,
                now,
                runner_time,
                verdict,
                outcome: Some(outcome),
                payload_sha256: Some(sha256_hex(
                    format!("{}:{}", outcome.as_str(), result_digest).as_bytes(),
                )),
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
