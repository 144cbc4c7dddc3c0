//! Read views: jobs, attempts, ledgers, reconciliations, logs, target reservations, and the
//! demonstration targets.

use super::parse;
use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

impl Store {
    /// The project of `runner` (`None`: no such runner). A runner's project never changes.
    pub async fn project_of_runner(&self, runner: RunnerId) -> Result<Option<ProjectId>, Error> {
        let project: Option<Uuid> = sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_PROJECT))
            .bind(runner.0)
            .fetch_optional(self.pool())
            .await?;
        Ok(project.map(ProjectId))
    }

    /// The queue depth: `(project name, state, jobs)` for every project and state with jobs not
    /// finished (`queued`, `running`, `cancelling`, `uncertain`).
    pub async fn queue_depth(&self) -> Result<Vec<(String, String, i64)>, Error> {
        Ok(
            sqlx::query_as(self.sql(sql::JOB_COUNT_UNFINISHED_BY_PROJECT_AND_STATE))
                .fetch_all(self.pool())
                .await?,
        )
    }

    /// The job, if it exists.
    pub async fn job(&self, job: JobId) -> Result<Option<JobView>, Error> {
        let Some(row) = sqlx::query(self.sql(sql::JOB_SELECT_VIEW))
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(JobView {
            id: JobId(row.try_get("id")?),
            project: ProjectId(row.try_get("project_id")?),
            state: parse(row.try_get("state")?, JobState::from_code)?,
            current_attempt: row
                .try_get::<Option<Uuid>, _>("current_attempt_id")?
                .map(AttemptId),
            fence: row.try_get("fence")?,
            cancel_requested: row.try_get("cancel_requested")?,
            outcome: match row.try_get::<Option<&str>, _>("outcome")? {
                Some(code) => Some(parse(code, JobState::from_code)?),
                None => None,
            },
            result_digest: row.try_get("result_digest")?,
            source_revision: row.try_get("source_revision")?,
            source_digest: row.try_get("source_digest")?,
            command: row.try_get("command")?,
            target: row.try_get("target")?,
            target_kind: parse(row.try_get("target_kind")?, TargetKind::from_code)?,
            submitted_at: row.try_get("submitted_at")?,
            finished_at: row.try_get("finished_at")?,
        }))
    }

    /// The job's attempts, in fence order.
    pub async fn attempts(&self, job: JobId) -> Result<Vec<AttemptView>, Error> {
        self.attempts_page(job, 0, i64::MAX).await
    }

    /// One page of the job's attempts: those with a fence above `after`, at most `limit`.
    pub async fn attempts_page(
        &self,
        job: JobId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AttemptView>, Error> {
        let rows = sqlx::query(self.sql(sql::ATTEMPT_SELECT_VIEWS_OF_JOB))
            .bind(job.0)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(attempt_view).collect()
    }

    /// The job's ledger of observations, in the order received: every message that named the
    /// job (attributed to one of its attempts or not), except those a runner of another project
    /// sent, which are that project's [`Store::security_log`] (docs/protocol.md §7).
    pub async fn observations(&self, job: JobId) -> Result<Vec<ObservationView>, Error> {
        self.observations_page(job, 0, i64::MAX).await
    }

    /// One page of [`Store::observations`]: ids above `after`, at most `limit`.
    pub async fn observations_page(
        &self,
        job: JobId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ObservationView>, Error> {
        let rows = sqlx::query(self.sql(sql::OBSERVATION_SELECT_OF_JOB))
            .bind(job.0)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(observation_view).collect()
    }

    /// One page of the project's security log: the messages its runners sent naming a job that
    /// is not the project's (another project's, or none), in the order received; ids above
    /// `after`, at most `limit`. They are kept here, never in the named job's ledger.
    pub async fn security_log(
        &self,
        project: ProjectId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ObservationView>, Error> {
        // Sent unnamed (not kept prepared): PostgreSQL plans it at every call for the tables as
        // they are then. A plan kept from a connection's first calls, made while `observations`
        // was small, read every unattributed observation of every project (3 ms per read at
        // 9,500 observations, growing with the table; the test below). The log is read by
        // operators, never on a runner's path, so planning it each time costs nothing that
        // matters.
        let rows = sqlx::query(self.sql(sql::OBSERVATION_SELECT_SECURITY_LOG))
            .persistent(false)
            .bind(project.0)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(observation_view).collect()
    }

    /// The attempt's ledger: the observations attributed to it, in the order received.
    pub async fn attempt_observations(
        &self,
        attempt: AttemptId,
    ) -> Result<Vec<ObservationView>, Error> {
        let rows = sqlx::query(self.sql(sql::OBSERVATION_SELECT_OF_ATTEMPT))
            .bind(attempt.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(observation_view).collect()
    }

    /// The reconciliations asked for the job, in order.
    pub async fn reconciliations(&self, job: JobId) -> Result<Vec<ReconciliationView>, Error> {
        self.reconciliations_page(job, 0, i64::MAX).await
    }

    /// One page of [`Store::reconciliations`]: ids above `after`, at most `limit`.
    pub async fn reconciliations_page(
        &self,
        job: JobId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ReconciliationView>, Error> {
        let rows = sqlx::query(self.sql(sql::RECONCILIATION_SELECT_OF_JOB))
            .bind(job.0)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let verdict = match row.try_get::<&str, _>("verdict")? {
                    "accepted" => Verdict::Accepted(()),
                    _ => Verdict::Rejected(parse(row.try_get("reason")?, Reason::from_code)?),
                };
                Ok(ReconciliationView {
                    id: row.try_get("id")?,
                    project: ProjectId(row.try_get("project_id")?),
                    job: JobId(row.try_get("job_id")?),
                    attempt: row.try_get::<Option<Uuid>, _>("attempt_id")?.map(AttemptId),
                    finding: parse(row.try_get("finding")?, Finding::from_code)?,
                    decision: parse(row.try_get("decision")?, Decision::from_code)?,
                    verdict,
                    decided_at: row.try_get("decided_at")?,
                })
            })
            .collect()
    }

    /// The attempt's log chunks, in sequence order.
    pub async fn logs(&self, attempt: AttemptId) -> Result<Vec<(i64, Vec<u8>)>, Error> {
        let rows = sqlx::query(self.sql(sql::LOG_SELECT_OF_ATTEMPT))
            .bind(attempt.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("seq")?, row.try_get("content")?)))
            .collect()
    }

    /// The attempt's artifact `name`, if it stored one (a read: no tuple, nothing recorded).
    pub async fn artifact(&self, attempt: AttemptId, name: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(sqlx::query_scalar(self.sql(sql::ARTIFACT_GET))
            .bind(attempt.0)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The project's cache entry `key`: its content and digest, the attempt that stored it last,
    /// that attempt's job, and when.
    pub async fn cache_entry(
        &self,
        project: ProjectId,
        key: &str,
    ) -> Result<Option<CacheEntryView>, Error> {
        let row = sqlx::query(self.sql(sql::CACHE_ENTRY_SELECT_STORER))
            .bind(project.0)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| {
            Ok(CacheEntryView {
                content: row.try_get("content")?,
                content_sha256: row.try_get("content_sha256")?,
                stored_by_attempt: AttemptId(row.try_get("stored_by_attempt")?),
                stored_by_job: row.try_get::<Option<Uuid>, _>("stored_by_job")?.map(JobId),
                stored_at: row.try_get("stored_at")?,
            })
        })
        .transpose()
    }

    /// The job's target reservation: the target and the attempt holding it.
    pub async fn target_reservation(
        &self,
        job: JobId,
    ) -> Result<Option<(String, AttemptId)>, Error> {
        let row = sqlx::query(self.sql(sql::TARGET_RESERVATION_SELECT_OF_JOB))
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(Some((
                row.try_get("target")?,
                AttemptId(row.try_get("attempt_id")?),
            ))),
            None => Ok(None),
        }
    }

    /// A demonstration deployment target of `kind` in slot `slot` (docs/protocol.md §8), backed
    /// by this store's database. A slot keeps the kind it was first created with.
    pub async fn demo_target(
        &self,
        kind: TargetKind,
        slot: &str,
    ) -> Result<crate::target::DemoTarget, Error> {
        sqlx::query(self.sql(sql::TARGET_ENSURE))
            .bind(slot)
            .bind(kind.as_str())
            .execute(&self.pool)
            .await?;
        let target = crate::target::DemoTarget::open(
            self.pool.clone(),
            self.clock.clone(),
            slot.to_owned(),
            kind,
        )
        .await?;
        #[cfg(feature = "mutants")]
        let target = target.with_mutant(self.mutant);
        Ok(target)
    }
}

fn attempt_view(row: &PgRow) -> Result<AttemptView, Error> {
    Ok(AttemptView {
        id: AttemptId(row.try_get("id")?),
        job: JobId(row.try_get("job_id")?),
        runner: RunnerId(row.try_get("runner_id")?),
        lease_id: LeaseId(row.try_get("lease_id")?),
        fence: row.try_get("fence")?,
        slot_token: row.try_get("slot_token")?,
        state: parse(row.try_get("state")?, AttemptState::from_code)?,
        lease_expiry: row.try_get("lease_expiry")?,
        outcome: match row.try_get::<Option<&str>, _>("outcome")? {
            Some(code) => Some(parse(code, Outcome::from_code)?),
            None => None,
        },
        result_digest: row.try_get("result_digest")?,
        claimed_at: row.try_get("claimed_at")?,
        ended_at: row.try_get("ended_at")?,
    })
}

fn observation_view(row: &PgRow) -> Result<ObservationView, Error> {
    let verdict = match row.try_get::<&str, _>("verdict")? {
        "accepted" => Verdict::Accepted(()),
        "acknowledged" => Verdict::Acknowledged,
        _ => Verdict::Rejected(parse(row.try_get("reason")?, Reason::from_code)?),
    };
    Ok(ObservationView {
        id: row.try_get("id")?,
        kind: parse(row.try_get("kind")?, MessageKind::from_code)?,
        named: Tuple {
            runner: RunnerId(row.try_get("sender_runner_id")?),
            job: JobId(row.try_get("named_job_id")?),
            attempt: AttemptId(row.try_get("named_attempt_id")?),
            lease_id: LeaseId(row.try_get("named_lease_id")?),
            fence: row.try_get("named_fence")?,
        },
        attempt: row.try_get::<Option<Uuid>, _>("attempt_id")?.map(AttemptId),
        received_at: row.try_get("received_at")?,
        runner_time: row.try_get("runner_time")?,
        verdict,
        outcome: match row.try_get::<Option<&str>, _>("outcome")? {
            Some(code) => Some(parse(code, Outcome::from_code)?),
            None => None,
        },
        payload_sha256: row.try_get("payload_sha256")?,
    })
}

#[cfg(test)]
mod security_log_plan_tests {
    use crate::sql;
    use crate::store::plan::scans_of;
    use sqlx::{Connection, PgConnection};

    /// The security log's statement, planned as the store sends it (unnamed: a custom plan at
    /// every call, which `force_custom_plan` reproduces for a prepared statement) after
    /// `observations` was analyzed empty and its first calls were planned, then explained after
    /// 20,000 unattributed observations of other projects' runners were added: its reads of
    /// `observations` must be ranges of the index keyed by the project's runner, never a read of
    /// the whole index or table (which grows with every project's rejected messages). Kept
    /// prepared (`force_generic_plan` here) it fails: a sequential scan of `observations` per
    /// runner, planned while the table was empty; the statement the store used to keep prepared,
    /// a plain join, read the whole index in id order (`Index Scan (id > $2)`).
    #[tokio::test]
    async fn the_security_log_reads_its_runners_observations_by_key_after_an_empty_analyze() {
        let (database, store) = crate::store::plan::test_store().await;
        let project = store.create_project("log").await.expect("a project");
        for name in ["a", "b", "c"] {
            store.create_runner(project, name).await.expect("a runner");
        }
        store.close().await;
        let mut conn = PgConnection::connect(database.url())
            .await
            .expect("connect");
        sqlx::raw_sql(
            "ANALYZE observations; ANALYZE runners; ANALYZE jobs;
             SET plan_cache_mode = force_custom_plan",
        )
        .execute(&mut conn)
        .await
        .expect("analyze");
        sqlx::raw_sql(&format!(
            "PREPARE security_log(uuid, bigint, bigint) AS {}",
            sql::OBSERVATION_SELECT_SECURITY_LOG.text
        ))
        .execute(&mut conn)
        .await
        .expect("prepare");
        let execute = format!("EXECUTE security_log('{}', 0, 1000)", project.0);
        for _ in 0..6 {
            sqlx::raw_sql(&execute)
                .execute(&mut conn)
                .await
                .expect("execute");
        }
        sqlx::query(
            "INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id,
                 named_lease_id, named_fence, received_at, verdict, reason)
             SELECT gen_random_uuid(), 'heartbeat', gen_random_uuid(), gen_random_uuid(),
                 gen_random_uuid(), 1, now(), 'rejected', 'unknown_job'
             FROM generate_series(1, 20000)",
        )
        .execute(&mut conn)
        .await
        .expect("observations");
        let plan: serde_json::Value =
            sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {execute}"))
                .fetch_one(&mut conn)
                .await
                .expect("explain");
        let scans = scans_of(&plan, "observations");
        assert!(!scans.is_empty(), "the log reads observations: {plan}");
        assert!(
            scans
                .iter()
                .all(|scan| scan.starts_with("Index") && scan.contains("sender_runner_id = r.id")),
            "the security log must read observations by their sender's key, not {scans:?}: {plan}"
        );
    }
}
