//! The short profile of the concurrent history check and of each fault (docs/reliability.md):
//! runner tasks against the real implementation, every call recorded, the history checked
//! against the model, and after each fault the checks that no committed result was lost, no job
//! was silently requeued, and every job is running, terminal or explicitly uncertain.
//!
//! The soak profile is `leasewright stress` (cli/src/stress.rs).

use leasewright_conformance::history::load::{self, LoadConfig, RunOutcome};
use leasewright_conformance::history::net;
use leasewright_impl::database::{Cluster, TestDatabase};
use std::time::Duration;

fn seed() -> u64 {
    std::env::var("LEASEWRIGHT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Run the load on a fresh database and assert a clean history.
async fn run_clean(name: &str, config: LoadConfig) -> RunOutcome {
    let db = TestDatabase::create().await.expect("a test database");
    run_clean_on(name, db.url(), config).await
}

async fn run_clean_on(name: &str, url: &str, config: LoadConfig) -> RunOutcome {
    let outcome = load::run(url, &config).await.expect("the run");
    assert_clean(name, &config, &outcome);
    outcome
}

fn assert_clean(name: &str, config: &LoadConfig, outcome: &RunOutcome) {
    let summary = &outcome.summary;
    eprintln!("--- {name} ---\n{}", summary.render(5));
    eprintln!("answers: {:#?}", summary.report.answers);
    assert!(
        summary.report.is_clean(),
        "{name} (seed {}): the history has violations:\n{}",
        config.seed,
        summary.render(20)
    );
    assert!(summary.report.operations >= config.ops);
    assert!(
        summary.report.linearizable_jobs + summary.report.undecided_jobs > 0,
        "{name}: no job was checked"
    );
}

fn count(outcome: &RunOutcome, key: &str) -> usize {
    outcome
        .summary
        .report
        .answers
        .get(key)
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_history_with_duplicates_and_late_messages_is_linearizable() {
    let outcome = run_clean("history", LoadConfig::short(8, 1_500, seed())).await;
    // The run exercised what it claims to: duplicates, late reports, expiry, reconciliation.
    assert!(count(&outcome, "result acknowledged") > 0);
    assert!(count(&outcome, "heartbeat rejected (lease_expired)") > 0);
    assert!(count(&outcome, "expiry_sweep uncertain") > 0);
    assert!(count(&outcome, "reconcile accepted") > 0);
    assert!(count(&outcome, "claim accepted") > count(&outcome, "expiry_sweep uncertain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_killed_mid_transaction_lose_no_committed_result() {
    let mut config = LoadConfig::short(8, 1_000, seed());
    config.faults.kill_connections = Some(Duration::from_millis(400));
    let outcome = run_clean("kill-connections", config).await;
    assert!(outcome.summary.faults.connection_kills > 0);
    assert!(
        outcome.summary.report.unknown > 0,
        "no call failed: the kills missed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_clocks_hours_off_change_no_verdict() {
    let mut config = LoadConfig::short(8, 1_000, seed());
    config.faults.runner_skew = Some(Duration::from_secs(5 * 3600));
    let outcome = run_clean("clock-skew", config).await;
    assert_eq!(outcome.summary.faults.skewed_runners, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_operation_leaves_its_job_uncertain_never_requeued() {
    let mut config = LoadConfig::short(8, 1_000, seed());
    config.faults.kill_runners = Some(Duration::from_millis(300));
    let outcome = run_clean("kill-runner", config).await;
    assert!(outcome.summary.faults.runner_kills > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_during_load_loses_no_committed_result() {
    // A cluster of this test's own: restarting the shared one (or a DATABASE_URL server) would
    // break every other test using it.
    let cluster = match tokio::task::spawn_blocking(Cluster::start_private).await {
        Ok(Ok(cluster)) => cluster,
        Ok(Err(error)) => {
            eprintln!("SKIPPED: a PostgreSQL restart needs a cluster of the test's own: {error}");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let mut config = LoadConfig::short(8, 1_000, seed());
    config.faults.restart_postgres = Some((Duration::from_millis(1500), cluster.clone()));
    let outcome = run_clean_on("restart-postgres", &cluster.url("postgres"), config).await;
    assert!(outcome.summary.faults.postgres_restarts > 0);
}

/// The checker catches an implementation with one rule removed, from a load run alone
/// (`cargo test -p leasewright-conformance --features mutants --test history`).
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_check_catches_the_implementations_mutants() {
    use leasewright_impl::mutants::Mutant;
    let mut survivors = Vec::new();
    for mutant in Mutant::ALL {
        if mutant == Mutant::NoProjectCheck {
            continue; // one project in the load: nothing crosses a project boundary
        }
        if matches!(
            mutant,
            Mutant::IdempotentRepeatReapplies | Mutant::FencedTargetRefusesSameToken
        ) {
            continue; // the load deploys to no target: target mutants are `conform`'s
        }
        if matches!(
            mutant,
            Mutant::ClaimIgnoresEpoch
                | Mutant::ClaimWithoutWait
                | Mutant::WaitWithoutClockSkew
                | Mutant::WaitEndsLate
                | Mutant::SweepAtOneSkew
                | Mutant::SweepEndsLate
                | Mutant::PruneGuardReadsOwnPosition
                | Mutant::CacheReadLosesPrunedStorer
        ) {
            // The load has no failover, one clock and no prune: these are `conform`'s
            // (conformance/tests/statements.rs).
            continue;
        }
        let db = TestDatabase::create().await.expect("a test database");
        let mut config = LoadConfig::short(8, 1_000, seed());
        config.forge_percent = 10;
        config.duplicate_percent = 20;
        config.pause_percent = 20;
        config.mutant = Some(mutant);
        if mutant == Mutant::RunnerClockDecidesExpiry {
            config.faults.runner_skew = Some(Duration::from_secs(5 * 3600));
        }
        let outcome = load::run(db.url(), &config).await.expect("the run");
        let counts = outcome.summary.report.counts();
        eprintln!("{mutant:?}: {counts:?}");
        if outcome.summary.report.is_clean() {
            survivors.push(mutant);
        }
    }
    assert!(survivors.is_empty(), "mutants not caught: {survivors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_proxy_that_drops_delays_and_duplicates_loses_no_committed_result() {
    let db = TestDatabase::create().await.expect("a test database");
    let config = LoadConfig::short(6, 800, seed());
    let faults = net::NetFaults::lossy(config.lease_ttl * 3 / 2);
    let outcome = net::run(db.url(), &config, &faults).await.expect("the run");
    assert_clean("http-proxy", &config, &outcome);
    let f = &outcome.summary.faults;
    assert!(
        f.proxy_drops > 0 && f.proxy_delays > 0 && f.proxy_duplicates > 0,
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_restarted_while_runners_execute_loses_no_committed_result() {
    let db = TestDatabase::create().await.expect("a test database");
    let config = LoadConfig::short(6, 800, seed());
    let mut faults = net::NetFaults::none();
    faults.restart_server = Some(Duration::from_millis(1500));
    let outcome = net::run(db.url(), &config, &faults).await.expect("the run");
    assert_clean("http-restart", &config, &outcome);
    assert!(outcome.summary.faults.server_restarts > 0);
}
