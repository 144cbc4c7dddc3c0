//! `leasewright check`: exhaustive model checking of docs/protocol.md with stateright (DFS with
//! symmetry reduction over runners, jobs and outcomes), the flawed variants' shortest
//! counterexamples (the model's own breadth-first search), and the named configurations of a
//! profile (`--profile ci`).

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use leasewright_model::{
    describe, properties, search, trace, Action, Config, LeaseModel, State, TargetKind, Variant,
};
use serde_json::json;
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `leasewright check`. Defaults are [`Config::default`].
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Jobs of the checked project.
    #[arg(long, default_value_t = Config::default().jobs, value_parser = clap::value_parser!(u8).range(1..))]
    jobs: u8,
    /// Runners of that project (an outsider runner of another project is added too).
    #[arg(long, default_value_t = Config::default().runners, value_parser = clap::value_parser!(u8).range(1..))]
    runners: u8,
    /// Attempts per job at most.
    #[arg(long = "attempts", default_value_t = Config::default().attempts_per_job, value_parser = clap::value_parser!(u8).range(1..))]
    attempts_per_job: u8,
    /// Lease TTL in ticks.
    #[arg(long = "ttl", default_value_t = Config::default().lease_ttl, value_parser = clap::value_parser!(u8).range(1..))]
    lease_ttl: u8,
    /// Runner clock skew: messages carry runner time 0..=SKEW.
    #[arg(long = "skew", default_value_t = Config::default().max_skew)]
    max_skew: u8,
    /// Let an executing runner lose contact and rejoin (off by default: with two jobs of two
    /// attempts the state space grows past what checks in a minute; `--profile ci` checks them).
    #[arg(long)]
    disconnects: bool,
    /// Leave out the outsider runner of another project.
    #[arg(long)]
    no_outsider: bool,
    /// Jobs of the outsider's project, claimed and run by the outsider runner.
    #[arg(long, default_value_t = Config::default().outsider_jobs)]
    outsider_jobs: u8,
    /// Every job, of both projects, names one target slot.
    #[arg(long)]
    shared_slot: bool,
    /// Let executing runners send the side effects of R8 (source fetch, log append, artifact
    /// put/get, cache put/get), probed in every state (off by default: they multiply the states).
    #[arg(long)]
    side_effects: bool,
    /// Let an operator revoke a runner while it holds a lease (`runner_revoke`): its messages
    /// are refused `unknown_runner` and recorded nowhere, its lease runs out and is swept as a
    /// lost runner's (docs/model.md "Revocation").
    #[arg(long)]
    revocation: bool,
    /// Let the database fail over once: the server's state goes back to before its last
    /// committed transition while runners, messages in flight and targets keep theirs, and the
    /// epoch rises (docs/model.md "Failover"; not with --side-effects).
    #[arg(long)]
    failover: bool,
    /// With --failover: attempt ids and lease ids come from the server's counters, which the
    /// failover rolls back, so the next claim is issued the lost claim's ids again (its fence
    /// carries the epoch; docs/model.md "Caught by their harm").
    #[arg(long)]
    reissued_ids: bool,
    /// Replica clocks (docs/protocol.md §3.1): every server-side step is judged at `clock + d`
    /// for a `d` in [-N, N] the environment chooses, and the sweep and the wait after an epoch
    /// change act 2N past a lease (0: one clock).
    #[arg(long, default_value_t = 0)]
    replica_skew: u8,
    /// Batch claims of up to K jobs (docs/protocol.md "Batch claim"); 0: none.
    #[arg(long, default_value_t = 0)]
    batch_claim: u8,
    /// The first N jobs name one slot, every later job a slot of its own (with --batch-claim:
    /// batches that walk past jobs waiting on a busy slot).
    #[arg(long, default_value_t = 0)]
    slot_shared_by: u8,
    /// Deployment target kind: fenced, idempotent or unfenced (a variant may require one).
    #[arg(long, default_value_t = Config::default().target)]
    target: TargetKind,
    /// A flawed design to check instead of the protocol (see --list-variants).
    #[arg(long, default_value_t = Variant::None)]
    variant: Variant,
    /// Check a named set of configurations instead of one (`ci`: what CI runs).
    #[arg(long, value_enum)]
    profile: Option<Profile>,
    /// Checker threads (1 or more).
    #[arg(long, default_value_t = 2, value_parser = crate::output::at_least_one)]
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

/// A named set of configurations.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Profile {
    /// The configurations CI checks: every target kind, two jobs with disconnects and rejoins,
    /// two-tick leases with two jobs, three attempts, runner-clock skew, outsider jobs, shared
    /// slots, the side effects of R8 (docs/model.md says what each covers).
    Ci,
}

/// One named configuration of a profile. What its bounds cannot test is not listed here: a
/// property whose witness the check does not reach there is reported `vacuous-here`
/// ([`properties::vacuous`]).
pub struct Named {
    /// Its name.
    pub name: &'static str,
    /// What it checks.
    pub config: Config,
    /// Checked only along paths of at most this many states (stateright's
    /// `target_max_depth`), where the whole space is too large; `None`: exhaustively.
    pub max_depth: Option<usize>,
}

/// The ledger bound of the `one-job-ledger` configuration: with the ledger in the state every
/// distinct record is a new state, so its paths end at this many distinct records.
const ONE_JOB_LEDGER: u8 = 3;

/// The configurations of `profile`.
pub fn profile(profile: Profile) -> Vec<Named> {
    match profile {
        Profile::Ci => {
            let one_job = Config::one_job();
            let two_jobs = Config {
                attempts_per_job: 1,
                ..Config::default()
            };
            vec![
                Named {
                    max_depth: None,
                    name: "one-job-fenced",
                    config: one_job.clone(),
                },
                Named {
                    max_depth: None,
                    name: "one-job-idempotent",
                    config: Config {
                        target: TargetKind::Idempotent,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-unfenced",
                    config: Config {
                        target: TargetKind::Unfenced,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-three-attempts",
                    config: Config {
                        attempts_per_job: 3,
                        lease_ttl: 1,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-skew",
                    config: Config {
                        max_skew: 1,
                        ..one_job.clone()
                    },
                },
                // Two jobs of two attempts each (retries beside a second job: stale completions,
                // a retried job's slot token next to another job) with disconnects and rejoins:
                // every path of the default configuration and of two jobs of one attempt with
                // disconnects is one of its paths.
                Named {
                    max_depth: None,
                    name: "two-jobs-retries-disconnects",
                    config: Config {
                        disconnects: true,
                        ..Config::default()
                    },
                },
                Named {
                    max_depth: None,
                    name: "two-jobs-ttl-2",
                    config: Config {
                        lease_ttl: 2,
                        ..two_jobs.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "outsider-jobs",
                    config: Config {
                        jobs: 1,
                        outsider_jobs: 1,
                        disconnects: true,
                        ..two_jobs.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-ledger",
                    config: Config {
                        lease_ttl: 1,
                        disconnects: false,
                        ledger: ONE_JOB_LEDGER,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-side-effects",
                    config: Config {
                        lease_ttl: 1,
                        disconnects: false,
                        side_effects: true,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "outsider-side-effects",
                    config: Config {
                        jobs: 1,
                        outsider_jobs: 1,
                        side_effects: true,
                        ..two_jobs.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "one-job-failover",
                    config: Config {
                        failover: true,
                        reissued_ids: true,
                        ..one_job.clone()
                    },
                },
                // Servers that differ in lease ttl through two failovers (issue 39 item 3): the
                // lease policy is server state a failover rolls back, recorded again by every
                // live server on the new primary (`failover-forgets-policy` skips that).
                Named {
                    max_depth: None,
                    name: "policy-failover",
                    config: Config::policy_failover(),
                },
                Named {
                    // Replica clocks (docs/protocol.md §3.1): every server step judged at
                    // clock + d, d in [-1, 1], through a failover; one attempt, one-tick leases,
                    // no outsider and no forgery (each replica clock multiplies the states).
                    max_depth: None,
                    name: "one-job-replica-clocks",
                    config: Config {
                        failover: true,
                        replica_skew: 1,
                        attempts_per_job: 1,
                        lease_ttl: 1,
                        disconnects: false,
                        outsider: false,
                        forgery: false,
                        ..one_job.clone()
                    },
                },
                Named {
                    max_depth: None,
                    name: "shared-slot",
                    config: Config {
                        jobs: 1,
                        outsider_jobs: 1,
                        shared_slot: true,
                        ..two_jobs.clone()
                    },
                },
                // The shared slot with retries: a retried job's new slot token next to the other
                // project's job on the same slot.
                Named {
                    max_depth: None,
                    name: "shared-slot-retries",
                    config: Config {
                        jobs: 1,
                        outsider_jobs: 1,
                        shared_slot: true,
                        ..Config::default()
                    },
                },
                Named {
                    max_depth: None,
                    name: "batch-claim",
                    config: Config::batch_claims(),
                },
                // Four jobs (two on slot 0): the K earliest claimable jobs reach past the K
                // earliest queued ones, so a batch that stops at busy slots differs from the rule
                // (invariant 29's witness). The whole space exceeds 1.7 million states: checked
                // along every path of up to 10 states (51,053 states).
                Named {
                    max_depth: Some(10),
                    name: "batch-claim-walk",
                    config: Config {
                        jobs: 4,
                        outsider: false,
                        ..Config::batch_claims()
                    },
                },
                // Batches executed by two runners (issue 39 item 2): four jobs on two slots in
                // turn, two attempts each (a swept job retried), every lease a batch gives
                // executed, heartbeated and reported; a batch may start on either slot. The whole space exceeds two million states: checked
                // along every path of up to 10 states, past `batch-one-slot-token`'s 8-step
                // counterexample.
                Named {
                    max_depth: Some(10),
                    name: "batch-execution-walk",
                    config: Config::batch_execution(),
                },
            ]
        }
    }
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
            target: self.target,
            outsider_jobs: self.outsider_jobs,
            shared_slot: self.shared_slot,
            side_effects: self.side_effects,
            failover: self.failover,
            reissued_ids: self.reissued_ids,
            replica_skew: self.replica_skew,
            batch_claim: self.batch_claim,
            slot_shared_by: self.slot_shared_by,
            revocation: self.revocation,
            ..Config::default()
        }
        .with_variant(self.variant)
    }
}

/// Runs the check; returns the exit code (0: every `always` holds and every `sometimes` is
/// reached; 1 otherwise; 2 for arguments that do not make a model).
pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    if args.list_variants {
        for &variant in Variant::ALL.iter().filter(|v| **v != Variant::None) {
            println!("{variant}");
        }
        return Ok(0);
    }
    if let Some(p) = args.profile {
        return run_profile(args, p);
    }
    let config = args.config();
    if config.outsider_jobs > 0 && !config.outsider {
        eprintln!("error: --outsider-jobs needs the outsider (drop --no-outsider)");
        return Ok(2);
    }
    if config.reissued_ids && !config.failover {
        eprintln!("error: --reissued-ids needs --failover (only a failover issues an id again)");
        return Ok(2);
    }
    if config.failover && (config.side_effects || config.ledger > 0) {
        eprintln!("error: --failover is modelled without the side effects and the stored ledger");
        return Ok(2);
    }
    if config.all_jobs() > 7 || config.runners > 6 {
        eprintln!("error: at most 7 jobs and 6 runners");
        return Ok(2);
    }
    if let Some(addr) = &args.explore {
        eprintln!("serving the Explorer on http://{addr} (no symmetry reduction; Ctrl-C to stop)");
        LeaseModel::new(config.clone())
            .checker()
            .threads(args.threads.max(1))
            .serve(addr.as_str());
        return Ok(0);
    }
    if config.variant != Variant::None {
        return run_variant(args, &config);
    }
    if !args.json {
        println!("leasewright check: {}", summary(&config));
    }
    let outcome = check_protocol(args, &config, None, !args.json)?;
    if let Some(file) = &args.junit {
        junit_of(file, &[&outcome.doc])?;
    }
    if args.json {
        crate::output::print_json(&outcome.doc)?;
    } else {
        print_outcome(&outcome)?;
    }
    Ok(if outcome.ok { 0 } else { 1 })
}

/// The verdicts a property gets (`verdict` in the JSON report).
const HOLDS: &str = "holds";
const VIOLATED: &str = "violated";
const REACHED: &str = "reached";
const NOT_REACHED: &str = "not reached";
/// The property's witness was not reached in this configuration ([`properties::vacuous`]).
const VACUOUS: &str = "vacuous-here";
/// The check stopped at the first violation before it could tell.
const NOT_CHECKED: &str = "not checked";
/// A `sometimes` not reached along the paths of a depth-bounded configuration.
const NOT_REACHED_IN_DEPTH: &str = "not reached within the depth bound";
/// A witness not reached in this configuration: what it guards is `vacuous-here`.
const UNREACHED: &str = "unreached";

/// What checking one configuration found.
struct Outcome {
    doc: serde_json::Value,
    ok: bool,
}

fn check_protocol(
    args: &CheckArgs,
    config: &Config,
    max_depth: Option<usize>,
    progress: bool,
) -> anyhow::Result<Outcome> {
    let model = LeaseModel::for_checking(config.clone());
    let start = Instant::now();
    let mut builder = model.checker().finish_when(HasDiscoveries::AnyFailures);
    if let Some(depth) = max_depth {
        builder = builder.target_max_depth(depth);
    }
    let checker = builder.symmetry().threads(args.threads.max(1)).spawn_dfs();
    let mut last = Instant::now();
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(50));
        if progress && last.elapsed() >= Duration::from_secs(5) {
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
    let model = checker.model();
    let discoveries = checker.discoveries();
    let combined = discoveries.get(properties::EVERY_INVARIANT);
    let violated_there = combined
        .map(|path| properties::violated(model, path.last_state()))
        .unwrap_or_default();
    let stopped_early = combined.is_some();
    let mut results = Vec::new();
    let mut ok = !stopped_early;
    let mut counterexamples = Vec::new();
    for property in properties::all(config) {
        let found = discoveries
            .get(property.name)
            .or_else(|| combined.filter(|_| violated_there.contains(&property.name)));
        // Derived from what this run reached: a property whose witness (a `sometimes` about
        // its precondition) was not reached is `vacuous-here`, never "holds" or "not reached".
        // A violation is reported whatever the witness says.
        let vacuous = properties::vacuous(property.name, |w| discoveries.contains_key(w));
        let (kind, verdict, good) = match property.expectation {
            // A witness only tells whether what it guards was put at stake here.
            Expectation::Sometimes if properties::is_witness(property.name) => (
                "witness",
                match (found.is_some(), stopped_early) {
                    (true, _) => REACHED,
                    (false, true) => NOT_CHECKED,
                    (false, false) => UNREACHED,
                },
                true,
            ),
            Expectation::Always | Expectation::Eventually => (
                "always",
                match (found.is_some(), stopped_early, &vacuous) {
                    (true, _, _) => VIOLATED,
                    (false, true, _) => NOT_CHECKED,
                    (false, false, Some(_)) => VACUOUS,
                    (false, false, None) => HOLDS,
                },
                found.is_none(),
            ),
            Expectation::Sometimes => match (found.is_some(), stopped_early, &vacuous) {
                (true, _, _) => ("sometimes", REACHED, true),
                (false, true, _) => ("sometimes", NOT_CHECKED, true),
                (false, false, Some(_)) => ("sometimes", VACUOUS, true),
                // Paths cut at a depth may end before a case: not a failure of this
                // configuration (the profile still needs it reached in some configuration).
                (false, false, None) if max_depth.is_some() => {
                    ("sometimes", NOT_REACHED_IN_DEPTH, true)
                }
                (false, false, None) => ("sometimes", NOT_REACHED, false),
            },
        };
        ok &= good;
        let mut result = json!({"property": property.name, "kind": kind, "verdict": verdict});
        if verdict == VACUOUS {
            result["reason"] = json!(vacuous);
        }
        results.push(result);
    }
    if let Some(path) = combined {
        let path = path.clone().into_vec();
        counterexamples.push(counterexample(
            args,
            model,
            violated_there
                .first()
                .copied()
                .unwrap_or(properties::EVERY_INVARIANT),
            &violated_there,
            &path,
        )?);
    }
    let doc = json!({
        "config": config,
        "unique_states": unique,
        "total_states": checker.state_count(),
        "max_depth": checker.max_depth(),
        "seconds": elapsed.as_secs_f64(),
        "states_per_second": unique as f64 / elapsed.as_secs_f64().max(1e-9),
        "complete": !stopped_early,
        "max_depth_bound": max_depth,
        "ledger_paths_cut": model.ledger_paths_cut(),
        "properties": results,
        "counterexamples": counterexamples,
        "ok": ok,
    });
    Ok(Outcome { doc, ok })
}

/// A counterexample as JSON: its steps, its diagram, the trace file, and every invariant that
/// fails at its end.
fn counterexample(
    args: &CheckArgs,
    model: &LeaseModel,
    property: &str,
    violated: &[&str],
    path: &[(State, Option<Action>)],
) -> anyhow::Result<serde_json::Value> {
    let trace_path = save_trace(args, &model.config, property, path)?;
    let also: Vec<&str> = violated
        .iter()
        .copied()
        .filter(|p| *p != property)
        .collect();
    Ok(json!({
        "property": property,
        "also": also,
        "steps": describe::steps(model, path),
        "mermaid": describe::mermaid(model, path),
        "trace": trace_path.display().to_string(),
    }))
}

/// A flawed variant: the shortest counterexample to the property it is caught by (breadth-first).
fn run_variant(args: &CheckArgs, config: &Config) -> anyhow::Result<i32> {
    let property = properties::caught_by(config.variant)[0];
    if !args.json {
        println!("leasewright check: {}", summary(config));
        println!("searching breadth-first for the shortest counterexample to \"{property}\"");
    }
    let start = Instant::now();
    let model = LeaseModel::for_checking(config.clone()).focused(property);
    let found = search::shortest_counterexample(&model, 20_000_000);
    let elapsed = start.elapsed();
    let full = LeaseModel::for_checking(config.clone());
    let mut counterexamples = Vec::new();
    if let Some(path) = &found.counterexample {
        let violated = properties::violated(&full, &path.last().expect("a state").0);
        counterexamples.push(counterexample(args, &full, property, &violated, path)?);
    }
    let caught = !counterexamples.is_empty();
    let doc = json!({
        "config": config,
        "property": property,
        "unique_states": found.states,
        "depth": found.depth,
        "seconds": elapsed.as_secs_f64(),
        "counterexamples": counterexamples,
        "ok": !caught,
    });
    if let Some(file) = &args.junit {
        let result = json!({
            "property": property,
            "kind": "always",
            "verdict": if caught { "violated" } else { "holds" },
        });
        write_junit(file, &[result], &counterexamples, elapsed)?;
    }
    if args.json {
        crate::output::print_json(&doc)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{} unique states, breadth-first to depth {}, in {:.2} s",
            found.states,
            found.depth,
            elapsed.as_secs_f64()
        )?;
        print_counterexamples(&mut out, &doc)?;
        if caught {
            writeln!(out, "\nFAILED: an `always` property is violated.")?;
        } else {
            writeln!(out, "\nno counterexample to \"{property}\" found")?;
        }
    }
    Ok(if caught { 1 } else { 0 })
}

fn run_profile(args: &CheckArgs, p: Profile) -> anyhow::Result<i32> {
    let start = Instant::now();
    let mut docs = Vec::new();
    let mut ok = true;
    for named in profile(p) {
        if !args.json {
            println!(
                "== {}: {}{}",
                named.name,
                summary(&named.config),
                named
                    .max_depth
                    .map(|d| format!(" (paths of up to {d} states only)"))
                    .unwrap_or_default()
            );
        }
        let outcome = check_protocol(args, &named.config, named.max_depth, !args.json)?;
        ok &= outcome.ok;
        if !args.json {
            print_outcome(&outcome)?;
            println!();
        }
        let mut doc = outcome.doc;
        doc["name"] = json!(named.name);
        doc["covers"] = json!(covers(&named.config));
        docs.push(doc);
    }
    let elapsed = start.elapsed();
    let untested = vacuous_everywhere(&docs);
    ok &= untested.is_empty();
    if let Some(file) = &args.junit {
        junit_of(file, &docs.iter().collect::<Vec<_>>())?;
    }
    if args.json {
        let doc = json!({"profile": format!("{p:?}").to_lowercase(), "configurations": docs,
                         "vacuous_everywhere": untested,
                         "seconds": elapsed.as_secs_f64(), "ok": ok});
        crate::output::print_json(&doc)?;
    } else {
        println!("profile: {} configurations", docs.len());
        for d in &docs {
            let ledger = match d["config"]["ledger"].as_u64() {
                Some(bound) if bound > 0 => format!(
                    ", ledger on (bound {bound}: {} states cut)",
                    d["ledger_paths_cut"]
                ),
                _ => String::new(),
            };
            let vacuous = d["properties"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["verdict"] == VACUOUS)
                .count();
            println!(
                "  {:<28} {:>10} states {:>8.1} s  {}  ({} properties vacuous here{ledger})",
                d["name"].as_str().unwrap_or(""),
                d["unique_states"],
                d["seconds"].as_f64().unwrap_or(0.0),
                if d["ok"] == json!(true) {
                    "ok"
                } else {
                    "FAILED"
                },
                vacuous
            );
            println!("      covers: {}", d["covers"].as_str().unwrap_or(""));
        }
        for property in &untested {
            println!("  vacuous in every configuration of the profile: {property}");
        }
        if !untested.is_empty() {
            println!("FAILED: the profile cannot test every property (see above).");
        }
        println!(
            "{} in {:.1} s",
            if ok { "OK" } else { "FAILED" },
            elapsed.as_secs_f64()
        );
    }
    Ok(if ok { 0 } else { 1 })
}

/// The properties no configuration of a profile can test: vacuous (or absent) in every one.
/// Such a property would be reported by the profile without ever being checked, so the profile
/// fails.
fn vacuous_everywhere(docs: &[serde_json::Value]) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    let mut tested: Vec<&str> = Vec::new();
    for doc in docs {
        for r in doc["properties"].as_array().into_iter().flatten() {
            let name = r["property"].as_str().unwrap_or("");
            if !names.contains(&name) {
                names.push(name);
            }
            if r["verdict"] != VACUOUS
                && r["verdict"] != NOT_REACHED_IN_DEPTH
                && !tested.contains(&name)
            {
                tested.push(name);
            }
        }
    }
    names
        .into_iter()
        .filter(|n| !tested.contains(n))
        .map(str::to_string)
        .collect()
}

fn print_counterexamples(
    out: &mut impl std::io::Write,
    doc: &serde_json::Value,
) -> anyhow::Result<()> {
    for c in doc["counterexamples"].as_array().into_iter().flatten() {
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
    Ok(())
}

fn print_outcome(outcome: &Outcome) -> anyhow::Result<()> {
    let doc = &outcome.doc;
    let mut out = std::io::stdout().lock();
    let complete = doc["complete"] == json!(true);
    writeln!(
        out,
        "{} unique states, {} total, max depth {}, in {:.2} s ({:.0} unique states/s){}",
        doc["unique_states"],
        doc["total_states"],
        doc["max_depth"],
        doc["seconds"].as_f64().unwrap_or(0.0),
        doc["states_per_second"].as_f64().unwrap_or(0.0),
        if complete {
            ""
        } else {
            " (stopped at the first violation)"
        }
    )?;
    if let Some(bound) = doc["config"]["ledger"].as_u64().filter(|b| *b > 0) {
        writeln!(
            out,
            "ledger in the state: {} states had successors the bound of {bound} distinct records cut off (each ends the paths through it)",
            doc["ledger_paths_cut"]
        )?;
    }
    for r in doc["properties"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "  {:<9} {:<12} {}{}",
            r["kind"].as_str().unwrap_or(""),
            r["verdict"].as_str().unwrap_or(""),
            r["property"].as_str().unwrap_or(""),
            r["reason"]
                .as_str()
                .map(|why| format!(" ({why})"))
                .unwrap_or_default()
        )?;
    }
    print_counterexamples(&mut out, doc)?;
    if !outcome.ok {
        if complete {
            writeln!(out, "\nFAILED: a `sometimes` property was not reached: the bounds are too small to show it, so the `always` results prove less than they claim.")?;
        } else {
            writeln!(out, "\nFAILED: an `always` property is violated.")?;
        }
    } else {
        writeln!(
            out,
            "\nOK: every `always` property holds and every `sometimes` property is reached, except those vacuous here (listed with the witness this configuration did not reach: nothing it explored put them at stake)."
        )?;
    }
    Ok(())
}

/// One JUnit case per property; a property that did not hold or was not reached fails, with
/// the counterexample that shows it; a property vacuous in its configuration is `skipped`, with
/// the reason (so no CI dashboard counts it as passed). Written by quick-junit, as
/// `leasewright conform`'s report is.
fn write_junit(
    file: &std::path::Path,
    results: &[serde_json::Value],
    counterexamples: &[serde_json::Value],
    elapsed: Duration,
) -> anyhow::Result<()> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let per_case = Duration::try_from_secs_f64(elapsed.as_secs_f64() / results.len().max(1) as f64)
        .unwrap_or_default();
    let mut report = Report::new("leasewright check");
    let mut kinds: Vec<&str> = results
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("property"))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let mut suite = TestSuite::new(kind);
        for r in results
            .iter()
            .filter(|r| r["kind"].as_str().unwrap_or("property") == kind)
        {
            let property = r["property"].as_str().unwrap_or("");
            let verdict = r["verdict"].as_str().unwrap_or("");
            let status = match verdict {
                HOLDS | REACHED => TestCaseStatus::success(),
                NOT_REACHED_IN_DEPTH => {
                    let mut status = TestCaseStatus::skipped();
                    status
                        .set_type(NOT_REACHED_IN_DEPTH)
                        .set_message(NOT_REACHED_IN_DEPTH);
                    status
                }
                UNREACHED => {
                    let mut status = TestCaseStatus::skipped();
                    status
                        .set_type(UNREACHED)
                        .set_message("witness not reached here: what it guards is vacuous-here");
                    status
                }
                VACUOUS => {
                    let mut status = TestCaseStatus::skipped();
                    status
                        .set_type(VACUOUS)
                        .set_message(r["reason"].as_str().unwrap_or(VACUOUS));
                    status
                }
                _ => {
                    let shown = counterexamples.iter().find(|c| {
                        c["property"] == property
                            || c["also"]
                                .as_array()
                                .is_some_and(|a| a.contains(&r["property"]))
                    });
                    let mut text = format!("{property}: {verdict}\n");
                    for step in shown
                        .and_then(|c| c["steps"].as_array())
                        .into_iter()
                        .flatten()
                    {
                        text.push_str(step.as_str().unwrap_or(""));
                        text.push('\n');
                    }
                    if let Some(trace) = shown.and_then(|c| c["trace"].as_str()) {
                        text.push_str(&format!("ITF trace: {trace}\n"));
                    }
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status
                        .set_message(format!("{property}: {verdict}"))
                        .set_type("violation")
                        .set_description(text);
                    status
                }
            };
            let mut case = TestCase::new(property, status);
            case.set_classname(format!("check.{kind}"))
                .set_time(per_case);
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report.set_time(elapsed);
    let text = report.to_string().context("rendering the JUnit report")?;
    std::fs::write(file, text).with_context(|| format!("writing {}", file.display()))
}

/// A JUnit report of checked configurations: one case per configuration and property (named
/// `configuration: property` when the configuration has a name).
fn junit_of(file: &std::path::Path, docs: &[&serde_json::Value]) -> anyhow::Result<()> {
    let mut results = Vec::new();
    let mut counterexamples = Vec::new();
    let mut seconds = 0.0;
    for doc in docs {
        let prefix = doc["name"]
            .as_str()
            .map(|n| format!("{n}: "))
            .unwrap_or_default();
        let name = |v: &serde_json::Value| json!(format!("{prefix}{}", v.as_str().unwrap_or("")));
        for r in doc["properties"].as_array().into_iter().flatten() {
            let mut r = r.clone();
            r["property"] = name(&r["property"]);
            results.push(r);
        }
        for c in doc["counterexamples"].as_array().into_iter().flatten() {
            let mut c = c.clone();
            c["property"] = name(&c["property"]);
            let also: Vec<serde_json::Value> = c["also"]
                .as_array()
                .into_iter()
                .flatten()
                .map(name)
                .collect();
            c["also"] = json!(also);
            counterexamples.push(c);
        }
        seconds += doc["seconds"].as_f64().unwrap_or(0.0);
    }
    write_junit(
        file,
        &results,
        &counterexamples,
        Duration::from_secs_f64(seconds),
    )
}

/// What a configuration covers, in one short line: the profile's summary prints it for each
/// configuration (and `--json` has it as `covers`).
pub fn covers(c: &Config) -> String {
    let jobs = if c.outsider && c.outsider_jobs > 0 {
        format!("jobs {}+{} (other project)", c.jobs, c.outsider_jobs)
    } else {
        format!("jobs {}", c.jobs)
    };
    let mut parts = vec![
        jobs,
        format!("attempts {}", c.attempts_per_job),
        format!("ttl {}", c.lease_ttl),
        format!("runner time 0..={}", c.max_skew),
        if c.disconnects {
            "disconnects+rejoins"
        } else {
            "no disconnects"
        }
        .to_string(),
        if c.shared_slot {
            "shared slot"
        } else {
            "slot per job"
        }
        .to_string(),
        format!("target {}", c.target),
    ];
    if c.ledger > 0 {
        parts.push(format!("ledger {}", c.ledger));
    }
    if c.side_effects {
        parts.push("side effects".to_string());
    }
    if c.failover {
        parts.push("failover".to_string());
    }
    if c.reissued_ids {
        parts.push("reissued attempt and lease ids".to_string());
    }
    if !c.outsider {
        parts.push("no outsider".to_string());
    }
    parts.join(", ")
}

fn summary(c: &Config) -> String {
    format!(
        "jobs {}{}, runners {}{}, attempts/job {}, lease_ttl {}, runner time 0..={}, disconnects {}, slots {}, target {}, variant {}, {}",
        c.jobs,
        if c.outsider_jobs > 0 && c.outsider {
            format!(" + {} of the outsider's project", c.outsider_jobs)
        } else {
            String::new()
        },
        c.runners,
        if c.outsider { " + 1 outsider" } else { "" },
        c.attempts_per_job,
        c.lease_ttl,
        c.max_skew,
        c.disconnects,
        if c.shared_slot {
            "one shared".to_string()
        } else if c.slots_in_turn > 1 {
            format!("{} taken in turn", c.slots_in_turn)
        } else if c.slot_shared_by > 1 {
            format!("the first {} jobs on one, the others one each", c.slot_shared_by)
        } else {
            "one per job".to_string()
        },
        c.target,
        c.variant,
        if c.ledger > 0 {
            format!(
                "ledger in the state (bound: {} distinct records; a path ends when it is full)",
                c.ledger
            )
        } else {
            "ledger checked by probes".to_string()
        },
    ) + if c.side_effects {
        ", side effects (R8)"
    } else {
        ""
    } + &if c.failover {
        let count = match c.failovers() {
            1 => "one failover".to_string(),
            n => format!("up to {n} failovers"),
        };
        format!(", {count} (each: the last committed server transition lost, the epoch rises)")
    } else {
        String::new()
    } + if c.reissued_ids {
        ", attempt and lease ids reissued after the failover (the fence carries the epoch)"
    } else {
        ""
    } + &if c.replica_skew > 0 {
        // This configuration's margins (a flawed variant may shorten either).
        let model = LeaseModel::new(c.clone());
        let (sweep, wait) = (model.sweep_margin(), model.skew_margin());
        let margins = if sweep == wait {
            format!("sweep and epoch wait {sweep} past a lease")
        } else {
            format!("sweep {sweep} and epoch wait {wait} past a lease")
        };
        format!(
            ", replica clocks within ±{} of the clock ({margins})",
            c.replica_skew
        )
    } else {
        String::new()
    } + &if c.batch_claim > 1 {
        format!(", batch claims of up to {} jobs", c.batch_claim)
    } else {
        String::new()
    }
}

fn save_trace(
    args: &CheckArgs,
    config: &Config,
    property: &str,
    path: &[(State, Option<Action>)],
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
