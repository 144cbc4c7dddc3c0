//! Time is an argument: every rule reads the server's receipt time from an injected [`Clock`].

use chrono::{DateTime, Duration, TimeZone, Utc};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The server's clock: the only authority for leases (docs/protocol.md §3).
pub trait Clock: Send + Sync {
    /// The current server time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock, for production.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

tokio::task_local! {
    /// The time of one request on a manual clock ([`ManualClock::at`]).
    static REQUEST_TIME: DateTime<Utc>;
}

/// A clock that moves only when told to, for tests and replays. Clones share one time; a future
/// run under [`ManualClock::at`] reads a time of its own instead (a replay that runs several
/// traces at once on one server gives each request its trace's time).
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// A clock standing at 2030-01-01T00:00:00Z.
    pub fn at_fixed_start() -> Self {
        Self::new(
            Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
        )
    }

    /// Set the time.
    pub fn set(&self, now: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// Runs `future` at time `at`: every manual clock's [`Clock::now`] read within it (on this
    /// task) answers `at`, and the shared time is neither read nor moved. Only a test mode calls
    /// this (`leasewright serve --manual-clock`, the `Leasewright-Test-Time` header); a
    /// [`SystemClock`] never consults it.
    pub async fn at<F: std::future::Future>(at: DateTime<Utc>, future: F) -> F::Output {
        REQUEST_TIME.scope(at, future).await
    }

    /// Move the time by `by` (which may be negative).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        REQUEST_TIME
            .try_with(|at| *at)
            .unwrap_or_else(|_| *self.now.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}

#[cfg(test)]
mod request_time_tests {
    use super::*;

    #[tokio::test]
    async fn a_request_time_is_read_within_its_future_only() {
        let clock = ManualClock::at_fixed_start();
        let shared = clock.now();
        let own = shared + Duration::seconds(90);
        let inner = clock.clone();
        let seen = ManualClock::at(own, async move { inner.now() }).await;
        assert_eq!(seen, own);
        // The shared time was neither read nor moved by the request.
        assert_eq!(clock.now(), shared);
        // Two requests at once, each at its own time.
        let (a, b) = (clock.clone(), clock.clone());
        let (ta, tb) = tokio::join!(
            ManualClock::at(own, async move {
                tokio::task::yield_now().await;
                a.now()
            }),
            ManualClock::at(shared - Duration::seconds(5), async move { b.now() }),
        );
        assert_eq!((ta, tb), (own, shared - Duration::seconds(5)));
    }
}
