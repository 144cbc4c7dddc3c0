//! `leasewright runner-suite`: the runner's duties (docs/protocol.md §6.4) checked against any
//! runner given as a command line, or `leasewright runner` itself (docs/runner-suite.md). The
//! suite lives in `leasewright_conformance::runner_suite`.
use clap::Args;
use leasewright_conformance::runner_suite::{self, scenarios::Status, SuiteOptions};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct RunnerSuiteArgs {
    /// The runner to check, as a command line (run as `sh -c 'exec CMD'`, its settings in the
    /// environment: LEASEWRIGHT_SERVER, LEASEWRIGHT_RUNNER_TOKEN, LEASEWRIGHT_CAPACITY,
    /// LEASEWRIGHT_MAX_JOBS, LEASEWRIGHT_WORKDIR; docs/runner-suite.md). Default: this binary's
    /// own `leasewright runner`.
    #[arg(long)]
    runner_cmd: Option<String>,
    /// How late after its deadline a runner's work may still run, in milliseconds (default: the
    /// server's margin 2δ at the default δ, 1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    margin_ms: u64,
    /// Only this scenario (repeatable).
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Keep each scenario's runner log and ticks under DIR.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// List the scenarios and the duties they check, and exit.
    #[arg(long)]
    list: bool,
    /// One JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// The default runner: this binary's `runner`, told everything by the suite's environment.
fn own_runner() -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let exe = exe.to_string_lossy().replace('\'', r"'\''");
    Ok(format!(
        "'{exe}' runner --server \"$LEASEWRIGHT_SERVER\" --capacity \"$LEASEWRIGHT_CAPACITY\" \
         --max-jobs \"$LEASEWRIGHT_MAX_JOBS\" --workdir \"$LEASEWRIGHT_WORKDIR\" \
         --poll-interval-ms 50 --max-poll-interval-ms 200"
    ))
}

pub fn run(args: RunnerSuiteArgs) -> anyhow::Result<i32> {
    if args.list {
        for scenario in runner_suite::scenarios::SCENARIOS {
            println!("{:<28} {}", scenario.name, scenario.what);
        }
        return Ok(0);
    }
    if let Err(error) = runner_suite::select(&args.scenarios) {
        eprintln!("leasewright runner-suite: {error}");
        return Ok(2);
    }
    let runner_cmd = match args.runner_cmd {
        Some(cmd) if cmd.trim().is_empty() => {
            eprintln!("leasewright runner-suite: --runner-cmd is empty");
            return Ok(2);
        }
        Some(cmd) => cmd,
        None => own_runner()?,
    };
    let options = SuiteOptions {
        runner_cmd,
        margin: Duration::from_millis(args.margin_ms),
        only: args.scenarios,
        keep: args.keep,
    };
    let report = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(runner_suite::run(&options));
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("leasewright runner-suite: cannot run the suite: {error}");
            return Ok(2);
        }
    };
    if report.no_runner() {
        let log = report
            .scenarios
            .first()
            .map(|s| s.runner_log.display().to_string());
        eprintln!(
            "leasewright runner-suite: the runner never called the control plane in any scenario: \
             is {:?} a runner that reads LEASEWRIGHT_SERVER and LEASEWRIGHT_RUNNER_TOKEN? (its \
             output: --keep DIR, then {})",
            options.runner_cmd,
            log.unwrap_or_default()
        );
        return Ok(2);
    }
    if report.no_command_ran() {
        eprintln!(
            "leasewright runner-suite: the runner never ran a job's command in any scenario: \
             nothing was judged (it must run each lease's `command` with `sh -c` in the \
             extracted source; docs/runner-suite.md)"
        );
        return Ok(2);
    }
    let violations = report.violations();
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        for scenario in &report.scenarios {
            println!("{}: {}", scenario.name, scenario.what);
            for verdict in &scenario.verdicts {
                let mark = match verdict.status {
                    Status::Held => "held",
                    Status::Violated => "VIOLATED",
                    Status::NotExercised => "not exercised",
                };
                println!("  {mark:<13} {:<40} {}", verdict.duty, verdict.detail);
            }
        }
        let verdicts: usize = report.scenarios.iter().map(|s| s.verdicts.len()).sum();
        println!(
            "{} scenarios, {verdicts} verdicts, {} violated, {} not exercised, {:.1} s (margin {} ms)",
            report.scenarios.len(),
            violations.len(),
            report.not_exercised(),
            report.seconds,
            report.margin_ms
        );
        for (scenario, verdict) in &violations {
            println!(
                "duty violated: {} (scenario {scenario}): {}",
                verdict.duty, verdict.detail
            );
        }
    }
    Ok(if violations.is_empty() { 0 } else { 1 })
}
