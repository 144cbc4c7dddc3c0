//! `leasewright bench`: measure the implementation against same-run baselines on PostgreSQL.
//! The logic lives in the leasewright-benches crate; see docs/benchmarks.md.
use clap::{Args, Subcommand};
use leasewright_benches::{claims, curve, fixture, lifecycle, peers, scaling, vacuum, writes};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
    /// PostgreSQL server to benchmark on (a fresh database is created there and dropped).
    /// Default: $DATABASE_URL (which keeps the password off the command line); without either,
    /// a throwaway cluster is started.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    /// The PostgreSQL schema the implementation's tables live in, in each fresh benchmark
    /// database (and in the control planes the HTTP benchmarks start).
    #[arg(long, global = true, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Print the report as JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Claims per second and p50/p99 latency: the fenced claim, the fenced floor (its three
    /// writes and nothing else), the bare SKIP LOCKED claim and the one-row commit rate, measured
    /// alternately (rounds of A B C D), with the ratios.
    Claims(ClaimsArgs),
    /// Whole jobs per second: claim -> result (and claim -> heartbeat -> result), in-process
    /// and over HTTP, next to a typical PostgreSQL queue's claim -> complete and the fenced
    /// floor's (the same writes, no guards), alternately, with p50/p99, WAL bytes per job and
    /// the ratios.
    Lifecycle(LifecycleArgs),
    /// What one operation writes (WAL bytes, row versions, row locks, index entries per index),
    /// counted over one worker's operations: the figures that do not depend on the machine.
    Writes(WritesArgs),
    /// Claim throughput at several queue depths (one database each), measured alternately.
    Scaling(ScalingArgs),
    /// A sustained run: throughput per interval next to dead tuples and autovacuum counts.
    Sustained(SustainedArgs),
    /// How throughput grows with claimers, batch size, queue depth or control-plane replicas
    /// (real `serve` processes): every point next to its same-run baseline, alternately, with
    /// jobs/s, p50/p99, CPU per job and where the database's backends waited.
    Curve(CurveArgs),
    /// Leasewright beside the queues people run instead, in one run on one PostgreSQL:
    /// graphile-worker, pg-boss, pgqueuer and procrastinate (installed at pinned versions into
    /// a cache directory by this command; skipped, with the reason, when node/npm or python3 is
    /// missing), a River-shaped table, the bare queue and the fenced floor, and Leasewright
    /// batched, single and over HTTP; alternating rounds of the same jobs, with jobs/s, p50/p99,
    /// WAL bytes and rows per job and the ratio to the fastest peer round by round.
    Peers(PeersArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PeersOver {
    /// 1, 4, 16, 64 workers.
    Workers,
    /// Queue depths 1,000 and 100,000 (1,000,000 with --points).
    Depth,
}

#[derive(Args)]
struct PeersArgs {
    /// Jobs each contender completes per round.
    #[arg(long, default_value_t = 5_000)]
    jobs: u64,
    /// Rounds (every contender once per round, in the same order).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent workers (job slots) of every contender.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Jobs queued when each slot starts (at least --jobs; default --jobs).
    #[arg(long)]
    depth: Option<u64>,
    /// Payload bytes per peer job.
    #[arg(long, default_value_t = 64)]
    payload_bytes: usize,
    /// The batched contenders' K: the job slots of each agent (leasewright-batched, and
    /// --capacity of each leasewright-runners process) and the river-shaped fetch; the workers
    /// are split over workers / K agents.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// A slot's work stops after this many seconds even when fewer jobs were done.
    #[arg(long, default_value_t = 10)]
    max_seconds: u64,
    /// Only these contenders, comma-separated (leasewright-batched, leasewright,
    /// leasewright-runners, leasewright-http-clients, fenced-floor, bare-queue, river-shaped,
    /// graphile-worker, pg-boss, pgqueuer, procrastinate).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where the peers are installed (default ~/.cache/leasewright/peers).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    /// The same table at several worker counts or queue depths (one run per point; default
    /// contenders: Leasewright batched and single, graphile-worker, pgqueuer).
    #[arg(long, value_enum)]
    over: Option<PeersOver>,
    /// The points of --over, comma-separated.
    #[arg(long, value_delimiter = ',')]
    points: Vec<u64>,
}

impl PeersArgs {
    fn options(&self) -> peers::Options {
        let mut only = self.only.clone();
        if only.is_empty() && self.over.is_some() {
            only = [
                "leasewright-batched",
                "leasewright",
                "graphile-worker",
                "pgqueuer",
            ]
            .map(String::from)
            .to_vec();
        }
        peers::Options {
            jobs: self.jobs,
            rounds: self.rounds,
            workers: self.workers,
            depth: self.depth.unwrap_or(self.jobs),
            payload_bytes: self.payload_bytes,
            batch: self.batch,
            max_seconds: self.max_seconds,
            only,
            cache_dir: self
                .cache_dir
                .clone()
                .unwrap_or_else(peers::default_cache_dir),
            runner_exe: std::env::current_exe().ok(),
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OverArg {
    /// The fenced claim at 1, 4, 16, 64 claimers, next to the bare SKIP LOCKED claim.
    Claimers,
    /// The batch claim of K = 1, 4, 16, 64 jobs, next to the bare claim of K rows.
    Batch,
    /// The fenced claim with 10,000 and 100,000 jobs queued (one database each; 1,000,000 on
    /// request with --points, its load takes about a minute), next to the bare claim.
    Depth,
    /// Claim -> result over HTTP against 1, 2, 4 `leasewright serve` processes on one database.
    Replicas,
}

#[derive(Args)]
struct CurveArgs {
    /// What the curve moves.
    #[arg(long, value_enum)]
    over: OverArg,
    /// The points, comma-separated (default: claimers and batch 1,4,16,64; depth
    /// 10000,100000; replicas 1,2,4).
    #[arg(long, value_delimiter = ',')]
    points: Vec<u64>,
    /// Concurrent workers where the curve does not move them (batch, depth, replicas).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds in all (split evenly over rounds and slots).
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Rounds of every point's slots.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Jobs kept queued (at least) through every slot (depth: the points instead).
    #[arg(long, default_value_t = 10_000)]
    queued: i64,
    /// Replicas: the database connections of each point's serve processes in all, split evenly
    /// (default: --concurrency, fewer when the server cannot hold them).
    #[arg(long)]
    server_connections: Option<u32>,
}

impl CurveArgs {
    fn options(&self) -> curve::Options {
        let over = match self.over {
            OverArg::Claimers => curve::Over::Claimers,
            OverArg::Batch => curve::Over::Batch,
            OverArg::Depth => curve::Over::Depth,
            OverArg::Replicas => curve::Over::Replicas,
        };
        curve::Options {
            over,
            points: if self.points.is_empty() {
                over.default_points()
            } else {
                self.points.clone()
            },
            concurrency: self.concurrency,
            duration_seconds: self.duration,
            rounds: self.rounds,
            queued: self.queued,
            server_connections: self.server_connections,
            serve_exe: std::env::current_exe().ok(),
        }
    }
}

#[derive(Args)]
struct ClaimsArgs {
    /// Concurrent claimers (each its own runner and connection).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds in all (split evenly over rounds and contenders).
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Jobs kept queued (at least) while claims are measured.
    #[arg(long, default_value_t = 10_000)]
    queued: i64,
    /// Also measure the batch claim of up to K jobs per transaction.
    #[arg(long)]
    batch: Option<usize>,
    /// Rounds of A B C D.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Args)]
struct LifecycleArgs {
    /// Concurrent workers (each its own runner).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds in all (split evenly over rounds and contenders).
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Jobs kept queued (at least) while jobs are measured.
    #[arg(long, default_value_t = 10_000)]
    queued: i64,
    /// Rounds of the contenders.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also measure claim -> heartbeat -> result.
    #[arg(long)]
    heartbeat: bool,
    /// Also measure claim -> result over HTTP, against this many control planes (`serve`
    /// replicas on the same database; the runners are spread evenly over them).
    #[arg(long, value_name = "REPLICAS", num_args = 0..=1, default_missing_value = "1")]
    http: Option<usize>,
}

#[derive(Args)]
struct WritesArgs {
    /// Operations of each kind.
    #[arg(long, default_value_t = 1000)]
    operations: usize,
    /// The batch claim's K.
    #[arg(long, default_value_t = 16)]
    batch: usize,
}

#[derive(Args)]
struct ScalingArgs {
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Queue depths, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000])]
    queued: Vec<i64>,
    /// Measured seconds in all (split over rounds and depths).
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Args)]
struct SustainedArgs {
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds in all.
    #[arg(long, default_value_t = 300.0)]
    duration: f64,
    /// Seconds per sample.
    #[arg(long, default_value_t = 10.0)]
    interval: f64,
    #[arg(long, default_value_t = 100_000)]
    queued: i64,
    /// Run the whole lifecycle (claim, heartbeat, result) instead of claims only.
    #[arg(long)]
    lifecycle: bool,
}

/// Why the arguments cannot be measured (checked before any database is started).
fn invalid(command: &BenchCommand) -> Option<String> {
    let (concurrency, duration, rounds) = match command {
        BenchCommand::Curve(a) => return curve::invalid(&a.options()),
        BenchCommand::Peers(a) => {
            if a.points.contains(&0) {
                return Some("--points must be positive".into());
            }
            return a.options().invalid();
        }
        BenchCommand::Claims(a) => (a.concurrency, a.duration, a.rounds),
        BenchCommand::Lifecycle(a) => {
            if a.http == Some(0) {
                return Some("--http takes at least 1 replica".into());
            }
            (a.concurrency, a.duration, a.rounds)
        }
        BenchCommand::Writes(a) => {
            if a.operations == 0 || a.batch == 0 {
                return Some("--operations and --batch must be positive".into());
            }
            return None;
        }
        BenchCommand::Scaling(a) => (a.concurrency, a.duration, a.rounds),
        BenchCommand::Sustained(a) => {
            if !(a.interval.is_finite() && a.interval > 0.0 && a.interval <= a.duration) {
                return Some(format!(
                    "--interval must be more than 0 and at most --duration (got {})",
                    a.interval
                ));
            }
            (a.concurrency, a.duration, 1)
        }
    };
    if !(duration.is_finite() && duration > 0.0) {
        return Some(format!(
            "--duration must be positive (seconds; got {duration})"
        ));
    }
    if concurrency == 0 || rounds == 0 {
        return Some("--concurrency and --rounds must be positive".into());
    }
    None
}

pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    if let Some(problem) = invalid(&args.command) {
        eprintln!("leasewright bench: {problem}");
        return Ok(2);
    }
    if let Some(url) = args.database_url.as_ref().filter(|u| !u.is_empty()) {
        // `--database-url` given on the command line: set before any thread exists, the
        // benchmark database module reads DATABASE_URL.
        std::env::set_var("DATABASE_URL", url);
    }
    fixture::set_schema(&args.schema);
    // With `RUST_LOG` set, the log of the control planes a benchmark starts in this process
    // (`bench peers`' HTTP rows, `bench lifecycle`) goes to stderr: a 500 they answer names its
    // cause only there. Unset, nothing is logged, as before.
    if std::env::var_os("RUST_LOG").is_some() {
        leasewright_server::serve::init_logging(false);
    }
    if fixture::uses_database_url() {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            if let Err(error) = crate::db::probe_blocking(&url, crate::db::Access::Writes) {
                eprintln!("leasewright bench: {error:#}");
                return Ok(2);
            }
        }
        eprintln!("leasewright bench: creating a fresh database on DATABASE_URL's server");
    } else {
        eprintln!(
            "leasewright bench: no DATABASE_URL and no --database-url: starting a throwaway \
             PostgreSQL cluster (initdb in a temporary directory, fsync=off, \
             synchronous_commit=off; removed on exit)"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let json = args.json;
    let result = runtime.block_on(async move {
        match args.command {
            BenchCommand::Claims(a) => {
                let report = claims::run(claims::Options {
                    concurrency: a.concurrency,
                    duration_seconds: a.duration,
                    queued: a.queued,
                    batch: a.batch,
                    rounds: a.rounds,
                })
                .await?;
                if json {
                    crate::output::print_json(&report)?;
                } else {
                    print!("{}", report.table());
                }
            }
            BenchCommand::Lifecycle(a) => {
                let report = lifecycle::run(lifecycle::Options {
                    concurrency: a.concurrency,
                    duration_seconds: a.duration,
                    queued: a.queued,
                    rounds: a.rounds,
                    heartbeat: a.heartbeat,
                    http_replicas: a.http.unwrap_or(0),
                })
                .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.table());
                }
            }
            BenchCommand::Writes(a) => {
                let report = writes::run(writes::Options {
                    operations: a.operations,
                    batch: a.batch,
                })
                .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.table());
                }
            }
            BenchCommand::Scaling(a) => {
                let report = scaling::run(scaling::Options {
                    concurrency: a.concurrency,
                    depths: a.queued,
                    duration_seconds: a.duration,
                    rounds: a.rounds,
                })
                .await?;
                if json {
                    crate::output::print_json(&report)?;
                } else {
                    print!("{}", report.table());
                }
            }
            BenchCommand::Peers(a) => {
                let options = a.options();
                if let Some(over) = a.over {
                    let over = match over {
                        PeersOver::Workers => peers::Over::Workers,
                        PeersOver::Depth => peers::Over::Depth,
                    };
                    let points = if a.points.is_empty() {
                        over.default_points()
                    } else {
                        a.points.clone()
                    };
                    let report = peers::run_over(options, over, points).await?;
                    if json {
                        crate::output::print_json(&report)?;
                    } else {
                        print!("{}", report.table());
                    }
                } else {
                    let report = peers::run(options).await?;
                    if json {
                        crate::output::print_json(&report)?;
                    } else {
                        print!("{}", report.table());
                    }
                }
            }
            BenchCommand::Curve(a) => {
                let report = curve::run(a.options()).await?;
                if json {
                    crate::output::print_json(&report)?;
                } else {
                    print!("{}", report.table());
                }
            }
            BenchCommand::Sustained(a) => {
                if !json {
                    println!("{}", vacuum::Sample::header());
                }
                let report = vacuum::run(
                    vacuum::Options {
                        concurrency: a.concurrency,
                        duration_seconds: a.duration,
                        interval_seconds: a.interval,
                        queued: a.queued,
                        lifecycle: a.lifecycle,
                    },
                    |sample| {
                        if !json {
                            println!("{}", sample.row());
                        }
                    },
                )
                .await?;
                if json {
                    crate::output::print_json(&report)?;
                } else {
                    println!("table settings:");
                    for (table, options) in &report.reloptions {
                        println!("  {table}: {options}");
                    }
                }
            }
        }
        anyhow::Ok(())
    });
    // A benchmark finds no violations: every failure is one of setup or of the database (no
    // server binaries, too few connections, bad options), exit code 2.
    match result {
        Ok(()) => Ok(0),
        Err(error) => {
            eprintln!("leasewright bench: {error:#}");
            Ok(2)
        }
    }
}
