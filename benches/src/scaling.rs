//! Claim throughput against queue depth: one database per depth (so that each table really holds
//! that many jobs), all on one server, measured alternately (10k 100k 1M 10k 100k 1M ...).

use crate::claims::{line, Line, Queue};
use crate::contender::Contender;
use crate::fixture::{BenchError, Fixture};
use crate::measure::Round;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What the scaling run measures.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub concurrency: usize,
    /// Queue depths (jobs kept queued, at least).
    pub depths: Vec<i64>,
    /// Total measured seconds (split over rounds and depths).
    pub duration_seconds: f64,
    pub rounds: usize,
}

/// One depth's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Depth {
    pub queued: i64,
    /// Seconds the bulk load (one `INSERT ... SELECT generate_series`) took.
    pub load_seconds: f64,
    pub line: Line,
    /// Throughput relative to the smallest depth.
    pub relative: f64,
}

/// The scaling run's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub options: Options,
    pub slot_seconds: f64,
    pub depths: Vec<Depth>,
}

/// Measures the fenced claim at every depth, alternately.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    if options.depths.is_empty() || options.rounds == 0 {
        return Err(BenchError::Invalid(
            "at least one depth and one round".into(),
        ));
    }
    let slot = Duration::from_secs_f64(
        options.duration_seconds / options.rounds as f64 / options.depths.len() as f64,
    );
    let mut fixtures = Vec::new();
    for &depth in &options.depths {
        let fixture = Fixture::new(options.concurrency).await?;
        let mut queue = Queue::new(depth);
        let started = Instant::now();
        queue.ensure(&fixture, None, slot).await?;
        let load_seconds = started.elapsed().as_secs_f64();
        fixture.vacuum().await?;
        // Warm-up (not recorded).
        queue
            .ensure(
                &fixture,
                Some(Contender::Fenced),
                Duration::from_millis(500),
            )
            .await?;
        let warm = Contender::Fenced
            .run(&fixture, options.concurrency, Duration::from_millis(500))
            .await?;
        queue.observe(Contender::Fenced, &warm);
        // Statistics of a system in operation, as in `claims::run_on`.
        fixture.analyze().await?;
        fixtures.push((fixture, queue, load_seconds));
    }
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); fixtures.len()];
    for _ in 0..options.rounds {
        for (i, (fixture, queue, _)) in fixtures.iter_mut().enumerate() {
            queue.ensure(fixture, Some(Contender::Fenced), slot).await?;
            let round = Contender::Fenced
                .run(fixture, options.concurrency, slot)
                .await?;
            queue.observe(Contender::Fenced, &round);
            rounds[i].push(round);
        }
    }
    let mut depths = Vec::new();
    for ((fixture, _, load_seconds), (rounds, &queued)) in
        fixtures.iter().zip(rounds.iter().zip(&options.depths))
    {
        fixture.close().await;
        depths.push(Depth {
            queued,
            load_seconds: *load_seconds,
            line: line(&format!("fenced claim, {queued} queued"), rounds),
            relative: 0.0,
        });
    }
    let base = depths[0].line.jobs_per_second;
    for d in &mut depths {
        d.relative = if base > 0.0 {
            d.line.jobs_per_second / base
        } else {
            0.0
        };
    }
    Ok(Report {
        slot_seconds: slot.as_secs_f64(),
        options,
        depths,
    })
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "leasewright bench scaling: fenced claim, {} concurrent claimers, {} rounds over {} \
             depths ({:.2} s each, alternating)",
            self.options.concurrency,
            self.options.rounds,
            self.depths.len(),
            self.slot_seconds
        );
        let _ = writeln!(
            out,
            "{:>10} {:>8} {:>10} {:>9} {:>9} {:>9}   claims/s per round",
            "queued", "load s", "claims/s", "p50 ms", "p99 ms", "relative"
        );
        for d in &self.depths {
            let rounds: Vec<String> = d.line.per_round.iter().map(|r| format!("{r:.0}")).collect();
            let _ = writeln!(
                out,
                "{:>10} {:>8.1} {:>10.0} {:>9.2} {:>9.2} {:>9.2}   {}",
                d.queued,
                d.load_seconds,
                d.line.jobs_per_second,
                d.line.p50_ms,
                d.line.p99_ms,
                d.relative,
                rounds.join(" ")
            );
        }
        out
    }
}
