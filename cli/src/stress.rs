//! `leasewright stress`: the soak profile of the concurrent history check (docs/reliability.md).
//! Many runner tasks against the PostgreSQL implementation, with faults; every call recorded and
//! the history checked against the model. The logic lives in
//! `leasewright_conformance::history`.
use anyhow::Context as _;
use clap::Args;
use leasewright_conformance::history::load::{self, Faults, LoadConfig};
use leasewright_conformance::history::net;
use std::time::Duration;

#[derive(Args)]
pub struct StressArgs {
    /// Runner tasks (each its own runner identity).
    #[arg(long, default_value_t = 64)]
    runners: usize,
    /// Calls to record before the runners stop starting new work.
    #[arg(long, default_value_t = 100_000)]
    ops: usize,
    /// The seed of every random choice (printed; scheduling is not seeded).
    #[arg(long)]
    seed: Option<u64>,
    /// Faults to inject, comma-separated: kill-connections, clock-skew, kill-runner,
    /// restart-postgres (needs the throwaway cluster: no --database-url, no DATABASE_URL);
    /// with --http also proxy (drops, delays, duplicates) and restart-server; all.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Run the runners over HTTP: the control plane in-process, each runner through a loopback
    /// proxy, the operator direct.
    #[arg(long)]
    http: bool,
    /// With --http: run this many real `leasewright serve` processes on the one database instead
    /// of the in-process control plane, each sweeping on its own, every request sent to any of
    /// them; `restart-server` then kills one with SIGKILL and starts it again.
    #[arg(long, requires = "http")]
    replicas: Option<usize>,
    /// The lease ttl in milliseconds (default 400; with --replicas 1000, the least `serve`
    /// takes).
    #[arg(long)]
    lease_ttl_ms: Option<u64>,
    /// Connections in the store's pool.
    #[arg(long, default_value_t = 16)]
    pool: u32,
    /// Seconds between injections of each periodic fault.
    #[arg(long, default_value_t = 5.0)]
    fault_interval: f64,
    /// Stop after this many seconds even if fewer calls were recorded.
    #[arg(long, default_value_t = 3600)]
    max_seconds: u64,
    /// PostgreSQL server to run on (a fresh database is created there and dropped). Default:
    /// $DATABASE_URL (which keeps the password off the command line); without either, a
    /// throwaway cluster is started.
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The PostgreSQL schema our tables live in (created if missing; every connection's
    /// search_path), in the fresh database.
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Print the summary as one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Leave the database in place (needs --database-url or DATABASE_URL) and print its URL, so
    /// that it can be audited (`leasewright audit --database-url URL`).
    #[arg(long)]
    keep_database: bool,
}

const FAULTS: [&str; 4] = [
    "kill-connections",
    "clock-skew",
    "kill-runner",
    "restart-postgres",
];
const HTTP_FAULTS: [&str; 2] = ["proxy", "restart-server"];

pub fn run(args: &StressArgs) -> anyhow::Result<i32> {
    let lease_ttl_ms =
        args.lease_ttl_ms
            .unwrap_or(if args.replicas.is_some() { 1000 } else { 400 });
    if args.runners == 0 || args.ops == 0 || lease_ttl_ms < 50 || args.pool == 0 {
        eprintln!(
            "leasewright stress: --runners, --ops and --pool must be positive, --lease-ttl-ms at \
             least 50"
        );
        return Ok(2);
    }
    if let Some(replicas) = args.replicas {
        if !(1..=16).contains(&replicas) || lease_ttl_ms < 1000 {
            eprintln!(
                "leasewright stress: --replicas must be 1 to 16, and with it --lease-ttl-ms at \
                 least 1000 (`serve --lease-ttl` takes 1 s to 1 day)"
            );
            return Ok(2);
        }
    }
    let replicas = match args.replicas {
        Some(count) => Some(net::ReplicaProcesses {
            program: std::env::current_exe().context("finding the leasewright executable")?,
            count,
            sweep_interval: Duration::from_millis(lease_ttl_ms / 4),
            schema: args.schema.clone(),
        }),
        None => None,
    };
    let url = args.database_url.clone().filter(|u| !u.is_empty());
    let mut known: Vec<&str> = FAULTS.to_vec();
    if args.http {
        known.extend(HTTP_FAULTS);
    }
    let mut faults: Vec<String> = Vec::new();
    for fault in &args.faults {
        if fault == "all" {
            faults.extend(
                known
                    .iter()
                    .filter(|f| url.is_none() || **f != "restart-postgres")
                    .map(|f| f.to_string()),
            );
        } else if known.contains(&fault.as_str()) {
            faults.push(fault.clone());
        } else {
            let http_only = if HTTP_FAULTS.contains(&fault.as_str()) {
                " (this one needs --http)"
            } else {
                ""
            };
            eprintln!(
                "leasewright stress: unknown fault `{fault}`{http_only}; expected one of: {}, all",
                known.join(", ")
            );
            return Ok(2);
        }
    }
    faults.dedup();
    let wants_restart = faults.iter().any(|f| f == "restart-postgres");
    if args.keep_database && url.is_none() {
        eprintln!(
            "leasewright stress: --keep-database needs --database-url or DATABASE_URL (a \
             throwaway cluster goes with this command)"
        );
        return Ok(2);
    }
    if wants_restart && url.is_some() {
        eprintln!(
            "leasewright stress: restart-postgres restarts the server: it runs only on a \
             throwaway cluster of its own (no --database-url, no DATABASE_URL)"
        );
        return Ok(2);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let code: anyhow::Result<i32> = runtime.block_on(async move {
        let every = Duration::from_secs_f64(args.fault_interval.max(0.1));
        let mut config = LoadConfig::short(args.runners, args.ops, seed);
        config.lease_ttl = Duration::from_millis(lease_ttl_ms);
        config.pool_size = args.pool;
        config.schema = args.schema.clone();
        config.max_duration = Duration::from_secs(args.max_seconds);
        config.progress = true;
        config.faults = Faults::default();
        let mut net_faults = net::NetFaults::none();
        for fault in &faults {
            match fault.as_str() {
                "kill-connections" => config.faults.kill_connections = Some(every),
                "clock-skew" => config.faults.runner_skew = Some(Duration::from_secs(5 * 3600)),
                "kill-runner" => config.faults.kill_runners = Some(every),
                "proxy" => {
                    let restart = net_faults.restart_server;
                    net_faults = net::NetFaults::lossy(config.lease_ttl * 3 / 2);
                    net_faults.restart_server = restart;
                }
                "restart-server" => net_faults.restart_server = Some(every),
                _ => {}
            }
        }
        // The database: a fresh one on the given server, or on a throwaway cluster (its own
        // when the server is to be restarted).
        let (guard, database_url) = if wants_restart {
            let cluster =
                tokio::task::spawn_blocking(leasewright_impl::database::Cluster::start_private)
                    .await?
                    .context("starting a throwaway PostgreSQL cluster for restart-postgres")?;
            config.faults.restart_postgres = Some((every, cluster.clone()));
            (None, cluster.url("postgres"))
        } else {
            if url.is_none() {
                eprintln!(
                    "leasewright stress: no --database-url or DATABASE_URL: starting a throwaway \
                     PostgreSQL cluster (removed when this command exits)"
                );
            }
            // The primary among the URL's hosts: the stress database is created there.
            let url = match &url {
                Some(url) => Some(crate::db::probe(url, crate::db::Access::Writes).await?),
                None => None,
            };
            let db = leasewright_impl::database::TestDatabase::create_on(url.as_deref())
                .await
                .context("creating the stress database")?;
            let db_url = db.url().to_string();
            (Some(db), db_url)
        };
        eprintln!(
            "leasewright stress: {} runners{}{}, {} calls, seed {seed}, lease ttl {} ms, faults: {}",
            args.runners,
            if args.http { " over HTTP" } else { "" },
            match args.replicas {
                Some(n) => format!(" to {n} serve replicas"),
                None => String::new(),
            },
            args.ops,
            lease_ttl_ms,
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(", ")
            }
        );
        let run = if args.http {
            net::run_with(&database_url, &config, &net_faults, replicas.as_ref()).await
        } else {
            load::run(&database_url, &config).await
        };
        let outcome = match run {
            Ok(outcome) => outcome,
            Err(error) => {
                eprintln!("leasewright stress: {error}");
                return Ok(2);
            }
        };
        if args.keep_database {
            // The name only: the server's URL may hold a password.
            if let Some(name) = guard.map(|db| {
                let name = db.name().to_owned();
                db.keep();
                name
            }) {
                eprintln!(
                    "leasewright stress: database `{name}` kept on the server; audit its ledger \
                     with `leasewright audit --schema {}` and DATABASE_URL set to the server's \
                     URL with /{name}",
                    args.schema
                );
            }
        }
        let summary = &outcome.summary;
        if args.json {
            crate::output::print_json(summary)?;
        } else {
            println!("{}", summary.render(10));
        }
        if summary.report.is_clean() {
            eprintln!(
                "leasewright stress: clean history ({} calls, {} faults injected); replay the \
                 choices with --seed {seed}",
                summary.report.operations, summary.faults_injected
            );
            Ok(0)
        } else {
            eprintln!(
                "leasewright stress: VIOLATIONS ({}); rerun with --seed {seed}",
                summary.report.violations.len()
            );
            Ok(1)
        }
    });
    // A failure to set up (no database, no cluster) is exit 2, like bad arguments.
    Ok(code.unwrap_or_else(|error| {
        eprintln!("leasewright stress: {error:#}");
        2
    }))
}
