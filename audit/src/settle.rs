//! The watermark's position, settled before the audit's snapshot (docs/audit.md, "Watermarks: a
//! settled position"). A record's ledger position is drawn inside its transaction, before it
//! commits: a transaction in flight when the audit takes its snapshot can hold a position below
//! the largest one the snapshot shows and commit after it. A watermark at that largest position
//! would then cover a record its digest never saw, and the next `--since` would report a healthy
//! ledger as `watermark_mismatch`.
//!
//! So, before the snapshot, in one statement: the largest position committed (`P`) and the
//! transactions in progress (`pg_current_snapshot()`'s xip list). Every position at or below `P`
//! was drawn by a transaction that had committed by then (it is in `P`), or was in progress
//! then: each of those of this database is waited for (`pg_xact_status`) until it has ended, and
//! only then is the audit's snapshot taken. Every record at or below `P` the ledger will ever hold
//! is in that snapshot, and `P` is the watermark's position.
//!
//! What it assumes: a transaction has its transaction id when it draws a position. Every record
//! but a job's submission and an observation naming no job is drawn under its job's row lock
//! (which takes the id); those two draw inside their INSERT, a few microseconds before the insert
//! takes the id. A record drawn in that window by a transaction that then outlives the audit's
//! snapshot is the one case left: the next `--since` reports `watermark_mismatch` (loud, never a
//! record silently skipped: its job's chain head no longer matches the digest). Prepared (two-phase)
//! transactions are not waited for; the Store does not use them.

use sqlx::PgConnection;
use std::time::{Duration, Instant};

/// How long the audit waits by default for the transactions in progress at its start.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The settled position, or why there is none.
#[derive(Clone, Debug)]
pub struct Settled {
    /// The largest ledger position committed before the audit, every transaction that could
    /// hold a position below it ended (`None`: some had not when the wait ran out).
    pub position: Option<i64>,
    /// The transactions of this database still in progress when the wait ran out.
    pub in_progress: Vec<String>,
    pub waited: Duration,
}

/// The transactions of `$1` (a `pg_current_snapshot()` as text) still in progress, of this
/// database (a transaction holds the lock on its own id; `pg_stat_activity` says whose database),
/// after a pause of `$2` seconds. On a hot standby the primary's transactions hold no lock the
/// standby shows, so there every transaction in progress is waited for, of any database.
const IN_PROGRESS: &str = "SELECT x::text FROM pg_sleep($2) AS pause, \
         pg_snapshot_xip($1::text::pg_snapshot) AS x \
     WHERE pg_xact_status(x) = 'in progress' \
       AND (pg_is_in_recovery() \
         OR EXISTS (SELECT 1 FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid \
                   WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' \
                     AND l.granted AND l.transactionid = x::xid \
                     AND a.datname = current_database()))";

/// Settle the position (outside any transaction of `conn`: before the audit's `BEGIN`).
/// `pruned`: the schema has `ledger_pruned` (migration 0015), whose tombstones hold positions of
/// records a prune deleted (and, since migration 0019, the prune's own).
pub async fn settle(
    conn: &mut PgConnection,
    pruned: bool,
    timeout: Duration,
) -> Result<Settled, sqlx::Error> {
    let tombstones = if !pruned {
        ""
    } else if crate::chain::pruned_on_the_record(conn).await? {
        ", (SELECT max(greatest(max_ledger_seq, pruned_seq)) FROM ledger_pruned)"
    } else {
        ", (SELECT max(max_ledger_seq) FROM ledger_pruned)"
    };
    let (position, snapshot): (i64, String) = sqlx::query_as(&format!(
        "SELECT coalesce(greatest((SELECT max(ledger_seq) FROM jobs), \
                (SELECT max(ledger_seq) FROM attempts), \
                (SELECT max(ledger_seq) FROM observations), \
                (SELECT max(ledger_seq) FROM reconciliations), \
                (SELECT max(ledger_seq) FROM cancels), \
                (SELECT max(ledger_seq) FROM expiry_sweeps){tombstones}), 0)::bigint, \
                pg_current_snapshot()::text"
    ))
    .fetch_one(&mut *conn)
    .await?;
    let started = Instant::now();
    let mut pause = Duration::ZERO;
    loop {
        let in_progress: Vec<String> = sqlx::query_scalar(IN_PROGRESS)
            .bind(&snapshot)
            .bind(pause.as_secs_f64())
            .fetch_all(&mut *conn)
            .await?;
        let waited = started.elapsed();
        if in_progress.is_empty() {
            return Ok(Settled {
                position: Some(position),
                in_progress,
                waited,
            });
        }
        if waited >= timeout {
            return Ok(Settled {
                position: None,
                in_progress,
                waited,
            });
        }
        pause = (pause * 2)
            .clamp(Duration::from_millis(10), Duration::from_millis(500))
            .min(timeout - waited);
    }
}
