//! The ledger read in job order by one sequential scan of each table (issue 37): every table's
//! rows sorted by their job on the server (a sequential scan and a sort, never an index probe
//! per row), read through a cursor a few thousand rows at a time, and cut at each batch's last
//! job. A batch of 2,000 job ids read by `= ANY(ids)` visited about one heap page per row (the
//! jobs in uuid order, the rows in insertion order); a scan visits each page once.
//!
//! Only `SELECT`s and cursors over them, in the audit's read-only snapshot: what a read-only
//! role and a hot standby allow. Memory: the rows of one batch and one fetch per table.

use futures_util::future::try_join_all;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use std::collections::VecDeque;
use uuid::Uuid;

/// Rows fetched from a cursor at a time.
const FETCH: usize = 4096;

/// The tables scanned, each with the column naming its job and the order of its rows (the job
/// first): what the chain pass and the replay read of every record.
const TABLES: [(Table, &str, &str); 6] = [
    (
        Table::Observations,
        "named_job_id",
        "SELECT id, named_job_id, ledger_seq, sender_runner_id, kind, named_attempt_id, \
                named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, \
                reason, outcome, payload_sha256, lease_expiry, chain_seq, chain_hash \
         FROM observations ORDER BY named_job_id, id",
    ),
    (
        Table::Attempts,
        "job_id",
        "SELECT id, job_id, project_id, ledger_seq, runner_id, lease_id, fence, slot_token, \
                claimed_at, claim_lease_expiry, chain_seq, chain_hash, state, lease_expiry, \
                outcome, result_digest, ended_at, job_chain_seq, job_chain_head \
         FROM attempts ORDER BY job_id, ledger_seq",
    ),
    (
        Table::Jobs,
        "id",
        "SELECT id, project_id, ledger_seq, submitted_at, source_revision, source_digest, \
                command, target, target_kind, state, fence, current_attempt_id, \
                cancel_requested, outcome, result_digest, finished_at, submitted_seq, \
                chain_seq, chain_head \
         FROM jobs ORDER BY id",
    ),
    (
        Table::Reconciliations,
        "job_id",
        "SELECT id, job_id, ledger_seq, project_id, attempt_id, finding, decision, verdict, \
                reason, decided_at, chain_seq, chain_hash \
         FROM reconciliations ORDER BY job_id, id",
    ),
    (
        Table::Cancels,
        "job_id",
        "SELECT id, job_id, ledger_seq, project_id, attempt_id, verdict, reason, requested_at, \
                chain_seq, chain_hash \
         FROM cancels ORDER BY job_id, ledger_seq",
    ),
    (
        Table::Sweeps,
        "job_id",
        "SELECT id, job_id, ledger_seq, attempt_id, swept_at, chain_seq, chain_hash \
         FROM expiry_sweeps ORDER BY job_id, ledger_seq",
    ),
];

/// A table scanned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Table {
    Jobs,
    Attempts,
    Observations,
    Reconciliations,
    Cancels,
    Sweeps,
}

/// One table's cursor: on which connection, the rows fetched and not yet taken.
struct Cursor {
    table: Table,
    key: &'static str,
    conn: usize,
    fetch: String,
    rows: VecDeque<PgRow>,
    done: bool,
}

impl Cursor {
    fn job(&self, r: &PgRow) -> Result<Uuid, sqlx::Error> {
        r.try_get(self.key)
    }

    /// Rows fetched until one of a job after `last` (or the end).
    async fn fill(&mut self, conn: &mut PgConnection, last: Uuid) -> Result<(), sqlx::Error> {
        while !self.done {
            if let Some(r) = self.rows.back() {
                if self.job(r)? > last {
                    break;
                }
            }
            let got = sqlx::query(&self.fetch).fetch_all(&mut *conn).await?;
            self.done = got.len() < FETCH;
            self.rows.extend(got);
        }
        Ok(())
    }

    /// The rows of the jobs `ids` (sorted; the rows up to its last job taken, those of a job not
    /// in it dropped: an observation naming a job that does not exist is the orphans' check).
    fn take(&mut self, ids: &[Uuid]) -> Result<Vec<PgRow>, sqlx::Error> {
        let mut out = Vec::new();
        let Some(&last) = ids.last() else {
            return Ok(out);
        };
        while let Some(r) = self.rows.front() {
            let job = self.job(r)?;
            if job > last {
                break;
            }
            let r = self.rows.pop_front().expect("a front row");
            if ids.binary_search(&job).is_ok() {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// Every table's rows of one batch of jobs, each table's in job order.
#[derive(Default)]
pub(crate) struct Rows {
    pub jobs: Vec<PgRow>,
    pub attempts: Vec<PgRow>,
    pub observations: Vec<PgRow>,
    pub reconciliations: Vec<PgRow>,
    pub cancels: Vec<PgRow>,
    pub sweeps: Vec<PgRow>,
}

impl Rows {
    fn of(&mut self, table: Table) -> &mut Vec<PgRow> {
        match table {
            Table::Jobs => &mut self.jobs,
            Table::Attempts => &mut self.attempts,
            Table::Observations => &mut self.observations,
            Table::Reconciliations => &mut self.reconciliations,
            Table::Cancels => &mut self.cancels,
            Table::Sweeps => &mut self.sweeps,
        }
    }
}

/// The scan of every ledger table, its cursors spread over the connections given (each in the
/// audit's snapshot).
pub(crate) struct Scan {
    cursors: Vec<Cursor>,
}

impl Scan {
    /// The cursors declared, table `i` on connection `i % conns.len()` (the largest tables
    /// first, so that two connections share the work). Each is planned as a sequential scan and
    /// a sort: the index scans a planner prefers for a cursor's first rows are off while they
    /// are declared (and back on for every later query).
    pub async fn declare(conns: &mut [&mut PgConnection]) -> Result<Scan, sqlx::Error> {
        let n = conns.len().max(1);
        let mut cursors = Vec::with_capacity(TABLES.len());
        for (i, &(table, key, select)) in TABLES.iter().enumerate() {
            let conn = &mut *conns[i % n];
            let name = format!("lw_audit_scan_{i}");
            for sql in [
                "SET LOCAL cursor_tuple_fraction = 1",
                "SET LOCAL enable_indexscan = off",
                "SET LOCAL enable_indexonlyscan = off",
                "SET LOCAL enable_bitmapscan = off",
            ] {
                sqlx::query(sql)
                    .persistent(false)
                    .execute(&mut *conn)
                    .await?;
            }
            sqlx::query(&format!("DECLARE {name} NO SCROLL CURSOR FOR {select}"))
                .persistent(false)
                .execute(&mut *conn)
                .await?;
            for setting in [
                "cursor_tuple_fraction",
                "enable_indexscan",
                "enable_indexonlyscan",
                "enable_bitmapscan",
            ] {
                sqlx::query(&format!("RESET {setting}"))
                    .persistent(false)
                    .execute(&mut *conn)
                    .await?;
            }
            cursors.push(Cursor {
                table,
                key,
                conn: i % n,
                fetch: format!("FETCH FORWARD {FETCH} FROM {name}"),
                rows: VecDeque::new(),
                done: false,
            });
        }
        Ok(Scan { cursors })
    }

    /// The rows of the jobs `ids` (sorted, after every job of the batches before): each
    /// connection fetches for its own cursors, the connections at once.
    pub async fn batch(
        &mut self,
        conns: &mut [&mut PgConnection],
        ids: &[Uuid],
    ) -> Result<Rows, sqlx::Error> {
        let mut rows = Rows::default();
        let Some(&last) = ids.last() else {
            return Ok(rows);
        };
        let mut mine: Vec<Vec<&mut Cursor>> = conns.iter().map(|_| Vec::new()).collect();
        for c in &mut self.cursors {
            mine[c.conn].push(c);
        }
        let fills: Vec<_> = conns
            .iter_mut()
            .zip(mine)
            .map(|(conn, cursors)| fill(conn, cursors, last))
            .collect();
        try_join_all(fills).await?;
        for c in &mut self.cursors {
            *rows.of(c.table) = c.take(ids)?;
        }
        Ok(rows)
    }

    /// The cursors closed (their sorts' memory and files released).
    pub async fn close(self, conns: &mut [&mut PgConnection]) -> Result<(), sqlx::Error> {
        for (i, c) in self.cursors.iter().enumerate() {
            sqlx::query(&format!("CLOSE lw_audit_scan_{i}"))
                .persistent(false)
                .execute(&mut *conns[c.conn])
                .await?;
        }
        Ok(())
    }
}

/// `cursors` (all on `conn`) filled up to the job `last`, one after the other.
async fn fill(
    conn: &mut PgConnection,
    cursors: Vec<&mut Cursor>,
    last: Uuid,
) -> Result<(), sqlx::Error> {
    for c in cursors {
        c.fill(conn, last).await?;
    }
    Ok(())
}
