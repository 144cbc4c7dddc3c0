//! What side effects stored (`logs`, `artifacts`, `cache_entries`) against the accepted messages
//! behind them (`side_effect_record`). Checked for every job in every run, full or `--since`: the
//! rows are read by job batches with their content hashed by the database (the content itself is
//! never transferred), the messages are the accepted side-effect observations the chain pass reads
//! anyway (docs/audit.md, "Side effects").
//!
//! The rules (the rule stores and records in one transaction, with one `now`):
//! - a row's content hashes to its `content_sha256` (else the content was edited);
//! - every row has an accepted `log_append`, `artifact_put` or `cache_put` of its attempt with its
//!   content digest and its time; a cache entry is in its storer's project's cache;
//! - every accepted `log_append` has its chunk (a chunk is never replaced);
//! - an accepted `artifact_put` whose row is gone was replaced by a later put of the same name:
//!   its attempt still has an artifact stored at or after it (the put does not record the name);
//! - an accepted `cache_put` whose entry is gone was replaced by a later put of the same key, of
//!   any attempt of the project: the project still has an entry stored at or after it (the put
//!   does not record the key; an entry outlives a pruned attempt, so every entry counts).

use super::{Kind, Violation};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};
use std::collections::HashMap;
use uuid::Uuid;

type Time = DateTime<Utc>;

/// An accepted side-effect message of a job (`log_append`, `artifact_put`, `cache_put`).
#[derive(Clone, Debug)]
pub struct Message {
    pub id: i64,
    pub ledger_seq: i64,
    pub kind: &'static str,
    pub attempt: Option<Uuid>,
    pub payload_sha256: Option<String>,
    pub received_at: Time,
}

impl Message {
    fn name(&self) -> String {
        format!("observation #{} (ledger {})", self.id, self.ledger_seq)
    }

    /// The message, if it is an accepted side effect that stores a row.
    pub fn of(
        id: i64,
        ledger_seq: i64,
        kind: &str,
        verdict: &str,
        attempt: Option<Uuid>,
        payload_sha256: Option<String>,
        received_at: Time,
    ) -> Option<Message> {
        let kind = match kind {
            "log_append" => "log_append",
            "artifact_put" => "artifact_put",
            "cache_put" => "cache_put",
            _ => return None,
        };
        (verdict == "accepted").then_some(Message {
            id,
            ledger_seq,
            kind,
            attempt,
            payload_sha256,
            received_at,
        })
    }
}

/// A row a side effect stored: a log chunk, an artifact, a cache entry (its content's digest as
/// recorded and as the database computed it, never the content).
#[derive(Clone, Debug)]
pub struct StoredRow {
    /// `logs`, `artifacts` or `cache_entries`.
    pub table: &'static str,
    /// The chunk's sequence number, the artifact's name, the cache key.
    pub key: String,
    pub attempt: Uuid,
    pub content_sha256: String,
    /// sha256 of the stored content, computed by the database.
    pub actual_sha256: String,
    pub stored_at: Time,
    /// A cache entry's project (`None` for logs and artifacts).
    pub project: Option<Uuid>,
}

impl StoredRow {
    fn message_kind(&self) -> &'static str {
        match self.table {
            "logs" => "log_append",
            "artifacts" => "artifact_put",
            _ => "cache_put",
        }
    }

    fn name(&self) -> String {
        format!(
            "{} row {} of attempt {}",
            self.table, self.key, self.attempt
        )
    }
}

fn stored_row(r: &sqlx::postgres::PgRow) -> Result<(Option<Uuid>, StoredRow), sqlx::Error> {
    let table = match r.try_get::<String, _>("t")?.as_str() {
        "logs" => "logs",
        "artifacts" => "artifacts",
        _ => "cache_entries",
    };
    Ok((
        r.try_get("job_id")?,
        StoredRow {
            table,
            key: r.try_get("key")?,
            attempt: r.try_get("attempt_id")?,
            content_sha256: r.try_get("content_sha256")?,
            actual_sha256: r.try_get("actual_sha256")?,
            stored_at: r.try_get("stored_at")?,
            project: r.try_get("project_id")?,
        },
    ))
}

/// The log chunks and artifacts of the jobs `ids`' attempts, by job (one query).
pub async fn rows(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<StoredRow>>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT 'logs' AS t, a.job_id, l.attempt_id, l.seq::text AS key, l.content_sha256, \
                encode(sha256(l.content), 'hex') AS actual_sha256, l.appended_at AS stored_at, \
                NULL::uuid AS project_id \
         FROM attempts AS a JOIN logs AS l ON l.attempt_id = a.id WHERE a.job_id = ANY($1) \
         UNION ALL \
         SELECT 'artifacts', a.job_id, r.attempt_id, r.name, r.content_sha256, \
                encode(sha256(r.content), 'hex'), r.stored_at, NULL::uuid \
         FROM attempts AS a JOIN artifacts AS r ON r.attempt_id = a.id WHERE a.job_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    by_job(&rows)
}

/// Every cache entry (one query: a project's cache holds one entry per key, not one per put), by
/// its storer's job; under `Uuid::nil()` the entries whose storer attempt no longer exists (pruned).
pub async fn cache_rows(
    conn: &mut PgConnection,
) -> Result<HashMap<Uuid, Vec<StoredRow>>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT 'cache_entries' AS t, a.job_id, c.stored_by_attempt AS attempt_id, c.key, \
                c.content_sha256, encode(sha256(c.content), 'hex') AS actual_sha256, \
                c.stored_at, c.project_id \
         FROM cache_entries AS c LEFT JOIN attempts AS a ON a.id = c.stored_by_attempt",
    )
    .fetch_all(&mut *conn)
    .await?;
    by_job(&rows)
}

/// The rows read, by job (`Uuid::nil()`: no job, the storer pruned).
fn by_job(rows: &[sqlx::postgres::PgRow]) -> Result<HashMap<Uuid, Vec<StoredRow>>, sqlx::Error> {
    let mut out: HashMap<Uuid, Vec<StoredRow>> = HashMap::new();
    for r in rows {
        let (job, row) = stored_row(r)?;
        out.entry(job.unwrap_or_default()).or_default().push(row);
    }
    Ok(out)
}

/// The side-effect check over every job: one job at a time ([`Checker::job`]), then the
/// projects' caches ([`Checker::finish`]).
#[derive(Clone, Debug, Default)]
pub struct Checker {
    /// Per project: the latest time an entry of its cache was stored.
    latest_entry: HashMap<Uuid, Time>,
    /// Per project: the latest accepted `cache_put` whose entry is not stored, with its job.
    latest_unstored_put: HashMap<Uuid, (Message, Uuid)>,
}

impl Checker {
    /// Note the cache entries `rows` (all of them, including those of pruned storers).
    pub fn entries<'a>(&mut self, rows: impl IntoIterator<Item = &'a StoredRow>) {
        for row in rows {
            if let Some(project) = row.project {
                let t = self.latest_entry.entry(project).or_insert(row.stored_at);
                *t = (*t).max(row.stored_at);
            }
        }
    }

    /// The first of one job's stored rows (its attempts' chunks and artifacts, the cache entries
    /// its attempts stored) that breaks a rule, or accepted message without its row.
    pub fn job(
        &mut self,
        job: Uuid,
        project: Uuid,
        messages: &[Message],
        rows: &[StoredRow],
    ) -> Option<Violation> {
        let stores = |m: &Message, row: &StoredRow| {
            m.kind == row.message_kind()
                && m.attempt == Some(row.attempt)
                && m.payload_sha256.as_deref() == Some(row.content_sha256.as_str())
                && m.received_at == row.stored_at
        };
        for m in messages.iter().filter(|m| m.kind == "cache_put") {
            if !rows.iter().any(|row| stores(m, row)) {
                let latest = self.latest_unstored_put.entry(project);
                let m = (m.clone(), job);
                latest
                    .and_modify(|e| {
                        if (m.0.received_at, m.0.ledger_seq) > (e.0.received_at, e.0.ledger_seq) {
                            *e = m.clone();
                        }
                    })
                    .or_insert(m);
            }
        }
        let violation = |record: String, detail: String| {
            Some(Violation {
                kind: Kind::SideEffectRecord,
                job,
                project,
                record,
                detail,
                steps: Vec::new(),
            })
        };
        for row in rows {
            if row.actual_sha256 != row.content_sha256 {
                return violation(
                    row.name(),
                    format!(
                        "its content hashes to {}, not to the content_sha256 {} recorded with it: \
                         the content was edited",
                        row.actual_sha256, row.content_sha256
                    ),
                );
            }
        }
        for row in rows {
            if row.project.is_some_and(|p| p != project) {
                return violation(
                    row.name(),
                    format!(
                        "in the cache of project {}, stored by an attempt of a job of project \
                         {project}: a put stores into its own project's cache",
                        row.project.unwrap_or_default()
                    ),
                );
            }
            if !messages.iter().any(|m| stores(m, row)) {
                let kind = row.message_kind();
                return violation(
                    row.name(),
                    format!(
                        "stored at {} with content {}, but no accepted {kind} of the attempt with \
                         that digest and time is recorded",
                        row.stored_at.format("%Y-%m-%d %H:%M:%S%.6f"),
                        row.content_sha256
                    ),
                );
            }
        }
        let unstored = |m: &&Message| !rows.iter().any(|row| stores(m, row));
        let lost_chunk = messages
            .iter()
            .filter(|m| m.kind == "log_append")
            .filter(unstored)
            .min_by_key(|m| m.ledger_seq);
        if let Some(m) = lost_chunk {
            return violation(
                m.name(),
                "an accepted log_append whose chunk is not in `logs` (a chunk is never replaced)"
                    .to_string(),
            );
        }
        let lost_artifact = messages
            .iter()
            .filter(|m| m.kind == "artifact_put")
            .filter(unstored)
            .filter(|m| {
                !rows.iter().any(|row| {
                    row.table == "artifacts"
                        && Some(row.attempt) == m.attempt
                        && row.stored_at >= m.received_at
                })
            })
            .max_by_key(|m| m.ledger_seq);
        if let Some(m) = lost_artifact {
            return violation(
                m.name(),
                "an accepted artifact_put whose artifact is not in `artifacts`, and no later put \
                 of its attempt can have replaced it (the attempt has no artifact stored at or \
                 after it)"
                    .to_string(),
            );
        }
        None
    }

    /// The projects whose latest accepted `cache_put` without its entry has no entry stored at or
    /// after it: no later put can have replaced that entry, so it was deleted.
    pub fn finish(self) -> Vec<Violation> {
        let mut out: Vec<Violation> = self
            .latest_unstored_put
            .into_iter()
            .filter(|(project, (m, _))| {
                self.latest_entry
                    .get(project)
                    .is_none_or(|t| *t < m.received_at)
            })
            .map(|(project, (m, job))| Violation {
                kind: Kind::SideEffectRecord,
                job,
                project,
                record: m.name(),
                detail: "an accepted cache_put whose entry is not in `cache_entries`, and no \
                         later put of the project can have replaced it (its cache has no entry \
                         stored at or after it)"
                    .to_string(),
                steps: Vec::new(),
            })
            .collect();
        out.sort_by_key(|v| v.job);
        out
    }
}
