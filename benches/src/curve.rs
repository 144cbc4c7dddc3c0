//! `leasewright bench curve --over claimers|batch|depth|replicas`: how throughput grows.
//!
//! One run measures every point of one curve, alternately: each round runs every point's
//! implementation slot next to the same point's baseline slot (claimers and queue depth: the
//! bare `SKIP LOCKED` claim; batch size: the bare claim of K rows; replicas: no baseline of its
//! own, every point is compared with the first, one control plane), so the machine's noise falls
//! on every point alike and the ratios of one run are what to read.
//!
//! - `claimers`: the fenced claim at 1, 4, 16, 64 concurrent claimers (one database, one pool
//!   as large as the largest point).
//! - `batch`: the batch claim of K = 1, 4, 16, 64 jobs per transaction at `--concurrency`.
//! - `depth`: the fenced claim with 10k, 100k (1M on request) jobs queued: one database per depth,
//!   each holding that many queued jobs (and as many bare-queue rows), all on one server.
//! - `replicas`: claim -> result over HTTP at `--concurrency` runners spread over 1, 2, 4 real
//!   `leasewright serve` processes on one database. Every point's processes run for the whole
//!   run, and each point's processes share the same number of database connections in all
//!   (`--server-connections`, split evenly, plus one each for its sweeper), so that the only
//!   thing a point changes is how many processes do the HTTP work.
//!
//! Every slot also records where the database's backends were (`pg_stat_activity` samples) and
//! the CPU the server's backends, the benchmark (and its `serve` children) and the machine used
//! ([`crate::probe`]): the measured answer to "what bounds this point".

use crate::baseline;
use crate::claims::{divide, line, Line, Ratio};
use crate::contender::{Contender, Op};
use crate::fixture::{server_settings, uses_database_url, BenchError, Capacity, Fixture};
use crate::measure::{closed_loop, Round};
use crate::probe::{load_average, sampler_pool, Cpu, CpuSnapshot, Sampler, Waits};
use crate::replicas::ServeProcess;
use serde::Serialize;
use sqlx::PgPool;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The variable a curve moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    Claimers,
    Batch,
    Depth,
    Replicas,
}

impl Over {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Over::Claimers => "claimers",
            Over::Batch => "batch",
            Over::Depth => "depth",
            Over::Replicas => "replicas",
        }
    }

    /// The points measured when none are given.
    pub fn default_points(self) -> Vec<u64> {
        match self {
            Over::Claimers | Over::Batch => vec![1, 4, 16, 64],
            // 1,000,000 is opt-in: its load alone takes about a minute on a busy 2-core machine.
            Over::Depth => vec![10_000, 100_000],
            Over::Replicas => vec![1, 2, 4],
        }
    }

    /// The largest point that makes sense (beyond it a run measures the machine's limits of
    /// processes or memory, not the implementation).
    fn max_point(self) -> u64 {
        match self {
            Over::Claimers => 500,
            Over::Batch => 1000,
            Over::Depth => 10_000_000,
            Over::Replicas => 16,
        }
    }
}

/// What `leasewright bench curve` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub over: Over,
    /// The values of the variable, in the order given.
    pub points: Vec<u64>,
    /// Concurrent workers where the curve does not move them (batch, depth, replicas).
    pub concurrency: usize,
    /// Measured seconds in all, split over rounds and slots.
    pub duration_seconds: f64,
    pub rounds: usize,
    /// Jobs kept queued (at least) through every slot (the depth curve's points replace it).
    pub queued: i64,
    /// Replicas: database connections of each point's control planes in all (`None`: as many
    /// as the workers, fewer when the server cannot hold them).
    pub server_connections: Option<u32>,
    /// Replicas: the `leasewright` executable to run `serve` with.
    #[serde(skip)]
    pub serve_exe: Option<PathBuf>,
}

/// Why `options` cannot be measured (checked before any database is touched).
pub fn invalid(options: &Options) -> Option<String> {
    let over = options.over.name();
    if !(options.duration_seconds.is_finite() && options.duration_seconds > 0.0) {
        return Some(format!(
            "--duration must be positive (seconds; got {})",
            options.duration_seconds
        ));
    }
    if options.concurrency == 0 || options.rounds == 0 {
        return Some("--concurrency and --rounds must be positive".into());
    }
    if options.queued < 0 {
        return Some("--queued must not be negative".into());
    }
    if options.points.is_empty() {
        return Some("--points needs at least one value".into());
    }
    let max = options.over.max_point();
    if let Some(p) = options.points.iter().find(|&&p| p == 0 || p > max) {
        return Some(format!(
            "--points of --over {over} must be between 1 and {max} (got {p})"
        ));
    }
    let mut sorted = options.points.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != options.points.len() {
        return Some("--points must not repeat a value".into());
    }
    match options.over {
        Over::Replicas => {
            let most = *sorted.last().unwrap_or(&1);
            if (options.concurrency as u64) < most {
                return Some(format!(
                    "--over replicas needs at least one runner per replica: --concurrency {} is \
                     less than {most} replicas",
                    options.concurrency
                ));
            }
            if let Some(b) = options.server_connections {
                if u64::from(b) < most {
                    return Some(format!(
                        "--server-connections {b} gives {most} replicas less than one database \
                         connection each"
                    ));
                }
            }
            if options.serve_exe.is_none() {
                return Some("--over replicas needs the leasewright executable".into());
            }
        }
        _ => {
            if options.server_connections.is_some() {
                return Some("--server-connections applies to --over replicas only".into());
            }
        }
    }
    None
}

/// One point of a curve.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The variable's value (claimers, K, queued jobs, replicas).
    pub point: u64,
    /// The implementation at this point.
    pub line: Line,
    /// The same-run baseline at this point (none for replicas).
    pub baseline: Option<Line>,
    /// Implementation / baseline jobs/s (replicas: this point / the first point).
    pub ratio: Ratio,
    /// Jobs/s relative to the first point's.
    pub relative: f64,
    /// Where the database's backends were during the implementation's slots.
    pub waits: Waits,
    /// CPU during the implementation's slots.
    pub cpu: Cpu,
    /// Server backends' CPU milliseconds per job (implementation), if visible.
    pub server_cpu_ms_per_job: Option<f64>,
    /// The benchmark's (and its `serve` children's) CPU milliseconds per job.
    pub client_cpu_ms_per_job: f64,
    /// The same for the baseline's slots.
    pub baseline_server_cpu_ms_per_job: Option<f64>,
    /// The machine's busy share during the implementation's slots (every process, 0..1).
    pub machine_busy: f64,
}

/// What a curve run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub command: String,
    pub over: Over,
    pub options: Options,
    /// `DATABASE_URL` or `throwaway cluster`.
    pub database: String,
    pub settings: Vec<(String, String)>,
    /// The implementation's contender and the baseline's.
    pub contender: String,
    pub baseline: Option<String>,
    pub slot_seconds: f64,
    /// Load average (1, 5, 15 min) before and after the run.
    pub load_average_before: Option<[f64; 3]>,
    pub load_average_after: Option<[f64; 3]>,
    pub notes: Vec<String>,
    pub points: Vec<Point>,
}

/// What one slot runs.
#[derive(Clone, Copy, Debug)]
enum What {
    Contender(Contender),
    /// Claim -> result over HTTP against the control planes of set `usize`.
    Http(usize),
}

/// One slot of a round.
#[derive(Clone, Copy, Debug)]
struct Slot {
    fixture: usize,
    what: What,
    concurrency: usize,
    /// Jobs kept queued through it.
    depth: i64,
    point: usize,
    baseline: bool,
}

impl Slot {
    fn takes_fenced_jobs(&self) -> bool {
        matches!(
            self.what,
            What::Http(_) | What::Contender(Contender::Fenced | Contender::FencedBatch(_))
        )
    }
}

/// What a slot measured.
struct Measured {
    round: Round,
    waits: Waits,
    cpu: Cpu,
}

/// The databases, control planes and samplers of a run.
struct Setup {
    fixtures: Vec<Fixture>,
    samplers: Vec<PgPool>,
    /// Control planes per replicas point, and one runner client per worker for each.
    servers: Vec<Vec<ServeProcess>>,
    clients: Vec<Arc<Vec<leasewright_server::client::RunnerClient>>>,
    notes: Vec<String>,
}

impl Setup {
    async fn close(mut self) {
        // The control planes first: a database with clients cannot be dropped.
        self.servers.clear();
        for sampler in &self.samplers {
            sampler.close().await;
        }
        for fixture in &self.fixtures {
            fixture.close().await;
        }
    }
}

/// Measures. Uses `DATABASE_URL` (fresh databases on that server) or a throwaway cluster.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    if let Some(problem) = invalid(&options) {
        return Err(BenchError::Invalid(problem));
    }
    let load_average_before = load_average();
    let mut setup = Setup {
        fixtures: Vec::new(),
        samplers: Vec::new(),
        servers: Vec::new(),
        clients: Vec::new(),
        notes: Vec::new(),
    };
    let result = measure(&options, &mut setup).await;
    let mut notes = setup_notes(&options);
    notes.append(&mut setup.notes);
    setup.close().await;
    let (slot, settings, points) = result?;
    let (contender, baseline) = names(options.over);
    if uses_database_url() {
        notes.push(
            "the server's CPU is that of the benchmark database's backends; the machine's busy \
             share counts every process (other users' too)"
                .to_string(),
        );
    }
    Ok(Report {
        command: "curve".into(),
        over: options.over,
        database: if uses_database_url() {
            "DATABASE_URL".into()
        } else {
            "throwaway cluster".into()
        },
        settings,
        contender: contender.into(),
        baseline: baseline.map(str::to_string),
        slot_seconds: slot.as_secs_f64(),
        load_average_before,
        load_average_after: load_average(),
        notes,
        points,
        options,
    })
}

fn names(over: Over) -> (&'static str, Option<&'static str>) {
    match over {
        Over::Claimers | Over::Depth => ("fenced claim", Some("skip-locked")),
        Over::Batch => ("fenced claim K", Some("skip-locked K")),
        Over::Replicas => ("HTTP claim->result", None),
    }
}

fn setup_notes(options: &Options) -> Vec<String> {
    match options.over {
        Over::Replicas => vec![
            "every point's serve processes share the same database connections in all, split \
             evenly (plus one each for its sweeper); runners over loopback HTTP, worker w on \
             replica w mod R"
                .into(),
        ],
        Over::Depth => vec![
            "one database per depth, each with that many queued jobs and as many bare-queue rows"
                .into(),
        ],
        _ => Vec::new(),
    }
}

type Measurement = (Duration, Vec<(String, String)>, Vec<Point>);

async fn measure(options: &Options, setup: &mut Setup) -> Result<Measurement, BenchError> {
    let c = options.concurrency;
    let most = *options.points.iter().max().unwrap_or(&1) as usize;
    let mut slots = Vec::new();
    match options.over {
        Over::Claimers => {
            let fixture = Fixture::with_pool(most, most, 1).await?;
            setup
                .samplers
                .push(sampler_pool(fixture.database.url()).await?);
            setup.fixtures.push(fixture);
            for (i, &p) in options.points.iter().enumerate() {
                for (what, baseline) in [(Contender::Fenced, false), (Contender::SkipLocked, true)]
                {
                    slots.push(Slot {
                        fixture: 0,
                        what: What::Contender(what),
                        concurrency: p as usize,
                        depth: options.queued,
                        point: i,
                        baseline,
                    });
                }
            }
        }
        Over::Batch => {
            let fixture = Fixture::with_pool(c, c, 1).await?;
            setup
                .samplers
                .push(sampler_pool(fixture.database.url()).await?);
            setup.fixtures.push(fixture);
            for (i, &k) in options.points.iter().enumerate() {
                let k = k as usize;
                for (what, baseline) in [
                    (Contender::FencedBatch(k), false),
                    (Contender::SkipLockedBatch(k), true),
                ] {
                    slots.push(Slot {
                        fixture: 0,
                        what: What::Contender(what),
                        concurrency: c,
                        depth: options.queued,
                        point: i,
                        baseline,
                    });
                }
            }
        }
        Over::Depth => {
            let n = options.points.len() as u32;
            let each = crate::fixture::connections_needed(c) + 1;
            for (i, &depth) in options.points.iter().enumerate() {
                // The first refuses for the whole run; later ones see the earlier ones in use.
                let also = if i == 0 { each * (n - 1) + 1 } else { 1 };
                let fixture = Fixture::with_pool(c, c, also).await?;
                setup
                    .samplers
                    .push(sampler_pool(fixture.database.url()).await?);
                let started = Instant::now();
                fixture.load_queued(depth as i64).await?;
                baseline::fill_bare_queue(&fixture.pool, depth as i64).await?;
                setup.notes.push(format!(
                    "{depth} queued: loaded in {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                setup.fixtures.push(fixture);
                for (what, baseline) in [(Contender::Fenced, false), (Contender::SkipLocked, true)]
                {
                    slots.push(Slot {
                        fixture: i,
                        what: What::Contender(what),
                        concurrency: c,
                        depth: depth as i64,
                        point: i,
                        baseline,
                    });
                }
            }
        }
        Over::Replicas => {
            let processes: u32 = options.points.iter().map(|&r| r as u32).sum();
            // The fixture's pool only sets up and tops up: two connections.
            let mut fixture = Fixture::with_pool(c, 2, 1 + 2 * processes).await?;
            fixture.job_specs = true;
            let capacity = Capacity::of(&fixture.pool).await?;
            // What the control planes of every point hold, with `b` connections per point.
            let needed = |b: u32| -> u32 {
                options
                    .points
                    .iter()
                    .map(|&r| r as u32 * (b.div_ceil(r as u32) + 1))
                    .sum()
            };
            let available = capacity.available().saturating_sub(1); // the sampler
            let b = match options.server_connections {
                Some(b) => {
                    capacity.check(needed(b) + 1)?;
                    b
                }
                None => {
                    let mut b = c as u32;
                    while b > most as u32 && needed(b) > available {
                        b -= 1;
                    }
                    capacity.check(needed(b) + 1)?;
                    if b < c as u32 {
                        setup.notes.push(format!(
                            "the server allows {} more connections: {b} per point instead of {c}",
                            capacity.available()
                        ));
                    }
                    b
                }
            };
            setup.notes.push(format!(
                "{b} database connections per point, {} in all for {processes} serve processes",
                needed(b)
            ));
            setup
                .samplers
                .push(sampler_pool(fixture.database.url()).await?);
            let exe = options
                .serve_exe
                .clone()
                .ok_or_else(|| BenchError::Invalid("no leasewright executable".into()))?;
            for (i, &r) in options.points.iter().enumerate() {
                let r = r as usize;
                let mut set = Vec::with_capacity(r);
                for _ in 0..r {
                    set.push(ServeProcess::start(
                        &exe,
                        fixture.database.url(),
                        b.div_ceil(r as u32) + 1,
                    )?);
                }
                let mut clients = Vec::with_capacity(c);
                for (w, token) in fixture.tokens.iter().enumerate() {
                    clients.push(
                        leasewright_server::client::RunnerClient::new(
                            &set[w % r].url,
                            token,
                            Duration::from_secs(60),
                        )
                        .map_err(|e| BenchError::Invalid(format!("an HTTP client: {e}")))?,
                    );
                }
                setup.servers.push(set);
                setup.clients.push(Arc::new(clients));
                slots.push(Slot {
                    fixture: 0,
                    what: What::Http(i),
                    concurrency: c,
                    depth: options.queued,
                    point: i,
                    baseline: false,
                });
            }
            setup.fixtures.push(fixture);
        }
    }
    let settings = server_settings(&setup.fixtures[0].pool).await?;
    let slot = Duration::from_secs_f64(
        options.duration_seconds / options.rounds as f64 / slots.len() as f64,
    );

    // Loaded queues vacuumed, every slot warmed up once (not recorded), then statistics of a
    // system in operation (as `claims::alternate` does).
    let mut rates = vec![5_000.0; slots.len()];
    for (i, s) in slots.iter().enumerate() {
        top_up(setup, s, rates[i], slot).await?;
    }
    for fixture in &setup.fixtures {
        fixture.vacuum().await?;
    }
    let warm_up = slot.min(Duration::from_millis(500));
    for (i, s) in slots.iter().enumerate() {
        top_up(setup, s, rates[i], warm_up).await?;
        let round = run_slot(setup, s, warm_up).await?;
        rates[i] = divide(round.ops as f64, round.elapsed.as_secs_f64());
    }
    for fixture in &setup.fixtures {
        fixture.analyze().await?;
    }

    let mut measured: Vec<Vec<Measured>> = (0..slots.len()).map(|_| Vec::new()).collect();
    let children: Vec<u32> = setup.servers.iter().flatten().map(|s| s.pid()).collect();
    for _ in 0..options.rounds {
        for (i, s) in slots.iter().enumerate() {
            top_up(setup, s, rates[i], slot).await?;
            let sampler_pool = &setup.samplers[s.fixture];
            let before = CpuSnapshot::take(sampler_pool, &children).await?;
            let lsn = setup.fixtures[s.fixture].wal_lsn().await?;
            let sampler = Sampler::start(sampler_pool);
            let mut round = run_slot(setup, s, slot).await?;
            let waits = sampler.stop().await?;
            round.wal_bytes = setup.fixtures[s.fixture].wal_bytes_since(&lsn).await?;
            let after = CpuSnapshot::take(sampler_pool, &children).await?;
            rates[i] = divide(round.ops as f64, round.elapsed.as_secs_f64());
            measured[i].push(Measured {
                round,
                waits,
                cpu: before.until(&after),
            });
        }
    }
    Ok((slot, settings, points(options, &slots, &measured)))
}

/// Tops up the queue `s` takes from to its depth plus 1.5 times what it took in a slot of this
/// length last time.
async fn top_up(setup: &Setup, s: &Slot, rate: f64, slot: Duration) -> Result<(), BenchError> {
    let fixture = &setup.fixtures[s.fixture];
    let want = s.depth + (rate * slot.as_secs_f64() * 1.5) as i64 + 100;
    if s.takes_fenced_jobs() {
        let have = fixture.queued().await?;
        fixture.load_queued(want - have).await
    } else {
        Ok(baseline::fill_bare_queue(&fixture.pool, want).await?)
    }
}

async fn run_slot(setup: &Setup, s: &Slot, duration: Duration) -> Result<Round, BenchError> {
    let fixture = &setup.fixtures[s.fixture];
    match s.what {
        What::Contender(contender) => contender.run(fixture, s.concurrency, duration).await,
        What::Http(set) => {
            let op = http_claim_result(Arc::clone(&setup.clients[set]));
            closed_loop(s.concurrency, duration, move |w| op(w)).await
        }
    }
}

/// Claim -> result over HTTP, worker `w` with client `w`.
fn http_claim_result(clients: Arc<Vec<leasewright_server::client::RunnerClient>>) -> Op {
    Arc::new(move |w| {
        let clients = Arc::clone(&clients);
        Box::pin(async move {
            let client = &clients[w as usize];
            let http = |e: leasewright_server::client::CallError| {
                BenchError::Invalid(format!("an HTTP call failed: {e}"))
            };
            let Some(lease) = client.claim(1).await.map_err(http)?.pop() else {
                return Ok(0);
            };
            let answer = client
                .result(&lease.tuple(None), "passed", "bench")
                .await
                .map_err(http)?;
            Ok(u64::from(answer.verdict == "accepted"))
        })
    })
}

fn points(options: &Options, slots: &[Slot], measured: &[Vec<Measured>]) -> Vec<Point> {
    let (contender, baseline_name) = names(options.over);
    let name = |p: u64, base: bool| -> String {
        let who = if base {
            baseline_name.unwrap_or("baseline")
        } else {
            contender
        };
        let s = if p == 1 { "" } else { "s" };
        match options.over {
            Over::Claimers => format!("{who}, {p} claimer{s}"),
            Over::Batch => format!("{who}={p}"),
            Over::Depth => format!("{who}, {p} queued"),
            Over::Replicas => format!("{who}, {p} replica{s}"),
        }
    };
    let rounds = |i: usize| -> Vec<Round> { measured[i].iter().map(|m| m.round.clone()).collect() };
    let mut out: Vec<Point> = Vec::new();
    for (p, &value) in options.points.iter().enumerate() {
        let Some(imp) = slots.iter().position(|s| s.point == p && !s.baseline) else {
            continue;
        };
        let base = slots.iter().position(|s| s.point == p && s.baseline);
        let line_imp = line(&name(value, false), &rounds(imp));
        let line_base = base.map(|b| line(&name(value, true), &rounds(b)));
        let mut waits = Waits::default();
        let mut cpu = Cpu::default();
        for m in &measured[imp] {
            waits.add(&m.waits);
            cpu.add(&m.cpu);
        }
        let mut base_cpu = Cpu::default();
        if let Some(b) = base {
            for m in &measured[b] {
                base_cpu.add(&m.cpu);
            }
        }
        let imp_jobs: u64 = measured[imp].iter().map(|m| m.round.ops).sum();
        let base_jobs: u64 = base.map_or(0, |b| measured[b].iter().map(|m| m.round.ops).sum());
        let per_job = |seconds: f64, jobs: u64| divide(seconds * 1000.0, jobs as f64);
        let ratio = match &line_base {
            Some(b) => Ratio::of_throughput(
                &format!("{} / {}", line_imp.contender, b.contender),
                &line_imp,
                b,
                None,
            ),
            None => match out.first() {
                Some(first) => Ratio::of_throughput(
                    &format!("{} / {}", line_imp.contender, first.line.contender),
                    &line_imp,
                    &first.line,
                    None,
                ),
                None => Ratio::of_throughput(
                    &format!("{} / itself", line_imp.contender),
                    &line_imp,
                    &line_imp,
                    None,
                ),
            },
        };
        out.push(Point {
            point: value,
            relative: 0.0,
            server_cpu_ms_per_job: cpu.server_seconds.map(|s| per_job(s, imp_jobs)),
            client_cpu_ms_per_job: per_job(cpu.client_seconds, imp_jobs),
            baseline_server_cpu_ms_per_job: base
                .and(base_cpu.server_seconds)
                .map(|s| per_job(s, base_jobs)),
            machine_busy: cpu.machine_busy(),
            line: line_imp,
            baseline: line_base,
            ratio,
            waits,
            cpu,
        });
    }
    let first = out.first().map_or(0.0, |p| p.line.jobs_per_second);
    for p in &mut out {
        p.relative = divide(p.line.jobs_per_second, first);
    }
    out
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let o = &self.options;
        let mut out = String::new();
        let setting = |name: &str| crate::fixture::setting(&self.settings, name);
        let fixed = match self.over {
            Over::Claimers => format!(">= {} queued", o.queued),
            Over::Batch => format!("{} claimers, >= {} queued", o.concurrency, o.queued),
            Over::Depth => format!("{} claimers", o.concurrency),
            Over::Replicas => format!("{} runners, >= {} queued", o.concurrency, o.queued),
        };
        let _ = writeln!(
            out,
            "leasewright bench curve --over {}: {}{}, {fixed}; {} rounds, {:.2} s slots, \
             alternating",
            self.over.name(),
            self.contender,
            self.baseline
                .as_ref()
                .map_or(String::new(), |b| format!(" against {b} (same run)")),
            o.rounds,
            self.slot_seconds,
        );
        let load = |l: &Option<[f64; 3]>| {
            l.map_or("?".to_string(), |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"))
        };
        let _ = writeln!(
            out,
            "PostgreSQL {} ({}): fsync={} synchronous_commit={} max_connections={}; load \
             average {} before, {} after",
            setting("server_version"),
            self.database,
            setting("fsync"),
            setting("synchronous_commit"),
            setting("max_connections"),
            load(&self.load_average_before),
            load(&self.load_average_after),
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:>9} {:>8} {:>7} {:>7} {:>5} | {:>8} {:>7} {:>7} | {:<28}| {:>6} {:>6} {:>6} {:>5}",
            self.over.name(),
            "jobs/s",
            "p50 ms",
            "p99 ms",
            "rel",
            "base j/s",
            "p50 ms",
            "p99 ms",
            if self.baseline.is_some() {
                "ratio to base (per round)"
            } else {
                "ratio to first (per round)"
            },
            "srv ms",
            "base",
            "cli ms",
            "busy"
        );
        for p in &self.points {
            let per_round: Vec<String> = p
                .ratio
                .per_round
                .iter()
                .map(|v| format!("{v:.2}"))
                .collect();
            let ratio = format!("{:.2} ({})", p.ratio.value, per_round.join(" "));
            let (bj, b50, b99) = p.baseline.as_ref().map_or(
                ("-".to_string(), "-".to_string(), "-".to_string()),
                |b| {
                    (
                        format!("{:.0}", b.jobs_per_second),
                        format!("{:.2}", b.p50_ms),
                        format!("{:.2}", b.p99_ms),
                    )
                },
            );
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                out,
                "{:>9} {:>8.0} {:>7.2} {:>7.2} {:>5.2} | {:>8} {:>7} {:>7} | {:<28}| {:>6} {:>6} {:>6.2} {:>4.0}%{}",
                p.point,
                p.line.jobs_per_second,
                p.line.p50_ms,
                p.line.p99_ms,
                p.relative,
                bj,
                b50,
                b99,
                ratio,
                ms(p.server_cpu_ms_per_job),
                ms(p.baseline_server_cpu_ms_per_job),
                p.client_cpu_ms_per_job,
                p.machine_busy * 100.0,
                if p.line.empty > 0 {
                    format!("  ({} claims found the queue empty)", p.line.empty)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "srv ms: CPU of the database's backends per job (base: the baseline's); cli ms: the \
             benchmark's{} CPU per job; busy: the whole machine",
            if self.over == Over::Replicas {
                " and its serve processes'"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "where the backends were during the implementation's slots (pg_stat_activity \
             samples):"
        );
        for p in &self.points {
            let _ = writeln!(out, "{:>9}  {}", p.point, p.waits.top(5));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{invalid, Options, Over};

    fn options(over: Over) -> Options {
        Options {
            over,
            points: over.default_points(),
            concurrency: 16,
            duration_seconds: 10.0,
            rounds: 3,
            queued: 10_000,
            server_connections: None,
            serve_exe: Some("leasewright".into()),
        }
    }

    #[test]
    fn the_default_points_are_valid() {
        for over in [Over::Claimers, Over::Batch, Over::Depth, Over::Replicas] {
            assert_eq!(invalid(&options(over)), None, "{over:?}");
        }
    }

    #[test]
    fn bad_points_are_refused_with_the_reason() {
        let mut o = options(Over::Claimers);
        o.points = vec![];
        assert!(invalid(&o).unwrap().contains("at least one value"));
        o.points = vec![0, 4];
        assert!(invalid(&o).unwrap().contains("between 1 and 500"));
        o.points = vec![4, 4];
        assert!(invalid(&o).unwrap().contains("must not repeat"));
        let mut o = options(Over::Replicas);
        o.concurrency = 2;
        assert!(invalid(&o).unwrap().contains("one runner per replica"));
        o.concurrency = 16;
        o.server_connections = Some(2);
        assert!(invalid(&o).unwrap().contains("less than one database"));
        let mut o = options(Over::Batch);
        o.server_connections = Some(8);
        assert!(invalid(&o).unwrap().contains("replicas only"));
    }
}
