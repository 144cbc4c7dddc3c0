//! `leasewright bench peers`: Leasewright beside the queues people run instead, on one
//! PostgreSQL, in one run.
//!
//! The contenders: Leasewright in-process batched (agents of K slots each claiming their free
//! slots in one batch claim and sending the waiting results in one batch result, as the runner
//! agent uses them: [`agents`]), in-process single (claim -> result), over HTTP with real
//! `leasewright runner` processes running the command `true` ([`runners`]), over HTTP with runner
//! clients in this process (no command: the protocol's HTTP cost alone), the fenced floor and
//! the bare queue as yardsticks ([`crate::floor`], [`crate::baseline`]), a River-shaped table
//! ([`river`]), and the peer libraries graphile-worker, pg-boss, pgqueuer and procrastinate,
//! each through its own worker API with a no-op handler ([`external`]).
//!
//! Every contender gets the same slot: its queue topped up to `max(depth, jobs)` queued jobs
//! (timed apart: the enqueue rate), then `workers` concurrent workers take and complete `jobs`
//! jobs (or stop at `max_seconds`); the WAL insert position is read before and after the work,
//! and where `pg_walinspect` can be created the records between are counted (heap row versions,
//! index entries). One unrecorded warm-up slot of each, then `rounds` rounds, the contenders in
//! the same order every round, so the machine's noise falls on all of them alike: compare only
//! the ratios of one run, round by round.

pub mod agents;
pub mod external;
pub mod river;
pub mod runners;

use crate::claims::divide;
use crate::contender::{Contender, Op};
use crate::fixture::{server_settings, uses_database_url, BenchError, Fixture};
use crate::measure::percentile;
use leasewright_impl::database::TestDatabase;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `leasewright bench peers` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Jobs each contender completes in each round (the same for all).
    pub jobs: u64,
    /// Rounds of every contender.
    pub rounds: usize,
    /// Concurrent workers (job slots) of every contender.
    pub workers: usize,
    /// Jobs queued when a slot starts (at least `jobs`).
    pub depth: u64,
    /// Bytes of payload per peer job (Leasewright's job row carries its own fields, about as
    /// many bytes).
    pub payload_bytes: usize,
    /// The batched contenders' K: jobs per batch claim (and per batch result); the `workers`
    /// job slots are split over `workers / K` agents.
    pub batch: usize,
    /// A slot's work stops after this many seconds even if fewer jobs were done.
    pub max_seconds: u64,
    /// The contenders to run (`--only`; empty: all).
    pub only: Vec<String>,
    /// Where the peers are installed.
    pub cache_dir: PathBuf,
    /// The `leasewright` executable the `leasewright-runners` contender starts as `leasewright
    /// runner` (`None`: that contender is skipped).
    pub runner_exe: Option<PathBuf>,
}

impl Options {
    /// Why the options cannot be measured.
    pub fn invalid(&self) -> Option<String> {
        if self.jobs == 0 || self.rounds == 0 || self.workers == 0 || self.batch == 0 {
            return Some("--jobs, --rounds, --workers and --batch must be positive".into());
        }
        if self.max_seconds == 0 {
            return Some("--max-seconds must be positive".into());
        }
        let known = names();
        for name in &self.only {
            if !known.contains(&name.as_str()) {
                return Some(format!(
                    "--only: no contender {name:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        None
    }

    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|n| n == name)
    }
}

/// The cache directory peers are installed into by default: `$XDG_CACHE_HOME/leasewright/peers`,
/// else `~/.cache/leasewright/peers`.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("leasewright").join("peers")
}

/// Every contender's `--only` name, in the order they run in a round.
pub fn names() -> Vec<&'static str> {
    let mut names = vec![
        BATCHED,
        SINGLE,
        RUNNERS,
        HTTP_CLIENTS,
        "fenced-floor",
        "bare-queue",
        "river-shaped",
    ];
    names.extend(external::PEERS.iter().map(|p| p.name));
    names
}

/// The warm-up slot's jobs and seconds (at most).
const WARM_UP_JOBS: u64 = 500;
const WARM_UP_SECONDS: u64 = 3;

const BATCHED: &str = "leasewright-batched";
const SINGLE: &str = "leasewright";
const RUNNERS: &str = "leasewright-runners";
const HTTP_CLIENTS: &str = "leasewright-http-clients";

/// One contender of this benchmark.
#[derive(Debug)]
enum Who {
    /// Leasewright: `workers / K` agents of K slots, batch claims and batch results ([`agents`]).
    Batched,
    /// Leasewright claim -> result, one job at a time per worker (in-process).
    Single,
    /// Leasewright over HTTP: `leasewright runner` processes running `true`.
    Runners(Box<runners::Runners>),
    /// Leasewright claim -> result over HTTP, runner clients in this process.
    HttpClients,
    /// Yardstick: the fenced floor's claim -> result.
    Floor,
    /// Yardstick: the bare queue's claim -> complete.
    Bare,
    /// River's table and statements, batched like `Batched`.
    River,
    /// A peer library, installed, with its own database.
    Peer(Box<PeerRun>),
}

#[derive(Debug)]
struct PeerRun {
    installed: external::Installed,
    database: TestDatabase,
    version: String,
}

impl Who {
    fn name(&self) -> String {
        match self {
            Who::Batched => BATCHED.into(),
            Who::Single => SINGLE.into(),
            Who::Runners(_) => RUNNERS.into(),
            Who::HttpClients => HTTP_CLIENTS.into(),
            Who::Floor => "fenced-floor".into(),
            Who::Bare => "bare-queue".into(),
            Who::River => "river-shaped".into(),
            Who::Peer(p) => p.installed.peer.name.into(),
        }
    }

    fn is_peer(&self) -> bool {
        matches!(self, Who::Peer(_))
    }
}

/// What one slot measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Slot {
    /// Jobs completed.
    pub done: u64,
    /// Seconds of work (the contender's own clock for a peer: from starting its worker until it
    /// stopped gracefully after the last job).
    pub seconds: f64,
    /// Jobs enqueued before the work, and how long that took.
    pub enqueued: u64,
    pub enqueue_seconds: f64,
    /// WAL bytes written during the work.
    pub wal_bytes: u64,
    /// Heap row versions written during the work (insert, update, HOT update, delete), from
    /// `pg_walinspect`.
    pub rows: Option<u64>,
    /// Index entries inserted during the work (B-tree and GIN), from `pg_walinspect`.
    pub index_entries: Option<u64>,
    /// Claim -> completion per job, microseconds (empty where the contender does not show it).
    #[serde(skip)]
    pub latencies_us: Vec<u32>,
}

/// One contender's row.
#[derive(Clone, Debug, Serialize)]
pub struct Line {
    pub contender: String,
    /// The library's version, or what the row is.
    pub version: String,
    /// How it was driven (settings that shape its rate).
    pub settings: String,
    /// Jobs per second over all rounds (jobs done / seconds of work).
    pub jobs_per_second: f64,
    pub per_round: Vec<f64>,
    /// Enqueue jobs per second (measured apart from the work).
    pub enqueue_per_second: f64,
    /// Claim -> completion, where observable.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub wal_bytes_per_job: f64,
    pub rows_per_job: Option<f64>,
    pub index_entries_per_job: Option<f64>,
    /// Jobs done in all (at most the rounds' jobs plus the last batches in flight).
    pub jobs_done: u64,
    /// Rounds that stopped at `max_seconds` before `jobs` were done.
    pub capped_rounds: usize,
    /// This row's jobs/s over the fastest peer's, overall and round by round.
    pub ratio_to_fastest_peer: Option<f64>,
    pub ratio_per_round: Vec<f64>,
}

/// One queue's first fill.
#[derive(Clone, Debug, Serialize)]
pub struct Fill {
    /// The contenders that share the queue (Leasewright's rows share one).
    pub contender: String,
    pub jobs: u64,
    pub seconds: f64,
}

impl std::fmt::Display for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = divide(self.jobs as f64, self.seconds);
        let (contender, jobs, seconds) = (&self.contender, self.jobs, self.seconds);
        write!(
            f,
            "{contender} {jobs} jobs in {seconds:.1} s ({rate:.0} jobs/s)"
        )
    }
}

fn fill(who: &Who, jobs: u64, seconds: f64) -> Fill {
    let fill = Fill {
        contender: who.name(),
        jobs,
        seconds,
    };
    eprintln!("leasewright bench peers: queue filled: {fill}");
    fill
}

/// A goal of issue 35, checked on this run.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub name: String,
    pub value: f64,
    pub per_round: Vec<f64>,
    pub target: f64,
    /// `value <= target` rather than `>=`.
    pub at_most: bool,
    pub met: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub options: Options,
    /// `DATABASE_URL` or `throwaway cluster`.
    pub database: String,
    pub settings: Vec<(String, String)>,
    /// Whether rows and index entries were counted (`pg_walinspect`).
    pub walinspect: bool,
    /// The fastest peer library of the run (by overall jobs/s), the ratios' denominator.
    pub fastest_peer: Option<String>,
    /// Each queue's first fill to the run's depth, before the warm-up (not in any line's
    /// enqueue rate).
    pub fills: Vec<Fill>,
    pub lines: Vec<Line>,
    pub goals: Vec<Goal>,
    /// Contenders that could not run, and why.
    pub skipped: Vec<(String, String)>,
    pub notes: Vec<String>,
    /// `uptime`'s load averages at the start and the end of the run.
    pub load: Vec<String>,
}

/// Measures. Uses `DATABASE_URL` (fresh databases on that server) or a throwaway cluster.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    if let Some(problem) = options.invalid() {
        return Err(BenchError::Invalid(problem));
    }
    let load_before = load_average();
    let wants_http = options.wants(HTTP_CLIENTS) || options.wants(RUNNERS);
    // The fixture's pool serves the in-process contenders (one connection per worker); the HTTP
    // control plane has its own (workers + 1); each peer opens its own.
    let also = if wants_http {
        options.workers as u32 + 1
    } else {
        0
    };
    let mut fixture = Fixture::with_pool(options.workers, options.workers, also).await?;
    let result = measure(&mut fixture, &options).await;
    let stopped = fixture.stop_http().await;
    fixture.close().await;
    let mut report = result?;
    stopped?;
    report.load = vec![load_before, load_average()];
    Ok(report)
}

async fn measure(fixture: &mut Fixture, options: &Options) -> Result<Report, BenchError> {
    let mut skipped = Vec::new();
    let mut whos = Vec::new();
    if options.wants(HTTP_CLIENTS) || options.wants(RUNNERS) {
        fixture.start_http(1).await?;
    }
    for (name, who) in [
        (BATCHED, Some(Who::Batched)),
        (SINGLE, Some(Who::Single)),
        (RUNNERS, None),
        (HTTP_CLIENTS, Some(Who::HttpClients)),
        ("fenced-floor", Some(Who::Floor)),
        ("bare-queue", Some(Who::Bare)),
        ("river-shaped", Some(Who::River)),
    ] {
        if !options.wants(name) {
            continue;
        }
        match who {
            Some(who) => whos.push(who),
            None => match &options.runner_exe {
                Some(exe) => {
                    let runners =
                        runners::Runners::prepare(fixture, exe, agents(options), batch_k(options))
                            .await?;
                    whos.push(Who::Runners(Box::new(runners)));
                }
                None => {
                    let why = "no leasewright executable to run `leasewright runner` with";
                    eprintln!("leasewright bench peers: skipping {RUNNERS}: {why}");
                    skipped.push((RUNNERS.to_string(), why.to_string()));
                }
            },
        }
    }
    river::create(&fixture.pool).await?;
    let walinspect = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .execute(&fixture.pool)
        .await
        .is_ok();
    for peer in external::PEERS {
        if !options.wants(peer.name) {
            continue;
        }
        match prepare_peer(peer, options).await {
            Ok(run) => whos.push(Who::Peer(Box::new(run))),
            Err(why) => {
                eprintln!("leasewright bench peers: skipping {}: {why}", peer.name);
                skipped.push((peer.name.to_string(), why));
            }
        }
    }
    if whos.is_empty() {
        return Err(BenchError::Invalid("no contender could run".into()));
    }
    let settings = server_settings(&fixture.pool).await?;
    let depth = options.depth.max(options.jobs);

    // Everything queued once, vacuumed and analyzed, then an unrecorded warm-up slot of each.
    // The first fill of each queue is shown (at a depth of 10^6 it is most of a run's time).
    let mut fills = Vec::new();
    for who in &whos {
        if !who.is_peer() {
            let (jobs, seconds) = enqueue(fixture, who, depth, options).await?;
            if jobs > 0 {
                fills.push(fill(who, jobs, seconds));
            }
        }
    }
    fixture.vacuum().await?;
    sqlx::query("VACUUM (ANALYZE) leasewright_bench_river.river_job")
        .execute(&fixture.pool)
        .await?;
    // A short warm-up (plans cached, pages in memory, the peers' runtimes' caches): a few
    // hundred jobs or 3 s, whichever comes first.
    let warm_up = Options {
        max_seconds: options.max_seconds.min(WARM_UP_SECONDS),
        ..options.clone()
    };
    for who in &whos {
        eprintln!("leasewright bench peers: warm-up: {}", who.name());
        let (s, _) = slot(
            fixture,
            who,
            &warm_up,
            options.jobs.min(WARM_UP_JOBS),
            depth,
            false,
        )
        .await?;
        if who.is_peer() {
            fills.push(fill(who, s.enqueued, s.enqueue_seconds));
        }
    }
    fixture.analyze().await?;

    let mut measured: Vec<Vec<Slot>> = vec![Vec::new(); whos.len()];
    let mut settings_of: Vec<String> = vec![String::new(); whos.len()];
    for round in 0..options.rounds {
        for (i, who) in whos.iter().enumerate() {
            let (s, how) = slot(fixture, who, options, options.jobs, depth, walinspect).await?;
            eprintln!(
                "leasewright bench peers: round {}/{}: {:<20} {:>8.0} jobs/s ({} jobs in {:.2} s), \
                 WAL {:.0} B/job{}",
                round + 1,
                options.rounds,
                who.name(),
                divide(s.done as f64, s.seconds),
                s.done,
                s.seconds,
                divide(s.wal_bytes as f64, s.done as f64),
                s.rows
                    .map(|r| format!(", {:.1} rows/job", divide(r as f64, s.done as f64)))
                    .unwrap_or_default()
            );
            settings_of[i] = how;
            measured[i].push(s);
        }
    }

    let mut lines: Vec<Line> = whos
        .iter()
        .zip(&measured)
        .zip(&settings_of)
        .map(|((who, slots), how)| line(who, slots, how, options.jobs))
        .collect();
    let fastest = whos
        .iter()
        .zip(&lines)
        .filter(|(who, _)| who.is_peer())
        .max_by(|a, b| a.1.jobs_per_second.total_cmp(&b.1.jobs_per_second))
        .map(|(_, l)| l.clone());
    if let Some(fastest) = &fastest {
        for l in &mut lines {
            l.ratio_to_fastest_peer = Some(divide(l.jobs_per_second, fastest.jobs_per_second));
            l.ratio_per_round = l
                .per_round
                .iter()
                .zip(&fastest.per_round)
                .map(|(a, b)| divide(*a, *b))
                .collect();
        }
    }
    let goals = goals(&lines);
    let mut notes = vec![
        "jobs/s: jobs completed / seconds of work, enqueue measured apart (Leasewright, the \
         yardsticks and the River-shaped table enqueue with one bulk INSERT; the peers with \
         their own bulk API)"
            .to_string(),
        "p50/p99: claim -> completion per job, seen by the in-process contenders (a batch's jobs \
         share their batch's time); the peers' APIs do not show when a job was claimed or its \
         completion written, so theirs are not shown"
            .to_string(),
        "a peer's seconds are its own clock, from starting its worker until it stopped \
         gracefully after the last job (its completions written); its process start, imports and \
         connections are not counted"
            .to_string(),
        format!(
            "{BATCHED}: {agents} agents x {k} slots, as the runner agent drives the protocol: \
             each agent's claim loop claims as many jobs as slots are free in one batch claim, \
             and its result sender sends the results waiting in one batch result, at the same \
             time on another connection (no-op work, no HTTP)",
            agents = agents(options),
            k = batch_k(options)
        ),
        format!(
            "river-shaped: {agents} agents x K={k} (a fetch of K, no-op work, a completion of K)",
            agents = agents(options),
            k = batch_k(options)
        ),
        format!(
            "{RUNNERS}: {agents} `leasewright runner` processes x --capacity {k} against one \
             control plane in this process (the server of `leasewright serve`), each job running \
             the command `{command}`: its jobs/s include, per job, the source's download, \
             verification and extraction and the command's process spawn, and the runners' start \
             and exit once per slot; its p50/p99 are the server's claim -> result receipt times",
            agents = agents(options),
            k = batch_k(options),
            command = runners::COMMAND
        ),
        format!(
            "{HTTP_CLIENTS}: {} runner clients in this process, claim -> result over loopback \
             against the same control plane, no command: the HTTP protocol's cost alone",
            options.workers
        ),
        "bare-queue carries no payload; the fenced floor and Leasewright carry their job rows"
            .to_string(),
    ];
    if uses_database_url() {
        notes.push(
            "WAL and rows are cluster-wide: on a shared server they include other databases' \
             writes (a private throwaway cluster, the default, has none)"
                .into(),
        );
    }
    if !walinspect {
        notes.push("pg_walinspect could not be created: rows and index entries not counted".into());
    }
    Ok(Report {
        options: options.clone(),
        database: if uses_database_url() {
            "DATABASE_URL".into()
        } else {
            "throwaway cluster".into()
        },
        settings,
        walinspect,
        fastest_peer: fastest.map(|l| l.contender),
        fills,
        lines,
        goals,
        skipped,
        notes,
        load: Vec::new(),
    })
}

/// Installs a peer, gives it a database of its own on the same server and runs its setup.
async fn prepare_peer(peer: external::Peer, options: &Options) -> Result<PeerRun, String> {
    let installed = peer.install(&options.cache_dir).await?;
    let database = TestDatabase::create()
        .await
        .map_err(|e| format!("no database for it: {e}"))?;
    let phase = peer_phase(&database, options, options.jobs, 0);
    let answer = installed.run("setup", &phase).await?;
    Ok(PeerRun {
        installed,
        version: answer.version.unwrap_or_else(|| peer.version.to_string()),
        database,
    })
}

fn peer_phase(
    database: &TestDatabase,
    options: &Options,
    jobs: u64,
    depth: u64,
) -> external::Phase {
    external::Phase {
        dsn: external::peer_dsn(database.url()),
        jobs,
        depth: depth.saturating_sub(jobs),
        workers: options.workers,
        payload_bytes: options.payload_bytes,
        max_seconds: options.max_seconds,
    }
}

fn batch_k(options: &Options) -> usize {
    options.batch.min(options.workers).max(1)
}

fn agents(options: &Options) -> usize {
    (options.workers / batch_k(options)).max(1)
}

/// Tops an in-process contender's queue up to `depth`: the jobs enqueued and the seconds.
async fn enqueue(
    fixture: &Fixture,
    who: &Who,
    depth: u64,
    options: &Options,
) -> Result<(u64, f64), BenchError> {
    let depth = depth as i64;
    let started = Instant::now();
    let enqueued = match who {
        Who::Batched | Who::Single | Who::Runners(_) | Who::HttpClients | Who::Floor => {
            let missing = (depth - fixture.queued().await?).max(0);
            fixture.load_queued(missing).await?;
            missing
        }
        Who::Bare => {
            let have: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM leasewright_bench.bare_queue WHERE state = 0",
            )
            .fetch_one(&fixture.pool)
            .await?;
            crate::baseline::fill_bare_queue(&fixture.pool, depth).await?;
            (depth - have).max(0)
        }
        Who::River => river::top_up(&fixture.pool, depth, options.payload_bytes).await?,
        Who::Peer(_) => 0,
    };
    Ok((enqueued as u64, started.elapsed().as_secs_f64()))
}

/// One slot of `who`: enqueue to `depth`, then `jobs` jobs of work, with the WAL written.
async fn slot(
    fixture: &Fixture,
    who: &Who,
    options: &Options,
    jobs: u64,
    depth: u64,
    count_records: bool,
) -> Result<(Slot, String), BenchError> {
    let mut s = Slot::default();
    let how;
    if let Who::Peer(peer) = who {
        let phase = peer_phase(&peer.database, options, jobs, depth);
        let enqueued = peer
            .installed
            .run("enqueue", &phase)
            .await
            .map_err(BenchError::Invalid)?;
        s.enqueued = enqueued.enqueued.unwrap_or(0);
        s.enqueue_seconds = enqueued.seconds.unwrap_or(0.0);
        let before = fixture.wal_lsn().await?;
        let worked = peer
            .installed
            .run("work", &phase)
            .await
            .map_err(BenchError::Invalid)?;
        let end = fixture.wal_lsn().await?;
        s.done = worked.done.unwrap_or(0);
        s.seconds = worked.seconds.unwrap_or(0.0);
        how = worked.settings.unwrap_or_default();
        s.wal_bytes = fixture.wal_bytes_since(&before).await?;
        if count_records {
            (s.rows, s.index_entries) = records(fixture, &before, &end).await?;
        }
        return Ok((s, how));
    }
    (s.enqueued, s.enqueue_seconds) = enqueue(fixture, who, depth, options).await?;
    let max = Duration::from_secs(options.max_seconds);
    if let Who::Runners(runners) = who {
        let (processes, capacity) = runners.shape();
        how = format!(
            "{processes} `leasewright runner` processes x --capacity {capacity}, command `{}`",
            runners::COMMAND
        );
        let before = fixture.wal_lsn().await?;
        let done = runners.slot(fixture, jobs, max, count_records).await?;
        s.done = done.jobs;
        s.seconds = done.seconds;
        s.latencies_us = done.latencies_us;
        return work_written(fixture, s, &before, count_records)
            .await
            .map(|s| (s, how));
    }
    let k = batch_k(options);
    if let Who::Batched = who {
        how = format!(
            "{} agents x {k} slots (claims of the free slots, results sent as they wait)",
            agents(options)
        );
        let before = fixture.wal_lsn().await?;
        let (done, elapsed, latencies) =
            agents::run(fixture, agents(options), k, jobs, max).await?;
        s.done = done;
        s.seconds = elapsed.as_secs_f64();
        s.latencies_us = latencies;
        return work_written(fixture, s, &before, count_records)
            .await
            .map(|s| (s, how));
    }
    let (op, concurrency): (Op, usize) = match who {
        Who::River => {
            how = format!("{} agents x fetch/complete of K={k}", agents(options));
            (river_op(fixture, k), agents(options))
        }
        Who::Single => {
            how = format!("{} workers x claim -> result", options.workers);
            (
                Contender::ClaimResult.op(fixture, options.workers).await?,
                options.workers,
            )
        }
        Who::HttpClients => {
            how = format!("{} runner clients x claim -> result", options.workers);
            (
                Contender::HttpClaimResult
                    .op(fixture, options.workers)
                    .await?,
                options.workers,
            )
        }
        Who::Floor => {
            how = format!("{} workers x floor claim -> result", options.workers);
            (
                Contender::FloorClaimResult
                    .op(fixture, options.workers)
                    .await?,
                options.workers,
            )
        }
        Who::Bare => {
            how = format!("{} workers x claim -> complete", options.workers);
            (
                Contender::TypicalQueue.op(fixture, options.workers).await?,
                options.workers,
            )
        }
        Who::Peer(_) | Who::Runners(_) | Who::Batched => unreachable!("handled above"),
    };
    let before = fixture.wal_lsn().await?;
    let (done, elapsed, latencies) = counted(concurrency, jobs, max, op).await?;
    s.done = done;
    s.seconds = elapsed.as_secs_f64();
    s.latencies_us = latencies;
    work_written(fixture, s, &before, count_records)
        .await
        .map(|s| (s, how))
}

/// `s` with the WAL written since `before` (and its records, when counted).
async fn work_written(
    fixture: &Fixture,
    mut s: Slot,
    before: &str,
    count_records: bool,
) -> Result<Slot, BenchError> {
    let end = fixture.wal_lsn().await?;
    s.wal_bytes = fixture.wal_bytes_since(before).await?;
    if count_records {
        (s.rows, s.index_entries) = records(fixture, before, &end).await?;
    }
    Ok(s)
}

/// The River-shaped table driven the same way: fetch up to `k`, complete them in one statement.
fn river_op(fixture: &Fixture, k: usize) -> Op {
    let pool = fixture.pool.clone();
    Arc::new(move |w| {
        let pool = pool.clone();
        Box::pin(async move {
            let ids = river::fetch(&pool, w, k as i64).await?;
            if ids.is_empty() {
                return Ok(0);
            }
            Ok(river::complete(&pool, &ids).await?)
        })
    })
}

/// Runs `op(worker)` on `concurrency` tasks until `jobs` jobs are done (the last operations in
/// flight finish and count) or `max` passed: the jobs done, the wall time, one latency per job
/// (its operation's).
async fn counted(
    concurrency: usize,
    jobs: u64,
    max: Duration,
    op: Op,
) -> Result<(u64, Duration, Vec<u32>), BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + max;
    let mut tasks = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let op = Arc::clone(&op);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while done.load(Ordering::Relaxed) < jobs && Instant::now() < deadline {
                let t0 = Instant::now();
                let n = op(worker as i32).await?;
                let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                done.fetch_add(n, Ordering::Relaxed);
                latencies.extend(std::iter::repeat_n(us, n as usize));
            }
            Ok::<Vec<u32>, BenchError>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a benchmark worker panicked")?);
    }
    Ok((done.load(Ordering::Relaxed), started.elapsed(), latencies))
}

/// Heap row versions and index entries in the WAL between `start` and `end` (all databases of
/// the server), from `pg_walinspect`, which reads only flushed WAL: wait (bounded) for it.
async fn records(
    fixture: &Fixture,
    start: &str,
    end: &str,
) -> Result<(Option<u64>, Option<u64>), BenchError> {
    for _ in 0..50 {
        let flushed: bool = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn")
            .bind(end)
            .fetch_one(&fixture.pool)
            .await?;
        if flushed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts: Vec<(String, i64)> = sqlx::query_as(
        "SELECT \"resource_manager/record_type\", count::bigint
         FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true) WHERE count > 0",
    )
    .bind(start)
    .bind(end)
    .fetch_all(&fixture.pool)
    .await?;
    Ok(tally(&counts))
}

/// Row versions and index entries among `(record type, count)` pairs of `pg_get_wal_stats`.
fn tally(counts: &[(String, i64)]) -> (Option<u64>, Option<u64>) {
    let mut rows = 0u64;
    let mut entries = 0u64;
    for (kind, count) in counts {
        let count = (*count).max(0) as u64;
        let kind = kind.strip_suffix("+INIT").unwrap_or(kind);
        match kind {
            "Heap/INSERT" | "Heap/UPDATE" | "Heap/HOT_UPDATE" | "Heap/DELETE"
            | "Heap2/MULTI_INSERT" => rows += count,
            "Btree/INSERT_LEAF" | "Btree/INSERT_POST" | "Gin/INSERT" => entries += count,
            _ => {}
        }
    }
    (Some(rows), Some(entries))
}

fn line(who: &Who, slots: &[Slot], how: &str, jobs: u64) -> Line {
    let done: u64 = slots.iter().map(|s| s.done).sum();
    let seconds: f64 = slots.iter().map(|s| s.seconds).sum();
    let enqueued: u64 = slots.iter().map(|s| s.enqueued).sum();
    let enqueue_seconds: f64 = slots.iter().map(|s| s.enqueue_seconds).sum();
    let wal: u64 = slots.iter().map(|s| s.wal_bytes).sum();
    let sum =
        |f: fn(&Slot) -> Option<u64>| -> Option<u64> { slots.iter().map(f).sum::<Option<u64>>() };
    let mut latencies: Vec<u32> = slots
        .iter()
        .flat_map(|s| s.latencies_us.iter().copied())
        .collect();
    latencies.sort_unstable();
    let ms = |q: f64| (!latencies.is_empty()).then(|| f64::from(percentile(&latencies, q)) / 1e3);
    Line {
        contender: who.name(),
        version: match who {
            Who::Peer(p) => p.version.clone(),
            Who::River => "River's schema, SQL only".into(),
            Who::Floor | Who::Bare => "yardstick".into(),
            _ => env!("CARGO_PKG_VERSION").into(),
        },
        settings: how.to_string(),
        jobs_per_second: divide(done as f64, seconds),
        per_round: slots
            .iter()
            .map(|s| divide(s.done as f64, s.seconds))
            .collect(),
        enqueue_per_second: divide(enqueued as f64, enqueue_seconds),
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        wal_bytes_per_job: divide(wal as f64, done as f64),
        rows_per_job: sum(|s| s.rows).map(|r| divide(r as f64, done as f64)),
        index_entries_per_job: sum(|s| s.index_entries).map(|r| divide(r as f64, done as f64)),
        jobs_done: done,
        capped_rounds: slots.iter().filter(|s| s.done < jobs).count(),
        ratio_to_fastest_peer: None,
        ratio_per_round: Vec::new(),
    }
}

/// Issue 35's goals on this run's lines (those present).
fn goals(lines: &[Line]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let find = |name: &str| lines.iter().find(|l| l.contender == name);
    for (name, target) in [(BATCHED, 1.0), (SINGLE, 0.5), (RUNNERS, 0.3)] {
        if let Some(l) = find(name) {
            if let Some(value) = l.ratio_to_fastest_peer {
                goals.push(Goal {
                    name: format!("{name} / fastest peer (jobs/s)"),
                    value,
                    per_round: l.ratio_per_round.clone(),
                    target,
                    at_most: false,
                    met: value >= target,
                });
            }
        }
    }
    for name in [BATCHED, SINGLE] {
        if let Some(l) = find(name) {
            goals.push(Goal {
                name: format!("{name}: WAL bytes per job"),
                value: l.wal_bytes_per_job,
                per_round: Vec::new(),
                target: 1500.0,
                at_most: true,
                met: l.wal_bytes_per_job <= 1500.0,
            });
        }
    }
    goals
}

/// `uptime`'s load averages, as `/proc/loadavg` has them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let o = &self.options;
        let mut out = String::new();
        let setting = |name: &str| crate::fixture::setting(&self.settings, name);
        let _ = writeln!(
            out,
            "leasewright bench peers: {} workers, {} jobs per contender per round, queue depth {} \
             at each slot's start, {} B payload, {} rounds (alternating), load {}",
            o.workers,
            o.jobs,
            o.depth.max(o.jobs),
            o.payload_bytes,
            o.rounds,
            self.load.join(" -> "),
        );
        let _ = writeln!(
            out,
            "PostgreSQL {} ({}): fsync={} synchronous_commit={} full_page_writes={}",
            setting("server_version"),
            self.database,
            setting("fsync"),
            setting("synchronous_commit"),
            setting("full_page_writes"),
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for (name, why) in &self.skipped {
            let _ = writeln!(out, "skipped: {name}: {why}");
        }
        for f in &self.fills {
            let _ = writeln!(out, "queue filled: {f}");
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<20} {:<24} {:>8} {:>9} {:>7} {:>7} {:>6} {:>6} {:>9}  {:<20} jobs/s per round",
            "contender",
            "version",
            "jobs/s",
            "enqueue/s",
            "p50 ms",
            "p99 ms",
            "WAL B",
            "rows",
            "x fastest",
            "x fastest per round",
        );
        let opt =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        for l in &self.lines {
            let rounds: Vec<String> = l.per_round.iter().map(|r| format!("{r:.0}")).collect();
            let ratios: Vec<String> = l
                .ratio_per_round
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect();
            let _ = writeln!(
                out,
                "{:<20} {:<24} {:>8.0} {:>9.0} {:>7} {:>7} {:>6.0} {:>6} {:>9}  {:<20} {}{}",
                l.contender,
                l.version,
                l.jobs_per_second,
                l.enqueue_per_second,
                opt(l.p50_ms, 2),
                opt(l.p99_ms, 2),
                l.wal_bytes_per_job,
                opt(l.rows_per_job, 1),
                opt(l.ratio_to_fastest_peer, 2),
                ratios.join(" "),
                rounds.join(" "),
                if l.capped_rounds > 0 {
                    format!(
                        "  ({} rounds stopped at {} s)",
                        l.capped_rounds, o.max_seconds
                    )
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "how each was driven:");
        for l in &self.lines {
            let _ = writeln!(out, "  {:<20} {}", l.contender, l.settings);
        }
        if let Some(fastest) = &self.fastest_peer {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "goals (issue 35), against the fastest peer, {fastest}:"
            );
            for g in &self.goals {
                let rounds: Vec<String> = g.per_round.iter().map(|r| format!("{r:.2}")).collect();
                let _ = writeln!(
                    out,
                    "  {:<44} {:>8.2} {}{} {}   {}",
                    g.name,
                    g.value,
                    if g.at_most { "<=" } else { ">=" },
                    g.target,
                    if g.met { "met" } else { "MISSED" },
                    rounds.join(" ")
                );
            }
        }
        out
    }
}

/// What `--over` moves.
#[derive(Clone, Copy, Debug, Serialize)]
pub enum Over {
    /// Concurrent workers (default points 1, 4, 16, 64).
    Workers,
    /// Queue depth at each slot's start (default points 1,000 and 100,000).
    Depth,
}

impl Over {
    pub fn default_points(self) -> Vec<u64> {
        match self {
            Over::Workers => vec![1, 4, 16, 64],
            Over::Depth => vec![1_000, 100_000],
        }
    }
}

/// The same table at several points of one setting, one fresh run per point.
#[derive(Clone, Debug, Serialize)]
pub struct OverReport {
    pub over: Over,
    pub points: Vec<u64>,
    pub reports: Vec<Report>,
}

/// Runs the peers table at every point of `over` (each its own databases). At a depth point
/// below `options.jobs`, the point's jobs are the depth (the queue drains).
pub async fn run_over(
    options: Options,
    over: Over,
    points: Vec<u64>,
) -> Result<OverReport, BenchError> {
    let mut reports = Vec::with_capacity(points.len());
    for &point in &points {
        let mut o = options.clone();
        match over {
            Over::Workers => o.workers = point as usize,
            Over::Depth => {
                o.depth = point;
                o.jobs = o.jobs.min(point);
            }
        }
        eprintln!("leasewright bench peers: --over {over:?}: point {point}");
        reports.push(run(o).await?);
    }
    Ok(OverReport {
        over,
        points,
        reports,
    })
}

impl OverReport {
    /// Jobs/s and the ratio to the point's fastest peer, one column per point.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let what = match self.over {
            Over::Workers => "workers",
            Over::Depth => "queue depth",
        };
        let _ = writeln!(
            out,
            "leasewright bench peers --over {what}: jobs/s (x the point's fastest peer), one run per point"
        );
        for (point, r) in self.points.iter().zip(&self.reports) {
            let _ = writeln!(
                out,
                "  {what} {point}: {} jobs per contender, {} rounds, load {}, fastest peer {}",
                r.options.jobs,
                r.options.rounds,
                r.load.join(" -> "),
                r.fastest_peer.as_deref().unwrap_or("-")
            );
            for f in &r.fills {
                let _ = writeln!(out, "    queue filled: {f}");
            }
        }
        let _ = write!(out, "{:<20}", "contender");
        for point in &self.points {
            let _ = write!(out, " {:>20}", format!("{what} {point}"));
        }
        let _ = writeln!(out);
        let mut names: Vec<String> = Vec::new();
        for r in &self.reports {
            for l in &r.lines {
                if !names.contains(&l.contender) {
                    names.push(l.contender.clone());
                }
            }
        }
        for name in names {
            let _ = write!(out, "{name:<20}");
            for r in &self.reports {
                let cell = r.lines.iter().find(|l| l.contender == name).map_or(
                    "-".to_string(),
                    |l| match l.ratio_to_fastest_peer {
                        Some(x) => format!("{:.0} ({x:.2}x)", l.jobs_per_second),
                        None => format!("{:.0}", l.jobs_per_second),
                    },
                );
                let _ = write!(out, " {cell:>20}");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "WAL bytes per job:");
        for r in self.reports.iter().take(1) {
            for l in &r.lines {
                let _ = writeln!(out, "  {:<20} {:.0}", l.contender, l.wal_bytes_per_job);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::tally;

    #[test]
    fn tally_counts_heap_row_versions_and_index_entries_only() {
        let counts: Vec<(String, i64)> = [
            ("Heap/INSERT", 3),
            ("Heap/INSERT+INIT", 1),
            ("Heap/HOT_UPDATE", 2),
            ("Heap/UPDATE", 1),
            ("Heap/DELETE", 1),
            ("Heap/LOCK", 5),
            ("Heap2/MULTI_INSERT", 1),
            ("Heap2/PRUNE", 7),
            ("Btree/INSERT_LEAF", 4),
            ("Gin/INSERT", 2),
            ("Transaction/COMMIT", 9),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        assert_eq!(tally(&counts), (Some(9), Some(6)));
    }
}
