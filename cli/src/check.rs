//! `leasewright check`: exhaustive model checking of docs/protocol.md with stateright (DFS with
//! symmetry reduction over runners).

use anyhow::Context as _;
use clap::Args;
use leasewright_conformance::junit;
use leasewright_model::{describe, properties, trace, Config, LeaseModel, TargetKind, Variant};
use serde_json::json;
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `leasewright check`. Defaults are [`Config::default`].
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Jobs (all of one project).
    #[arg(long, default_value_t = Config::default().jobs)]
    jobs: u8,
    /// Runners of that project (an outsider runner of another project is added too).
    #[arg(long, default_value_t = Config::default().runners)]
    runners: u8,
    /// Attempts per job at most.
    #[arg(long = "attempts", default_value_t = Config::default().attempts_per_job)]
    attempts_per_job: u8,
    /// Lease TTL in ticks.
    #[arg(long = "ttl", default_value_t = Config::default().lease_ttl)]
    lease_ttl: u8,
    /// Runner clock skew: messages carry runner time now+0..=SKEW.
    #[arg(long = "skew", default_value_t = Config::default().max_skew)]
    max_skew: u8,
    /// Let an executing runner lose contact and rejoin (off by default: with two jobs the state
    /// space grows past what checks in a minute; CI checks them with `--jobs 1 --ttl 2`).
    #[arg(long)]
    disconnects: bool,
    /// Leave out the outsider runner of another project.
    #[arg(long)]
    no_outsider: bool,
    /// Let runners re-send their messages with a forged lease id or fence.
    #[arg(long)]
    forgery: bool,
    /// Deployment target kind: fenced, idempotent or unfenced (a variant may require one).
    #[arg(long, default_value_t = Config::default().target)]
    target: TargetKind,
    /// A flawed design to check instead of the protocol (none, requeue-on-expiry, ...).
    #[arg(long, default_value_t = Variant::None)]
    variant: Variant,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Write a JUnit XML report here: one test case per property (a violated `always` or an
    /// unreached `sometimes` is a failure, with its counterexample).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Where counterexample traces (ITF JSON) are written.
    #[arg(long, default_value = "traces")]
    traces: PathBuf,
    /// Serve stateright's Explorer on this address instead of checking (never returns).
    #[arg(long, value_name = "ADDR")]
    explore: Option<String>,
    /// Print the names of the flawed variants, one a line, and exit.
    #[arg(long)]
    list_variants: bool,
}

impl CheckArgs {
    fn config(&self) -> Config {
        Config {
            jobs: self.jobs,
            runners: self.runners,
            attempts_per_job: self.attempts_per_job,
            lease_ttl: self.lease_ttl,
            max_skew: self.max_skew,
            disconnects: self.disconnects,
            outsider: !self.no_outsider,
            forgery: self.forgery,
            target: self.target,
            variant: Variant::None,
        }
        .with_variant(self.variant)
    }
}

/// Runs the check; returns the exit code (0: every `always` holds and every `sometimes` is
/// reached; 1 otherwise).
pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    if args.list_variants {
        for variant in Variant::ALL.iter().filter(|v| **v != Variant::None) {
            println!("{variant}");
        }
        return Ok(0);
    }
    let config = args.config();
    if let Some(addr) = &args.explore {
        eprintln!("serving the Explorer on http://{addr} (no symmetry reduction; Ctrl-C to stop)");
        LeaseModel::new(config.clone())
            .checker()
            .threads(args.threads.max(1))
            .serve(addr.as_str());
        return Ok(0);
    }
    if !args.json {
        println!("leasewright check: {}", summary(&config));
    }
    let model = LeaseModel::for_checking(config.clone());
    let start = Instant::now();
    // The protocol: exhaustive DFS with symmetry reduction. A flawed variant: BFS (which ignores
    // symmetry) on one thread, for short counterexamples.
    let builder = model.checker().finish_when(HasDiscoveries::AnyFailures);
    if config.variant == Variant::None {
        let checker = builder.symmetry().threads(args.threads.max(1)).spawn_dfs();
        report(args, &config, start, checker)
    } else {
        // One thread: the counterexample is short (stateright does not promise the shortest).
        report(args, &config, start, builder.threads(1).spawn_bfs())
    }
}

fn report<C: Checker<LeaseModel>>(
    args: &CheckArgs,
    config: &Config,
    start: Instant,
    checker: C,
) -> anyhow::Result<i32> {
    let config = config.clone();
    let mut last = Instant::now();
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(50));
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            eprintln!(
                "  ... {} unique states, {} total, depth {}, {:.0?}",
                checker.unique_state_count(),
                checker.state_count(),
                checker.max_depth(),
                start.elapsed()
            );
        }
    }
    let checker = checker.join();
    let elapsed = start.elapsed();
    let unique = checker.unique_state_count();
    let total = checker.state_count();
    let rate = unique as f64 / elapsed.as_secs_f64().max(1e-9);
    let model = checker.model();
    let discoveries = checker.discoveries();

    // The checker stops at the first `always` violation; then an unreached `sometimes` says
    // nothing, nor does an `always` that is not violated where it stopped. The invariants are
    // checked as one property: those that fail in the counterexample's last state are violated.
    let combined = discoveries.get(properties::EVERY_INVARIANT);
    let violated_there = combined
        .map(|path| properties::violated(model, path.last_state()))
        .unwrap_or_default();
    let stopped_early = model
        .properties()
        .iter()
        .any(|p| p.expectation.discovery_is_failure() && discoveries.contains_key(p.name));
    let mut results = Vec::new();
    let mut failed = stopped_early;
    let mut counterexamples = Vec::new();
    for property in properties::all(config.target) {
        let found = discoveries
            .get(property.name)
            .or_else(|| combined.filter(|_| violated_there.contains(&property.name)));
        let (kind, verdict, ok) = match property.expectation {
            Expectation::Always | Expectation::Eventually => (
                "always",
                match (found.is_some(), stopped_early) {
                    (true, _) => "violated",
                    (false, false) => "holds",
                    (false, true) => "not checked",
                },
                found.is_none(),
            ),
            Expectation::Sometimes => (
                "sometimes",
                match (found.is_some(), stopped_early) {
                    (true, _) => "reached",
                    (false, false) => "not reached",
                    (false, true) => "not checked",
                },
                found.is_some(),
            ),
        };
        failed |= !ok;
        results.push(json!({"property": property.name, "kind": kind, "verdict": verdict}));
        if kind == "always" {
            // Invariants that fail at the end of one counterexample share it: print it once.
            let shared = found.is_some() && !discoveries.contains_key(property.name);
            if let Some(c) = counterexamples
                .iter_mut()
                .find(|c: &&mut serde_json::Value| shared && c["shared"] == json!(true))
            {
                c["also"]
                    .as_array_mut()
                    .expect("an array")
                    .push(json!(property.name));
            } else if let Some(path) = found {
                let path = path.clone().into_vec();
                let trace_path = save_trace(args, &config, property.name, &path)?;
                counterexamples.push(json!({
                    "property": property.name,
                    "steps": describe::steps(model, &path),
                    "mermaid": describe::mermaid(model, &path),
                    "trace": trace_path.display().to_string(),
                    "also": [],
                    "shared": shared,
                }));
            }
        }
    }
    for c in &mut counterexamples {
        if let Some(fields) = c.as_object_mut() {
            fields.remove("shared");
        }
    }
    let complete = !stopped_early;
    if let Some(file) = &args.junit {
        write_junit(file, &results, &counterexamples, elapsed)?;
    }
    if args.json {
        let doc = json!({
            "config": config,
            "unique_states": unique,
            "total_states": total,
            "max_depth": checker.max_depth(),
            "seconds": elapsed.as_secs_f64(),
            "states_per_second": rate,
            "complete": complete,
            "properties": results,
            "counterexamples": counterexamples,
            "ok": !failed,
        });
        crate::output::print_json(&doc)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{} unique states, {} total, max depth {}, in {:.2} s ({:.0} unique states/s){}",
            unique,
            total,
            checker.max_depth(),
            elapsed.as_secs_f64(),
            rate,
            if complete {
                ""
            } else {
                " (stopped at the first violation)"
            }
        )?;
        for r in &results {
            writeln!(
                out,
                "  {:<9} {:<12} {}",
                r["kind"].as_str().unwrap_or(""),
                r["verdict"].as_str().unwrap_or(""),
                r["property"].as_str().unwrap_or("")
            )?;
        }
        for c in &counterexamples {
            let also: Vec<String> = c["also"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!(" and \"{}\"", p.as_str().unwrap_or("")))
                .collect();
            writeln!(
                out,
                "\nCounterexample to \"{}\"{}:",
                c["property"].as_str().unwrap_or(""),
                also.concat()
            )?;
            for step in c["steps"].as_array().into_iter().flatten() {
                writeln!(out, "  {}", step.as_str().unwrap_or(""))?;
            }
            writeln!(
                out,
                "\n```mermaid\n{}```",
                c["mermaid"].as_str().unwrap_or("")
            )?;
            writeln!(
                out,
                "ITF trace written to {}",
                c["trace"].as_str().unwrap_or("")
            )?;
        }
        if failed {
            if complete {
                writeln!(out, "\nFAILED: a `sometimes` property was not reached: the bounds are too small to show it, so the `always` results prove less than they claim.")?;
            } else {
                writeln!(out, "\nFAILED: an `always` property is violated.")?;
            }
        } else {
            writeln!(
                out,
                "\nOK: every `always` property holds and every `sometimes` property is reached."
            )?;
        }
    }
    Ok(if failed { 1 } else { 0 })
}

/// One JUnit case per property; a property that did not hold or was not reached fails, with
/// the counterexample that shows it.
fn write_junit(
    file: &std::path::Path,
    results: &[serde_json::Value],
    counterexamples: &[serde_json::Value],
    elapsed: Duration,
) -> anyhow::Result<()> {
    let per_case = elapsed.as_secs_f64() / results.len().max(1) as f64;
    let cases: Vec<junit::Case> = results
        .iter()
        .map(|r| {
            let property = r["property"].as_str().unwrap_or("");
            let verdict = r["verdict"].as_str().unwrap_or("");
            let failure = (!matches!(verdict, "holds" | "reached")).then(|| {
                let shown = counterexamples.iter().find(|c| {
                    c["property"] == property
                        || c["also"]
                            .as_array()
                            .is_some_and(|a| a.contains(&r["property"]))
                });
                let mut report = format!("{property}: {verdict}\n");
                for step in shown
                    .and_then(|c| c["steps"].as_array())
                    .into_iter()
                    .flatten()
                {
                    report.push_str(step.as_str().unwrap_or(""));
                    report.push('\n');
                }
                if let Some(trace) = shown.and_then(|c| c["trace"].as_str()) {
                    report.push_str(&format!("ITF trace: {trace}\n"));
                }
                report
            });
            junit::Case {
                name: property.to_string(),
                suite: r["kind"].as_str().unwrap_or("property").to_string(),
                seconds: per_case,
                failure,
            }
        })
        .collect();
    std::fs::write(file, junit::render_for("check", &cases))
        .with_context(|| format!("writing {}", file.display()))
}

fn summary(c: &Config) -> String {
    format!(
        "jobs {}, runners {}{}, attempts/job {}, lease_ttl {}, runner time 0..={}, disconnects {}, forgery {}, target {}, variant {}",
        c.jobs,
        c.runners,
        if c.outsider { " + 1 outsider" } else { "" },
        c.attempts_per_job,
        c.lease_ttl,
        c.max_skew,
        c.disconnects,
        c.forgery,
        c.target,
        c.variant
    )
}

fn save_trace(
    args: &CheckArgs,
    config: &Config,
    property: &str,
    path: &[(leasewright_model::State, Option<leasewright_model::Action>)],
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&args.traces)
        .with_context(|| format!("creating {}", args.traces.display()))?;
    let slug: String = property
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = args
        .traces
        .join(format!("check-{}-{slug}.itf.json", config.variant));
    let text = trace::to_string(
        config,
        "check",
        0,
        &format!("counterexample to \"{property}\""),
        &trace::steps_of(path),
    );
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}
