//! The server's receipt time against itself, beside the replay: within one job's commit (ledger)
//! order receipt times never go backwards by more than [`TOLERANCE`] (every rule of a job runs
//! under its row lock, so a later record was received later; only clocks of several servers or
//! replicas may disagree, by less than the tolerance), and no lease is granted for longer than the
//! largest ttl a store of this database was configured with (`lease_policy`, when the schema has
//! it).

use chrono::{DateTime, Duration, Utc};

type Time = DateTime<Utc>;

/// How far one record's receipt time may be behind an earlier record's of the same job (servers
/// or replicas whose clocks disagree): one second. A sweeper whose clock runs a lease ttl ahead
/// is far outside it.
pub const TOLERANCE: Duration = Duration::seconds(1);

/// The latest receipt time seen so far in one job's commit order, and its record.
#[derive(Default)]
pub struct ReceiptOrder {
    latest: Option<(Time, String)>,
}

impl ReceiptOrder {
    /// `record`, received at `at`, next in commit order: the violation's detail if it is more
    /// than the tolerance before an earlier record.
    pub fn next(&mut self, at: Time, record: &str) -> Result<(), String> {
        if let Some((latest, earlier)) = &self.latest {
            if at + TOLERANCE < *latest {
                return Err(format!(
                    "received at {}, {:.3} s before {earlier} (received at {}), which committed \
                     earlier: receipt times went backwards by more than the {} s tolerance (a \
                     server's clock ahead of the others, or a time rewritten)",
                    at.format("%Y-%m-%d %H:%M:%S%.6f"),
                    (*latest - at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6,
                    latest.format("%Y-%m-%d %H:%M:%S%.6f"),
                    TOLERANCE.num_seconds()
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
