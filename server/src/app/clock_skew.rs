//! This replica's clock against the database server's (docs/protocol.md §3.1): every replica's
//! clock must be within `max_clock_skew` (δ) of the database's. The replica measures its offset
//! (`SELECT clock_timestamp()`, the round trip accounted for) when it starts and every
//! [`ServerConfig::database_check_interval`](super::ServerConfig); while the measurement does not
//! prove it within δ (|offset| + round trip / 2 > δ), or before the first one, the gate answers
//! every request but `/healthz` and `/metrics` `503 clock_skew_exceeded` with `Retry-After`, and
//! the periodic sweep does not run.
//!
//! The measurement reads the system clock, never the injected one: a server on a manual clock
//! (`serve --manual-clock`, the conformance drivers) has no check at all, since every replica of
//! a test reads the one manual clock. Tests inject the measurement
//! ([`ServerConfig::measure_clock_offset`](super::ServerConfig)).

use super::AppState;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The default bound: 500 ms, so that two replicas disagree by at most 1 s, the audit's
/// receipt-time tolerance (docs/audit.md).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_millis(500);

/// The largest `serve --max-clock-skew-ms` (and `migrate --set-max-clock-skew-ms`): one minute.
/// The sweep acts 2δ past a lease and claims wait 2δ more after an epoch change: a δ far beyond
/// any real clock error would stop both for as long (migration 0018 checks it in the database).
pub const MAX_MAX_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// What the database records of the lease policy (`lease_policy`): the largest lease ttl and
/// `max_clock_skew` any server recorded. `None`: no row (nothing recorded yet, or a failover or
/// restore lost it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedPolicy {
    pub max_lease_ttl: Duration,
    pub max_clock_skew: Duration,
}

/// Read the lease policy the database records (`GET /healthz`, `/metrics`).
pub async fn recorded_policy(pool: &PgPool) -> Result<Option<RecordedPolicy>, sqlx::Error> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT (extract(epoch FROM max_lease_ttl) * 1000000)::bigint, \
                (extract(epoch FROM max_clock_skew) * 1000000)::bigint \
         FROM lease_policy WHERE id",
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(ttl, skew)| RecordedPolicy {
        max_lease_ttl: Duration::from_micros(u64::try_from(ttl).unwrap_or(0)),
        max_clock_skew: Duration::from_micros(u64::try_from(skew).unwrap_or(0)),
    }))
}

/// The operator's step to change the `max_clock_skew` the database records
/// (`leasewright migrate --set-max-clock-skew-ms`): the database keeps the largest δ any server
/// recorded, so lowering it takes this. Every server of the database must be restarted with a
/// `--max-clock-skew-ms` no larger first, or it records its own again (at its next start, or on
/// its next new database connection). Returns the value before (`None`: no row; then nothing is written: the next server
/// records its own).
pub async fn set_recorded_max_clock_skew(
    pool: &PgPool,
    max_clock_skew: Duration,
) -> Result<Option<Duration>, sqlx::Error> {
    let micros = i64::try_from(max_clock_skew.as_micros()).unwrap_or(i64::MAX);
    let mut tx = pool.begin().await?;
    let before: Option<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM max_clock_skew) * 1000000)::bigint \
         FROM lease_policy WHERE id FOR UPDATE",
    )
    .fetch_optional(&mut *tx)
    .await?;
    sqlx::query("UPDATE lease_policy SET max_clock_skew = $1 * interval '1 microsecond' WHERE id")
        .bind(micros)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(before.map(|b| Duration::from_micros(u64::try_from(b).unwrap_or(0))))
}

/// The stable code of the answer of a replica outside the bound.
pub(super) const CLOCK_SKEW_EXCEEDED: &str = "clock_skew_exceeded";

/// One measurement of this replica's clock against the database's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    /// The database's clock minus this replica's (positive: the database is ahead), at the
    /// midpoint of the round trip.
    pub offset: chrono::Duration,
    /// The round trip of the measuring query: the offset is uncertain by half of it.
    pub round_trip: Duration,
}

impl ClockOffset {
    /// The largest the true offset can be: |offset| + round trip / 2.
    pub fn bound(&self) -> Duration {
        self.offset.abs().to_std().unwrap_or(Duration::MAX) + self.round_trip / 2
    }
}

/// A measurement of the offset (injectable: [`super::ServerConfig::measure_clock_offset`]).
pub type MeasureClockOffset = Arc<
    dyn Fn(PgPool) -> Pin<Box<dyn Future<Output = Result<ClockOffset, sqlx::Error>> + Send>>
        + Send
        + Sync,
>;

/// The measurement against the database: the system clock before and after
/// `SELECT clock_timestamp()`, the database's time compared with the midpoint.
pub async fn measure_against_database(pool: &PgPool) -> Result<ClockOffset, sqlx::Error> {
    let sent = Utc::now();
    let started = Instant::now();
    let database: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await?;
    let round_trip = started.elapsed();
    let midpoint = sent + chrono::Duration::from_std(round_trip / 2).unwrap_or_default();
    Ok(ClockOffset {
        offset: database - midpoint,
        round_trip,
    })
}

/// The replica's check: the bound, how it measures, and what it found last.
pub(super) struct ClockCheck {
    max_clock_skew: Duration,
    measure: MeasureClockOffset,
    last: Mutex<Option<ClockOffset>>,
    within: AtomicBool,
}

impl ClockCheck {
    pub(super) fn new(max_clock_skew: Duration, measure: Option<MeasureClockOffset>) -> Self {
        Self {
            max_clock_skew,
            measure: measure.unwrap_or_else(|| {
                Arc::new(|pool: PgPool| {
                    Box::pin(async move { measure_against_database(&pool).await })
                })
            }),
            last: Mutex::new(None),
            within: AtomicBool::new(false),
        }
    }

    /// Whether the last measurement proved the clock within the bound.
    pub(super) fn within(&self) -> bool {
        self.within.load(Ordering::Acquire)
    }

    /// The bound δ.
    pub(super) fn max_clock_skew(&self) -> Duration {
        self.max_clock_skew
    }

    /// The last measurement, if any.
    pub(super) fn last(&self) -> Option<ClockOffset> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Measure once and record the result. A measurement that fails (the database is
    /// unreachable) changes nothing: the database gate answers for that.
    pub(super) async fn check(&self, state: &AppState) {
        let measured = (self.measure)(state.0.store.pool().clone()).await;
        let Ok(offset) = measured else {
            return;
        };
        let within = offset.bound() <= self.max_clock_skew;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(offset);
        let was = self.within.swap(within, Ordering::AcqRel);
        state.0.metrics.clock(
            offset.offset.abs().to_std().unwrap_or(Duration::MAX),
            offset.offset >= chrono::Duration::zero(),
            within,
        );
        let offset_ms = offset.offset.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0;
        let round_trip_ms = offset.round_trip.as_secs_f64() * 1000.0;
        let max_ms = self.max_clock_skew.as_secs_f64() * 1000.0;
        if was && !within {
            tracing::error!(
                offset_ms,
                round_trip_ms,
                max_clock_skew_ms = max_ms,
                "this replica's clock is not within --max-clock-skew of the database's: requests \
                 get 503 clock_skew_exceeded and no sweep runs until it is (docs/protocol.md §3.1)"
            );
        } else if !was && within {
            tracing::info!(
                offset_ms,
                round_trip_ms,
                max_clock_skew_ms = max_ms,
                "this replica's clock is within --max-clock-skew of the database's: serving"
            );
        }
    }
}

/// Measures every `interval` for as long as the server runs.
pub(super) async fn watch_clock(state: AppState, interval: Duration) {
    let Some(check) = state.0.clock_check.clone() else {
        return;
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        check.check(&state).await;
    }
}

/// Whether the request may be served by a replica outside the bound: only the routes that show
/// why it refuses the rest.
pub(super) fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/metrics")
}

/// `503 clock_skew_exceeded`.
pub(super) fn clock_skew_exceeded() -> super::ApiError {
    super::ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        CLOCK_SKEW_EXCEEDED,
        "this replica's clock is not known to be within max_clock_skew of the database's \
         (docs/protocol.md §3.1): another replica may serve; retry",
    )
}
