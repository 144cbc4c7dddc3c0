//! The `leasewright` command. Each subcommand lives in its own module with a clap `Args` struct and
//! a `run(args) -> anyhow::Result<i32>` returning the process exit code.
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

mod audit;
mod bench;
mod check;
mod conform;
mod db;
mod migrate;
mod output;
mod prune;
mod runner;
mod runner_suite;
mod secret;
mod serve;
mod stress;

#[derive(Parser)]
#[command(
    name = "leasewright",
    version,
    about = "Fenced leases, model-checked and conformance-tested"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Model-check the protocol (or a flawed variant) exhaustively with stateright.
    Check(check::CheckArgs),
    /// Replay model traces against the PostgreSQL implementation and compare step by step.
    Conform(conform::ConformArgs),
    /// Benchmark the implementation against same-run baselines on PostgreSQL.
    Bench(bench::BenchArgs),
    /// Serve the HTTP control plane (a throwaway PostgreSQL without --database-url).
    Serve(serve::ServeArgs),
    /// Run a runner agent: claim jobs, verify their source, run them, report.
    Runner(runner::RunnerArgs),
    /// Check a runner against the runner's duties (docs/runner-suite.md): `leasewright runner` or --runner-cmd.
    RunnerSuite(runner_suite::RunnerSuiteArgs),
    /// Operator commands against a running server (projects, runners, jobs).
    Op(serve::OpArgs),
    /// Many runners against the implementation, with faults; the history checked against the model.
    Stress(stress::StressArgs),
    /// Check a database's recorded ledger against the model, job by job (read-only).
    Audit(audit::AuditArgs),
    /// Apply the migrations to a schema of DATABASE_URL and say which were applied (--status: list).
    Migrate(migrate::MigrateArgs),
    /// Delete the finished jobs older than --older-than with everything they own, in small batches.
    Prune(prune::PruneArgs),
}

/// jemalloc, not the system's allocator: the audit's per-record allocations spent about 40 % of
/// its CPU in glibc's malloc, and jemalloc roughly halves its CPU (docs/audit.md, "Current
/// figures"). The whole binary uses it: the server, the runner agent and the checker too.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit codes, the same for every subcommand: 0 success; 1 a protocol violation or a divergence
/// (each subcommand returns it itself); 2 bad arguments (clap's own exit code) or a setup failure:
/// any error a subcommand does not turn into a verdict is one (a database or server that cannot
/// be reached, a file that cannot be read or written).
fn main() {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let result = match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Conform(mut args) => {
            let sub = matches.subcommand().map(|(_, sub)| sub);
            args.database_url_from_env = sub.and_then(|m| m.value_source("database_url"))
                == Some(clap::parser::ValueSource::EnvVariable);
            conform::run(args)
        }
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Runner(args) => runner::run(args),
        Command::RunnerSuite(args) => runner_suite::run(args),
        Command::Op(args) => serve::op(args),
        Command::Stress(args) => stress::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::Migrate(args) => migrate::run(&args),
        Command::Prune(args) => prune::run(&args),
    };
    let code = result.unwrap_or_else(|error| {
        eprintln!("error: {}", cause_chain(&error));
        2
    });
    std::process::exit(code);
}

/// The error and its causes, `: `-separated, each said once: a cause whose text its parent's
/// already holds (sqlx's "error returned from database: X" above the database's own "X") is left
/// out.
fn cause_chain(error: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if said.last().is_some_and(|parent| parent.contains(&text)) {
            continue;
        }
        said.push(text);
    }
    said.join(": ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_is_said_once() {
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("permission denied for table jobs")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "error returned from database: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = anyhow::Error::new(Outer(Inner)).context("database unavailable");
        assert_eq!(
            super::cause_chain(&error),
            "database unavailable: error returned from database: permission denied for table jobs"
        );
    }
}
