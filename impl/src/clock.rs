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

/// A clock that moves only when told to, for tests and replays. Clones share one time.
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

    /// Move the time by `by` (which may be negative).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}
