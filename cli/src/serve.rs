//! `leasewright serve` (the HTTP control plane) and `leasewright op` (its operator routes). The
//! work is in leasewright-server; this module parses arguments.

use crate::secret;
use leasewright_server::app::ConnectionLimits;
use leasewright_server::client::{CopyError, OperatorClient};
use leasewright_server::serve::{self, ServeOptions};
use leasewright_server::wire::SubmitJobRequest;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// How logs are written to stderr: `text` (colour only on a terminal) or `json` (one object
    /// per line).
    #[arg(long, value_enum, default_value_t = crate::output::LogFormat::Text)]
    log_format: crate::output::LogFormat,
    /// PostgreSQL URL (default: $DATABASE_URL, which keeps the password off the command line).
    /// Without either, a throwaway cluster is started and removed at exit, with all its data.
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The PostgreSQL schema our tables live in (created and migrated if missing, unless
    /// --no-migrate; every connection's search_path).
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Apply no migration and create nothing: the schema's owner ran `leasewright migrate`
    /// (docs/roles.md); a schema that lacks a migration is refused with exit 2. Without it an
    /// up-to-date schema gets no DDL either.
    #[arg(long)]
    no_migrate: bool,
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Lease time-to-live in seconds.
    #[arg(long, default_value_t = 30.0)]
    lease_ttl: f64,
    /// TEST ONLY: run on a manual clock and add the test hooks POST /v1/test/clock,
    /// /v1/test/replicate and /v1/test/failover (a failover replayed: the database goes back to
    /// its last replicate); the expiry sweep then runs only on POST /v1/sweep. Routes the
    /// demonstration targets too (--demo-targets).
    #[arg(long)]
    manual_clock: bool,
    /// A DEMONSTRATION: route POST /v1/targets/{slot}/deploy, the demonstration targets (rule
    /// R9), which take no credential and record, in this database, each mutation naming an
    /// attempt with the slot token the database issued it (at most 64 per attempt, pruned with
    /// the job). Off by default: the route answers 404.
    #[arg(long)]
    demo_targets: bool,
    /// The operator token (default: --operator-token-file, else $LEASEWRIGHT_OPERATOR_TOKEN,
    /// else generated and printed). A command line is visible to every local user.
    #[arg(long)]
    operator_token: Option<String>,
    /// A file holding the operator token.
    #[arg(long, conflicts_with = "operator_token")]
    operator_token_file: Option<PathBuf>,
    /// The bound on this replica's clock's distance from the database server's, in milliseconds
    /// (docs/protocol.md §3.1): every replica of one database must use one value. Recorded in the
    /// database (the sweep and the wait after an epoch change act twice this past a lease) and
    /// checked against the database's clock at start and every second; outside it the server
    /// answers 503 clock_skew_exceeded. Not checked on a manual clock. From 1 to 60000 (one
    /// minute); the database keeps the largest any server recorded (`GET /healthz`
    /// `database.max_clock_skew_ms`), and `leasewright migrate --set-max-clock-skew-ms` lowers it.
    #[arg(long, default_value_t = 500)]
    max_clock_skew_ms: u64,
    /// How often the expiry sweep runs, in milliseconds (never on a manual clock).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    sweep_interval_ms: u64,
    /// How long a client may take to send a request's headers (also how long an idle kept-alive
    /// connection stays open), in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_ms: u64,
    /// How long a request body may send nothing before the request is refused (408), in ms.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    body_read_timeout_ms: u64,
    /// The longest one request may take, headers to answer, in milliseconds (not the test hooks
    /// of --manual-clock, which work on the whole database).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: u64,
    /// On SIGTERM or SIGINT: how long the requests under way may take to finish, in
    /// milliseconds; those still running then are answered 503 shutting_down, and the process
    /// exits 0 within about a second more (plus up to 2 s to close its database connections).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    shutdown_grace_ms: u64,
    /// The most connections open at once (never more than the open-file limit leaves room for).
    #[arg(long, default_value_t = 4096, value_parser = crate::output::at_least_one)]
    max_connections: usize,
    /// The most bytes one attempt may store in logs, artifacts and cache entries (0: no quota);
    /// past it a write is refused `413 quota_exceeded`.
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_ATTEMPT_QUOTA_BYTES)]
    attempt_quota_bytes: u64,
    /// The most payload bytes (logs, artifacts, cache entries, sources) all requests together may
    /// be receiving at once; past it a payload request is refused `503 payload_budget_exhausted`
    /// before its body is read (a runner retries it).
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_PAYLOAD_IN_FLIGHT_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 40)))]
    payload_in_flight_bytes: u64,
    /// The size of this server's PostgreSQL connection pool: what it may hold of the database's
    /// `max_connections` (replicas on one database each hold their own pool).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    database_connections: u32,
    /// The most of --payload-in-flight-bytes one project's requests may hold at once, a fraction
    /// from 0.01 to 1: a project that floods the payload routes leaves the rest to the others.
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_PROJECT_SHARE,
          value_parser = parse_share)]
    payload_project_share: f64,
    /// The most requests to /v1/ routes served at once; past it a request is refused
    /// `503 request_slots_exhausted` with Retry-After (a runner retries it).
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_MAX_REQUESTS_IN_FLIGHT as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_requests_in_flight: u64,
    /// The most of --max-requests-in-flight one project's runners (or the operator) may hold at
    /// once, a fraction from 0.01 to 1: a project that floods the routes leaves the rest to the
    /// others.
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_REQUEST_PROJECT_SHARE,
          value_parser = parse_share)]
    request_project_share: f64,
    /// Prune the jobs that finished longer ago than this (`30d`, `12h`), with everything they
    /// own, every --prune-interval; jobs whose ledgers are not audited are kept unless
    /// --prune-unaudited (docs/http.md, "Retention"). Default: never.
    #[arg(long, value_name = "AGE", value_parser = crate::prune::parse_age)]
    retain_finished_jobs: Option<Duration>,
    /// How often the retention's prune runs (`10m`, `1h`).
    #[arg(long, value_name = "INTERVAL", default_value = "10m", value_parser = crate::prune::parse_age,
          requires = "retain_finished_jobs")]
    prune_interval: Duration,
    /// Prune finished jobs past the retention even when their ledgers are not audited yet.
    #[arg(long, requires = "retain_finished_jobs")]
    prune_unaudited: bool,
}

/// `--payload-project-share`, `--request-project-share`: a fraction from 0.01 to 1.
fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.01..=1.0).contains(&share) => Ok(share),
        _ => Err(format!(
            "{text:?} is not a fraction from 0.01 to 1 (0.5: half)"
        )),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The bounds of `--lease-ttl`: one second to one day (a lease longer than a day is no lease;
/// far beyond it the expiry overflows the time type).
const MIN_LEASE_TTL_SECONDS: f64 = 1.0;
const MAX_LEASE_TTL_SECONDS: f64 = 86_400.0;

/// `--max-clock-skew-ms` (of `serve` and `migrate --set-max-clock-skew-ms`): from 1 ms to
/// [`leasewright_server::app::MAX_MAX_CLOCK_SKEW`] (one minute): the sweep acts twice it past
/// a lease, and the database keeps the largest any server recorded.
pub fn check_max_clock_skew_ms(ms: u64) -> Result<(), String> {
    let max = leasewright_server::app::MAX_MAX_CLOCK_SKEW.as_millis();
    if ms == 0 || u128::from(ms) > max {
        return Err(format!(
            "must be between 1 and {max} milliseconds (one minute), not {ms}: the expiry sweep \
             acts twice it past a lease, and the database keeps the largest any server recorded"
        ));
    }
    Ok(())
}

/// The operator token from its flag, its file or `LEASEWRIGHT_OPERATOR_TOKEN`.
fn operator_token(
    flag: Option<String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<String>> {
    secret::read(secret::Sources {
        what: "the operator token",
        flag,
        file,
        env: "LEASEWRIGHT_OPERATOR_TOKEN",
    })
}

pub fn run(args: ServeArgs) -> anyhow::Result<i32> {
    serve::init_logging(args.log_format == crate::output::LogFormat::Json);
    if !(MIN_LEASE_TTL_SECONDS..=MAX_LEASE_TTL_SECONDS).contains(&args.lease_ttl) {
        eprintln!(
            "leasewright serve: --lease-ttl must be between {MIN_LEASE_TTL_SECONDS} and \
             {MAX_LEASE_TTL_SECONDS} seconds (one day), not {}",
            args.lease_ttl
        );
        return Ok(2);
    }
    if let Err(error) = check_max_clock_skew_ms(args.max_clock_skew_ms) {
        eprintln!("leasewright serve: --max-clock-skew-ms {error}");
        return Ok(2);
    }
    let operator_token =
        match operator_token(args.operator_token, args.operator_token_file.as_deref()) {
            Ok(token) => token,
            Err(error) => {
                eprintln!("leasewright serve: {error}");
                return Ok(2);
            }
        };
    let database_url = args.database_url.filter(|u| !u.is_empty());
    if let Some(url) = &database_url {
        // A refused connection, a bad URL or a standby where the primary is needed: exit 2 at
        // once, saying so for every host tried. `serve` keeps the whole URL: it follows the
        // primary among its hosts after a failover.
        if let Err(error) = crate::db::probe_blocking(url, crate::db::Access::Writes) {
            eprintln!("leasewright serve: {error:#}");
            return Ok(2);
        }
    }
    let options = ServeOptions {
        database_url,
        listen: args.listen,
        lease_ttl: Duration::from_secs_f64(args.lease_ttl),
        manual_clock: args.manual_clock,
        operator_token,
        sweep_interval: Duration::from_millis(args.sweep_interval_ms.max(10)),
        max_clock_skew: Duration::from_millis(args.max_clock_skew_ms),
        demo_targets: args.demo_targets,
        connections: ConnectionLimits {
            header_read_timeout: Duration::from_millis(args.header_read_timeout_ms.max(1)),
            body_read_timeout: Duration::from_millis(args.body_read_timeout_ms.max(1)),
            request_timeout: Duration::from_millis(args.request_timeout_ms.max(1)),
            shutdown_grace: Duration::from_millis(args.shutdown_grace_ms),
            max_connections: args.max_connections.max(1),
            ..ConnectionLimits::default()
        },
        attempt_quota_bytes: (args.attempt_quota_bytes > 0).then_some(args.attempt_quota_bytes),
        payload_in_flight_bytes: usize::try_from(args.payload_in_flight_bytes)
            .unwrap_or(usize::MAX),
        schema: args.schema,
        database_connections: args.database_connections,
        migrate: !args.no_migrate,
        payload_project_share: args.payload_project_share,
        max_requests_in_flight: args.max_requests_in_flight as usize,
        request_project_share: args.request_project_share,
        retention: args.retain_finished_jobs.map(|finished_jobs| {
            leasewright_server::app::Retention {
                finished_jobs,
                unaudited: args.prune_unaudited,
                interval: args.prune_interval,
                batch: leasewright_server::app::DEFAULT_PRUNE_BATCH,
            }
        }),
    };
    let runtime = runtime()?;
    let served = runtime.block_on(serve::serve(options));
    // Whatever is left (a blocking task such as a source extraction) does not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served?;
    Ok(0)
}

#[derive(clap::Args)]
pub struct OpArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// The operator token. Prefer --operator-token-file or LEASEWRIGHT_OPERATOR_TOKEN: a command
    /// line is visible to every local user.
    #[arg(long)]
    operator_token: Option<String>,
    /// A file holding the operator token (default: $LEASEWRIGHT_OPERATOR_TOKEN).
    #[arg(long, conflicts_with = "operator_token")]
    operator_token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: OpCommand,
}

#[derive(clap::Subcommand)]
enum OpCommand {
    /// Create a project; prints its id.
    Project { name: String },
    /// Create a runner of a project (`op runner PROJECT NAME`; prints its token, shown once), or
    /// revoke one (`op runner revoke PROJECT RUNNER`).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Runner {
        #[command(subcommand)]
        action: Option<RunnerAction>,
        #[arg(required = true)]
        project: Option<uuid::Uuid>,
        #[arg(required = true)]
        name: Option<String>,
    },
    /// Print one page of the project's runners in creation order, revoked ones with their
    /// `revoked_at` (JSON: `{"runners": [...], "next"?}`; pass `next` as --after for the page
    /// after it).
    Runners {
        project: uuid::Uuid,
        /// At most this many runners (1 to 1000; default: the server's, 100).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: Option<i64>,
        /// The cursor of the page to print: a previous page's `next`.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
        after: Option<i64>,
    },
    /// Submit a job with a git revision (`--git`) or a directory (`--dir`) as its source; prints
    /// the job id.
    #[command(group(clap::ArgGroup::new("source").required(true).args(["git", "dir"])))]
    Submit {
        project: uuid::Uuid,
        /// The source: `git archive` of this revision (a commit, branch, tag, `HEAD`...) of the
        /// repository (--repo), recording the revision's commit id as the job's source revision.
        /// Only what the commit tracks is sent (no ignored or untracked files, no .git).
        #[arg(long, value_name = "REV")]
        git: Option<String>,
        /// The repository of --git (default: the current directory).
        #[arg(long, value_name = "DIR", requires = "git")]
        repo: Option<PathBuf>,
        /// The source: every regular file under this directory, except its top-level .git
        /// (.gitignore is not read: build outputs are sent too; prefer --git in a repository).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The shell command.
        #[arg(long)]
        command: String,
        /// The source revision recorded with --dir (default: `git rev-parse HEAD` in the
        /// directory, else `unversioned`).
        #[arg(long, conflicts_with = "git")]
        revision: Option<String>,
        /// A file (relative to the source) to upload as an artifact; repeatable.
        #[arg(long = "artifact")]
        artifacts: Vec<String>,
        /// The target slot the job deploys to (default: its own slot, named by the job id); one
        /// global namespace: a slot shared by jobs of several projects has one kind.
        #[arg(long, value_name = "SLOT")]
        target: Option<String>,
        /// fenced, idempotent or unfenced.
        #[arg(long, default_value = "unfenced")]
        target_kind: String,
    },
    /// Print one page of the project's jobs in submission order (JSON: `{"jobs": [...],
    /// "next"?}`; pass `next` as --after for the page after it).
    Jobs {
        project: uuid::Uuid,
        /// Only the jobs in this state (queued, running, cancelling, uncertain, passed, failed,
        /// cancelled, aborted).
        #[arg(long, value_parser = ["queued", "running", "cancelling", "uncertain", "passed", "failed", "cancelled", "aborted"])]
        state: Option<String>,
        /// At most this many jobs (1 to 1000; default: the server's, 100).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: Option<i64>,
        /// The cursor of the page to print: a previous page's `next`.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
        after: Option<i64>,
    },
    /// Print a job (JSON); with --wait, wait until it is terminal or uncertain.
    Job {
        project: uuid::Uuid,
        job: uuid::Uuid,
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds, print the job as it stands and exit 1.
        #[arg(long, requires = "wait", value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
        timeout: Option<u64>,
    },
    /// Print the log of the job's current (or latest) attempt, or of --attempt.
    Logs {
        project: uuid::Uuid,
        job: uuid::Uuid,
        /// An earlier attempt of the job (its id: `op ledger` lists them).
        #[arg(long, value_name = "ATTEMPT")]
        attempt: Option<uuid::Uuid>,
    },
    /// Print the stored log chunks (seq, digest, size) of the job's current (or latest) attempt,
    /// or of --attempt (JSON).
    LogChunks {
        project: uuid::Uuid,
        job: uuid::Uuid,
        /// An earlier attempt of the job.
        #[arg(long, value_name = "ATTEMPT")]
        attempt: Option<uuid::Uuid>,
    },
    /// Print an artifact of the job's current (or latest) attempt, or of --attempt.
    Artifact {
        project: uuid::Uuid,
        job: uuid::Uuid,
        name: String,
        /// An earlier attempt of the job.
        #[arg(long, value_name = "ATTEMPT")]
        attempt: Option<uuid::Uuid>,
    },
    /// Print the job's reconciliations, in the order recorded (JSON; every page).
    Reconciliations {
        project: uuid::Uuid,
        job: uuid::Uuid,
    },
    /// Print the project's cache entry under KEY, with who stored it (JSON).
    Cache { project: uuid::Uuid, key: String },
    /// Print a target slot's state: its kind, the highest slot token it applied, how many
    /// mutations it applied (JSON).
    Target { slot: String },
    /// Print the job's attempts and observations as one JSON document (`{"attempts": [...],
    /// "observations": [...]}`; every page).
    Ledger {
        project: uuid::Uuid,
        job: uuid::Uuid,
    },
    /// Print the project's security log: what its runners sent naming another project's job,
    /// or none (JSON; every page).
    SecurityLog { project: uuid::Uuid },
    /// Cancel a job.
    Cancel {
        project: uuid::Uuid,
        job: uuid::Uuid,
    },
    /// Reconcile an uncertain job.
    Reconcile {
        project: uuid::Uuid,
        job: uuid::Uuid,
        /// stopped, still_running, observed_passed, observed_failed
        finding: String,
        /// retry, abort, adopt
        decision: String,
    },
}

#[derive(clap::Subcommand)]
enum RunnerAction {
    /// Revoke a runner of the project: its token is refused (401) at once by this server and
    /// within 5 s by every server on the database; its leases run out and are swept as a lost
    /// runner's (prints the revoked runner as JSON).
    Revoke {
        project: uuid::Uuid,
        runner: uuid::Uuid,
    },
}

/// `git -C repo ARGS`: its stdout, or an error with git's own message.
fn git(repo: &std::path::Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| anyhow::anyhow!("cannot run git: {error}"))?;
    if !output.status.success() {
        anyhow::bail!(
            "git {} in {} failed: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.stdout)
}

/// The commit id of `rev` in `repo`, and `git archive --format=tar.gz` of that commit.
fn git_source(repo: &std::path::Path, rev: &str) -> anyhow::Result<(String, Vec<u8>)> {
    if rev.is_empty() || rev.starts_with('-') {
        anyhow::bail!("--git {rev:?} is not a revision");
    }
    let commit = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|error| {
        // git's own message says why (not a repository, an unknown revision, ...); `--quiet`
        // leaves it empty for a revision that a repository does not have.
        let said = error.to_string();
        let why = said.split_once("failed: ").map_or("", |(_, why)| why);
        if why.is_empty() {
            anyhow::anyhow!("--git {rev:?} names no commit in {}", repo.display())
        } else {
            anyhow::anyhow!("--git {rev:?}: git says: {why}")
        }
    })?;
    let commit = String::from_utf8(commit)?.trim().to_owned();
    let archive = git(repo, &["archive", "--format=tar.gz", &commit])?;
    Ok((commit, archive))
}

fn git_revision(dir: &std::path::Path) -> String {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unversioned".to_owned())
}

pub fn op(args: OpArgs) -> anyhow::Result<i32> {
    use base64::Engine as _;
    let token = match operator_token(args.operator_token, args.operator_token_file.as_deref()) {
        Ok(Some(token)) => token,
        Ok(None) => {
            eprintln!(
                "leasewright op: no operator token: set LEASEWRIGHT_OPERATOR_TOKEN or pass \
                 --operator-token-file FILE"
            );
            return Ok(2);
        }
        Err(error) => {
            eprintln!("leasewright op: {error}");
            return Ok(2);
        }
    };
    let client = OperatorClient::new(&args.server, &token)?;
    let json = |value: &dyn erased::Json| value.print();
    let text = |text: &str| write_stdout(text.as_bytes());
    runtime()?.block_on(async move {
        match args.command {
            OpCommand::Project { name } => {
                text(&format!("{}\n", client.create_project(&name).await?))
            }
            OpCommand::Runner {
                action: Some(RunnerAction::Revoke { project, runner }),
                ..
            } => json(&client.revoke_runner(project, runner).await?),
            OpCommand::Runner {
                action: None,
                project: Some(project),
                name: Some(name),
            } => text(&format!(
                "{}\n",
                client.create_runner(project, &name).await?.token
            )),
            OpCommand::Runner { .. } => unreachable!("clap requires PROJECT NAME or a subcommand"),
            OpCommand::Runners {
                project,
                limit,
                after,
            } => json(&client.runners_page(project, after, limit).await?),
            OpCommand::Submit {
                project,
                git: rev,
                repo,
                dir,
                command,
                revision,
                artifacts,
                target,
                target_kind,
            } => {
                let (source_revision, archive) = match (rev, dir) {
                    (Some(rev), _) => {
                        match git_source(repo.as_deref().unwrap_or(std::path::Path::new(".")), &rev)
                        {
                            Ok(source) => source,
                            Err(error) => {
                                eprintln!("leasewright op submit: {error:#}");
                                return Ok(2);
                            }
                        }
                    }
                    (None, Some(dir)) => {
                        let snapshot = leasewright_server::source::snapshot_dir(&dir)?;
                        (
                            revision.unwrap_or_else(|| git_revision(&dir)),
                            snapshot.archive,
                        )
                    }
                    (None, None) => unreachable!("clap requires --git or --dir"),
                };
                let request = SubmitJobRequest {
                    command,
                    source_revision,
                    source_archive_base64: base64::engine::general_purpose::STANDARD
                        .encode(&archive),
                    artifacts,
                    target,
                    target_kind: Some(target_kind),
                };
                let submitted = client.submit(project, &request).await?;
                eprintln!(
                    "source {} ({} files, blob {})",
                    submitted.source_digest, submitted.file_count, submitted.source_blob_sha256
                );
                text(&format!("{}\n", submitted.job));
            }
            OpCommand::Jobs {
                project,
                state,
                limit,
                after,
            } => {
                json(
                    &client
                        .jobs_page(project, state.as_deref(), after, limit)
                        .await?,
                );
            }
            OpCommand::Job {
                project,
                job,
                wait,
                timeout,
            } => {
                let deadline =
                    timeout.map(|secs| tokio::time::Instant::now() + Duration::from_secs(secs));
                let settled = |state: &str| {
                    matches!(
                        state,
                        "passed" | "failed" | "cancelled" | "aborted" | "uncertain"
                    )
                };
                let mut body = client.job(project, job).await?;
                while wait && !settled(&body.state) {
                    if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        json(&body);
                        eprintln!(
                            "leasewright op: the job is still {} after {} s (--timeout)",
                            body.state,
                            timeout.unwrap_or_default()
                        );
                        return Ok(1);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    body = client.job(project, job).await?;
                }
                json(&body);
            }
            OpCommand::Logs {
                project,
                job,
                attempt,
            } => {
                // Streamed: the log may reach the attempt quota (1 GiB by default).
                let mut stdout = std::io::stdout().lock();
                copied(client.logs_into(project, job, attempt, &mut stdout).await)?;
            }
            OpCommand::LogChunks {
                project,
                job,
                attempt,
            } => {
                // Streamed as the server sends it (one JSON array): each entry carries its chunk.
                let mut stdout = std::io::stdout().lock();
                copied(
                    client
                        .log_chunks_into(project, job, attempt, &mut stdout)
                        .await,
                )?;
                drop(stdout);
                write_stdout(b"\n");
            }
            OpCommand::Artifact {
                project,
                job,
                name,
                attempt,
            } => {
                let mut stdout = std::io::stdout().lock();
                copied(
                    client
                        .artifact_into(project, job, &name, attempt, &mut stdout)
                        .await,
                )?;
            }
            OpCommand::Reconciliations { project, job } => {
                json(&client.reconciliations(project, job).await?);
            }
            OpCommand::Cache { project, key } => {
                json(&client.cache_entry(project, &key).await?);
            }
            OpCommand::Target { slot } => {
                json(&client.target(&slot).await?);
            }
            OpCommand::Ledger { project, job } => {
                json(&serde_json::json!({
                    "attempts": client.attempts(project, job).await?,
                    "observations": client.observations(project, job).await?,
                }));
            }
            OpCommand::SecurityLog { project } => {
                json(&client.security_log(project).await?);
            }
            OpCommand::Cancel { project, job } => {
                json(&client.cancel(project, job).await?);
            }
            OpCommand::Reconcile {
                project,
                job,
                finding,
                decision,
            } => {
                json(&client.reconcile(project, job, &finding, &decision).await?);
            }
        }
        anyhow::Ok(0)
    })
}

/// Write to stdout. A reader that went away (`op ledger | head`) ends the process quietly with
/// status 0, as with other Unix tools, instead of a panic.
fn write_stdout(bytes: &[u8]) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        write_failed(&error);
    }
}

/// Stdout refused the output: a reader that went away ends the process with status 0, any
/// other failure with status 1.
fn write_failed(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("leasewright op: cannot write the output: {error}");
    std::process::exit(1);
}

/// An answer streamed to stdout: the call's failure is the command's error; stdout's refusal
/// ends the process as [`write_failed`] says.
fn copied(outcome: Result<u64, CopyError>) -> Result<(), leasewright_server::client::CallError> {
    match outcome {
        Ok(_) => Ok(()),
        Err(CopyError::Call(error)) => Err(error),
        Err(CopyError::Write(error)) => write_failed(&error),
    }
}

mod erased {
    /// Print any serializable value as pretty JSON.
    pub trait Json {
        fn print(&self);
    }

    impl<T: serde::Serialize> Json for T {
        fn print(&self) {
            match serde_json::to_string_pretty(self) {
                Ok(text) => super::write_stdout(format!("{text}\n").as_bytes()),
                Err(error) => eprintln!("cannot print: {error}"),
            }
        }
    }
}
