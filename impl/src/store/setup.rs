//! Setup: projects, runners (and their bearer tokens), job submission.

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use uuid::Uuid;

impl Store {
    /// Create a project.
    pub async fn create_project(&self, name: &str) -> Result<ProjectId, Error> {
        let id = ProjectId::new_random();
        sqlx::query(self.sql(sql::PROJECT_INSERT))
            .bind(id.0)
            .bind(name)
            .bind(self.now())
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    /// Create a runner of `project`. Returns its id and its bearer token; only the token's
    /// SHA-256 is stored, so the token cannot be recovered later.
    pub async fn create_runner(
        &self,
        project: ProjectId,
        name: &str,
    ) -> Result<(RunnerId, String), Error> {
        let id = RunnerId::new_random();
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|_| Error::Invariant("no system randomness"))?;
        let token = format!("lw_{}_{}", id.0.simple(), hex::encode(secret));
        let token_sha256 = Sha256::digest(token.as_bytes()).to_vec();
        sqlx::query(self.sql(sql::RUNNER_INSERT))
            .bind(id.0)
            .bind(project.0)
            .bind(name)
            .bind(token_sha256)
            .bind(self.now())
            .execute(&self.pool)
            .await?;
        Ok((id, token))
    }

    /// The runner a bearer token authenticates, if any: a runner that exists, is not revoked,
    /// and whose stored hash equals the token's (compared in constant time). Authentication is
    /// not ownership.
    ///
    /// A runner's stored hash is written once, when the runner is created, and never changed; a
    /// runner is never deleted; only its `revoked_at` is ever set (by [`Store::revoke_runner`]).
    /// So the hash read for a runner id is kept in memory and used for
    /// [`DEFAULT_TOKEN_RECHECK`] (5 s; [`Store::with_token_recheck`]) by the store's clock, then read again (a
    /// runner that sends many messages costs one read per recheck interval instead of a round
    /// trip per message: docs/benchmarks.md, "The HTTP claim in two round trips"). A revocation
    /// is therefore honoured at once by the store that made it (it forgets the kept hash) and
    /// within that recheck by every other store on the database (every replica). A clock that
    /// moves backwards makes the hash be read again, never kept longer. Only hashes of runners
    /// that exist and are not revoked are kept (an unknown or revoked id is read again every
    /// time), so the memory is bounded by the runners there are, and by [`TOKEN_HASHES_KEPT`]
    /// besides.
    ///
    /// [`DEFAULT_TOKEN_RECHECK`]: super::DEFAULT_TOKEN_RECHECK
    pub async fn authenticate(&self, token: &str) -> Result<Option<RunnerId>, Error> {
        let Some(rest) = token.strip_prefix("lw_") else {
            return Ok(None);
        };
        let Some((id, _secret)) = rest.split_once('_') else {
            return Ok(None);
        };
        let Ok(id) = Uuid::try_parse(id) else {
            return Ok(None);
        };
        let now = self.now();
        let stored = match self.token_hashes.get(id, now) {
            Some(stored) => Some(stored),
            None => {
                let stored: Option<Vec<u8>> =
                    sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_TOKEN_HASH))
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                match &stored {
                    Some(stored) => self.token_hashes.keep(id, stored.clone(), now),
                    None => self.token_hashes.forget(id),
                }
                stored
            }
        };
        let presented = Sha256::digest(token.as_bytes());
        Ok(match stored {
            Some(stored) if constant_time_eq(&stored, presented.as_slice()) => Some(RunnerId(id)),
            _ => None,
        })
    }

    /// Revoke `runner` of `project` (docs/protocol.md §6.1, docs/http.md "Runners"): from now
    /// on its token authenticates nothing, here at once and on every other store within
    /// the recheck ([`Store::with_token_recheck`]). Nothing else changes:
    /// its leases are left to run out and be swept like any lost runner's. Revoking a revoked
    /// runner keeps the first revocation's time. `None`: no such runner in `project`.
    pub async fn revoke_runner(
        &self,
        project: ProjectId,
        runner: RunnerId,
    ) -> Result<Option<RunnerView>, Error> {
        let row: Option<RunnerRow> = sqlx::query_as(self.sql(sql::RUNNER_REVOKE))
            .bind(runner.0)
            .bind(project.0)
            .bind(self.now())
            .fetch_optional(&self.pool)
            .await?;
        // Forgotten after the commit: a request authenticated in between reads the revocation.
        self.token_hashes.forget(runner.0);
        Ok(row.map(runner_view))
    }

    /// A page of `project`'s runners in listing order (creation order): at most `limit` after
    /// the cursor `after` (a [`RunnerView::listed_seq`]; 0 for the first page).
    pub async fn runners_page(
        &self,
        project: ProjectId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<RunnerView>, Error> {
        let rows: Vec<RunnerRow> = sqlx::query_as(self.sql(sql::RUNNER_SELECT_PAGE_OF_PROJECT))
            .bind(project.0)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(runner_view).collect())
    }

    /// Submit a job to `project`: `queued`, fence 0, no attempt.
    pub async fn submit_job(&self, project: ProjectId, job: NewJob) -> Result<JobId, Error> {
        let mut conn = self.pool.acquire().await?;
        self.submit_job_in(&mut conn, project, job).await
    }

    /// [`Store::submit_job`] on `conn`, inside the caller's transaction: the caller commits the
    /// job together with rows of its own (the server's source spec), so that no claim ever sees
    /// the job without them and no crash leaves one half written.
    pub async fn submit_job_in(
        &self,
        conn: &mut sqlx::PgConnection,
        project: ProjectId,
        job: NewJob,
    ) -> Result<JobId, Error> {
        let id = JobId::new_random();
        let target = job.target.unwrap_or_else(|| id.0.to_string());
        sqlx::query(self.sql(sql::JOB_INSERT))
            .bind(id.0)
            .bind(project.0)
            .bind(self.now())
            .bind(&job.source_revision)
            .bind(&job.source_digest)
            .bind(&job.command)
            .bind(&target)
            .bind(job.target_kind.as_str())
            .execute(&mut *conn)
            .await?;
        Ok(id)
    }
}

type RunnerRow = (
    Uuid,
    String,
    chrono::DateTime<chrono::Utc>,
    Option<chrono::DateTime<chrono::Utc>>,
    i64,
);

fn runner_view((id, name, created_at, revoked_at, listed_seq): RunnerRow) -> RunnerView {
    RunnerView {
        id: RunnerId(id),
        name,
        created_at,
        revoked_at,
        listed_seq,
    }
}

/// The most runners' token hashes a store keeps in memory; past it the kept ones are forgotten
/// and read again as they are presented.
pub const TOKEN_HASHES_KEPT: usize = 100_000;

/// The kept hashes: runner id to (stored hash, store time it was read).
type Kept = std::collections::HashMap<Uuid, (Vec<u8>, DateTime<Utc>)>;

/// Stored token hashes by runner id, each with the store time it was read (only ever of runners
/// that existed unrevoked when read; see [`Store::authenticate`]), used for `recheck`.
pub(super) struct TokenHashes {
    kept: std::sync::Mutex<Kept>,
    recheck: chrono::Duration,
}

impl TokenHashes {
    pub(super) fn new(recheck: std::time::Duration) -> Self {
        Self {
            kept: Default::default(),
            recheck: chrono::Duration::from_std(recheck).unwrap_or(chrono::Duration::MAX),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The hash kept for `runner`, if it was read less than `recheck` before `now` (and not
    /// after `now`: a clock that moved backwards reads it again).
    fn get(&self, runner: Uuid, now: DateTime<Utc>) -> Option<Vec<u8>> {
        let kept = self.lock();
        let (stored, read_at) = kept.get(&runner)?;
        let age = now.signed_duration_since(*read_at);
        (age >= chrono::Duration::zero() && age < self.recheck).then(|| stored.clone())
    }

    fn keep(&self, runner: Uuid, stored: Vec<u8>, now: DateTime<Utc>) {
        let mut kept = self.lock();
        if kept.len() >= TOKEN_HASHES_KEPT {
            kept.clear();
        }
        kept.insert(runner, (stored, now));
    }

    fn forget(&self, runner: Uuid) {
        self.lock().remove(&runner);
    }
}

/// Whether two byte strings are equal, in a time that depends only on their lengths (public:
/// both are SHA-256 digests), never on where they differ. `subtle` keeps the optimizer from
/// turning the comparison into an early exit.
fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    left.ct_eq(right).into()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;
    use sha2::{Digest, Sha256};

    #[test]
    fn token_hashes_are_equal_only_when_every_byte_is() {
        let hash: [u8; 32] = Sha256::digest(b"lw_token").into();
        assert!(constant_time_eq(&hash, &hash.clone()));
        assert!(constant_time_eq(b"", b""));
        // A difference anywhere (first, middle, last byte, a single bit) is a difference.
        for at in [0, 15, 31] {
            for bit in [0x01, 0x80] {
                let mut other = hash;
                other[at] ^= bit;
                assert!(!constant_time_eq(&hash, &other), "byte {at} bit {bit:#x}");
            }
        }
        // Other lengths (a prefix, a longer string) are never equal.
        assert!(!constant_time_eq(&hash, &hash[..31]));
        assert!(!constant_time_eq(&hash[..31], &hash));
        assert!(!constant_time_eq(&hash, &[hash.as_slice(), &[0]].concat()));
        assert!(!constant_time_eq(&hash, b""));
    }

    /// Every file under `dir` (recursively) whose name ends with one of `extensions`.
    fn files(dir: &std::path::Path, extensions: &[&str], into: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                files(&path, extensions, into);
            } else if extensions
                .iter()
                .any(|e| path.to_string_lossy().ends_with(e))
            {
                into.push(path);
            }
        }
    }

    /// `Store::authenticate` keeps the token hash it read for a runner id for a recheck interval.
    /// That is only right while no statement, migration or server code changes a runner's token
    /// hash or deletes a runner (a rotated token would keep authenticating until the recheck; a
    /// deleted runner's id could be reused): the one change of a runner is its revocation
    /// (`runner_revoke`, which sets only `revoked_at`, and `Store::revoke_runner` forgets the
    /// kept hash), and the one migration that alters the table is 0014, which adds columns.
    /// Whoever adds another must think about the kept hashes, and this test says so.
    #[test]
    fn runner_token_hashes_are_never_changed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut sources = Vec::new();
        for dir in [
            "sql",
            "migrations",
            "src",
            "../server/migrations",
            "../server/src",
        ] {
            files(&root.join(dir), &[".sql", ".rs"], &mut sources);
        }
        assert!(
            sources.len() > 50,
            "the sources were not found: {sources:?}"
        );
        let this_file = root.join("src/store/setup.rs");
        // The one statement that updates runners, and the one migration that alters the table.
        let allowed = [
            ("update runners", root.join("sql/runner_revoke.sql")),
            (
                "alter table runners",
                root.join("migrations/0014_runner_revocation.sql"),
            ),
        ];
        let mut allowed_seen = 0;
        for path in sources.iter().filter(|path| **path != this_file) {
            let text = std::fs::read_to_string(path).expect("a source file");
            let words = text
                .to_lowercase()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            for change in [
                "update runners",
                "delete from runners",
                "alter table runners",
                "truncate runners",
                "truncate table runners",
                "truncate only runners",
                "update only runners",
                "delete from only runners",
            ] {
                if !words.contains(change) {
                    continue;
                }
                if allowed.contains(&(change, path.clone())) {
                    allowed_seen += 1;
                    continue;
                }
                panic!(
                    "{} changes runners ({change:?}): think about the token hashes \
                     Store::authenticate keeps",
                    path.display()
                );
            }
        }
        assert_eq!(
            allowed_seen,
            allowed.len(),
            "the allowed changes were found"
        );
        // Checked on the raw text, comments aside: neither allowed change names the token hash.
        for (_, path) in &allowed {
            let text = std::fs::read_to_string(path).expect("an allowed change");
            for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
                assert!(
                    !line.contains("token_sha256"),
                    "{} changes the token hash: {line}",
                    path.display()
                );
            }
        }
    }
}
