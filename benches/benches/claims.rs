//! Criterion benchmarks of the implementation against the two baselines, on one database
//! (DATABASE_URL, or a throwaway cluster): claim at 1, 4, 16 and 64 concurrent claimers, batch
//! claim (K = 16), heartbeat and the whole lifecycle.
//!
//! Criterion measures one function after another (all samples of A, then of B); so after each
//! concurrency level the same database is also measured alternately (A B C A B C A B C, see
//! leasewright_benches::claims) and that table, with the same-run ratios, is printed and written
//! as JSON to $CARGO_TARGET_DIR/leasewright-bench/. Compare only ratios of one run: the machine is
//! shared and noisy. Runs are short (10 samples, 3 s) so that `cargo bench` takes a few minutes.
//!
//! `cargo bench -p leasewright-benches --bench claims`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use leasewright_benches::claims::{self, Options};
use leasewright_benches::contender::Contender;
use leasewright_benches::fixture::{connections_needed, BenchError, Fixture};
use std::path::PathBuf;
use std::time::Duration;

const QUEUED: i64 = 10_000;
const LEVELS: [usize; 4] = [1, 4, 16, 64];
const MAX_CONCURRENCY: usize = 64;

fn report_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("leasewright-bench")
}

fn bench_group(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    fixture: &Fixture,
    name: &str,
    concurrency: usize,
    contenders: &[Contender],
) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for &contender in contenders {
        let per_op = match contender {
            Contender::FencedBatch(k)
            | Contender::FencedFloorBatch(k)
            | Contender::SkipLockedBatch(k) => k as u64,
            _ => 1,
        };
        group.throughput(Throughput::Elements(per_op));
        group.bench_function(contender.name(), |b| {
            b.to_async(runtime).iter_custom(|iters| async move {
                if contender.consumes_jobs() {
                    // Untimed: keep at least QUEUED jobs queued through the sample.
                    fixture
                        .top_up(QUEUED + (iters * per_op) as i64)
                        .await
                        .expect("top up the queues");
                }
                contender
                    .run_counted(fixture, concurrency, iters)
                    .await
                    .expect("a benchmark operation failed")
            });
        });
    }
    group.finish();
}

fn alternating(
    runtime: &tokio::runtime::Runtime,
    fixture: &Fixture,
    concurrency: usize,
    batch: Option<usize>,
) {
    let report = runtime
        .block_on(claims::run_on(
            fixture,
            Options {
                concurrency,
                duration_seconds: 6.0 + if batch.is_some() { 4.0 } else { 0.0 },
                queued: QUEUED,
                batch,
                rounds: 3,
            },
        ))
        .expect("the alternating measurement failed");
    println!("\n{}", report.table());
    let dir = report_dir();
    if std::fs::create_dir_all(&dir).is_ok() {
        let path = dir.join(format!("claims-c{concurrency}.json"));
        if let Ok(json) = serde_json::to_string_pretty(&report) {
            let _ = std::fs::write(&path, json);
            println!("(written to {})\n", path.display());
        }
    }
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    // One pool of as many connections as the highest level: on a server that cannot hold it
    // (max_connections 100, shared with others), measure the levels that fit and say so.
    let (fixture, levels) = match runtime.block_on(Fixture::new(MAX_CONCURRENCY)) {
        Ok(fixture) => (fixture, LEVELS.to_vec()),
        Err(BenchError::TooFewConnections { available, .. }) => {
            let levels: Vec<usize> = LEVELS
                .iter()
                .copied()
                .filter(|&level| connections_needed(level) <= available)
                .collect();
            let skipped: Vec<usize> = LEVELS
                .iter()
                .copied()
                .filter(|level| !levels.contains(level))
                .collect();
            eprintln!(
                "the server allows {available} more connections: skipping {skipped:?} \
                 concurrent claimers"
            );
            let highest = levels
                .last()
                .copied()
                .expect("the server allows 2 connections");
            let fixture = runtime
                .block_on(Fixture::new(highest))
                .expect("a benchmark database");
            (fixture, levels)
        }
        Err(error) => panic!("a benchmark database (DATABASE_URL or PostgreSQL binaries): {error}"),
    };
    runtime
        .block_on(async {
            fixture.top_up(QUEUED).await?;
            fixture.vacuum().await
        })
        .expect("load the queues");
    let single = [
        Contender::Fenced,
        Contender::SkipLocked,
        Contender::CommitRate,
    ];
    for &concurrency in &levels {
        bench_group(
            c,
            &runtime,
            &fixture,
            &format!("claim/c{concurrency}"),
            concurrency,
            &single,
        );
        alternating(
            &runtime,
            &fixture,
            concurrency,
            (concurrency == 16).then_some(16),
        );
    }
    if fixture.runners.len() >= 16 {
        bench_group(
            c,
            &runtime,
            &fixture,
            "batch-k16/c16",
            16,
            &[
                Contender::FencedBatch(16),
                Contender::SkipLockedBatch(16),
                Contender::Fenced,
            ],
        );
        bench_group(
            c,
            &runtime,
            &fixture,
            "lifecycle/c16",
            16,
            &[
                Contender::Heartbeat,
                Contender::ClaimResult,
                Contender::Lifecycle,
                Contender::TypicalQueue,
                Contender::CommitRate,
            ],
        );
    }
    runtime.block_on(fixture.close());
}

criterion_group!(claim_benches, benches);
criterion_main!(claim_benches);
