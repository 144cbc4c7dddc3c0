//! `leasewright conform`: replay model traces against the implementation, step by step.

//!
//! The harness (suite selection, running, the summary, mutant runs) lives in
//! leasewright-conformance; this module parses the command line, calls it and prints.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use leasewright_conformance::drivers::cmd::CmdDriver;
use leasewright_conformance::drivers::http::HttpDriver;
use leasewright_conformance::drivers::pg::PgDriver;
use leasewright_conformance::export;
use leasewright_conformance::generate::Generated;
use leasewright_conformance::property;
use leasewright_conformance::replay::Divergence;
use leasewright_conformance::select::{self, Batch, Selection, Suite};
use leasewright_conformance::shard::Shard;
use leasewright_conformance::suite::{self, run_batches, LeftOut, SuiteDriver};
use leasewright_conformance::summary::{statement_delta, Summary};
use leasewright_conformance::{junit, minimize, traces};
use leasewright_model::{Config, LeaseModel, TargetKind};

mod mutants;
mod progress;
mod run;

use mutants::*;
use progress::*;
use run::*;

/// Which traces to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SuiteName {
    /// Exactly one trace per (reachable state, enabled action) of the configuration.
    Cover,
    /// Seeded random walks (`--seed`, `--steps`).
    Random,
    /// The named scenarios of docs/protocol.md §10.
    Scenarios,
    /// Every message kind, pair of failing checks and operator action in every reachable state
    /// of the cover configuration and of two-job walks (docs/conformance.md, classes 1-3).
    Probes,
    /// Property-based traces (proptest): `--cases` random paths of the model of up to
    /// `--walk-len` steps from `--seed`; a divergent one is shrunk by proptest to a minimal trace.
    Proptest,
    /// All of the above (proptest in shard 1 only: it is one sequential run).
    All,
}

/// A class of traces a driver may be unable to replay (`--skip`), one per [`LeftOut`] reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SkipClass {
    /// Several jobs on one target slot.
    SharedSlots,
    /// The outsider project's own jobs.
    OutsiderJobs,
    /// The side effects of R8.
    SideEffects,
    /// Probes naming a runner, job or attempt no one created.
    UnknownIds,
    /// The model's failover (in-process, over version 5 of the driver protocol, and over HTTP on
    /// servers with the failover's test hooks).
    Failovers,
    /// Replica clocks (in-process, over version 4 of the driver protocol, and over HTTP on a
    /// server whose database records their δ).
    ReplicaClocks,
    /// Over HTTP against the servers' own demonstration targets: a target mutation carrying a
    /// slot token not issued to the attempt it names, or sent after a failover's lost step.
    DemoTargets,
}

impl SkipClass {
    /// The reason a driver gives for leaving out a trace of this class.
    fn reason(self) -> LeftOut {
        match self {
            SkipClass::SharedSlots => LeftOut::SharedSlot,
            SkipClass::OutsiderJobs => LeftOut::OutsiderJobs,
            SkipClass::SideEffects => LeftOut::SideEffects,
            SkipClass::UnknownIds => LeftOut::UnknownIdentity,
            SkipClass::Failovers => LeftOut::Failover,
            SkipClass::ReplicaClocks => LeftOut::ReplicaClocks,
            SkipClass::DemoTargets => LeftOut::DemoTarget,
        }
    }

    /// The class of traces left out for `reason` (its `--skip` value).
    pub(crate) fn of(reason: LeftOut) -> SkipClass {
        [
            SkipClass::SharedSlots,
            SkipClass::OutsiderJobs,
            SkipClass::SideEffects,
            SkipClass::UnknownIds,
            SkipClass::Failovers,
            SkipClass::ReplicaClocks,
            SkipClass::DemoTargets,
        ]
        .into_iter()
        .find(|class| class.reason() == reason)
        .expect("every reason has a class")
    }

    /// The `--skip` value of this class.
    pub(crate) fn name(self) -> String {
        self.to_possible_value()
            .expect("no class is hidden")
            .get_name()
            .to_owned()
    }
}

/// The form of `--export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One ITF file per trace and a manifest.
    Itf,
    /// The replay form, JSON Lines: DIR/traces.jsonl and a manifest.
    Jsonl,
    /// The replay form, gzipped: DIR/traces.jsonl.gz and a manifest.
    JsonlGz,
}

/// Exit code of a run whose driver left out traces of a class the user did not `--skip`: the
/// suite asked for them and they were not replayed (docs/ci.md).
pub const EXIT_INCOMPLETE: i32 = 3;

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// The PostgreSQL to run against. Default: $DATABASE_URL (which keeps the password off the
    /// command line), else a throwaway cluster. Only the in-process replay uses it: $DATABASE_URL
    /// is ignored with --http, --driver-cmd and --export, which refuse --database-url.
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Whether `database_url` came from $DATABASE_URL rather than the command line.
    #[arg(skip)]
    pub(crate) database_url_from_env: bool,
    /// The PostgreSQL schema our tables live in (created if missing; every connection's
    /// search_path).
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Replay over HTTP against a running `leasewright serve --manual-clock` at this URL instead
    /// of in-process. Give it several times (or comma-separated) for several servers, each with
    /// its own database: one trace runs on each server at a time (a server's clock is global).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    http: Vec<String>,
    /// Where the targets' routes (`POST /v1/targets/{slot}/deploy`, `GET /v1/targets/{slot}`)
    /// are, when not on the servers of --http.
    #[arg(long, value_name = "URL", requires = "http")]
    target_url: Option<String>,
    /// The operator token of the server given by --http; prefer the environment variable
    /// LEASEWRIGHT_OPERATOR_TOKEN (a secret on a command line is visible to every local user).
    #[arg(long, env = "LEASEWRIGHT_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// Replay against any implementation, in any language, behind this command: it is started
    /// (through `sh -c`) and speaks the driver protocol (one JSON object per line on its stdin and
    /// stdout; docs/conformance.md, "The driver protocol").
    #[arg(long, value_name = "CMD", conflicts_with_all = ["http", "mutants", "mutant"])]
    driver_cmd: Option<String>,
    /// Write the selected suite's traces as ITF files under DIR, with DIR/manifest.json, and exit
    /// (no implementation is run): the corpus for other tooling.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["http", "driver_cmd", "mutants", "mutant", "replay"])]
    export: Option<PathBuf>,
    /// The form of --export: `itf` (one ITF file per trace, pretty JSON), `jsonl` (the replay
    /// form: DIR/traces.jsonl, one trace per line with the requests the harness sends over the
    /// driver protocol and the verdicts and projections the model expects; replayed without Rust
    /// by examples/python/replay.py) or `jsonl-gz` (the same, gzipped: traces.jsonl.gz).
    #[arg(long, value_enum, default_value_t = ExportFormat::Itf, requires = "export")]
    export_format: ExportFormat,
    /// Which traces to replay.
    #[arg(long, value_enum, default_value_t = SuiteName::All)]
    suite: SuiteName,
    /// Seed of the random walks (printed, so any run can be repeated).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random-walk steps in all (20% with two jobs, 10% on each other target kind).
    #[arg(long, default_value_t = 15_000, value_parser = crate::output::at_least_one)]
    steps: usize,
    /// Steps per random walk (for `--suite proptest`: the longest generated trace).
    #[arg(long, default_value_t = 40, value_parser = crate::output::at_least_one)]
    walk_len: usize,
    /// `--suite proptest`: how many traces proptest generates and replays.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    cases: u32,
    /// Where divergent traces are saved (ITF JSON).
    #[arg(long, default_value = "traces")]
    traces: PathBuf,
    /// Write a JUnit XML report here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Run the suite against every mutant of the implementation and print which are killed.
    #[arg(long)]
    mutants: bool,
    /// Run against one mutant of the implementation (a divergence introduced on purpose, reported
    /// like any other), for example `--mutant ConflictOverwrites`; names in docs/conformance.md.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["mutants", "http"])]
    mutant: Option<String>,
    /// A class of traces left out of the run (repeat for several), whatever the driver can
    /// replay. A driver that leaves out a class not named here fails the run with exit 3
    /// (docs/ci.md).
    #[arg(long = "skip", value_enum, value_name = "CLASS")]
    skip: Vec<SkipClass>,
    /// Run only shard I of N (I from 1).
    #[arg(long, default_value = "1/1")]
    shard: Shard,
    /// Traces replayed at once, each in its own namespace. Over --http: on each server, when the
    /// servers take a time per request (`leasewright serve --manual-clock` does); else one per
    /// server.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Cover the whole configuration given (by default the model's default configuration, whose
    /// cover is about 369,000 traces) instead of the reduced cover configuration.
    #[arg(long)]
    cover_full: bool,
    /// Replay one saved trace file (ITF JSON) instead of a suite.
    #[arg(long, conflicts_with_all = ["suite", "mutants"])]
    replay: Option<PathBuf>,
    /// Print the summary as one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Jobs in the model configuration.
    #[arg(long)]
    jobs: Option<u8>,
    /// Runners of project 0.
    #[arg(long)]
    runners: Option<u8>,
    /// Attempts per job.
    #[arg(long)]
    attempts: Option<u8>,
    /// The deployment target's kind.
    #[arg(long)]
    target: Option<TargetKind>,
}

impl ConformArgs {
    fn config(&self) -> Config {
        let mut config = Config::one_job();
        if let Some(jobs) = self.jobs {
            config.jobs = jobs;
        }
        if let Some(runners) = self.runners {
            config.runners = runners;
        }
        if let Some(attempts) = self.attempts {
            config.attempts_per_job = attempts;
        }
        if let Some(target) = self.target {
            config.target = target;
        }
        config
    }

    /// Which traces this command replays.
    fn selection(&self) -> Selection {
        Selection {
            suite: match self.suite {
                SuiteName::Cover => Suite::Cover,
                SuiteName::Random => Suite::Random,
                SuiteName::Scenarios => Suite::Scenarios,
                SuiteName::Probes => Suite::Probes,
                SuiteName::Proptest => Suite::Proptest,
                SuiteName::All => Suite::All,
            },
            config: self.config(),
            seed: self.seed,
            steps: self.steps,
            walk_len: self.walk_len,
            cases: self.cases,
            shard: self.shard,
            cover_full: self.cover_full,
        }
    }
}

pub fn run(mut args: ConformArgs) -> anyhow::Result<i32> {
    let elsewhere = [
        (!args.http.is_empty(), "--http"),
        (args.driver_cmd.is_some(), "--driver-cmd"),
        (args.export.is_some(), "--export"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));
    if let Some(flag) = elsewhere {
        if args.database_url.is_some() && !args.database_url_from_env {
            eprintln!("error: --database-url cannot be used with {flag}");
            return Ok(2);
        }
        // $DATABASE_URL is for the in-process replay; the others reach no database of ours.
        args.database_url = None;
    }
    if !args.http.is_empty() && args.mutants {
        eprintln!(
            "error: --mutants cannot be used with --http: the mutants are compiled into an \
             in-process build of the implementation, and a running server has none"
        );
        return Ok(2);
    }
    if !args.http.is_empty() && args.operator_token.is_none() {
        eprintln!(
            "error: --http needs the operator token the server was started with: \
             LEASEWRIGHT_OPERATOR_TOKEN (or --operator-token)"
        );
        return Ok(2);
    }
    if let Some(dir) = &args.export {
        return Ok(export(&args, dir));
    }
    // Before any database or server is reached.
    if let Some(file) = &args.replay {
        if let Err(error) = std::fs::metadata(file) {
            eprintln!("error: cannot read {}: {error}", file.display());
            return Ok(2);
        }
    }
    #[cfg(not(feature = "mutants"))]
    if args.mutants || args.mutant.is_some() {
        return rerun_with_mutants();
    }
    if args.parallel == 0 {
        eprintln!("error: --parallel must be at least 1");
        return Ok(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(conform(args))
}

/// `--export DIR`: the selected suite's traces as ITF files and a manifest.
fn export(args: &ConformArgs, dir: &std::path::Path) -> i32 {
    if args.suite == SuiteName::Proptest {
        eprintln!(
            "error: --export writes generated suites (cover, scenarios, random); proptest \
             generates its cases while it runs"
        );
        return 2;
    }
    let batches = match generate_reporting(args) {
        Ok(batches) => batches,
        Err(code) => return code,
    };
    let suites: Vec<export::Suite<'_>> = batches
        .iter()
        .map(|b| export::Suite {
            model: &b.model,
            traces: &b.traces,
        })
        .collect();
    let written = match args.export_format {
        ExportFormat::Itf => export::write(dir, &suites),
        ExportFormat::Jsonl => export::write_replay(dir, &suites, false),
        ExportFormat::JsonlGz => export::write_replay(dir, &suites, true),
    };
    match written {
        Ok(manifest) => {
            if args.json {
                let summary = serde_json::json!({
                    "manifest_version": manifest["schema_version"],
                    "directory": dir.display().to_string(),
                    "traces": manifest["traces"],
                    "steps": manifest["steps"],
                    "suites": manifest["suites"],
                });
                if let Err(error) = crate::output::print_json(&summary) {
                    eprintln!("error: {error}");
                    return 2;
                }
            } else {
                println!(
                    "exported {} traces ({} steps{}) to {}; manifest: {}",
                    manifest["traces"],
                    manifest["steps"],
                    match manifest["file"].as_str() {
                        Some(file) => format!(", replay form {file}"),
                        None => String::new(),
                    },
                    dir.display(),
                    dir.join("manifest.json").display()
                );
            }
            0
        }
        Err(error) => {
            eprintln!(
                "error: cannot write the corpus to {}: {error}",
                dir.display()
            );
            2
        }
    }
}

async fn conform(args: ConformArgs) -> anyhow::Result<i32> {
    if let Some(command) = &args.driver_cmd {
        let driver = match CmdDriver::connect(command).await {
            Ok(driver) => Arc::new(driver),
            Err(error) => {
                eprintln!("error: {error}");
                return Ok(2);
            }
        };
        eprintln!(
            "replaying against `{command}` ({}, driver protocol v{})",
            driver.implementation(),
            driver.version()
        );
        for part in driver.not_compared() {
            eprintln!(
                "not compared (a version 1 driver does not report them): {}",
                part.describe()
            );
        }
        if let Some(file) = &args.replay {
            return replay_file(&args, driver, file).await;
        }
        return run_suite(&args, driver).await;
    }
    if let (false, Some(token)) = (args.http.is_empty(), &args.operator_token) {
        let driver =
            match HttpDriver::connect_all(&args.http, token, args.target_url.as_deref()).await {
                Ok(driver) => Arc::new(driver.with_traces_per_server(args.parallel)),
                Err(error) => {
                    eprintln!("error: {error}");
                    return Ok(2);
                }
            };
        let at_once = if driver.own_time() {
            format!(
                "{} traces at once on each server, each request at its trace's time",
                driver.traces_per_server()
            )
        } else {
            "one trace per server at a time: the server takes no time per request".to_owned()
        };
        eprintln!(
            "replaying over HTTP against {} (lease ttl {} ms; {at_once})",
            driver.urls().join(", "),
            driver.lease_ttl_ms()
        );
        // Replica clocks replay where a database records their δ (one tick of the model).
        let skews: Vec<String> = driver
            .clock_skews_ms()
            .iter()
            .map(|ms| format!("{ms} ms"))
            .collect();
        let ticks = leasewright_conformance::select::replica_clock_config(&args.config()).lease_ttl;
        eprintln!(
            "the max_clock_skew each server's database records: {} (the replica-clock traces \
             run where it is one model tick: the lease ttl over the model's {ticks} ticks, {} ms)",
            skews.join(", "),
            driver.lease_ttl_ms() / u64::from(ticks.max(1))
        );
        for part in driver.unread() {
            eprintln!(
                "not compared (the server does not offer the read): {}",
                part.describe()
            );
        }
        if let Some(file) = &args.replay {
            return replay_file(&args, driver, file).await;
        }
        return run_suite(&args, driver).await;
    }
    let (pool, _database) = match connect(&args).await {
        Ok(connected) => connected,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(2);
        }
    };
    let driver = match pg_driver(&args, pool.clone()).await? {
        Ok(driver) => Arc::new(driver),
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(2);
        }
    };
    if let Some(file) = &args.replay {
        return replay_file(&args, driver, file).await;
    }
    if args.mutants {
        let batches = match generate_reporting(&args) {
            Ok(batches) => batches,
            Err(code) => return Ok(code),
        };
        return mutants(&args, pool, &batches).await;
    }
    run_suite(&args, driver).await
}

/// The in-process driver, against `--mutant NAME` if given.
async fn pg_driver(
    args: &ConformArgs,
    pool: sqlx::PgPool,
) -> anyhow::Result<Result<PgDriver, String>> {
    let driver = PgDriver::new(pool).await?;
    let Some(name) = &args.mutant else {
        return Ok(Ok(driver));
    };
    #[cfg(feature = "mutants")]
    {
        Ok(leasewright_conformance::mutants::named(name).map(|m| driver.with_mutant(m)))
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = driver;
        unreachable!("a build without mutants re-runs itself from the mutants build first ({name})")
    }
}

/// Generates the suite and says so (the property suite generates its own traces as it runs);
/// `Err(2)` on bad arguments.
fn generate_reporting(args: &ConformArgs) -> Result<Vec<Batch>, i32> {
    if args.suite == SuiteName::Proptest {
        return Ok(Vec::new());
    }
    let started = Instant::now();
    let batches = match select::generate(&args.selection()) {
        Ok(batches) => batches,
        Err(error) => {
            eprintln!("error: {error}");
            return Err(2);
        }
    };
    let total: usize = batches.iter().map(|b| b.traces.len()).sum();
    eprintln!(
        "generated {total} traces in {:.1} s (suite {:?}, seed {}, shard {})",
        started.elapsed().as_secs_f64(),
        args.suite,
        args.seed,
        args.shard
    );
    Ok(batches)
}

/// The line that says how many traces the driver left out, for each reason (a trace counts
/// under its first reason, in the order of [`LeftOut::ALL`]); `None` when it left none out.
fn left_out_line<D: SuiteDriver>(
    driver: &D,
    left_out: &std::collections::BTreeMap<LeftOut, usize>,
    by_skip: &std::collections::BTreeSet<LeftOut>,
) -> Option<String> {
    let total: usize = left_out.values().sum();
    if total == 0 {
        return None;
    }
    let reasons: Vec<String> = left_out
        .iter()
        .map(|(why, n)| {
            let because = if by_skip.contains(why) {
                format!("--skip {}", SkipClass::of(*why).name())
            } else {
                driver.why_left_out(*why).to_owned()
            };
            format!("{n} {} ({because})", why.what())
        })
        .collect();
    Some(format!(
        "left out {total} traces: {}; the in-process driver replays them",
        reasons.join("; ")
    ))
}

/// Connects to `--database-url`, $DATABASE_URL, or a throwaway cluster (kept alive by the
/// returned guard).
async fn connect(
    args: &ConformArgs,
) -> anyhow::Result<(
    sqlx::PgPool,
    Option<leasewright_impl::database::TestDatabase>,
)> {
    let url = args.database_url.clone().filter(|u| !u.is_empty());
    let (url, guard) = match url {
        Some(url) => (
            crate::db::probe(&url, crate::db::Access::Writes).await?,
            None,
        ),
        None => {
            eprintln!(
                "no --database-url or DATABASE_URL: starting a throwaway PostgreSQL cluster \
                 (removed when this command exits)"
            );
            let db = leasewright_impl::database::TestDatabase::create().await?;
            (db.url().to_string(), Some(db))
        }
    };
    let url = leasewright_impl::database::with_search_path(&url, &args.schema);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections((args.parallel as u32).saturating_mul(2).max(4))
        .connect(&url)
        .await
        .with_context(|| "connecting to PostgreSQL (check --database-url)".to_string())?;
    leasewright_impl::schema::create_schema(&pool, &args.schema)
        .await
        .context("creating the schema")?;
    leasewright_impl::Store::from_pool(
        pool.clone(),
        Arc::new(leasewright_impl::SystemClock),
        leasewright_impl::StoreConfig::default(),
    )
    .await
    .context("applying the implementation's migrations")?;
    Ok((pool, guard))
}
