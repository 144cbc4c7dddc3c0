//! Counts the transition cover (traces and steps) of a few configurations.
use leasewright_conformance::generate::transition_cover;
use leasewright_model::{Config, LeaseModel};

fn main() {
    let base = Config::one_job();
    let small = Config {
        disconnects: false,
        lease_ttl: 1,
        ..base.clone()
    };
    let configs = [
        ("small (no disc, ttl1)", small.clone()),
        (
            "small, no outsider",
            Config {
                outsider: false,
                ..small.clone()
            },
        ),
        (
            "small, no outsider, 1 runner",
            Config {
                outsider: false,
                runners: 1,
                ..small.clone()
            },
        ),
        (
            "no outsider, ttl2, no disc",
            Config {
                outsider: false,
                disconnects: false,
                ..base.clone()
            },
        ),
        ("default", base.clone()),
        (
            "no outsider, default",
            Config {
                outsider: false,
                ..base.clone()
            },
        ),
    ];
    for (name, config) in configs {
        let t0 = std::time::Instant::now();
        let cover = transition_cover(
            LeaseModel::new(config),
            Some(leasewright_model::State::representative_keeping_outcomes),
        );
        let steps: usize = cover.iter().map(|t| t.steps.len()).sum();
        println!(
            "{name:<32} traces {:>8} steps {:>9} ({:.1} s)",
            cover.len(),
            steps,
            t0.elapsed().as_secs_f64()
        );
    }
}
