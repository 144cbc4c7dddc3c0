//! `leasewright conform`: replay model traces against the implementation, step by step.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use leasewright_conformance::driver::Driver;
use leasewright_conformance::generate::{random_walks, transition_cover, Generated};
use leasewright_conformance::http::HttpDriver;
use leasewright_conformance::pg::PgDriver;
use leasewright_conformance::property::{self, PropertyOptions};
use leasewright_conformance::replay::{action_key, Divergence};
use leasewright_conformance::shard::Shard;
use leasewright_conformance::suite::{self, RunOptions};
use leasewright_conformance::{junit, minimize, scenarios, traces};
use leasewright_model::{Config, LeaseModel, Reason, TargetKind};
use serde_json::json;

/// Which traces to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SuiteName {
    /// Exactly one trace per (reachable state, enabled action) of the configuration.
    Cover,
    /// Seeded random walks (`--seed`, `--steps`).
    Random,
    /// The named scenarios of docs/protocol.md §10.
    Scenarios,
    /// Property-based traces (proptest): `--cases` random paths of the model of up to
    /// `--walk-len` steps from `--seed`; a divergent one is shrunk by proptest to a minimal trace.
    Proptest,
    /// All of the above (proptest in shard 1 only: it is one sequential run).
    All,
}

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// The PostgreSQL to run against. Default: $DATABASE_URL, else a throwaway cluster.
    #[arg(long)]
    database_url: Option<String>,
    /// Replay over HTTP against a running `leasewright serve --manual-clock` at this URL instead
    /// of in-process (traces run one at a time: the server's clock is global).
    #[arg(long, value_name = "URL", conflicts_with = "database_url")]
    http: Option<String>,
    /// The operator token of the server given by --http.
    #[arg(long, requires = "http")]
    operator_token: Option<String>,
    /// Which traces to replay.
    #[arg(long, value_enum, default_value_t = SuiteName::All)]
    suite: SuiteName,
    /// Seed of the random walks (printed, so any run can be repeated).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random-walk steps in all.
    #[arg(long, default_value_t = 10_000)]
    steps: usize,
    /// Steps per random walk (for `--suite proptest`: the longest generated trace).
    #[arg(long, default_value_t = 40)]
    walk_len: usize,
    /// `--suite proptest`: how many traces proptest generates and replays.
    #[arg(long, default_value_t = 256)]
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
    /// Run only shard I of N (I from 1).
    #[arg(long, default_value = "1/1")]
    shard: Shard,
    /// Traces replayed at once, each in its own namespace.
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
}

/// One suite's traces, all of one model.
struct Batch {
    model: Arc<LeaseModel>,
    traces: Vec<Generated<LeaseModel>>,
}

pub fn run(args: ConformArgs) -> anyhow::Result<i32> {
    if args.http.is_some() && args.mutants {
        eprintln!(
            "error: --mutants cannot be used with --http: the mutants are compiled into an \
             in-process build of the implementation, and a running server has none"
        );
        return Ok(2);
    }
    if args.http.is_some() && args.operator_token.is_none() {
        eprintln!("error: --http needs --operator-token (the token the server was started with)");
        return Ok(2);
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

async fn conform(args: ConformArgs) -> anyhow::Result<i32> {
    if let (Some(url), Some(token)) = (&args.http, &args.operator_token) {
        let driver = match HttpDriver::connect(url, token).await {
            Ok(driver) => Arc::new(driver),
            Err(error) => {
                eprintln!("error: {error}");
                return Ok(2);
            }
        };
        eprintln!(
            "replaying over HTTP against {} (lease ttl {} ms; one trace at a time)",
            driver.url(),
            driver.lease_ttl_ms()
        );
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
        let batches = if args.suite == SuiteName::Proptest {
            Vec::new()
        } else {
            match generate_reporting(&args) {
                Ok(batches) => batches,
                Err(code) => return Ok(code),
            }
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
        use leasewright_impl::mutants::Mutant;
        Ok(Mutant::ALL
            .into_iter()
            .find(|m| format!("{m:?}") == *name)
            .map(|m| driver.with_mutant(m))
            .ok_or_else(|| {
                let names: Vec<String> = Mutant::ALL.iter().map(|m| format!("{m:?}")).collect();
                format!("no mutant named {name}; the mutants: {}", names.join(", "))
            }))
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = driver;
        unreachable!("a build without mutants re-runs itself from the mutants build first ({name})")
    }
}

/// A driver of the suite: the in-process one or the HTTP one.
trait SuiteDriver: Driver + 'static {
    /// The summary's first line.
    fn heading(&self) -> String;
    /// Options of `conform` that select this driver, for replay commands.
    fn replay_options(&self) -> String;
    /// How many traces may run at once.
    fn parallel(&self, asked: usize) -> usize;
    /// Whether it can replay traces of `model`.
    fn accepts(&self, model: &LeaseModel) -> Result<(), String>;
    /// How many times each of the implementation's SQL statements has run, when the
    /// implementation runs in this process (`None`: it runs in another one).
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>>;
}

impl SuiteDriver for PgDriver {
    fn heading(&self) -> String {
        "conformance: model against PostgreSQL (in-process driver)".into()
    }
    fn replay_options(&self) -> String {
        #[cfg(feature = "mutants")]
        if let Some(mutant) = self.mutant() {
            return format!(" --mutant {mutant:?}");
        }
        String::new()
    }
    fn parallel(&self, asked: usize) -> usize {
        asked
    }
    fn accepts(&self, _: &LeaseModel) -> Result<(), String> {
        Ok(())
    }
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>> {
        Some(leasewright_impl::statement_counts())
    }
}

impl SuiteDriver for HttpDriver {
    fn heading(&self) -> String {
        format!(
            "conformance: model against the HTTP server at {} (HTTP driver)",
            self.url()
        )
    }
    fn replay_options(&self) -> String {
        // The token is never printed.
        format!(" --http {} --operator-token <OPERATOR_TOKEN>", self.url())
    }
    fn parallel(&self, _: usize) -> usize {
        // The server's clock is global: one trace at a time (the driver enforces it anyway).
        1
    }
    fn accepts(&self, model: &LeaseModel) -> Result<(), String> {
        self.tick_ms(model.config.lease_ttl)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>> {
        // The statements run in the server's process.
        None
    }
}

/// The SQL statements a run executed: each statement's executions during the run, every
/// statement listed (`None`: over --http, where they run in the server's process).
type StatementCoverage = Option<Vec<(&'static str, u64)>>;

/// Executions of each statement between two snapshots of [`SuiteDriver::statement_counts`].
fn statement_delta(
    before: Option<Vec<(&'static str, u64)>>,
    after: Option<Vec<(&'static str, u64)>>,
) -> StatementCoverage {
    let (before, after) = (before?, after?);
    Some(
        after
            .into_iter()
            .zip(before)
            .map(|((name, after), (_, before))| (name, after.saturating_sub(before)))
            .collect(),
    )
}

/// Generates the suite and says so; `Err(2)` on bad arguments.
fn generate_reporting(args: &ConformArgs) -> Result<Vec<Batch>, i32> {
    let started = Instant::now();
    let batches = match generate(args) {
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

/// Replays the suite on `driver`, prints the summary, reports the first divergence. `all` runs
/// the property suite after the generated traces (in shard 1 only: it is one sequential run).
async fn run_suite<D: SuiteDriver>(args: &ConformArgs, driver: Arc<D>) -> anyhow::Result<i32> {
    let with_property = match args.suite {
        SuiteName::Proptest => true,
        SuiteName::All => args.shard.index == 1,
        _ => false,
    };
    if with_property && (args.cases == 0 || args.walk_len == 0) {
        eprintln!("error: the proptest suite needs --cases and --walk-len of at least 1");
        return Ok(2);
    }
    if args.suite == SuiteName::Proptest && args.shard != Shard::ALL {
        eprintln!(
            "error: --shard does not apply to --suite proptest (run another --seed on each machine)"
        );
        return Ok(2);
    }
    let batches = if args.suite == SuiteName::Proptest {
        Vec::new()
    } else {
        match generate_reporting(args) {
            Ok(batches) => batches,
            Err(code) => return Ok(code),
        }
    };
    let property_model = Arc::new(LeaseModel::new(args.config()));
    let models = batches
        .iter()
        .map(|b| b.model.as_ref())
        .chain(with_property.then_some(property_model.as_ref()));
    for model in models {
        if let Err(error) = driver.accepts(model) {
            eprintln!("error: {error}");
            return Ok(2);
        }
    }
    let counts_before = driver.statement_counts();
    let mut report = run_batches(args, Arc::clone(&driver), &batches, false, true).await;
    let first_generated = report.divergences.first().cloned();
    let property = if with_property {
        eprintln!(
            "proptest: {} cases of up to {} steps from seed {}",
            args.cases, args.walk_len, args.seed
        );
        let outcome =
            run_property_outcome(args, Arc::clone(&driver), Arc::clone(&property_model), true)
                .await;
        if let Some(reason) = &outcome.aborted {
            eprintln!("error: proptest gave up: {reason}");
            return Ok(2);
        }
        report.traces += outcome.cases;
        report.tally.absorb(&outcome.tally);
        report.cases.extend(outcome.junit.iter().cloned());
        report.divergences.extend(
            outcome
                .failure
                .iter()
                .map(|failure| failure.divergence.clone()),
        );
        report.elapsed += outcome.elapsed;
        Some(outcome)
    } else {
        None
    };
    let statements = statement_delta(counts_before, driver.statement_counts());
    print_summary(
        args,
        &driver.heading(),
        &driver.name(),
        &report,
        &batches,
        &statements,
    );
    if let Some(path) = &args.junit {
        std::fs::write(path, junit::render(&report.cases))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("JUnit report: {}", path.display());
    }
    if let Some(first) = &first_generated {
        report_divergence(args, driver.as_ref(), first, &batches).await?;
        return Ok(1);
    }
    if let Some(failure) = property.as_ref().and_then(|p| p.failure.as_ref()) {
        report_property_failure(args, driver.as_ref(), &property_model, failure)?;
        return Ok(1);
    }
    Ok(0)
}

/// The property suite's options from the command line.
fn property_options(args: &ConformArgs) -> PropertyOptions {
    PropertyOptions {
        seed: args.seed,
        cases: args.cases,
        max_len: args.walk_len,
        ..PropertyOptions::default()
    }
}

/// Prints the property suite's divergence as found and as shrunk by proptest, saves the minimal
/// trace and prints the commands that replay it and generate it again.
fn report_property_failure<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    model: &LeaseModel,
    failure: &property::PropertyFailure,
) -> anyhow::Result<()> {
    eprintln!("{}", failure.original_divergence.render());
    eprintln!(
        "proptest shrank it from {} steps (divergent at step {}) to {} ({} replays); the minimal \
         divergence:\n{}",
        failure.original.steps.len(),
        failure.original_divergence.step,
        failure.minimal.steps.len(),
        failure.shrink_replays,
        failure.divergence.render()
    );
    save_divergent(args, driver, model, &failure.minimal)?;
    eprintln!(
        "generate it again: cargo run --release -- conform{} --suite proptest --seed {} \
         --cases {} --walk-len {}",
        driver.replay_options(),
        args.seed,
        args.cases,
        args.walk_len
    );
    Ok(())
}

/// Runs the property suite on `driver`, with a progress bar if `show_progress`.
async fn run_property_outcome<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    model: Arc<LeaseModel>,
    show_progress: bool,
) -> property::PropertyOutcome {
    let bar = if show_progress {
        ProgressBar::new(u64::from(args.cases))
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} proptest cases, {per_sec}, eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(driver.name());
    let progress = {
        let bar = bar.clone();
        move |done: u64| bar.set_position(done)
    };
    let outcome = property::run(driver, model, property_options(args), progress).await;
    bar.finish_and_clear();
    outcome
}

/// Saves `trace` (of `model`) where divergent traces go and prints how to replay it.
fn save_divergent<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.traces)
        .with_context(|| format!("creating {}", args.traces.display()))?;
    let path = args.traces.join(format!("{}.itf.json", trace.name));
    std::fs::write(&path, traces::to_itf(model, trace))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("saved trace: {}", path.display());
    eprintln!(
        "replay it:   cargo run --release -- conform{} --replay {}",
        driver.replay_options(),
        path.display()
    );
    Ok(())
}

/// Connects to `--database-url`, $DATABASE_URL, or a throwaway cluster (kept alive by the
/// returned guard).
async fn connect(
    args: &ConformArgs,
) -> anyhow::Result<(
    sqlx::PgPool,
    Option<leasewright_impl::database::TestDatabase>,
)> {
    let url = args
        .database_url
        .clone()
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()));
    let (url, guard) = match url {
        Some(url) => (url, None),
        None => {
            eprintln!(
                "no --database-url or DATABASE_URL: starting a throwaway PostgreSQL cluster \
                 (removed when this command exits)"
            );
            let db = leasewright_impl::database::TestDatabase::create().await?;
            (db.url().to_string(), Some(db))
        }
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections((args.parallel as u32).saturating_mul(2).max(4))
        .connect(&url)
        .await
        .with_context(|| "connecting to PostgreSQL (check --database-url)".to_string())?;
    leasewright_impl::Store::from_pool(
        pool.clone(),
        Arc::new(leasewright_impl::SystemClock),
        leasewright_impl::StoreConfig::default(),
    )
    .await
    .context("applying the implementation's migrations")?;
    Ok((pool, guard))
}

/// The configuration the transition cover runs on by default: the suite's configuration (two
/// runners, the outsider, two attempts, the fenced target) without disconnects and with one-tick
/// leases. Its cover is 16,752 traces (208,046 steps), which replays in minutes; the cover of the
/// model's default configuration is 110,489 traces (1.9 million steps). The random walks and the
/// scenarios run on the full configuration, disconnects and two-tick leases included.
pub fn cover_config(base: &Config) -> Config {
    Config {
        disconnects: false,
        lease_ttl: 1,
        ..base.clone()
    }
}

fn generate(args: &ConformArgs) -> Result<Vec<Batch>, String> {
    let config = args.config();
    let model = Arc::new(LeaseModel::new(config));
    let mut batches = Vec::new();
    let wants = |s: SuiteName| args.suite == s || args.suite == SuiteName::All;
    if wants(SuiteName::Scenarios) {
        for (model, trace) in scenarios::all()? {
            batches.push(Batch {
                model: Arc::new(model),
                traces: vec![trace],
            });
        }
    }
    if wants(SuiteName::Cover) {
        let cover_model = if args.cover_full {
            Arc::clone(&model)
        } else {
            Arc::new(LeaseModel::new(cover_config(&model.config)))
        };
        let traces = transition_cover((*cover_model).clone(), true);
        batches.push(Batch {
            model: cover_model,
            traces,
        });
    }
    if wants(SuiteName::Random) {
        let traces = random_walks(model.as_ref(), args.seed, args.steps, args.walk_len);
        batches.push(Batch {
            model: Arc::clone(&model),
            traces,
        });
    }
    // Shard by position in the whole, stable list.
    let mut position = 0usize;
    for batch in &mut batches {
        batch.traces.retain(|_| {
            let keep = args.shard.contains(position);
            position += 1;
            keep
        });
    }
    batches.retain(|b| !b.traces.is_empty());
    Ok(batches)
}

async fn run_batches<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    batches: &[Batch],
    stop_at_first: bool,
    show_progress: bool,
) -> suite::Outcome {
    let total: u64 = batches.iter().map(|b| b.traces.len() as u64).sum();
    let bar = if show_progress {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} traces, {per_sec}, eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(driver.name());
    let mut all = suite::Outcome::default();
    let options = RunOptions {
        parallel: driver.parallel(args.parallel),
        stop_at_first,
    };
    let started = Instant::now();
    for batch in batches {
        let offset = bar.position();
        let progress = {
            let bar = bar.clone();
            move |done: u64| bar.set_position(offset + done)
        };
        let outcome = suite::run(
            Arc::clone(&driver),
            Arc::clone(&batch.model),
            batch.traces.clone(),
            &options,
            progress,
        )
        .await;
        all.traces += outcome.traces;
        all.tally.absorb(&outcome.tally);
        all.divergences.extend(outcome.divergences);
        all.cases.extend(outcome.cases);
        if stop_at_first && !all.divergences.is_empty() {
            break;
        }
    }
    bar.finish_and_clear();
    all.divergences.sort_by_key(|d| (d.step, d.trace.clone()));
    all.elapsed = started.elapsed();
    all
}

fn print_summary(
    args: &ConformArgs,
    heading: &str,
    driver: &str,
    report: &suite::Outcome,
    batches: &[Batch],
    statements: &StatementCoverage,
) {
    let seconds = report.elapsed.as_secs_f64().max(1e-9);
    let reasons_hit: BTreeSet<String> = report
        .tally
        .verdicts
        .keys()
        .filter_map(|k| k.strip_prefix("rejected:").map(str::to_string))
        .collect();
    let reasons_never: Vec<&str> = Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !reasons_hit.contains(*r))
        .collect();
    // The kinds the generated traces contain (the property suite keeps no traces: the kinds its
    // agreeing cases exercised).
    let action_kinds: BTreeSet<String> = batches
        .iter()
        .flat_map(|b| {
            b.traces
                .iter()
                .flat_map(|t| t.steps.iter().map(|(a, _)| action_key(a)))
        })
        .chain(report.tally.actions.keys().cloned())
        .collect();
    let statements_never: Option<Vec<&str>> = statements.as_ref().map(|counts| {
        counts
            .iter()
            .filter(|(_, n)| *n == 0)
            .map(|(name, _)| *name)
            .collect()
    });
    if args.json {
        let doc = json!({
            "driver": driver,
            "suite": format!("{:?}", args.suite).to_lowercase(),
            "seed": args.seed,
            "shard": args.shard.to_string(),
            "proptest_cases": match args.suite {
                SuiteName::Proptest => Some(args.cases),
                SuiteName::All if args.shard.index == 1 => Some(args.cases),
                _ => None,
            },
            "config": args.config(),
            "traces": report.traces,
            "steps": report.tally.steps,
            "seconds": report.elapsed.as_secs_f64(),
            "traces_per_second": report.traces as f64 / seconds,
            "steps_per_second": report.tally.steps as f64 / seconds,
            "verdicts": report.tally.verdicts,
            "actions": report.tally.actions,
            "reasons_never_hit": reasons_never,
            "sql_statements": statements.as_ref().map(|counts| json!({
                "hit": counts.iter().filter(|(_, n)| *n > 0).count(),
                "total": counts.len(),
                "never_hit": statements_never,
                "executions": counts.iter().map(|(name, n)| (name.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            })).unwrap_or_else(|| json!("not available over --http")),
            "divergences": report.divergences.len(),
            "first_divergence": report.divergences.first().map(Divergence::render),
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        return;
    }
    println!("{heading}");
    println!("  configuration   {}", describe_config(&args.config()));
    if let Some(cover) = batches
        .iter()
        .find(|b| b.traces.iter().any(|t| t.generator == "cover"))
    {
        println!("  cover config    {}", describe_config(&cover.model.config));
    }
    if args.suite == SuiteName::Proptest {
        println!(
            "  suite           Proptest (seed {}, {} cases of up to {} steps)",
            args.seed, args.cases, args.walk_len
        );
    } else if args.suite == SuiteName::All && args.shard.index == 1 {
        println!(
            "  suite           All (seed {}, shard {}; proptest: {} cases of up to {} steps)",
            args.seed, args.shard, args.cases, args.walk_len
        );
    } else {
        println!(
            "  suite           {:?} (seed {}, shard {})",
            args.suite, args.seed, args.shard
        );
    }
    println!("  traces          {}", report.traces);
    println!("  steps           {}", report.tally.steps);
    println!(
        "  time            {:.1} s ({:.0} traces/s, {:.0} steps/s)",
        report.elapsed.as_secs_f64(),
        report.traces as f64 / seconds,
        report.tally.steps as f64 / seconds
    );
    println!("  verdicts");
    print_counts(&report.tally.verdicts);
    println!(
        "  transitions by action kind ({} kinds)",
        action_kinds.len()
    );
    print_counts(&report.tally.actions);
    if reasons_never.is_empty() {
        println!("  rejection reasons never hit: none");
    } else {
        println!(
            "  rejection reasons never hit: {}",
            reasons_never.join(", ")
        );
    }
    match (statements, &statements_never) {
        (Some(counts), Some(never)) => {
            println!(
                "  SQL statements hit: {}/{}",
                counts.len() - never.len(),
                counts.len()
            );
            if never.is_empty() {
                println!("  SQL statements never hit: none");
            } else {
                println!("  SQL statements never hit: {}", never.join(", "));
            }
        }
        _ => println!(
            "  SQL statement coverage: not available over --http (the statements run in the \
             server's process)"
        ),
    }
    println!("  divergences     {}", report.divergences.len());
}

fn print_counts(counts: &std::collections::BTreeMap<String, u64>) {
    for (k, v) in counts {
        println!("    {k:<28} {v:>9}");
    }
}

fn describe_config(c: &Config) -> String {
    format!(
        "{} jobs, {} runners{}, {} attempts/job, lease ttl {} ticks, {} target",
        c.jobs,
        c.runners,
        if c.outsider { " + outsider" } else { "" },
        c.attempts_per_job,
        c.lease_ttl,
        c.target
    )
}

/// Shrinks the first divergence, saves it, and prints how to replay it.
async fn report_divergence<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    first: &Divergence,
    batches: &[Batch],
) -> anyhow::Result<()> {
    let (batch, trace) = batches
        .iter()
        .find_map(|b| {
            b.traces
                .iter()
                .find(|t| t.name == first.trace)
                .map(|t| (b, t))
        })
        .context("the divergent trace is in the suite")?;
    eprintln!("{}", first.render());
    let (shrunk, divergence) = minimize::shrink(&batch.model, driver, trace).await;
    if shrunk.steps.len() < trace.steps.len() {
        eprintln!(
            "shrunk from {} to {} steps; the minimal divergence:\n{}",
            trace.steps.len(),
            shrunk.steps.len(),
            divergence.map(|d| d.render()).unwrap_or_default()
        );
    }
    save_divergent(args, driver, &batch.model, &shrunk)
}

async fn replay_file<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    file: &PathBuf,
) -> anyhow::Result<i32> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error: cannot read {}: {error}", file.display());
            return Ok(2);
        }
    };
    let (model, trace) = match traces::from_itf(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!(
                "error: {} is not a trace of this model: {error}",
                file.display()
            );
            return Ok(2);
        }
    };
    if let Err(error) = driver.accepts(&model) {
        eprintln!("error: {error}");
        return Ok(2);
    }
    let model = Arc::new(model);
    let batches = [Batch {
        model,
        traces: vec![trace],
    }];
    let report = run_batches(args, driver, &batches, true, false).await;
    match report.divergences.first() {
        Some(d) => {
            println!("{}", d.render());
            Ok(1)
        }
        None => {
            println!(
                "{}: {} steps, the implementation agrees with the model",
                file.display(),
                report.tally.steps
            );
            Ok(0)
        }
    }
}

async fn mutants(args: &ConformArgs, pool: sqlx::PgPool, batches: &[Batch]) -> anyhow::Result<i32> {
    #[cfg(feature = "mutants")]
    {
        use leasewright_impl::mutants::Mutant;
        if args.suite == SuiteName::Proptest {
            return property_mutants(args, pool).await;
        }
        println!("{:<34} {:<9} first failing trace", "mutant", "verdict");
        let mut survived = 0;
        // The unmutated implementation first: a mutant only counts as killed if the real one passes.
        let clean = run_batches(
            args,
            Arc::new(PgDriver::new(pool.clone()).await?),
            batches,
            true,
            true,
        )
        .await;
        if let Some(d) = clean.divergences.first() {
            eprintln!(
                "the unmutated implementation already diverges:\n{}",
                d.render()
            );
            return Ok(1);
        }
        for mutant in Mutant::ALL {
            let driver = Arc::new(PgDriver::new(pool.clone()).await?.with_mutant(mutant));
            let report = run_batches(args, driver, batches, true, true).await;
            let name = format!("{mutant:?}");
            match report.divergences.first() {
                Some(d) => println!(
                    "{name:<34} {:<9} {} (step {}: {})",
                    "killed",
                    d.trace,
                    d.step,
                    d.differences.first().map(String::as_str).unwrap_or("")
                ),
                None => {
                    survived += 1;
                    println!("{name:<34} {:<9} -", "SURVIVED");
                }
            }
        }
        Ok(mutants_total(survived))
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = (args, pool, batches);
        unreachable!("a build without mutants re-runs itself from the mutants build first")
    }
}

/// `--mutants --suite proptest`: the property suite against the unmutated implementation, then
/// against each mutant; a kill is reported with the minimal trace proptest shrank it to.
#[cfg(feature = "mutants")]
async fn property_mutants(args: &ConformArgs, pool: sqlx::PgPool) -> anyhow::Result<i32> {
    use leasewright_impl::mutants::Mutant;
    if args.shard != Shard::ALL || args.cases == 0 || args.walk_len == 0 {
        eprintln!(
            "error: --suite proptest takes no --shard, and --cases and --walk-len of at least 1"
        );
        return Ok(2);
    }
    let model = Arc::new(LeaseModel::new(args.config()));
    let clean = run_property_outcome(
        args,
        Arc::new(PgDriver::new(pool.clone()).await?),
        Arc::clone(&model),
        true,
    )
    .await;
    if let Some(failure) = &clean.failure {
        eprintln!(
            "the unmutated implementation already diverges:\n{}",
            failure.divergence.render()
        );
        return Ok(1);
    }
    println!(
        "{:<34} {:<9} minimal trace (proptest, seed {}, {} cases)",
        "mutant", "verdict", args.seed, args.cases
    );
    let mut survived = 0;
    for mutant in Mutant::ALL {
        let driver = Arc::new(PgDriver::new(pool.clone()).await?.with_mutant(mutant));
        let outcome = run_property_outcome(args, driver, Arc::clone(&model), true).await;
        let name = format!("{mutant:?}");
        match &outcome.failure {
            Some(failure) => println!(
                "{name:<34} {:<9} {} ({} steps, shrunk from {}; step {}: {})",
                "killed",
                failure.minimal.name,
                failure.minimal.steps.len(),
                failure.original.steps.len(),
                failure.divergence.step,
                failure
                    .divergence
                    .differences
                    .first()
                    .map(String::as_str)
                    .unwrap_or("")
            ),
            None => {
                survived += 1;
                println!("{name:<34} {:<9} -", "SURVIVED");
            }
        }
    }
    Ok(mutants_total(survived))
}

/// Prints the last line of a mutant table; the exit code: 0 when every mutant was killed.
#[cfg(feature = "mutants")]
fn mutants_total(survived: usize) -> i32 {
    use leasewright_impl::mutants::Mutant;
    println!(
        "{} mutants, {} killed, {survived} survived",
        Mutant::ALL.len(),
        Mutant::ALL.len() - survived
    );
    if survived == 0 {
        0
    } else {
        1
    }
}

/// On a normal build, `--mutants` re-runs the same command from a separate build with the
/// `mutants` feature (in target/mutants, so the production binary is never rebuilt with it).
#[cfg(not(feature = "mutants"))]
fn rerun_with_mutants() -> anyhow::Result<i32> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace root")?
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "mutants live in a separate build so that the production binary never contains one; \
         building it in {} (the first time takes a few minutes)",
        root.join("target/mutants").display()
    );
    let status = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "--release",
            "--features",
            "mutants",
            "--bin",
            "leasewright",
        ])
        .arg("--target-dir")
        .arg(root.join("target/mutants"))
        .arg("--")
        .args(std::env::args_os().skip(1))
        .status()
        .context("running cargo to build the mutants build (is cargo on PATH?)")?;
    Ok(status.code().unwrap_or(2))
}
