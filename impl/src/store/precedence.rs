//! The precedence of docs/protocol.md §6.1: the job lock every runner message starts with, the
//! classification of a zero-row conditional statement, and the observation every message leaves.

use super::parse;
use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgConnection;
use sqlx::Row;
use uuid::Uuid;

/// The job row as locked by `job_lock`.
#[derive(Clone, Debug)]
pub(super) struct LockedJob {
    pub(super) project: ProjectId,
    pub(super) state: JobState,
    pub(super) current_attempt: Option<AttemptId>,
    pub(super) cancel_requested: bool,
}

/// What a §6.1 message asks for, as far as the precedence cares.
#[derive(Clone, Copy, Debug)]
pub(super) enum Check<'a> {
    Heartbeat,
    Rejoin,
    SideEffect,
    Result {
        outcome: Outcome,
        result_digest: &'a str,
    },
}

/// The first failing check of §6.1 (or an acknowledged identical result), and the attribution.
pub(super) struct Classified {
    pub(super) verdict: Verdict<()>,
    pub(super) attributed: Option<AttemptId>,
}

/// One observation to record.
pub(super) struct Observation<'a> {
    pub(super) tuple: &'a Tuple,
    pub(super) kind: MessageKind,
    pub(super) attributed: Option<AttemptId>,
    pub(super) now: DateTime<Utc>,
    pub(super) runner_time: Option<DateTime<Utc>>,
    pub(super) verdict: Verdict<()>,
    pub(super) outcome: Option<Outcome>,
    pub(super) payload_sha256: Option<String>,
    /// The lease an accepted heartbeat granted (the audit's ledger: docs/audit.md).
    pub(super) lease_expiry: Option<DateTime<Utc>>,
}

impl Store {
    pub(super) async fn runner_project(
        &self,
        conn: &mut PgConnection,
        runner: RunnerId,
    ) -> Result<Option<ProjectId>, Error> {
        let project: Option<Uuid> = sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_PROJECT))
            .bind(runner.0)
            .fetch_optional(conn)
            .await?;
        Ok(project.map(ProjectId))
    }

    pub(super) async fn lock_job(
        &self,
        conn: &mut PgConnection,
        job: JobId,
    ) -> Result<Option<LockedJob>, Error> {
        let Some(row) = sqlx::query(self.sql(sql::JOB_LOCK))
            .bind(job.0)
            .fetch_optional(conn)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(LockedJob {
            project: ProjectId(row.try_get("project_id")?),
            state: parse(row.try_get("state")?, JobState::from_code)?,
            current_attempt: row
                .try_get::<Option<Uuid>, _>("current_attempt_id")?
                .map(AttemptId),
            cancel_requested: row.try_get("cancel_requested")?,
        }))
    }

    /// Walk §6.1 after a zero-row conditional statement, in the same transaction, with the job
    /// row locked. Returns the first failing check; `Accepted` only if none fails (a bug).
    pub(super) async fn classify(
        &self,
        conn: &mut PgConnection,
        tuple: &Tuple,
        job: Option<&LockedJob>,
        check: Check<'_>,
        judge_time: DateTime<Utc>,
    ) -> Result<Classified, Error> {
        let rejected = |reason, attributed| Classified {
            verdict: Verdict::Rejected(reason),
            attributed,
        };
        // 1 unknown_runner
        let Some(runner_project) = self.runner_project(&mut *conn, tuple.runner).await? else {
            return Ok(rejected(Reason::UnknownRunner, None));
        };
        // 2 unknown_job
        let Some(job) = job else {
            return Ok(rejected(Reason::UnknownJob, None));
        };
        // 3 wrong_project
        if job.project != runner_project {
            return Ok(rejected(Reason::WrongProject, None));
        }
        // 4 unknown_attempt
        let Some(attempt) = sqlx::query(self.sql(sql::ATTEMPT_SELECT_OF_JOB))
            .bind(tuple.attempt.0)
            .bind(tuple.job.0)
            .fetch_optional(&mut *conn)
            .await?
        else {
            return Ok(rejected(Reason::UnknownAttempt, None));
        };
        // 5 runner_mismatch
        if attempt.try_get::<Uuid, _>("runner_id")? != tuple.runner.0 {
            return Ok(rejected(Reason::RunnerMismatch, None));
        }
        // From here on the message is the named attempt's: it is attributed to it.
        let attributed = Some(tuple.attempt);
        // 6 lease_mismatch
        if attempt.try_get::<Uuid, _>("lease_id")? != tuple.lease_id.0 {
            return Ok(rejected(Reason::LeaseMismatch, attributed));
        }
        // 7 fence_mismatch
        if attempt.try_get::<i64, _>("fence")? != tuple.fence {
            return Ok(rejected(Reason::FenceMismatch, attributed));
        }
        // 8 not_current (a late report)
        if job.current_attempt != Some(tuple.attempt) {
            return Ok(rejected(Reason::NotCurrent, attributed));
        }
        let attempt_state = parse(attempt.try_get("state")?, AttemptState::from_code)?;
        // 9 (result only) the attempt holds the committed outcome
        if let Check::Result {
            outcome,
            result_digest,
        } = check
        {
            if matches!(
                attempt_state,
                AttemptState::Passed | AttemptState::Failed | AttemptState::Cancelled
            ) {
                let committed: Option<String> = attempt.try_get("outcome")?;
                let committed_digest: Option<String> = attempt.try_get("result_digest")?;
                // An outcome adopted by a reconciliation has no digest: the same outcome is
                // identical to it.
                let identical = committed.as_deref() == Some(outcome.as_str())
                    && committed_digest
                        .as_deref()
                        .is_none_or(|digest| digest == result_digest);
                let verdict = if identical {
                    Verdict::Acknowledged
                } else {
                    Verdict::Rejected(Reason::ConflictingResult)
                };
                return Ok(Classified {
                    verdict,
                    attributed,
                });
            }
        }
        // 10 job_finished
        if job.state.is_terminal() {
            return Ok(rejected(Reason::JobFinished, attributed));
        }
        // 11 lease_expired: swept, or expired but not yet swept
        let lease_expiry: DateTime<Utc> = attempt.try_get("lease_expiry")?;
        if attempt_state == AttemptState::Uncertain || judge_time >= lease_expiry {
            return Ok(rejected(Reason::LeaseExpired, attributed));
        }
        // 12 cancel_requested
        let allowed_while_cancelling = matches!(
            check,
            Check::Heartbeat
                | Check::Rejoin
                | Check::Result {
                    outcome: Outcome::Cancelled,
                    ..
                }
        );
        if job.state == JobState::Cancelling && !allowed_while_cancelling {
            return Ok(rejected(Reason::CancelRequested, attributed));
        }
        // 13 cancel_not_requested
        if matches!(
            check,
            Check::Result {
                outcome: Outcome::Cancelled,
                ..
            }
        ) && job.state == JobState::Running
        {
            return Ok(rejected(Reason::CancelNotRequested, attributed));
        }
        Ok(Classified {
            verdict: Verdict::Accepted(()),
            attributed,
        })
    }

    pub(super) async fn record(
        &self,
        conn: &mut PgConnection,
        observation: Observation<'_>,
    ) -> Result<(), Error> {
        #[cfg(feature = "mutants")]
        if self.mutant_is(crate::mutants::Mutant::LateReportDropped)
            && observation.verdict == Verdict::Rejected(Reason::NotCurrent)
        {
            return Ok(());
        }
        let tuple = observation.tuple;
        sqlx::query(self.sql(sql::OBSERVATION_RECORD))
            .bind(tuple.runner.0)
            .bind(observation.kind.as_str())
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(observation.attributed.map(|attempt| attempt.0))
            .bind(observation.now)
            .bind(observation.runner_time)
            .bind(observation.verdict.as_str())
            .bind(observation.verdict.reason().map(Reason::as_str))
            .bind(observation.outcome.map(Outcome::as_str))
            .bind(observation.payload_sha256)
            .bind(observation.lease_expiry)
            .execute(conn)
            .await?;
        Ok(())
    }
}
