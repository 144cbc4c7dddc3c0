//! Rule R8: the side effects a lease entitles to (docs/protocol.md §7.1).

use super::precedence::{Check, Observation};
use super::Store;
use super::{not_accepted, sha256_hex};
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgConnection;
use sqlx::Row;
use sqlx::{Postgres, Transaction};

/// The gate of a side effect: `None` if the whole tuple passed, else the verdict to answer.
struct Gate {
    rejection: Option<Verdict<()>>,
    attributed: Option<AttemptId>,
}

impl Store {
    async fn gate_side_effect(
        &self,
        conn: &mut PgConnection,
        tuple: &Tuple,
        now: DateTime<Utc>,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Gate, Error> {
        let judge_time = self.judge_time(now, runner_time);
        let job = self.lock_job(&mut *conn, tuple.job).await?;
        let authorized = sqlx::query(self.sql(sql::ATTEMPT_AUTHORIZE_SIDE_EFFECT))
            .bind(tuple.runner.0)
            .bind(tuple.job.0)
            .bind(tuple.attempt.0)
            .bind(tuple.lease_id.0)
            .bind(tuple.fence)
            .bind(judge_time)
            .fetch_optional(&mut *conn)
            .await?;
        if authorized.is_some() {
            return Ok(Gate {
                rejection: None,
                attributed: Some(tuple.attempt),
            });
        }
        let classified = self
            .classify(conn, tuple, job.as_ref(), Check::SideEffect, judge_time)
            .await?;
        Ok(Gate {
            rejection: Some(not_accepted(classified.verdict)?),
            attributed: classified.attributed,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_side_effect<T>(
        &self,
        mut tx: Transaction<'static, Postgres>,
        tuple: &Tuple,
        kind: MessageKind,
        attributed: Option<AttemptId>,
        now: DateTime<Utc>,
        runner_time: Option<DateTime<Utc>>,
        payload_sha256: Option<String>,
        verdict: Verdict<T>,
    ) -> Result<Verdict<T>, Error> {
        self.record(
            &mut tx,
            Observation {
                tuple,
                kind,
                attributed,
                now,
                runner_time,
                verdict: verdict.without_value(),
                outcome: None,
                payload_sha256,
                lease_expiry: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(verdict)
    }

    /// Fails with [`Error::QuotaExceeded`] when writing `adding` bytes for `attempt` (replacing
    /// its artifact `artifact` or the cache entry `cache_key`) would pass the attempt's quota.
    async fn check_quota(
        &self,
        conn: &mut PgConnection,
        attempt: AttemptId,
        adding: usize,
        artifact: Option<&str>,
        cache_key: Option<&str>,
    ) -> Result<(), Error> {
        let Some(quota) = self.attempt_quota else {
            return Ok(());
        };
        let adding = i64::try_from(adding).unwrap_or(i64::MAX);
        if adding > quota {
            return Err(Error::QuotaExceeded { quota });
        }
        // octet_length is an integer, so each sum is a bigint.
        let stored: i64 = sqlx::query_scalar(self.sql(sql::ATTEMPT_BYTES_STORED))
            .bind(attempt.0)
            .bind(artifact)
            .bind(cache_key)
            .fetch_one(&mut *conn)
            .await?;
        if stored.saturating_add(adding) > quota {
            return Err(Error::QuotaExceeded { quota });
        }
        Ok(())
    }

    fn rejection<T>(gate: &Gate) -> Option<Verdict<T>> {
        gate.rejection.as_ref().map(|verdict| match verdict {
            Verdict::Rejected(reason) => Verdict::Rejected(*reason),
            _ => Verdict::Acknowledged,
        })
    }

    /// Every R8 side effect has one shape (docs/protocol.md §7.1): the server's time, one
    /// transaction, the gate (§6.1 checks 1-13 on the whole tuple); when it passes, `apply` does
    /// the rule's own work in that transaction; then the message is recorded as an observation
    /// with its verdict and `payload_sha256`, and the transaction commits.
    async fn side_effect<T>(
        &self,
        tuple: &Tuple,
        kind: MessageKind,
        runner_time: Option<DateTime<Utc>>,
        payload_sha256: Option<String>,
        apply: impl AsyncFnOnce(&mut PgConnection, DateTime<Utc>) -> Result<Verdict<T>, Error>,
    ) -> Result<Verdict<T>, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        let gate = self
            .gate_side_effect(&mut tx, tuple, now, runner_time)
            .await?;
        let verdict = match Self::rejection(&gate) {
            Some(rejection) => rejection,
            None => apply(&mut tx, now).await?,
        };
        self.finish_side_effect(
            tx,
            tuple,
            kind,
            gate.attributed,
            now,
            runner_time,
            payload_sha256,
            verdict,
        )
        .await
    }

    /// Rule R8 `source fetch`: the job's immutable source identity.
    pub async fn fetch_source(
        &self,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<SourceIdentity>, Error> {
        let kind = MessageKind::SourceFetch;
        self.side_effect(tuple, kind, runner_time, None, async |conn, _| {
            let row = sqlx::query(self.sql(sql::JOB_SELECT_SOURCE))
                .bind(tuple.job.0)
                .fetch_one(&mut *conn)
                .await?;
            Ok(Verdict::Accepted(SourceIdentity {
                source_revision: row.try_get("source_revision")?,
                source_digest: row.try_get("source_digest")?,
                command: row.try_get("command")?,
            }))
        })
        .await
    }

    /// Rule R8 `log append`: idempotent per (attempt, `seq`); the same content again is
    /// `acknowledged`, other content `sequence_conflict`.
    pub async fn append_log(
        &self,
        tuple: &Tuple,
        seq: i64,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        if seq < 0 {
            return Err(Error::InvalidArgument(
                "a log sequence number is not negative",
            ));
        }
        let digest = sha256_hex(content);
        let kind = MessageKind::LogAppend;
        let payload = Some(digest.clone());
        self.side_effect(tuple, kind, runner_time, payload, async |conn, now| {
            if self.attempt_quota.is_some() {
                let stored: Option<String> =
                    sqlx::query_scalar(self.sql(sql::LOG_SELECT_CHUNK_DIGEST))
                        .bind(tuple.attempt.0)
                        .bind(seq)
                        .fetch_optional(&mut *conn)
                        .await?;
                if stored.is_none() {
                    self.check_quota(conn, tuple.attempt, content.len(), None, None)
                        .await?;
                }
            }
            let appended = sqlx::query(self.sql(sql::LOG_APPEND_ONCE))
                .bind(tuple.attempt.0)
                .bind(seq)
                .bind(content)
                .bind(&digest)
                .bind(now)
                .fetch_optional(&mut *conn)
                .await?;
            if appended.is_some() {
                return Ok(Verdict::Accepted(()));
            }
            let existing: String = sqlx::query_scalar(self.sql(sql::LOG_SELECT_CHUNK_DIGEST))
                .bind(tuple.attempt.0)
                .bind(seq)
                .fetch_one(&mut *conn)
                .await?;
            Ok(if existing == digest {
                Verdict::Acknowledged
            } else {
                Verdict::Rejected(Reason::SequenceConflict)
            })
        })
        .await
    }

    /// Rule R8 `artifact put`: store (or replace) the attempt's artifact `name`.
    pub async fn put_artifact(
        &self,
        tuple: &Tuple,
        name: &str,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        let digest = sha256_hex(content);
        let kind = MessageKind::ArtifactPut;
        let payload = Some(digest.clone());
        self.side_effect(tuple, kind, runner_time, payload, async |conn, now| {
            self.check_quota(conn, tuple.attempt, content.len(), Some(name), None)
                .await?;
            sqlx::query(self.sql(sql::ARTIFACT_PUT))
                .bind(tuple.attempt.0)
                .bind(name)
                .bind(content)
                .bind(&digest)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            Ok(Verdict::Accepted(()))
        })
        .await
    }

    /// Rule R8 `artifact get`: the attempt's artifact `name`, or `not_found`.
    pub async fn get_artifact(
        &self,
        tuple: &Tuple,
        name: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<u8>>, Error> {
        let kind = MessageKind::ArtifactGet;
        let payload = Some(sha256_hex(name.as_bytes()));
        self.side_effect(tuple, kind, runner_time, payload, async |conn, _| {
            let content: Option<Vec<u8>> = sqlx::query_scalar(self.sql(sql::ARTIFACT_GET))
                .bind(tuple.attempt.0)
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(content.map_or(Verdict::Rejected(Reason::NotFound), Verdict::Accepted))
        })
        .await
    }

    /// Rule R8 `cache put`: store (or replace) the project's cache entry `key`.
    pub async fn cache_put(
        &self,
        tuple: &Tuple,
        key: &str,
        content: &[u8],
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Error> {
        let digest = sha256_hex(content);
        let kind = MessageKind::CachePut;
        let payload = Some(digest.clone());
        self.side_effect(tuple, kind, runner_time, payload, async |conn, now| {
            self.check_quota(conn, tuple.attempt, content.len(), None, Some(key))
                .await?;
            sqlx::query(self.sql(sql::CACHE_ENTRY_PUT))
                .bind(tuple.job.0)
                .bind(key)
                .bind(content)
                .bind(&digest)
                .bind(tuple.attempt.0)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            Ok(Verdict::Accepted(()))
        })
        .await
    }

    /// Rule R8 `cache get`: the project's cache entry `key`, or `not_found`.
    pub async fn cache_get(
        &self,
        tuple: &Tuple,
        key: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<Vec<u8>>, Error> {
        let kind = MessageKind::CacheGet;
        let payload = Some(sha256_hex(key.as_bytes()));
        self.side_effect(tuple, kind, runner_time, payload, async |conn, _| {
            let content: Option<Vec<u8>> = sqlx::query_scalar(self.sql(sql::CACHE_ENTRY_GET))
                .bind(tuple.job.0)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(content.map_or(Verdict::Rejected(Reason::NotFound), Verdict::Accepted))
        })
        .await
    }
}
