//! `leasewright bench claims`: the implementation's claim against both baselines and the fenced
//! floor (the claim's three writes and nothing else, [`crate::floor`]), measured alternately in
//! one run on one database, and the ratios.
//!
//! The run: set up one database (implementation schema, baseline tables, one runner per worker),
//! load the queue, then one short unrecorded warm-up slot per contender, then `rounds` rounds of
//! A B C D [E F G] in which every contender runs for `duration / rounds / contenders`. Before every
//! slot of a contender that takes jobs, both queues are topped up so that at least `queued` jobs
//! stay queued during the slot (the top-up is not timed). Machine noise thus falls on every
//! contender alike: compare only the ratios of one run.

use crate::contender::Contender;
use crate::fixture::{server_settings, uses_database_url, BenchError, Fixture};
use crate::measure::{Round, Summary};
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Duration;

/// What `leasewright bench claims` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Concurrent claimers (each a runner of its own, each with its own connection).
    pub concurrency: usize,
    /// Total measured time of the whole run, in seconds (split over rounds and contenders).
    pub duration_seconds: f64,
    /// Jobs kept queued (at least) while a claim is measured.
    pub queued: i64,
    /// Also measure the batch claim of up to K jobs per transaction.
    pub batch: Option<usize>,
    /// Rounds of A B C.
    pub rounds: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 16,
            duration_seconds: 30.0,
            queued: 10_000,
            batch: None,
            rounds: 3,
        }
    }
}

/// One contender's figures over all its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct Line {
    pub contender: String,
    /// Jobs claimed (or commits) per second.
    pub jobs_per_second: f64,
    /// Transactions per second (= jobs/s except for a batch claim).
    pub ops_per_second: f64,
    /// Median latency of one operation (one transaction), milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency of one operation, milliseconds.
    pub p99_ms: f64,
    /// Jobs per second in each round.
    pub per_round: Vec<f64>,
    /// Operations that found nothing to do (an empty queue): should be 0.
    pub empty: u64,
    /// WAL bytes written per job (per operation for contenders that take no job).
    pub wal_bytes_per_job: f64,
    /// WAL bytes per job in each round.
    pub wal_per_round: Vec<f64>,
}

/// One same-run ratio.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub name: String,
    /// Over the whole run.
    pub value: f64,
    /// Round by round (the spread says how much to trust `value`).
    pub per_round: Vec<f64>,
    /// The target, if any: the ratio should be at least this (at most, when `at_most`).
    pub target: Option<f64>,
    /// Whether `target` is an upper bound (WAL ratios) rather than a lower one.
    pub at_most: bool,
}

impl Ratio {
    /// `a`'s jobs/s over `b`'s, overall and round by round; `target`: at least.
    pub fn of_throughput(name: &str, a: &Line, b: &Line, target: Option<f64>) -> Ratio {
        Ratio {
            name: name.to_string(),
            value: divide(a.jobs_per_second, b.jobs_per_second),
            per_round: a
                .per_round
                .iter()
                .zip(&b.per_round)
                .map(|(x, y)| divide(*x, *y))
                .collect(),
            target,
            at_most: false,
        }
    }

    /// `a`'s WAL bytes per job over `b`'s, overall and round by round; `target`: at most.
    pub fn of_wal(name: &str, a: &Line, b: &Line, target: Option<f64>) -> Ratio {
        Ratio {
            name: name.to_string(),
            value: divide(a.wal_bytes_per_job, b.wal_bytes_per_job),
            per_round: a
                .wal_per_round
                .iter()
                .zip(&b.wal_per_round)
                .map(|(x, y)| divide(*x, *y))
                .collect(),
            target,
            at_most: true,
        }
    }

    /// `>=t ok`, `>=t MISS` (or `<=`), or nothing without a target.
    pub fn verdict(&self) -> String {
        match self.target {
            Some(t) if self.at_most && self.value <= t => format!("<={t} ok"),
            Some(t) if self.at_most => format!("<={t} MISS"),
            Some(t) if self.value >= t => format!(">={t} ok"),
            Some(t) => format!(">={t} MISS"),
            None => String::new(),
        }
    }
}

/// Runs `contenders` alternately on `fixture`: a short unrecorded warm-up slot of each, an
/// `ANALYZE`, then `rounds` rounds in which each contender runs for `slot` (queues topped up to
/// at least `queued` before every slot of a contender that takes jobs, untimed). The rounds of
/// each contender, in the order of `contenders`, each with the WAL bytes written during it.
pub async fn alternate(
    fixture: &Fixture,
    contenders: &[Contender],
    concurrency: usize,
    slot: Duration,
    rounds: usize,
    queued: i64,
) -> Result<Vec<Vec<Round>>, BenchError> {
    let mut queue = Queue::new(queued);
    queue.ensure(fixture, None, slot).await?;
    fixture.vacuum().await?;

    // Warm-up: every contender once, briefly, not recorded (plans cached, pages in memory).
    let warm_up = slot.min(Duration::from_millis(500));
    for &contender in contenders {
        if contender.consumes_jobs() {
            queue.ensure(fixture, Some(contender), warm_up).await?;
        }
        let round = contender.run(fixture, concurrency, warm_up).await?;
        queue.observe(contender, &round);
    }
    // Statistics of a system in operation (claimed jobs, held reservations), as autoanalyze
    // would have them: the claim's plan depends on them (docs/benchmarks.md, "cold statistics").
    fixture.analyze().await?;

    let mut measured: Vec<Vec<Round>> = vec![Vec::new(); contenders.len()];
    for _ in 0..rounds {
        for (i, &contender) in contenders.iter().enumerate() {
            if contender.consumes_jobs() {
                queue.ensure(fixture, Some(contender), slot).await?;
            }
            let before = fixture.wal_lsn().await?;
            let mut round = contender.run(fixture, concurrency, slot).await?;
            round.wal_bytes = fixture.wal_bytes_since(&before).await?;
            queue.observe(contender, &round);
            measured[i].push(round);
        }
    }
    Ok(measured)
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The command that measured (`claims`, `lifecycle`).
    pub command: String,
    pub options: Options,
    /// What else shaped the run (HTTP replicas, where WAL was counted).
    pub notes: Vec<String>,
    /// `DATABASE_URL` or `throwaway cluster`.
    pub database: String,
    /// The server settings that bound the numbers.
    pub settings: Vec<(String, String)>,
    /// Seconds each contender ran in each round.
    pub slot_seconds: f64,
    /// The order contenders ran in, within every round.
    pub order: Vec<String>,
    pub lines: Vec<Line>,
    pub ratios: Vec<Ratio>,
}

/// Measures. Uses `DATABASE_URL` (a fresh database on that server) or a throwaway cluster.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    let fixture = Fixture::new(options.concurrency).await?;
    let report = run_on(&fixture, options).await;
    fixture.close().await;
    report
}

/// Measures on an existing fixture (it needs at least `options.concurrency` runners).
pub async fn run_on(fixture: &Fixture, options: Options) -> Result<Report, BenchError> {
    if options.concurrency == 0 || options.rounds == 0 || options.duration_seconds <= 0.0 {
        return Err(BenchError::Invalid(
            "concurrency, rounds and duration must be positive".into(),
        ));
    }
    if options.batch == Some(0) {
        return Err(BenchError::Invalid("--batch takes K >= 1".into()));
    }
    let mut contenders = vec![
        Contender::Fenced,
        Contender::FencedFloor,
        Contender::SkipLocked,
        Contender::CommitRate,
    ];
    if let Some(k) = options.batch {
        contenders.push(Contender::FencedBatch(k));
        contenders.push(Contender::FencedFloorBatch(k));
        contenders.push(Contender::SkipLockedBatch(k));
    }
    let settings = server_settings(&fixture.pool).await?;
    let slot = Duration::from_secs_f64(
        options.duration_seconds / options.rounds as f64 / contenders.len() as f64,
    );
    let rounds = alternate(
        fixture,
        &contenders,
        options.concurrency,
        slot,
        options.rounds,
        options.queued,
    )
    .await?;

    let mut lines: Vec<Line> = contenders
        .iter()
        .zip(&rounds)
        .map(|(contender, rounds)| line(&contender.name(), rounds))
        .collect();
    let index = |c: Contender| contenders.iter().position(|&x| x == c);
    let mut ratios = Vec::new();
    let mut ratio = |name: &str, a: Contender, b: Contender, target: Option<f64>| {
        if let (Some(a), Some(b)) = (index(a), index(b)) {
            ratios.push(Ratio::of_throughput(name, &lines[a], &lines[b], target));
        }
    };
    ratio(
        "fenced claim / skip-locked",
        Contender::Fenced,
        Contender::SkipLocked,
        Some(0.7),
    );
    // What bounds the line above: the protocol's writes alone against the bare queue, and what the
    // claim's guards cost on top of its writes.
    ratio(
        "fenced floor / skip-locked",
        Contender::FencedFloor,
        Contender::SkipLocked,
        None,
    );
    ratio(
        "fenced claim / fenced floor",
        Contender::Fenced,
        Contender::FencedFloor,
        None,
    );
    ratio(
        "fenced claim / commit-rate",
        Contender::Fenced,
        Contender::CommitRate,
        None,
    );
    if let Some(k) = options.batch {
        ratio(
            &format!("fenced claim K={k} / fenced claim (jobs/s)"),
            Contender::FencedBatch(k),
            Contender::Fenced,
            (k == 16).then_some(5.0),
        );
        // What bounds the line above: the batch's gain on its writes alone.
        ratio(
            &format!("fenced floor K={k} / fenced floor (jobs/s)"),
            Contender::FencedFloorBatch(k),
            Contender::FencedFloor,
            None,
        );
        ratio(
            &format!("fenced claim K={k} / fenced floor K={k}"),
            Contender::FencedBatch(k),
            Contender::FencedFloorBatch(k),
            None,
        );
        ratio(
            &format!("fenced claim K={k} / skip-locked K={k}"),
            Contender::FencedBatch(k),
            Contender::SkipLockedBatch(k),
            None,
        );
    }
    // Many jobs on few slots: its own row, after the alternating rounds (one slot's length).
    let shared =
        crate::shared_slots::measure(fixture, options.concurrency, slot, SHARED_SLOTS).await?;
    lines.push(shared.line.clone());
    let mut report = Report::new(
        "claims",
        options,
        settings,
        slot,
        &contenders,
        lines,
        ratios,
    );
    report.notes.push(shared.note());
    Ok(report)
}

/// The slots the shared-slot row's jobs share.
const SHARED_SLOTS: usize = 4;

pub(crate) fn divide(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// One contender's line from its rounds.
pub fn line(name: &str, rounds: &[Round]) -> Line {
    let summary = Summary::of(name, rounds);
    let operations: usize = rounds.iter().map(|r| r.latencies_us.len()).sum();
    Line {
        contender: name.to_string(),
        jobs_per_second: summary.per_second,
        ops_per_second: divide(operations as f64, summary.seconds),
        p50_ms: f64::from(summary.p50_us) / 1000.0,
        p99_ms: f64::from(summary.p99_us) / 1000.0,
        per_round: rounds
            .iter()
            .map(|r| divide(r.ops as f64, r.elapsed.as_secs_f64()))
            .collect(),
        empty: summary.empty,
        wal_bytes_per_job: divide(summary.wal_bytes as f64, summary.ops as f64),
        wal_per_round: rounds
            .iter()
            .map(|r| divide(r.wal_bytes as f64, r.ops as f64))
            .collect(),
    }
}

/// Keeps at least `depth` jobs queued through every slot: before a slot, both queues are topped
/// up to `depth` plus 1.5 times what the contender took in its last slot of that length (or a
/// generous guess before the first).
pub struct Queue {
    depth: i64,
    rates: Vec<(Contender, f64)>,
}

impl Queue {
    /// A queue kept at `depth` queued jobs.
    pub fn new(depth: i64) -> Queue {
        Queue {
            depth,
            rates: Vec::new(),
        }
    }

    /// Tops up for a slot of `contender` lasting `slot` (`None`: the depth alone).
    pub async fn ensure(
        &mut self,
        fixture: &Fixture,
        contender: Option<Contender>,
        slot: Duration,
    ) -> Result<(), BenchError> {
        let rate = match contender {
            None => 0.0,
            Some(c) => self
                .rates
                .iter()
                .find(|(x, _)| *x == c)
                .map_or(5_000.0, |(_, r)| *r),
        };
        let headroom = (rate * slot.as_secs_f64() * 1.5) as i64 + 100;
        fixture.top_up(self.depth + headroom).await
    }

    /// Remembers the rate a contender reached.
    pub fn observe(&mut self, contender: Contender, round: &Round) {
        let rate = divide(round.ops as f64, round.elapsed.as_secs_f64());
        self.rates.retain(|(c, _)| *c != contender);
        self.rates.push((contender, rate));
    }
}

impl Report {
    /// A report of `command`'s run.
    pub fn new(
        command: &str,
        options: Options,
        settings: Vec<(String, String)>,
        slot: Duration,
        contenders: &[Contender],
        lines: Vec<Line>,
        ratios: Vec<Ratio>,
    ) -> Report {
        let mut notes = Vec::new();
        if uses_database_url() {
            notes.push(
                "WAL B/job is pg_current_wal_insert_lsn() before and after each slot: cluster-wide, so \
                 on a shared server it includes other databases' writes"
                    .to_string(),
            );
        }
        Report {
            command: command.to_string(),
            database: if uses_database_url() {
                "DATABASE_URL".into()
            } else {
                "throwaway cluster".into()
            },
            settings,
            slot_seconds: slot.as_secs_f64(),
            order: contenders.iter().map(|c| c.name()).collect(),
            options,
            notes,
            lines,
            ratios,
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let o = &self.options;
        let mut out = String::new();
        let setting = |name: &str| crate::fixture::setting(&self.settings, name);
        let _ = writeln!(
            out,
            "leasewright bench {}: {} concurrent workers, >= {} queued jobs, {} rounds of {} \
             ({:.2} s each, alternating)",
            self.command,
            o.concurrency,
            o.queued,
            o.rounds,
            self.order.join(" | "),
            self.slot_seconds,
        );
        let _ = writeln!(
            out,
            "PostgreSQL {} ({}): fsync={} synchronous_commit={}",
            setting("server_version"),
            self.database,
            setting("fsync"),
            setting("synchronous_commit"),
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<26} {:>10} {:>10} {:>9} {:>9} {:>10}   jobs/s per round",
            "contender", "jobs/s", "txn/s", "p50 ms", "p99 ms", "WAL B/job"
        );
        for l in &self.lines {
            let rounds: Vec<String> = l.per_round.iter().map(|r| format!("{r:.0}")).collect();
            let _ = writeln!(
                out,
                "{:<26} {:>10.0} {:>10.0} {:>9.2} {:>9.2} {:>10.0}   {}{}",
                l.contender,
                l.jobs_per_second,
                l.ops_per_second,
                l.p50_ms,
                l.p99_ms,
                l.wal_bytes_per_job,
                rounds.join(" "),
                if l.empty > 0 {
                    format!("  ({} found the queue empty)", l.empty)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<44} {:>6} {:>10}   per round",
            "ratio (same run)", "value", "target"
        );
        for r in &self.ratios {
            let rounds: Vec<String> = r.per_round.iter().map(|v| format!("{v:.2}")).collect();
            let _ = writeln!(
                out,
                "{:<44} {:>6.2} {:>10}   {}",
                r.name,
                r.value,
                r.verdict(),
                rounds.join(" ")
            );
        }
        out
    }
}
