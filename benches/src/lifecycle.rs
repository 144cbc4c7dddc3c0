//! `leasewright bench lifecycle`: whole jobs, claim -> result (and claim -> heartbeat -> result),
//! in-process and over HTTP, next to what a typical PostgreSQL queue does per job (a `SKIP
//! LOCKED` claim, then one `UPDATE` completing the row) and to the fenced floor's claim -> result
//! (the same writes with none of the rules' guards, [`crate::floor`]), measured alternately in one
//! run on one database, with jobs/s, p50/p99 per job, WAL bytes per job and the same-run ratios.

use crate::claims::{alternate, line, Options as ClaimsOptions, Ratio, Report};
use crate::contender::Contender;
use crate::fixture::{server_settings, BenchError, Fixture};
use std::time::Duration;

/// What `leasewright bench lifecycle` measures.
#[derive(Clone, Debug)]
pub struct Options {
    /// Concurrent workers (each a runner of its own).
    pub concurrency: usize,
    /// Total measured time, split over rounds and contenders.
    pub duration_seconds: f64,
    /// Jobs kept queued (at least) through every slot.
    pub queued: i64,
    /// Rounds of the contenders.
    pub rounds: usize,
    /// Also measure claim -> heartbeat -> result.
    pub heartbeat: bool,
    /// HTTP control planes to run (0: no HTTP contender). Workers are spread evenly over them.
    pub http_replicas: usize,
}

/// Measures. Uses `DATABASE_URL` (a fresh database on that server) or a throwaway cluster.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    if options.concurrency == 0 || options.rounds == 0 || options.duration_seconds <= 0.0 {
        return Err(BenchError::Invalid(
            "concurrency, rounds and duration must be positive".into(),
        ));
    }
    let mut fixture = Fixture::new(options.concurrency).await?;
    let report = measure(&mut fixture, &options).await;
    let stopped = fixture.stop_http().await;
    fixture.close().await;
    let report = report?;
    stopped?;
    Ok(report)
}

async fn measure(fixture: &mut Fixture, options: &Options) -> Result<Report, BenchError> {
    let mut contenders = vec![
        Contender::ClaimResult,
        Contender::FloorClaimResult,
        Contender::TypicalQueue,
    ];
    if options.heartbeat {
        contenders.push(Contender::Lifecycle);
    }
    if options.http_replicas > 0 {
        fixture.start_http(options.http_replicas).await?;
        contenders.push(Contender::HttpClaimResult);
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
    let lines: Vec<_> = contenders
        .iter()
        .zip(&rounds)
        .map(|(contender, rounds)| line(&contender.name(), rounds))
        .collect();
    let at = |c: Contender| &lines[contenders.iter().position(|&x| x == c).unwrap_or(0)];
    let claim_result = at(Contender::ClaimResult);
    let floor = at(Contender::FloorClaimResult);
    let typical = at(Contender::TypicalQueue);
    let mut ratios = vec![
        Ratio::of_throughput(
            "claim->result / typical queue (jobs/s)",
            claim_result,
            typical,
            Some(1.0),
        ),
        Ratio::of_wal(
            "claim->result / typical queue (WAL B/job)",
            claim_result,
            typical,
            Some(2.0),
        ),
        // What bounds the two lines above: the protocol's writes alone, and what the rules'
        // guards cost on top of them (crate::floor).
        Ratio::of_throughput(
            "fenced floor: claim->result / typical queue",
            floor,
            typical,
            None,
        ),
        Ratio::of_throughput(
            "claim->result / fenced floor: claim->result",
            claim_result,
            floor,
            None,
        ),
        Ratio::of_wal(
            "fenced floor: claim->result / typical (WAL)",
            floor,
            typical,
            None,
        ),
    ];
    if options.heartbeat {
        let beat = at(Contender::Lifecycle);
        ratios.push(Ratio::of_throughput(
            "claim->heartbeat->result / typical queue",
            beat,
            typical,
            None,
        ));
        ratios.push(Ratio::of_wal(
            "claim->heartbeat->result / typical (WAL)",
            beat,
            typical,
            None,
        ));
    }
    if options.http_replicas > 0 {
        let http = at(Contender::HttpClaimResult);
        ratios.push(Ratio::of_throughput(
            "HTTP claim->result / in-process",
            http,
            claim_result,
            Some(0.5),
        ));
        ratios.push(Ratio::of_throughput(
            "HTTP claim->result / typical queue",
            http,
            typical,
            None,
        ));
    }
    let mut report = Report::new(
        "lifecycle",
        ClaimsOptions {
            concurrency: options.concurrency,
            duration_seconds: options.duration_seconds,
            queued: options.queued,
            batch: None,
            rounds: options.rounds,
        },
        settings,
        slot,
        &contenders,
        lines,
        ratios,
    );
    if options.http_replicas > 0 {
        report.notes.push(format!(
            "HTTP: {} control plane(s) in this process (the server of `leasewright serve`), \
             {} runner clients over loopback",
            fixture.servers.len(),
            fixture.clients.len()
        ));
    }
    Ok(report)
}
