//! The server's receipt time against itself, beside the replay: within one job's commit (ledger)
//! order receipt times never go backwards by more than the tolerance ([`Policy::tolerance`]: every
//! rule of a job runs under its row lock, so a later record was received later; only clocks of
//! several servers or replicas may disagree, by less than the tolerance), and no lease is granted
//! for longer than the largest ttl a store of this database was configured with (`lease_policy`,
//! when the schema has it).

use chrono::{DateTime, Duration, Utc};

type Time = DateTime<Utc>;

/// The least tolerance of receipt times: one second. A sweeper whose clock runs a lease ttl ahead
/// is far outside it.
pub const TOLERANCE: Duration = Duration::seconds(1);

/// What the database's lease policy (`lease_policy`) bounds the ledger's times by.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// The largest lease ttl a store of the database was configured with, when recorded.
    pub max_ttl: Option<Duration>,
    /// How far one record's receipt time may be behind an earlier record's of the same job:
    /// [`TOLERANCE`], or twice the `max_clock_skew` (δ) the database records when that is more.
    /// Replicas whose clocks are each within δ of the database's disagree by up to 2δ
    /// (docs/protocol.md §3.1), and may write one job's records in turn.
    pub tolerance: Duration,
}

impl Policy {
    /// The policy of a database recording `max_ttl` and `max_clock_skew` (δ; `None`: a schema
    /// without it, as 0).
    pub fn new(max_ttl: Option<Duration>, max_clock_skew: Option<Duration>) -> Policy {
        let twice_skew = max_clock_skew.unwrap_or_else(Duration::zero) * 2;
        Policy {
            max_ttl,
            tolerance: TOLERANCE.max(twice_skew),
        }
    }
}

/// The latest receipt time seen so far in one job's commit order, and its record.
pub struct ReceiptOrder {
    tolerance: Duration,
    latest: Option<(Time, String)>,
}

impl ReceiptOrder {
    /// Receipt times of one job, each within `tolerance` of the latest before it.
    pub fn new(tolerance: Duration) -> ReceiptOrder {
        ReceiptOrder {
            tolerance,
            latest: None,
        }
    }

    /// `record`, received at `at`, next in commit order: the violation's detail if it is more
    /// than the tolerance before an earlier record.
    pub fn next(&mut self, at: Time, record: &str) -> Result<(), String> {
        if let Some((latest, earlier)) = &self.latest {
            if at + self.tolerance < *latest {
                return Err(format!(
                    "received at {}, {:.3} s before {earlier} (received at {}), which committed \
                     earlier: receipt times went backwards by more than the {} s tolerance (a \
                     server's clock ahead of the others by more than the database's \
                     max_clock_skew allows, or a time rewritten)",
                    at.format("%Y-%m-%d %H:%M:%S%.6f"),
                    (*latest - at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6,
                    latest.format("%Y-%m-%d %H:%M:%S%.6f"),
                    self.tolerance.num_milliseconds() as f64 / 1e3
                ));
            }
            if at <= *latest {
                return Ok(());
            }
        }
        self.latest = Some((at, record.to_string()));
        Ok(())
    }
}

/// The detail of a lease granted for longer than the configured ttl, if it was.
pub fn ttl_exceeded(ttl: Duration, configured: Option<Duration>) -> Option<String> {
    let configured = configured?;
    (ttl > configured).then(|| {
        format!(
            "the claim granted a lease ttl of {} s, above the largest ttl a store of this \
             database was configured with ({} s, lease_policy)",
            ttl.num_milliseconds() as f64 / 1e3,
            configured.num_milliseconds() as f64 / 1e3
        )
    })
}
