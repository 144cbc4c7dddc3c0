//! Claim throughput at 10,000, 100,000 and 1,000,000 queued jobs (the goal: flat), one database
//! per depth on one server, measured alternately (leasewright_benches::scaling). Not a criterion
//! bench: the point is the same-run ratio between depths, which criterion's one-after-another
//! measurement cannot give. Bulk-loading the million jobs takes most of its time.
//!
//! `cargo bench -p leasewright-benches --bench scaling`
//! (`LEASEWRIGHT_SCALING_DEPTHS=10000,100000` to leave out the million.)

use leasewright_benches::scaling::{self, Options};

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that is not ours means "not me".
    let filtered_out = std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !"scaling".contains(a.as_str()));
    if filtered_out {
        return;
    }
    let depths: Vec<i64> = std::env::var("LEASEWRIGHT_SCALING_DEPTHS")
        .ok()
        .map(|v| v.split(',').filter_map(|d| d.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let report = runtime
        .block_on(scaling::run(Options {
            concurrency: 16,
            depths,
            duration_seconds: 18.0,
            rounds: 3,
        }))
        .expect("the scaling measurement failed");
    println!("{}", report.table());
}
