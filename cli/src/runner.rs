//! `leasewright runner`: the runner agent. The work is in leasewright-server's agent.

use crate::secret;
use leasewright_server::serve::{self, RunnerOptions};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct RunnerArgs {
    /// How logs are written to stderr: `text` (colour only on a terminal) or `json` (one object
    /// per line).
    #[arg(long, value_enum, default_value_t = crate::output::LogFormat::Text)]
    log_format: crate::output::LogFormat,
    /// The control plane's base URL.
    #[arg(long)]
    server: String,
    /// The runner's bearer token. Prefer --token-file or LEASEWRIGHT_RUNNER_TOKEN: a command
    /// line is visible to every local user.
    #[arg(long)]
    token: Option<String>,
    /// A file holding the runner's token (default: $LEASEWRIGHT_RUNNER_TOKEN).
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// How many jobs at once (1 or more).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    capacity: u32,
    /// Where the per-lease workspaces, and the verified source archives it keeps (`sources/`),
    /// are created (default: a directory under the temp dir).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// The base URL of the deployment targets given to commands (default: --server).
    #[arg(long)]
    target_url: Option<String>,
    /// Exit after this many jobs (1 or more).
    #[arg(long, value_parser = crate::output::at_least_one)]
    max_jobs: Option<usize>,
    /// Milliseconds to wait after a claim that found no work; the wait doubles (with jitter) after
    /// each further empty claim, up to --max-poll-interval-ms.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    poll_interval_ms: u64,
    /// The longest wait between claims when there is no work, in milliseconds.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    max_poll_interval_ms: u64,
}

pub fn run(args: RunnerArgs) -> anyhow::Result<i32> {
    serve::init_logging(args.log_format == crate::output::LogFormat::Json);
    let token = secret::read(secret::Sources {
        what: "the runner token",
        flag: args.token,
        file: args.token_file.as_deref(),
        env: "LEASEWRIGHT_RUNNER_TOKEN",
    });
    let token = match token {
        Ok(Some(token)) => token,
        Ok(None) => {
            eprintln!(
                "leasewright runner: no runner token: set LEASEWRIGHT_RUNNER_TOKEN or pass \
                 --token-file FILE"
            );
            return Ok(2);
        }
        Err(error) => {
            eprintln!("leasewright runner: {error}");
            return Ok(2);
        }
    };
    if let Err(error) = leasewright_server::client::check_base_url(&args.server) {
        eprintln!("leasewright runner: {error}");
        return Ok(2);
    }
    let options = RunnerOptions {
        server: args.server,
        token,
        capacity: args.capacity,
        workdir: args.workdir,
        target_url: args.target_url,
        max_jobs: args.max_jobs,
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(10)),
        max_poll_interval: Duration::from_millis(args.max_poll_interval_ms.max(10)),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve::runner(options))?;
    Ok(0)
}
