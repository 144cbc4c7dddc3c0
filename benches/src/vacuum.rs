//! The sustained run: one workload for minutes, and per interval its throughput next to what dead
//! tuples and (auto)vacuum are doing in the tables it writes (`pg_stat_user_tables`).

use crate::claims::Queue;
use crate::contender::Contender;
use crate::fixture::{server_settings, BenchError, Fixture};
use serde::Serialize;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What the sustained run does.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Concurrent workers.
    pub concurrency: usize,
    /// The whole run, seconds.
    pub duration_seconds: f64,
    /// One sample per interval, seconds.
    pub interval_seconds: f64,
    /// Jobs kept queued (at least).
    pub queued: i64,
    /// `claim` (claims only: jobs stay running) or `lifecycle` (claim, heartbeat, result).
    pub lifecycle: bool,
}

/// One table's vacuum statistics at a sample.
#[derive(Clone, Debug, Serialize)]
pub struct TableStats {
    pub table: String,
    pub live: i64,
    pub dead: i64,
    pub autovacuums: i64,
    pub autoanalyzes: i64,
    /// Heap plus indexes, MiB.
    pub total_mib: f64,
}

/// One interval.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the start, at the end of the interval.
    pub at_seconds: f64,
    /// Operations (claims or lifecycles) per second in the interval.
    pub per_second: f64,
    pub p99_ms: f64,
    /// The queued-jobs index (`jobs_queued_by_submission`), MiB.
    pub queued_index_mib: f64,
    pub tables: Vec<TableStats>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub options: Options,
    pub settings: Vec<(String, String)>,
    /// Per-table storage options (fillfactor, autovacuum_*) as migrated.
    pub reloptions: Vec<(String, String)>,
    pub samples: Vec<Sample>,
}

const TABLES: [&str; 4] = ["jobs", "attempts", "target_slots", "observations"];

/// Runs the workload for `options.duration_seconds`, sampling every `interval_seconds`.
/// `on_sample` sees each sample as it is taken (for progress output).
pub async fn run(
    options: Options,
    mut on_sample: impl FnMut(&Sample),
) -> Result<Report, BenchError> {
    if options.interval_seconds <= 0.0 || options.duration_seconds < options.interval_seconds {
        return Err(BenchError::Invalid(
            "the duration must be at least one interval".into(),
        ));
    }
    let fixture = Fixture::new(options.concurrency).await?;
    let settings = server_settings(&fixture.pool).await?;
    let reloptions: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, coalesce(array_to_string(c.reloptions, ', '), '(defaults)')
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY($1)
         ORDER BY 1",
    )
    .bind(TABLES.iter().map(|t| t.to_string()).collect::<Vec<_>>())
    .fetch_all(&fixture.pool)
    .await?;
    let contender = if options.lifecycle {
        Contender::Lifecycle
    } else {
        Contender::Fenced
    };
    let interval = Duration::from_secs_f64(options.interval_seconds);
    let mut queue = Queue::new(options.queued);
    queue.ensure(&fixture, None, interval).await?;
    fixture.vacuum().await?;
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed().as_secs_f64() + options.interval_seconds
        <= options.duration_seconds + 0.5
    {
        queue.ensure(&fixture, Some(contender), interval).await?;
        let round = contender
            .run(&fixture, options.concurrency, interval)
            .await?;
        queue.observe(contender, &round);
        let line = crate::claims::line("sustained", std::slice::from_ref(&round));
        let sample = Sample {
            at_seconds: started.elapsed().as_secs_f64(),
            per_second: line.jobs_per_second,
            p99_ms: line.p99_ms,
            queued_index_mib: mib(sqlx::query_scalar(
                "SELECT pg_relation_size('jobs_queued_by_submission'::regclass)",
            )
            .fetch_one(&fixture.pool)
            .await?),
            tables: table_stats(&fixture).await?,
        };
        on_sample(&sample);
        samples.push(sample);
    }
    fixture.close().await;
    Ok(Report {
        options,
        settings,
        reloptions,
        samples,
    })
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn table_stats(fixture: &Fixture) -> Result<Vec<TableStats>, BenchError> {
    let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count,
                pg_total_relation_size(relid)
         FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = ANY($1)
         ORDER BY relname",
    )
    .bind(TABLES.iter().map(|t| t.to_string()).collect::<Vec<_>>())
    .fetch_all(&fixture.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(table, live, dead, autovacuums, autoanalyzes, bytes)| TableStats {
                table,
                live,
                dead,
                autovacuums,
                autoanalyzes,
                total_mib: mib(bytes),
            },
        )
        .collect())
}

impl Sample {
    /// The header of [`Sample::row`].
    pub fn header() -> String {
        let mut out = format!(
            "{:>6} {:>8} {:>8} {:>8}",
            "t s", "ops/s", "p99 ms", "qidx MiB"
        );
        for t in ["jobs", "attempts", "reservations", "observations"] {
            let _ = write!(out, " | {:>13} {:>9} {:>4} {:>7}", t, "dead", "av", "MiB");
        }
        out
    }

    /// One line: throughput, then live/dead/autovacuum count/size per table.
    pub fn row(&self) -> String {
        let mut out = format!(
            "{:>6.0} {:>8.0} {:>8.1} {:>8.1}",
            self.at_seconds, self.per_second, self.p99_ms, self.queued_index_mib
        );
        for name in TABLES {
            match self.tables.iter().find(|t| t.table == name) {
                Some(t) => {
                    let _ = write!(
                        out,
                        " | {:>13} {:>9} {:>4} {:>7.1}",
                        t.live, t.dead, t.autovacuums, t.total_mib
                    );
                }
                None => out.push_str(" | -"),
            }
        }
        out
    }
}
