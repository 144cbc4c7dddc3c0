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
        let payload_sha256 = result_payload_sha256(outcome, result_digest);
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
            (1, 1) => {
                // Absent from a mutant's variant of the statement: nothing to observe then.
                let claimed_at = row.try_get::<Option<DateTime<Utc>>, _>("claimed_at");
                self.observe_result(outcome, claimed_at.ok().flatten(), now);
                return Ok(Verdict::Accepted(()));
            }
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

    /// Rule R3 `result` for several finished attempts at once (a batch result): each item gets
    /// the verdict and reason [`Store::report_result`] would give it, as if the items were sent
    /// one after another in this order. Every item the rule accepts is accepted by one statement
    /// (one round trip, one transaction); each other item is then judged alone, in order, exactly
    /// as a single result (its own transaction, recorded in its attempt's ledger when late).
    /// The verdicts are in the items' order.
    pub async fn report_results(&self, items: &[ResultReport]) -> Result<Vec<Verdict<()>>, Error> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut runners = Vec::with_capacity(items.len());
        let mut jobs = Vec::with_capacity(items.len());
        let mut attempts = Vec::with_capacity(items.len());
        let mut lease_ids = Vec::with_capacity(items.len());
        let mut fences = Vec::with_capacity(items.len());
        let mut outcomes = Vec::with_capacity(items.len());
        let mut digests = Vec::with_capacity(items.len());
        let mut runner_times = Vec::with_capacity(items.len());
        let mut payloads = Vec::with_capacity(items.len());
        for item in items {
            runners.push(item.tuple.runner.0);
            jobs.push(item.tuple.job.0);
            attempts.push(item.tuple.attempt.0);
            lease_ids.push(item.tuple.lease_id.0);
            fences.push(item.tuple.fence);
            outcomes.push(item.outcome.as_str());
            digests.push(item.result_digest.as_str());
            runner_times.push(item.runner_time);
            payloads.push(result_payload_sha256(item.outcome, &item.result_digest));
        }
        // Every item is judged by the same receipt time: the batch arrived at once.
        let judge_time = self.judge_time(now, None);
        let rows = sqlx::query(self.sql(sql::ATTEMPT_COMMIT_RESULTS_IF_CURRENT))
            .bind(&runners)
            .bind(&jobs)
            .bind(&attempts)
            .bind(&lease_ids)
            .bind(&fences)
            .bind(judge_time)
            .bind(&outcomes)
            .bind(&digests)
            .bind(now)
            .bind(&runner_times)
            .bind(&payloads)
            .fetch_all(self.pool())
            .await?;
        let mut verdicts: Vec<Option<Verdict<()>>> = vec![None; items.len()];
        for row in rows {
            let position: i64 = row.try_get("position")?;
            let finished: bool = row.try_get("finished")?;
            if !finished {
                return Err(Error::Invariant(
                    "a committed attempt's job did not take the outcome",
                ));
            }
            let at = usize::try_from(position - 1)
                .ok()
                .filter(|at| *at < items.len())
                .ok_or(Error::Invariant("a batch result answered an unknown item"))?;
            let claimed_at = row.try_get::<Option<DateTime<Utc>>, _>("claimed_at");
            self.observe_result(items[at].outcome, claimed_at.ok().flatten(), now);
            verdicts[at] = Some(Verdict::Accepted(()));
        }
        let mut answered = Vec::with_capacity(items.len());
        for (item, verdict) in items.iter().zip(verdicts) {
            answered.push(match verdict {
                Some(verdict) => verdict,
                None => {
                    self.report_result(
                        &item.tuple,
                        item.outcome,
                        &item.result_digest,
                        item.runner_time,
                    )
                    .await?
                }
            });
        }
        Ok(answered)
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

/// What a result's observation keeps of its payload: the SHA-256 of `outcome:digest`.
fn result_payload_sha256(outcome: Outcome, result_digest: &str) -> String {
    sha256_hex(format!("{}:{}", outcome.as_str(), result_digest).as_bytes())
}

#[cfg(test)]
mod tests {
    /// The columns of `jobs` that a committed result's update changes
    /// (attempt_commit_result_if_current.sql, attempt_commit_results_if_current.sql).
    const CHANGED_BY_THE_RESULT: [&str; 6] = [
        "state",
        "outcome",
        "result_digest",
        "finished_at",
        "chain_seq",
        "chain_head",
    ];

    /// Whether an index definition names `column` (a whole identifier, in its key, expressions or
    /// predicate).
    fn names(definition: &str, column: &str) -> bool {
        definition
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| word == column)
    }

    /// A result's update of a job can be HOT (migration 0020): PostgreSQL writes a new entry in
    /// every index of the table for an update that changes a column any index names, in its key,
    /// its expressions or its predicate, and a HOT update writes none. No index of `jobs` names a
    /// column the result changes (the queued indexes name the generated `queued`, which a result
    /// leaves false).
    #[tokio::test]
    async fn no_index_of_jobs_names_a_column_the_result_changes() {
        let (_database, store) = crate::store::plan::test_store().await;
        let indexes: Vec<(String, String)> = sqlx::query_as(
            "SELECT c.relname::text, pg_get_indexdef(i.indexrelid) \
             FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid \
             WHERE i.indrelid = 'jobs'::regclass ORDER BY 1",
        )
        .fetch_all(store.pool())
        .await
        .expect("the indexes of jobs");
        assert!(
            indexes
                .iter()
                .any(|(_, definition)| names(definition, "queued")),
            "the queued indexes name `queued`: {indexes:?}"
        );
        for (index, definition) in &indexes {
            for column in CHANGED_BY_THE_RESULT {
                assert!(
                    !names(definition, column),
                    "{index} names {column}, which a result changes: its update of the job \
                     cannot be HOT ({definition})"
                );
            }
        }
    }
}
