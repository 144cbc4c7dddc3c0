//! `leasewright-runners`: Leasewright over HTTP as a user runs it. The control plane is the
//! server of `leasewright serve` in this process (the fixture's, on 127.0.0.1 and a free port);
//! the runners are registered through its operator route (`POST /v1/projects/{p}/runners`) and
//! each slot starts `agents x K` real `leasewright runner` processes (this executable) with
//! `--capacity K` and `--max-jobs` adding up to the slot's jobs, their tokens in
//! `LEASEWRIGHT_RUNNER_TOKEN` (never on a command line). Every job runs the command `true` in
//! its workspace: the runner claims it, downloads and verifies its source (one small file),
//! extracts it, spawns `sh -c true`, and reports the result. The slot ends when every runner has
//! exited; what was done, and claim -> completion per job, is read from the database's
//! `attempts` (the server's receipt times).
//!
//! The jobs are queued as the other Leasewright rows queue theirs (one bulk statement, the rows a
//! submission writes), naming the source of one real submission through
//! `POST /v1/projects/{p}/jobs`: the cheapest documented form of a job a runner can run.

use crate::fixture::{BenchError, Fixture, Source};
use leasewright_server::client::OperatorClient;
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::SubmitJobRequest;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The command every job runs.
pub const COMMAND: &str = "true";

/// The runners of this contender, registered once.
#[derive(Debug)]
pub struct Runners {
    exe: PathBuf,
    server: String,
    /// (runner id, token), one per runner process.
    runners: Vec<(Uuid, String)>,
    capacity: usize,
    /// The runners' `--workdir` parent, removed when dropped.
    workdir: PathBuf,
}

impl Drop for Runners {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workdir);
    }
}

/// What one slot of runner processes did.
#[derive(Debug, Default)]
pub struct Done {
    pub jobs: u64,
    pub seconds: f64,
    /// Claim -> completion of each job, microseconds (server receipt times).
    pub latencies_us: Vec<u32>,
}

impl Runners {
    /// Registers `agents` runners through the operator route of the fixture's control plane
    /// (started by [`Fixture::start_http`]) and submits one job through
    /// `POST /v1/projects/{p}/jobs`, whose stored source every loaded job names from now on.
    pub async fn prepare(
        fixture: &mut Fixture,
        exe: &Path,
        agents: usize,
        capacity: usize,
    ) -> Result<Runners, BenchError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            BenchError::Invalid(format!("leasewright-runners: {what}: {e}"))
        };
        let server = fixture
            .servers
            .first()
            .ok_or_else(|| BenchError::Invalid("leasewright-runners: no control plane".into()))?
            .url();
        let operator = OperatorClient::new(&server, &fixture.operator_token)
            .map_err(|e| failed("an operator client", &e))?;
        let project = fixture.project.0;
        let mut runners = Vec::with_capacity(agents);
        for i in 0..agents {
            let created = operator
                .create_runner(project, &format!("bench-runner-process-{i}"))
                .await
                .map_err(|e| failed("registering a runner", &e))?;
            runners.push((created.runner, created.token));
        }
        let snapshot = build_snapshot(vec![SourceFile {
            path: "README".into(),
            mode: 0o644,
            content: b"a job of leasewright bench peers\n".to_vec(),
        }])
        .map_err(|e| failed("the source snapshot", &e))?;
        use base64::Engine as _;
        let submitted = operator
            .submit(
                project,
                &SubmitJobRequest {
                    command: COMMAND.into(),
                    source_revision: "bench".into(),
                    source_archive_base64: base64::engine::general_purpose::STANDARD
                        .encode(&snapshot.archive),
                    artifacts: Vec::new(),
                    target: None,
                    target_kind: None,
                },
            )
            .await
            .map_err(|e| failed("submitting the template job", &e))?;
        fixture.source = Some(Source {
            blob_sha256: submitted.source_blob_sha256,
            digest: submitted.source_digest,
            revision: submitted.source_revision,
        });
        let workdir = std::env::temp_dir().join(format!(
            "leasewright-bench-runners-{}-{}",
            std::process::id(),
            Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&workdir).map_err(|e| failed("the runners' workdir", &e))?;
        Ok(Runners {
            exe: exe.to_path_buf(),
            server,
            runners,
            capacity,
            workdir,
        })
    }

    /// The runner processes and each one's capacity.
    pub fn shape(&self) -> (usize, usize) {
        (self.runners.len(), self.capacity)
    }

    /// Starts the runner processes with `--max-jobs` adding up to `jobs`, waits until every one
    /// has exited (or `max` passed: then they are killed), and reads what they did from the
    /// database. Every job the runners took must have passed: a runner that refused its source
    /// or failed its command would be counted fast for doing nothing.
    pub async fn slot(
        &self,
        fixture: &Fixture,
        jobs: u64,
        max: Duration,
        progress: bool,
    ) -> Result<Done, BenchError> {
        let ids: Vec<Uuid> = self.runners.iter().map(|(id, _)| *id).collect();
        let since: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&fixture.pool)
            .await?;
        let n = self.runners.len() as u64;
        let started = Instant::now();
        let mut children = Vec::with_capacity(self.runners.len());
        for (i, (_, token)) in self.runners.iter().enumerate() {
            // The jobs split evenly: their sum is exactly `jobs` (a runner waiting for a job
            // that is not there would never exit).
            let share = jobs / n + u64::from((i as u64) < jobs % n);
            if share == 0 {
                continue;
            }
            let log = std::fs::File::create(self.workdir.join(format!("runner-{i}.log")))
                .map_err(|e| BenchError::Invalid(format!("a runner's log file: {e}")))?;
            let child = tokio::process::Command::new(&self.exe)
                .arg("runner")
                .args(["--server", &self.server])
                .args(["--capacity", &self.capacity.to_string()])
                .args(["--max-jobs", &share.to_string()])
                .arg("--workdir")
                .arg(self.workdir.join(format!("runner-{i}")))
                .env("LEASEWRIGHT_RUNNER_TOKEN", token)
                .env_remove("DATABASE_URL")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    BenchError::Invalid(format!("cannot start {} runner: {e}", self.exe.display()))
                })?;
            children.push(child);
        }
        let deadline = started + max;
        let mut last_shown = Instant::now();
        let mut statuses = Vec::with_capacity(children.len());
        let mut capped = false;
        for child in &mut children {
            loop {
                let waited = tokio::time::timeout(Duration::from_millis(200), child.wait()).await;
                match waited {
                    Ok(status) => {
                        statuses.push(status.map_err(|e| {
                            BenchError::Invalid(format!("waiting for a runner: {e}"))
                        })?);
                        break;
                    }
                    Err(_) if Instant::now() >= deadline => {
                        capped = true;
                        let _ = child.start_kill();
                    }
                    Err(_) => {}
                }
                if progress && last_shown.elapsed() >= Duration::from_secs(2) {
                    last_shown = Instant::now();
                    let finished: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM attempts
                         WHERE runner_id = ANY($1) AND claimed_at >= $2 AND ended_at IS NOT NULL",
                    )
                    .bind(&ids)
                    .bind(since)
                    .fetch_one(&fixture.pool)
                    .await?;
                    eprintln!(
                        "leasewright bench peers: leasewright-runners: {finished}/{jobs} jobs \
                         finished, {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let rows: Vec<(Option<String>, Option<f64>)> = sqlx::query_as(
            "SELECT outcome, extract(epoch FROM ended_at - claimed_at)::float8
             FROM attempts WHERE runner_id = ANY($1) AND claimed_at >= $2",
        )
        .bind(&ids)
        .bind(since)
        .fetch_all(&fixture.pool)
        .await?;
        let mut done = Done {
            seconds,
            ..Done::default()
        };
        for (outcome, took) in rows {
            match (outcome.as_deref(), took) {
                (Some("passed"), Some(took)) => {
                    done.jobs += 1;
                    done.latencies_us
                        .push((took * 1e6).clamp(0.0, f64::from(u32::MAX)) as u32);
                }
                // Killed at the cap: the attempt is still running.
                (None, None) if capped => {}
                (outcome, _) => {
                    return Err(BenchError::Invalid(format!(
                        "leasewright-runners: a job ended {} instead of passed; the runners' \
                         log: {}",
                        outcome.unwrap_or("without an outcome"),
                        self.log_tail()
                    )))
                }
            }
        }
        if !capped {
            if let Some(status) = statuses.iter().find(|s| !s.success()) {
                return Err(BenchError::Invalid(format!(
                    "leasewright-runners: a runner exited with {status}; its log: {}",
                    self.log_tail()
                )));
            }
        }
        Ok(done)
    }

    /// The last lines the runner processes logged (for an error message).
    fn log_tail(&self) -> String {
        let mut lines = Vec::new();
        for i in 0..self.runners.len() {
            if let Ok(text) = std::fs::read_to_string(self.workdir.join(format!("runner-{i}.log")))
            {
                lines.extend(text.lines().rev().take(5).map(str::to_owned));
            }
        }
        lines.join("\n")
    }
}
