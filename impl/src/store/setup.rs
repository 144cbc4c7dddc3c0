//! Setup: projects, runners (and their bearer tokens), job submission.

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
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

    /// The runner a bearer token authenticates, if any. The token's hash is compared with the
    /// stored hash in constant time. Authentication is not ownership.
    ///
    /// A runner's stored hash is written once, when the runner is created, and no statement
    /// changes or deletes a runner (`runner_token_hashes_are_never_changed` checks every
    /// statement and migration), so the hash read for a runner id is the hash for good: it is
    /// kept in memory, and a runner that sends many messages costs one read in all instead of a
    /// round trip per message (docs/benchmarks.md, "The HTTP claim in two round trips"). Only
    /// hashes of runners that exist are kept (an unknown id is read again every time), so the
    /// memory is bounded by the runners there are, and by [`TOKEN_HASHES_KEPT`] besides.
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
        let stored = match self.token_hashes.get(id) {
            Some(stored) => Some(stored),
            None => {
                let stored: Option<Vec<u8>> =
                    sqlx::query_scalar(self.sql(sql::RUNNER_SELECT_TOKEN_HASH))
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                if let Some(stored) = &stored {
                    self.token_hashes.keep(id, stored.clone());
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

/// The most runners' token hashes a store keeps in memory; past it the kept ones are forgotten
/// and read again as they are presented.
pub const TOKEN_HASHES_KEPT: usize = 100_000;

/// Stored token hashes by runner id (only ever of runners that exist; see
/// [`Store::authenticate`]).
#[derive(Default)]
pub(super) struct TokenHashes(std::sync::Mutex<std::collections::HashMap<Uuid, Vec<u8>>>);

impl TokenHashes {
    fn get(&self, runner: Uuid) -> Option<Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&runner)
            .cloned()
    }

    fn keep(&self, runner: Uuid, stored: Vec<u8>) {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if kept.len() >= TOKEN_HASHES_KEPT {
            kept.clear();
        }
        kept.insert(runner, stored);
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

    /// `Store::authenticate` keeps the token hash it read for a runner id for good. That is only
    /// right while no statement, migration or server code changes or deletes a runner (a revoked
    /// or rotated token would keep authenticating): whoever adds one must forget the kept hash
    /// too, and this test says so.
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
                assert!(
                    !words.contains(change),
                    "{} changes runners ({change:?}): forget the token hashes Store::authenticate keeps",
                    path.display()
                );
            }
        }
    }
}
