//! The runner agent on a clock the test controls (issue 36 item 3): the suite's control plane
//! (conformance/src/runner_suite/) never answers a heartbeat, and the agent's injected
//! `ManualAgentClock` alone decides when its lease ends. The work runs while the clock stands
//! before the lease's end and is stopped once it reaches it, with no real time involved in the
//! verdict: each wait is a bounded poll of state (the command's ticks, its process), never a
//! timing threshold.

use leasewright_conformance::runner_suite::control_plane::{ControlPlane, Scene};
use leasewright_conformance::runner_suite::scenarios::{Route, SCENARIOS};
use leasewright_conformance::runner_suite::{alive, command_pid, TICK_SCRIPT};
use leasewright_server::agent::{self, AgentConfig, ManualAgentClock};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_control_plane_cannot_keep_the_work_past_the_lease_on_the_runners_own_clock() {
    let spec = SCENARIOS.iter().find(|s| s.name == "hang").expect("hang");
    let ttl = Duration::from_millis(spec.ttl_ms);
    let dir = tempfile::tempdir().unwrap();
    let tick_file = dir.path().join("ticks");
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
            ticks: tick_file.clone(),
            leases: Vec::new(),
            records: Vec::new(),
        },
    );
    let clock = ManualAgentClock::new();
    let mut config = AgentConfig::new(&url, "runner", dir.path().join("work"));
    config.clock = clock.clone();
    config.max_jobs = Some(1);
    // Only the runner's clock ends a request here: no real-time timeout of the client's.
    config.request_timeout = Duration::from_secs(3600);
    let agent = tokio::spawn(agent::run(config));

    let bound = Duration::from_secs(30);
    until("the command runs", bound, || ticks(&tick_file) > 0).await;
    let pid = command_pid(&tick_file).expect("the command's pid");
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
    // backoff, as a rejoin (contact was lost), which hangs too. Step the clock until a rejoin
    // goes out less than a third of the TTL before the lease's end: a request whose own limit
    // (a third of the TTL) would outlast the lease is then in flight when the lease ends.
    clock.advance_to(ttl / 6 + ttl / 3);
    let rejoins = || {
        plane
            .records("runner")
            .0
            .iter()
            .filter(|r| r.route == Route::Rejoin)
            .count()
    };
    let mut seen = 0;
    loop {
        let sent = rejoins();
        if sent > seen {
            seen = sent;
            // Noticed within one 20 ms step of its sending.
            if clock.elapsed() > ttl - ttl / 3 + Duration::from_millis(40) {
                break;
            }
        }
        assert!(
            clock.elapsed() < ttl - ttl / 30,
            "no rejoin in the last third of the lease"
        );
        clock.advance(Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Shortly before the lease's end (farther than the runner's own margin, a tenth of a
    // heartbeat interval, by which it may stop early) the work still runs: it ticks on.
    clock.advance_to(ttl - ttl / 30);
    let before = ticks(&tick_file);
    until("the work ticks on before the lease's end", bound, || {
        ticks(&tick_file) >= before + 3
    })
    .await;
    assert!(alive(pid));
    // At the lease's end by the runner's own reckoning, the hung rejoin is cut and the work
    // stops, the clock standing there (a rejoin cut only by its own limit, a third of the TTL
    // after it was sent, would still hang: the work would run on).
    clock.advance_to(ttl);
    until("the work stops at the lease's end", bound, || !alive(pid)).await;
    let (records, _) = plane.records("runner");
    assert!(
        records
            .iter()
            .filter(|r| r.answered.is_some())
            .all(|r| !matches!(r.route, Route::Heartbeat | Route::Rejoin)),
        "no heartbeat or rejoin was ever answered: {records:?}"
    );
    agent.abort();
    server.abort();
}
