//! The runner agent on a clock the test controls (issue 36 item 3): the suite's control plane
//! (conformance/src/runner_suite/) never answers a heartbeat, and the agent's injected
//! `ManualAgentClock` alone decides when its lease ends. The work runs while the clock stands
//! before the lease's end and is stopped once it reaches it, with no real time involved in the
//! verdict: each wait is a bounded poll of state (the command's ticks, its process), never a
//! timing threshold.

use leasewright_conformance::runner_suite::control_plane::{ControlPlane, Scene};
use leasewright_conformance::runner_suite::scenarios::{Route, SCENARIOS};
use leasewright_conformance::runner_suite::{alive, command_pid, kill_command, TICK_SCRIPT};
use leasewright_server::agent::{self, AgentConfig, ManualAgentClock, AGENT_MUTANTS};
use leasewright_server::source::{build_snapshot, SourceFile};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Polls `condition` every 20 ms; panics after `bound` (a bound on a hang, not a threshold).
async fn until(what: &str, bound: Duration, mut condition: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + bound;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: not within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ticks(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// How far the clock moves at a time when a test steps it.
const STEP: Duration = Duration::from_millis(20);

/// Waits until the agent has acted on every wait the clock has reached (bounded: a bound on a
/// hang, not a threshold). However slow the machine, the clock then never runs ahead of the
/// agent: each deadline is acted on, in order, before the clock moves past the next.
async fn settle(clock: &ManualAgentClock) {
    until(
        "the agent acts on the deadlines the clock reached",
        Duration::from_secs(30),
        || clock.due() == 0,
    )
    .await;
}

/// Steps the clock [`STEP`] at a time, each once the agent has settled, until `done` holds
/// (`true`) or the clock reaches `to` (`false`).
async fn step_until(
    clock: &ManualAgentClock,
    to: Duration,
    mut done: impl FnMut(&ManualAgentClock) -> bool,
) -> bool {
    loop {
        settle(clock).await;
        if done(clock) {
            return true;
        }
        if clock.elapsed() >= to {
            return false;
        }
        clock.advance_to((clock.elapsed() + STEP).min(to));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_control_plane_cannot_keep_the_work_past_the_lease_on_the_runners_own_clock() {
    let setup = Setup::new("hang").await;
    let (plane, clock, tick_file, ttl) = (&setup.plane, &setup.clock, &setup.ticks, setup.ttl);
    let agent = tokio::spawn(agent::run(setup.config.clone()));
    let bound = Duration::from_secs(30);
    until("the command runs", bound, || ticks(tick_file) > 0).await;
    let pid = command_pid(tick_file).expect("the command's pid");
    // A sixth of the TTL on: the heartbeat goes out, and is never answered.
    clock.advance(ttl / 6);
    until("the heartbeat is sent", bound, || {
        plane
            .records("runner")
            .0
            .iter()
            .any(|r| r.route == Route::Heartbeat)
    })
    .await;
    // The heartbeat's own limit (a third of the TTL) passes and it is retried after a short
    // backoff, as a rejoin (contact was lost), which hangs too, and is retried again. Step the
    // clock until a renewal goes out in the lease's last third: its wait, cut at the lease's end
    // by the runner's reckoning (the lease was claimed with the clock at zero), ends at the TTL,
    // where its own limit (a third of the TTL) would outlast the lease.
    clock.advance_to(ttl / 6 + ttl / 3);
    let rejoins = || {
        plane
            .records("runner")
            .0
            .iter()
            .filter(|r| r.route == Route::Rejoin)
            .count()
    };
    let sent_late = step_until(clock, ttl - ttl / 30, |clock| {
        clock.elapsed() > ttl - ttl / 3 && clock.pending().contains(&ttl)
    })
    .await;
    assert!(
        sent_late,
        "no renewal in the last third of the lease was cut at its end: {:?}",
        clock.pending()
    );
    // It is a rejoin, the second (the first went out in the middle third, after the heartbeat's
    // cut), and reaches the control plane with the clock standing.
    until("the late rejoin reaches the control plane", bound, || {
        rejoins() >= 2
    })
    .await;
    // A rejoin cut only by its own limit, a third of the TTL after it was sent, would still
    // hang at the lease's end: the work would run on.
    setup.runs_to_the_lease_end_and_stops(pid, setup.ttl).await;
    let (records, _) = plane.records("runner");
    assert!(
        records
            .iter()
            .filter(|r| r.answered.is_some())
            .all(|r| !matches!(r.route, Route::Heartbeat | Route::Rejoin)),
        "no heartbeat or rejoin was ever answered: {records:?}"
    );
    agent.abort();
}

/// The same hang with a command that prints every tick: a log append after lost contact rejoins
/// first, and that rejoin, cut at the lease's end, holds the lease's one rejoin while the
/// renewal's waits. The renewal's limit is taken when its rejoin goes out, not before the wait:
/// at the lease's end it has no time left and the work stops there (a limit taken before the
/// wait would send a rejoin at the lease's end that hangs on, and the work would run on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_appends_hung_rejoin_cannot_stretch_the_renewal_past_the_lease() {
    let setup = Setup::new("hang-chatty").await;
    let agent = tokio::spawn(agent::run(setup.config.clone()));
    let pid = setup.command_running().await;
    step_until(&setup.clock, setup.ttl - setup.ttl / 30, |_| false).await;
    let records = setup.plane.records("runner").0;
    assert!(
        records.iter().any(|r| r.route == Route::Logs),
        "the command's output was appended: {records:?}"
    );
    assert!(
        records
            .iter()
            .any(|r| r.route == Route::Rejoin && r.answered.is_none()),
        "a rejoin hangs: {records:?}"
    );
    setup.runs_to_the_lease_end_and_stops(pid, setup.ttl).await;
    agent.abort();
}

/// A heartbeat answered late renews the lease from when it was sent, not from when its answer
/// came (docs/protocol.md §6.4, "accepted"): the clock moves on while the answer is held, and
/// the work still stops a TTL after the heartbeat's sending (every later renewal gets 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_renews_the_lease_from_the_heartbeats_sending() {
    let setup = Setup::new("late-answer").await;
    let (plane, clock, ttl) = (&setup.plane, &setup.clock, setup.ttl);
    let agent = tokio::spawn(agent::run(setup.config.clone()));
    let pid = setup.command_running().await;
    let heartbeat = || {
        plane
            .records("runner")
            .0
            .into_iter()
            .find(|r| r.route == Route::Heartbeat)
    };
    // The first heartbeat goes out a sixth of the TTL on; its answer is held (in real time).
    clock.advance(ttl / 6);
    let bound = Duration::from_secs(30);
    until("the heartbeat is sent", bound, || heartbeat().is_some()).await;
    // A quarter of the TTL passes before the answer comes (within the heartbeat's own limit, a
    // third of the TTL): an answer reckoned from its arrival would stretch the lease by as much.
    clock.advance(ttl / 4);
    until("the heartbeat is accepted, late", bound, || {
        heartbeat().is_some_and(|r| matches!(r.answered, Some((_, 200, _))))
    })
    .await;
    // The agent has taken the answer once the heartbeat's wait (cut at a third of the TTL after
    // its sending) is gone from its clock.
    until("the agent takes the answer", bound, || {
        !clock.pending().contains(&(ttl / 6 + ttl / 3))
    })
    .await;
    setup
        .runs_to_the_lease_end_and_stops(pid, ttl / 6 + ttl)
        .await;
    agent.abort();
}

/// CI runs this file once per agent mutant and expects a failure each time (.ci/run): its list
/// names every mutant the agent has.
#[test]
fn ci_runs_every_agent_mutant_against_this_file() {
    let ci = include_str!("../../.ci/run");
    let line = ci
        .lines()
        .find(|line| line.starts_with("for mutant in ") && line.contains("request-not-cut"))
        .expect(".ci/run loops over the agent's mutants");
    let listed: Vec<&str> = line
        .trim_start_matches("for mutant in ")
        .trim_end_matches("; do")
        .split_whitespace()
        .collect();
    let mut expected = AGENT_MUTANTS.to_vec();
    let mut listed_sorted = listed.clone();
    expected.sort_unstable();
    listed_sorted.sort_unstable();
    assert_eq!(listed_sorted, expected, ".ci/run's list: {line}");
}

/// The suite's control plane playing one scenario, and an agent's configuration on a manual
/// clock against it.
struct Setup {
    plane: ControlPlane,
    server: tokio::task::JoinHandle<()>,
    clock: Arc<ManualAgentClock>,
    config: AgentConfig,
    ticks: std::path::PathBuf,
    ttl: Duration,
    _dir: tempfile::TempDir,
}

impl Setup {
    async fn new(scenario: &str) -> Self {
        let spec = SCENARIOS
            .iter()
            .find(|s| s.name == scenario)
            .expect("a scenario");
        let dir = tempfile::tempdir().unwrap();
        let ticks = dir.path().join("ticks");
        let snapshot = build_snapshot(vec![SourceFile {
            path: "tick.sh".into(),
            mode: 0o755,
            content: TICK_SCRIPT.as_bytes().to_vec(),
        }])
        .unwrap();
        let plane = ControlPlane::default();
        let (url, server) = plane.serve().await.unwrap();
        plane.add(
            "runner",
            Scene {
                spec,
                snapshot: Arc::new(snapshot),
                ticks: ticks.clone(),
                leases: Vec::new(),
                records: Vec::new(),
            },
        );
        let clock = ManualAgentClock::new();
        let mut config = AgentConfig::new(&url, "runner", dir.path().join("work"));
        config.clock = clock.clone();
        config.capacity = spec.capacity;
        config.max_jobs = Some(spec.max_jobs as usize);
        // Only the runner's clock ends a request here: no real-time timeout of the client's.
        config.request_timeout = Duration::from_secs(3600);
        Self {
            plane,
            server,
            clock,
            config,
            ticks,
            ttl: Duration::from_millis(spec.ttl_ms),
            _dir: dir,
        }
    }

    /// Shortly before the lease's end, `end` on the clock (farther than the runner's own
    /// margin, a tenth of a heartbeat interval, by which it may stop early), the work still
    /// runs: it ticks on. At the lease's end by the runner's own reckoning it stops, the clock
    /// standing there.
    async fn runs_to_the_lease_end_and_stops(&self, pid: i32, end: Duration) {
        let (clock, ttl, bound) = (&self.clock, self.ttl, Duration::from_secs(30));
        step_until(clock, end - ttl / 30, |_| false).await;
        let before = ticks(&self.ticks);
        until("the work ticks on before the lease's end", bound, || {
            ticks(&self.ticks) >= before + 3
        })
        .await;
        assert!(alive(pid));
        clock.advance_to(end);
        until("the work stops at the lease's end", bound, || !alive(pid)).await;
    }

    /// Waits until the command runs; its pid.
    async fn command_running(&self) -> i32 {
        until("the command runs", Duration::from_secs(30), || {
            ticks(&self.ticks) > 0
        })
        .await;
        command_pid(&self.ticks).expect("the command's pid")
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // A failing test leaves no command behind.
        kill_command(&self.ticks);
        self.server.abort();
    }
}

/// The margin within which a killed command is gone (a bound on a hang, not a threshold).
const GONE: Duration = Duration::from_secs(5);

/// Issue 36: a revoked runner (401 on its heartbeat) kept executing. Now the 401 stops the work
/// at once: the clock moves only to the first heartbeat, a sixth of the lease, and stands there
/// while the command is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_on_a_heartbeat_stops_the_work_at_once_at_capacity_1_with_the_clock_standing() {
    let setup = Setup::new("revoked-token").await;
    let agent = tokio::spawn(agent::run(setup.config.clone()));
    let pid = setup.command_running().await;
    setup.clock.advance(setup.ttl / 6);
    until("the work stops on the 401", GONE, || !alive(pid)).await;
    assert!(setup.clock.elapsed() < setup.ttl);
    let records = setup.plane.records("runner").0;
    assert!(
        records
            .iter()
            .any(|r| matches!(&r.answered, Some((_, 401, _)))),
        "{records:?}"
    );
    agent.abort();
}

/// Issue 36: at capacity 2 the next claim's 401 made the process exit and leave its command
/// running. Now the runner stops every command first: when `run` returns (an error), its command
/// is gone, the clock never having moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_on_a_claim_at_capacity_2_stops_the_command_before_the_runner_returns() {
    let setup = Setup::new("unauthorized-claim").await;
    let agent = tokio::spawn(agent::run(setup.config.clone()));
    let pid = setup.command_running().await;
    let ended = agent.await.expect("the agent task");
    assert!(
        ended.is_err(),
        "a refused token ends the runner with an error"
    );
    until("the command is gone when the runner returns", GONE, || {
        !alive(pid)
    })
    .await;
    assert_eq!(setup.clock.elapsed(), Duration::ZERO);
}

/// A runner told to shut down (SIGTERM, SIGINT: `run_until`'s future) stops its command before it
/// returns, the clock never having moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_the_command_before_the_runner_returns() {
    let setup = Setup::new("sigterm").await;
    let (shutdown, signalled) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(agent::run_until(setup.config.clone(), async move {
        let _ = signalled.await;
    }));
    let pid = setup.command_running().await;
    shutdown.send(()).unwrap();
    agent
        .await
        .expect("the agent task")
        .expect("a clean shutdown");
    until("the command is gone when the runner returns", GONE, || {
        !alive(pid)
    })
    .await;
    assert_eq!(setup.clock.elapsed(), Duration::ZERO);
}
