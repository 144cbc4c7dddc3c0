//! Measure one configuration of the model without the CLI:
//! `cargo run --release -p leasewright-model --example measure -- JOBS RUNNERS ATTEMPTS TTL SKEW DISCONNECTS LEDGER OUTSIDER_JOBS SIDE_EFFECTS SHARED_SLOT BATCH_CLAIM SLOT_SHARED_BY`
//! (`MEASURE_STATES=N` stops after about N generated states; `MEASURE_BATCH_EXECUTION=1` checks
//! `Config::batch_execution()` instead, with `JOBS RUNNERS ATTEMPTS` overriding its bounds).
use leasewright_model::{Config, LeaseModel};
use stateright::{Checker, Model};

fn main() {
    let args: Vec<u8> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let d = Config::default();
    let config = Config {
        jobs: *args.first().unwrap_or(&d.jobs),
        runners: *args.get(1).unwrap_or(&d.runners),
        attempts_per_job: *args.get(2).unwrap_or(&d.attempts_per_job),
        lease_ttl: *args.get(3).unwrap_or(&d.lease_ttl),
        max_skew: *args.get(4).unwrap_or(&d.max_skew),
        disconnects: args.get(5).map_or(d.disconnects, |&x| x != 0),
        ledger: *args.get(6).unwrap_or(&0),
        outsider_jobs: *args.get(7).unwrap_or(&0),
        side_effects: args.get(8).is_some_and(|&x| x != 0),
        shared_slot: args.get(9).is_some_and(|&x| x != 0),
        batch_claim: *args.get(10).unwrap_or(&0),
        slot_shared_by: *args.get(11).unwrap_or(&0),
        revocation: std::env::var("MEASURE_REVOCATION").is_ok(),
        ..d
    };
    let config = if std::env::var("MEASURE_BATCH_EXECUTION").is_ok() {
        let b = Config::batch_execution();
        Config {
            jobs: *args.first().unwrap_or(&b.jobs),
            runners: *args.get(1).unwrap_or(&b.runners),
            attempts_per_job: *args.get(2).unwrap_or(&b.attempts_per_job),
            ..b
        }
    } else {
        config
    };
    if let Ok(variant) = std::env::var("MEASURE_VARIANT") {
        // The variant's shortest counterexample to the first property it names, as `check
        // --variant` searches it.
        let variant: leasewright_model::Variant = variant.parse().expect("a variant");
        let config = Config::default().with_variant(variant);
        let property = leasewright_model::properties::caught_by(variant)[0];
        let model = LeaseModel::for_checking(config).focused(property);
        let start = std::time::Instant::now();
        let found = leasewright_model::search::shortest_counterexample(&model, 5_000_000);
        println!(
            "{property}: {:?} steps, {} states, {:.2?}",
            found.counterexample.map(|p| p.len() - 1),
            found.states,
            start.elapsed()
        );
        return;
    }
    let start = std::time::Instant::now();
    let mut builder = LeaseModel::for_checking(config.clone()).checker();
    // `MEASURE_STATES=N`: stop after about N generated states (a quick comparison of two builds).
    if let Some(n) = std::env::var("MEASURE_STATES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        builder = builder.target_state_count(n);
    }
    // `MEASURE_DEPTH=N`: only paths of at most N states (as a depth-bounded profile entry).
    if let Some(n) = std::env::var("MEASURE_DEPTH")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        builder = builder.target_max_depth(n);
    }
    let checker = builder.symmetry().threads(2).spawn_dfs();
    let mut last = std::time::Instant::now();
    while !checker.is_done() {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if last.elapsed() < std::time::Duration::from_secs(5) {
            continue;
        }
        last = std::time::Instant::now();
        let mut missing: Vec<_> = checker
            .model()
            .properties()
            .into_iter()
            .map(|p| p.name)
            .filter(|name| !checker.discoveries().contains_key(name))
            .collect();
        missing.retain(|name| *name != leasewright_model::properties::EVERY_INVARIANT);
        eprintln!(
            "  ... {} unique after {:.0?}; not yet reached: {missing:?}",
            checker.unique_state_count(),
            start.elapsed()
        );
    }
    let checker = checker.join();
    println!(
        "{config:?}\n{} unique, {} total, {:.2?}, {} distinct probe keys",
        checker.unique_state_count(),
        checker.state_count(),
        start.elapsed(),
        checker.model().probe_memo_len()
    );
    let mut found: Vec<_> = checker.discoveries().into_keys().collect();
    found.sort();
    for name in found {
        println!("  discovered: {name}");
    }
}
