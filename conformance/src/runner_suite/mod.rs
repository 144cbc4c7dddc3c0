//! The runner suite (docs/runner-suite.md): the other half of the protocol, the runner's duties
//! of docs/protocol.md §6.4, checked against any runner given as a command line.
//!
//! The suite plays the control plane over HTTP ([`control_plane`]: the real runner routes and wire
//! format), one scene per scenario ([`scenarios`]), each with its own runner process and token,
//! all at once. The job it hands out runs a command the suite wrote, which appends the machine's
//! uptime to a file every 50 ms: the work's own record of when it ran. Every verdict compares
//! those ticks, the requests' receipt and answer times, and the runner's exit on one clock, the
//! machine's monotonic uptime, which no runner can move: a runner is judged by what its work did,
//! never by what it says.
//!
//! The contract with a runner (the command line runs as `sh -c 'exec CMD'`, in its own process
//! group), in its environment:
//! `LEASEWRIGHT_SERVER` (the control plane's base URL), `LEASEWRIGHT_RUNNER_TOKEN` (its bearer
//! token), `LEASEWRIGHT_CAPACITY` (jobs at once), `LEASEWRIGHT_MAX_JOBS` (exit after this many
//! jobs), `LEASEWRIGHT_WORKDIR` (a directory for its workspaces). It claims, fetches and
//! extracts the source, runs each lease's `command` with `sh -c` in the extracted source in a
//! process group of its own, heartbeats, and reports, as docs/http.md says.

pub mod control_plane;
pub mod scenarios;

use control_plane::{ticked, uptime, ControlPlane, Scene};
use leasewright_server::source::{build_snapshot, SourceFile};
use scenarios::{Checks, Outcome, Scenario, Status, SCENARIOS};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The command the suite's jobs run: `sh tick.sh FILE [N [print]]` appends the machine's uptime
/// to FILE every 50 ms (N times, then exits 0; with N empty or absent until it is stopped), after
/// writing its pid to `FILE.pid`; with `print`, it prints each tick on its standard output too.
pub const TICK_SCRIPT: &str = r#"#!/bin/sh
# The runner suite's work: one line per tick, the machine's uptime (/proc/uptime), into $1;
# $2 ticks (none: until stopped); with $3, each tick printed on stdout too.
echo $$ > "$1.pid"
i=0
while [ -z "$2" ] || [ "$i" -lt "$2" ]; do
  read -r up rest < /proc/uptime
  echo "$up" >> "$1"
  [ -z "$3" ] || echo "tick $i $up"
  i=$((i + 1))
  sleep 0.05
done
"#;

/// How to run the suite.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// The runner, as a command line (run as `sh -c 'exec CMD'`).
    pub runner_cmd: String,
    /// How late after its deadline a runner's work may still tick (default 1 s: the server's
    /// margin 2δ at the default δ of 500 ms, docs/protocol.md §3.1).
    pub margin: Duration,
    /// Only the scenarios with these names (all when empty).
    pub only: Vec<String>,
    /// Where each scenario's files go (the runner's log, the ticks); a temporary directory,
    /// removed afterwards, when `None`.
    pub keep: Option<PathBuf>,
}

/// One verdict: a duty of docs/protocol.md §6.4, held or violated, and what the suite saw.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    pub duty: &'static str,
    pub status: Status,
    pub detail: String,
}

/// One scenario's verdicts.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScenarioReport {
    pub name: &'static str,
    pub what: &'static str,
    pub verdicts: Vec<Verdict>,
    /// The runner's exit code (`None`: killed by a signal, or it did not exit within the budget).
    pub exit_code: Option<i32>,
    /// Where its output went (when kept).
    pub runner_log: PathBuf,
    /// How many requests the runner sent the control plane.
    pub requests: usize,
    /// How many times the job's command ticked (0: it never ran).
    pub ticks: usize,
}

/// The whole suite's verdicts.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SuiteReport {
    pub runner_cmd: String,
    pub margin_ms: u128,
    pub scenarios: Vec<ScenarioReport>,
    pub seconds: f64,
}

impl SuiteReport {
    /// No runner of any scenario sent a single request: the command line runs no runner (or none
    /// that reads the suite's environment). A setup failure, not a verdict.
    pub fn no_runner(&self) -> bool {
        self.scenarios.iter().all(|s| s.requests == 0)
    }

    /// No scenario's command ever ran: nothing about stopping work was judged (a runner that
    /// never runs a command would otherwise pass, every verdict `not exercised`). A setup failure.
    pub fn no_command_ran(&self) -> bool {
        self.scenarios.iter().all(|s| s.ticks == 0)
    }

    /// How many verdicts could not be judged.
    pub fn not_exercised(&self) -> usize {
        self.scenarios
            .iter()
            .flat_map(|s| &s.verdicts)
            .filter(|v| v.status == Status::NotExercised)
            .count()
    }

    /// Every violated verdict, with its scenario.
    pub fn violations(&self) -> Vec<(&'static str, &Verdict)> {
        self.scenarios
            .iter()
            .flat_map(|s| s.verdicts.iter().map(move |v| (s.name, v)))
            .filter(|(_, v)| v.status == Status::Violated)
            .collect()
    }
}

/// The scenarios `only` names (every one when empty); an error names one that does not exist.
pub fn select(only: &[String]) -> Result<Vec<&'static Scenario>, String> {
    for name in only {
        if !SCENARIOS.iter().any(|s| s.name == name) {
            let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
            return Err(format!(
                "no scenario {name:?} (scenarios: {})",
                names.join(", ")
            ));
        }
    }
    Ok(SCENARIOS
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|n| n == s.name))
        .collect())
}

/// Runs the selected scenarios at once, each against its own runner process.
pub async fn run(options: &SuiteOptions) -> std::io::Result<SuiteReport> {
    let started = uptime();
    let selected = select(&options.only).map_err(std::io::Error::other)?;
    let temporary = tempfile::Builder::new()
        .prefix("leasewright-runner-suite-")
        .tempdir()?;
    let root = match &options.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => temporary.path().to_owned(),
    };
    let snapshot = Arc::new(
        build_snapshot(vec![SourceFile {
            path: "tick.sh".into(),
            mode: 0o755,
            content: TICK_SCRIPT.as_bytes().to_vec(),
        }])
        .map_err(|e| std::io::Error::other(e.to_string()))?,
    );
    let plane = ControlPlane::default();
    let (url, server) = plane.serve().await?;
    let mut tasks = tokio::task::JoinSet::new();
    for (index, spec) in selected.iter().enumerate() {
        let dir = root.join(spec.name);
        std::fs::create_dir_all(dir.join("work"))?;
        let token = format!("runner-suite-{}", uuid::Uuid::new_v4().simple());
        plane.add(
            &token,
            Scene {
                spec,
                snapshot: snapshot.clone(),
                ticks: dir.join("ticks"),
                leases: Vec::new(),
                records: Vec::new(),
            },
        );
        let (plane, url, options) = (plane.clone(), url.clone(), options.clone());
        let spec: &'static Scenario = spec;
        tasks.spawn(async move {
            let report = run_scenario(spec, &plane, &url, &token, &dir, &options).await;
            (index, report)
        });
    }
    let mut reports = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (index, report) = joined.map_err(std::io::Error::other)?;
        reports.push((index, report?));
    }
    server.abort();
    reports.sort_by_key(|(index, _)| *index);
    Ok(SuiteReport {
        runner_cmd: options.runner_cmd.clone(),
        margin_ms: options.margin.as_millis(),
        scenarios: reports.into_iter().map(|(_, report)| report).collect(),
        seconds: uptime() - started,
    })
}

/// A process of the machine, alive (not a zombie)?
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) state ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// The process group of `pid`.
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

fn signal_group(group: i32, signal: rustix::process::Signal) {
    let own = process_group(i32::try_from(std::process::id()).unwrap_or(0));
    if group > 1 && Some(group) != own {
        if let Some(pid) = rustix::process::Pid::from_raw(group) {
            let _ = rustix::process::kill_process_group(pid, signal);
        }
    }
}

/// The pid the command wrote when it started (`TICKS.pid`).
pub fn command_pid(ticks: &Path) -> Option<i32> {
    let mut file = ticks.as_os_str().to_owned();
    file.push(".pid");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Kills the command that ticks into `ticks` (its whole process group), if it still runs.
pub fn kill_command(ticks: &Path) {
    if let Some(pid) = command_pid(ticks) {
        if alive(pid) {
            if let Some(command_group) = process_group(pid) {
                signal_group(command_group, rustix::process::Signal::KILL);
            }
        }
    }
}

async fn run_scenario(
    spec: &'static Scenario,
    plane: &ControlPlane,
    url: &str,
    token: &str,
    dir: &Path,
    options: &SuiteOptions,
) -> std::io::Result<ScenarioReport> {
    let ticks = dir.join("ticks");
    let log_path = dir.join("runner.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("exec {}", options.runner_cmd))
        .env("LEASEWRIGHT_SERVER", url)
        .env("LEASEWRIGHT_RUNNER_TOKEN", token)
        .env("LEASEWRIGHT_CAPACITY", spec.capacity.to_string())
        .env("LEASEWRIGHT_MAX_JOBS", spec.max_jobs.to_string())
        .env("LEASEWRIGHT_WORKDIR", dir.join("work"))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let (exit_tx, mut exit_rx) = tokio::sync::watch::channel(None);
    let waiter = tokio::spawn(async move {
        let status = child.wait().await;
        let code = status.ok().and_then(|s| s.code());
        exit_tx.send_replace(Some((uptime(), code)));
    });
    let budget = Duration::from_secs_f64(spec.budget_s);
    let deadline = tokio::time::Instant::now() + budget;
    let mut sigterm_at = None;
    if spec.sigterm {
        // Once the command ticks (bounded by the budget), SIGTERM to the runner.
        while !ticked(&ticks) && tokio::time::Instant::now() < deadline {
            if exit_rx.borrow().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if ticked(&ticks) && exit_rx.borrow().is_none() {
            sigterm_at = Some(uptime());
            signal_group(group, rustix::process::Signal::TERM);
        }
    }
    tokio::select! {
        _ = exit_rx.wait_for(Option::is_some) => {}
        () = tokio::time::sleep_until(deadline) => {}
    }
    let exited = *exit_rx.borrow();
    // Was a command of the runner's still running when it exited? A command the runner killed
    // as it exited is gone within moments; one it left behind ticks on past the margin.
    let mut command_outlived_exit_s = None;
    if let (Some((exit_at, _)), Some(pid)) = (exited, command_pid(&ticks)) {
        let bound = tokio::time::Instant::now() + options.margin;
        while alive(pid) && tokio::time::Instant::now() < bound {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if alive(pid) {
            command_outlived_exit_s = Some(uptime() - exit_at);
        }
    }
    // Nothing outlives the scenario: the runner's group, the command's.
    signal_group(group, rustix::process::Signal::KILL);
    kill_command(&ticks);
    let _ = waiter.await;
    let (records, lease_end) = plane.records(token);
    let outcome = Outcome {
        records,
        lease_end,
        ticks: std::fs::read_to_string(&ticks)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect(),
        exited,
        command_outlived_exit_s,
        sigterm_at,
        log_path: log_path.clone(),
    };
    let mut checks = Checks {
        margin_s: options.margin.as_secs_f64(),
        verdicts: Vec::new(),
    };
    (spec.check)(&outcome, &mut checks);
    let foreign = outcome.records.iter().filter(|r| r.foreign_tuple).count();
    if foreign > 0 {
        checks.verdicts.push((
            "messages-carry-the-lease-tuple",
            Status::Violated,
            format!("{foreign} messages named no lease this runner holds (a wrong tuple)"),
        ));
    }
    Ok(ScenarioReport {
        name: spec.name,
        what: spec.what,
        verdicts: checks
            .verdicts
            .into_iter()
            .map(|(duty, status, detail)| Verdict {
                duty,
                status,
                detail,
            })
            .collect(),
        exit_code: exited.and_then(|(_, code)| code),
        runner_log: log_path,
        requests: outcome.records.len(),
        ticks: outcome.ticks.len(),
    })
}
