//! `leasewright bench writes`: what one operation writes, counted exactly rather than timed.
//!
//! One worker runs `n` operations of each kind one after another (claim, the fenced floor
//! ([`crate::floor`]), batch claim, heartbeat, result, and the typical queue's claim and claim ->
//! complete). Around each kind the server's
//! WAL insert position is read (`pg_current_wal_insert_lsn()`); where the `pg_walinspect` extension can be
//! created (superuser, PostgreSQL 15+ contrib), the WAL records between the two positions are
//! grouped by the relation they touch, which gives the heap row versions written (insert,
//! update, HOT update, delete), the row locks and the index entries inserted per index. These
//! figures do not depend on the machine's load: they are the stable ones to compare.
//!
//! Full-page images (the first change of a page after a checkpoint) are counted apart: how many
//! there are depends on when the last checkpoint was, not on the operation.

use crate::baseline;
use crate::claims::divide;
use crate::fixture::{BenchError, Fixture};
use leasewright_impl::{Outcome, Tuple, Verdict};
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Duration;

/// What `leasewright bench writes` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Operations of each kind.
    pub operations: usize,
    /// The batch claim's K.
    pub batch: usize,
}

/// One relation's writes per operation.
#[derive(Clone, Debug, Serialize)]
pub struct RelationWrites {
    /// Table or index name.
    pub relation: String,
    /// Heap row versions inserted (including the new version of a non-HOT update).
    pub inserted: f64,
    /// Heap updates (non-HOT: a new version and an entry in every index).
    pub updated: f64,
    /// HOT updates (a new version on the same page, no index entry).
    pub hot_updated: f64,
    /// Heap row deletions.
    pub deleted: f64,
    /// Row locks written (`SELECT ... FOR UPDATE`, foreign-key checks).
    pub locked: f64,
    /// Index entries inserted (B-tree leaf and posting-list inserts).
    pub index_entries: f64,
    /// WAL record bytes (without full-page images).
    pub wal_bytes: f64,
}

/// One kind of operation.
#[derive(Clone, Debug, Serialize)]
pub struct Kind {
    pub name: String,
    /// Jobs (or messages) the kind handled: the divisor of every figure.
    pub operations: u64,
    /// WAL bytes per operation, position difference (everything the server wrote).
    pub wal_bytes: f64,
    /// Of which full-page images, when `pg_walinspect` is available.
    pub fpi_bytes: Option<f64>,
    /// Heap row versions written per operation (insert + update + HOT update + delete).
    pub rows: Option<f64>,
    /// Row locks written per operation.
    pub locks: Option<f64>,
    /// Index entries per operation.
    pub index_entries: Option<f64>,
    /// Transaction commit records per operation.
    pub commits: Option<f64>,
    /// Per relation of this database (empty without `pg_walinspect`).
    pub relations: Vec<RelationWrites>,
}

/// What a run counted.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub options: Options,
    /// Whether the per-relation breakdown was available.
    pub walinspect: bool,
    pub kinds: Vec<Kind>,
    /// `idx_scan` of every index of the implementation's tables after the run (0: no query of
    /// the run used it).
    pub index_scans: Vec<(String, String, i64)>,
}

/// Counts. Uses `DATABASE_URL` (a fresh database on that server) or a throwaway cluster.
pub async fn run(options: Options) -> Result<Report, BenchError> {
    if options.operations == 0 || options.batch == 0 {
        return Err(BenchError::Invalid(
            "--operations and --batch must be positive".into(),
        ));
    }
    let fixture = Fixture::new(1).await?;
    let report = count(&fixture, options).await;
    fixture.close().await;
    report
}

async fn count(fixture: &Fixture, options: Options) -> Result<Report, BenchError> {
    let n = options.operations;
    let walinspect = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .execute(&fixture.pool)
        .await
        .is_ok();
    fixture
        .top_up(3 * n as i64 + (n * options.batch) as i64 + 100)
        .await?;
    fixture.vacuum().await?;
    let store = &fixture.store;
    let runner = fixture.runners[0];
    let mut kinds = Vec::new();

    // claim: n single claims.
    let mut leases: Vec<Tuple> = Vec::with_capacity(n);
    let window = Window::open(fixture).await?;
    for _ in 0..n {
        match store.claim(runner, None).await? {
            Verdict::Accepted(lease) => leases.push(lease.tuple),
            other => return Err(empty("claim", other.as_str())),
        }
    }
    kinds.push(window.close(fixture, "claim", n as u64, walinspect).await?);

    // The fenced floor: n claims that only write what a fenced claim must (crate::floor).
    let mut floor_leases = Vec::with_capacity(n);
    let window = Window::open(fixture).await?;
    for _ in 0..n {
        let now = chrono::Utc::now();
        let lease_expiry = now + chrono::Duration::hours(1);
        match crate::floor::claim(&fixture.pool, runner, fixture.project, now, lease_expiry).await?
        {
            Some(lease) => floor_leases.push(lease),
            None => return Err(empty("fenced floor", "empty")),
        }
    }
    kinds.push(
        window
            .close(fixture, "fenced floor: claim", n as u64, walinspect)
            .await?,
    );

    // batch claim: n / K batch claims of K jobs (per job).
    let batches = n.div_ceil(options.batch);
    let window = Window::open(fixture).await?;
    let mut batched = 0u64;
    for _ in 0..batches {
        match store.claim_batch(runner, options.batch, None).await? {
            Verdict::Accepted(taken) => batched += taken.len() as u64,
            other => return Err(empty("batch claim", other.as_str())),
        }
    }
    let name = format!("claim K={} (per job)", options.batch);
    kinds.push(window.close(fixture, &name, batched, walinspect).await?);

    // heartbeat: one per lease.
    let window = Window::open(fixture).await?;
    for tuple in &leases {
        if !store.heartbeat(tuple, None).await?.is_accepted() {
            return Err(BenchError::Invalid("a heartbeat was not accepted".into()));
        }
    }
    kinds.push(
        window
            .close(fixture, "heartbeat", n as u64, walinspect)
            .await?,
    );

    // result: one per lease.
    let window = Window::open(fixture).await?;
    for tuple in &leases {
        let verdict = store
            .report_result(tuple, Outcome::Passed, "bench", None)
            .await?;
        if !verdict.is_accepted() {
            return Err(BenchError::Invalid("a result was not accepted".into()));
        }
    }
    kinds.push(
        window
            .close(fixture, "result", n as u64, walinspect)
            .await?,
    );

    // The fenced floor's result: one per floor lease.
    let window = Window::open(fixture).await?;
    for lease in &floor_leases {
        if !crate::floor::result(&fixture.pool, runner, lease, chrono::Utc::now()).await? {
            return Err(BenchError::Invalid("a floor result finished no job".into()));
        }
    }
    kinds.push(
        window
            .close(fixture, "fenced floor: result", n as u64, walinspect)
            .await?,
    );

    // The typical queue: n bare claims, then n whole jobs (claim, complete).
    let window = Window::open(fixture).await?;
    for _ in 0..n {
        if !baseline::bare_claim(&fixture.pool, 0).await? {
            return Err(empty("bare claim", "empty"));
        }
    }
    kinds.push(
        window
            .close(fixture, "typical queue: claim", n as u64, walinspect)
            .await?,
    );
    let window = Window::open(fixture).await?;
    for _ in 0..n {
        if !baseline::claim_and_complete(&fixture.pool, 0).await? {
            return Err(empty("typical queue job", "empty"));
        }
    }
    kinds.push(
        window
            .close(
                fixture,
                "typical queue: claim -> complete",
                n as u64,
                walinspect,
            )
            .await?,
    );

    let index_scans = index_scans(fixture).await?;
    Ok(Report {
        options,
        walinspect,
        kinds,
        index_scans,
    })
}

fn empty(what: &str, verdict: &str) -> BenchError {
    BenchError::Invalid(format!("{what}: the queue ran dry ({verdict})"))
}

/// A WAL position, opened before a kind's operations.
struct Window {
    start: String,
}

impl Window {
    async fn open(fixture: &Fixture) -> Result<Window, BenchError> {
        Ok(Window {
            start: fixture.wal_lsn().await?,
        })
    }

    async fn close(
        self,
        fixture: &Fixture,
        name: &str,
        operations: u64,
        walinspect: bool,
    ) -> Result<Kind, BenchError> {
        let end = fixture.wal_lsn().await?;
        let total = fixture.wal_bytes_since(&self.start).await? as f64;
        let per = |x: f64| divide(x, operations as f64);
        let mut kind = Kind {
            name: name.to_string(),
            operations,
            wal_bytes: per(total),
            fpi_bytes: None,
            rows: None,
            locks: None,
            index_entries: None,
            commits: None,
            relations: Vec::new(),
        };
        // A window that wrote no WAL has nothing to inspect, and PostgreSQL 15's pg_walinspect
        // refuses a start LSN that is not before the flushed position ("cannot accept future
        // start LSN"), which such a window's start is.
        let wrote: bool = sqlx::query_scalar("SELECT $2::pg_lsn > $1::pg_lsn")
            .bind(&self.start)
            .bind(&end)
            .fetch_one(&fixture.pool)
            .await?;
        if !walinspect || !wrote {
            return Ok(kind);
        }
        // pg_walinspect reads only flushed WAL (with synchronous_commit = off the last records
        // may still be in memory): flush by waiting for the WAL writer.
        for _ in 0..50 {
            let flushed: bool =
                sqlx::query_scalar("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn")
                    .bind(&end)
                    .fetch_one(&fixture.pool)
                    .await?;
            if flushed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rows: Vec<(String, String, String, i64, i64, i64)> = sqlx::query_as(WAL_BY_RELATION)
            .bind(&self.start)
            .bind(&end)
            .fetch_all(&fixture.pool)
            .await?;
        let mut fpi = 0i64;
        let mut commits = 0i64;
        for (relation, rmgr, record, count, bytes, fpi_bytes) in rows {
            fpi += fpi_bytes;
            if rmgr == "Transaction" && record.starts_with("COMMIT") {
                commits += count;
            }
            if relation.is_empty() {
                continue;
            }
            let at = match kind.relations.iter().position(|r| r.relation == relation) {
                Some(at) => at,
                None => {
                    kind.relations.push(RelationWrites {
                        relation: relation.clone(),
                        inserted: 0.0,
                        updated: 0.0,
                        hot_updated: 0.0,
                        deleted: 0.0,
                        locked: 0.0,
                        index_entries: 0.0,
                        wal_bytes: 0.0,
                    });
                    kind.relations.len() - 1
                }
            };
            let r = &mut kind.relations[at];
            let count = per(count as f64);
            r.wal_bytes += per((bytes - fpi_bytes) as f64);
            match (rmgr.as_str(), record.as_str()) {
                ("Heap", "INSERT" | "INSERT+INIT") => r.inserted += count,
                ("Heap2", "MULTI_INSERT" | "MULTI_INSERT+INIT") => r.inserted += count,
                ("Heap", "UPDATE" | "UPDATE+INIT") => r.updated += count,
                ("Heap", "HOT_UPDATE" | "HOT_UPDATE+INIT") => r.hot_updated += count,
                ("Heap", "DELETE") => r.deleted += count,
                ("Heap", "LOCK") | ("Heap2", "LOCK_UPDATED") => r.locked += count,
                ("Btree", "INSERT_LEAF" | "INSERT_POST") => r.index_entries += count,
                _ => {}
            }
        }
        kind.relations.retain(|r| {
            r.inserted + r.updated + r.hot_updated + r.deleted + r.locked + r.index_entries > 0.0
        });
        kind.relations.sort_by(|a, b| a.relation.cmp(&b.relation));
        let sum = |f: fn(&RelationWrites) -> f64| kind.relations.iter().map(f).sum::<f64>();
        kind.rows = Some(sum(|r| r.inserted + r.updated + r.hot_updated + r.deleted));
        kind.locks = Some(sum(|r| r.locked));
        kind.index_entries = Some(sum(|r| r.index_entries));
        kind.fpi_bytes = Some(per(fpi as f64));
        kind.commits = Some(per(commits as f64));
        Ok(kind)
    }
}

/// WAL records between $1 and $2 by the relation of this database they touch (empty for records
/// without a block of this database: commits, and every record of other databases, which are
/// then counted only as commits), resource manager and record type.
const WAL_BY_RELATION: &str = "
SELECT coalesce(c.relname, '') AS relation, w.resource_manager, w.record_type,
       count(*)::bigint, sum(w.record_length)::bigint, sum(w.fpi_length)::bigint
FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) AS w
LEFT JOIN pg_class AS c
  ON substring(w.block_ref from 'rel \\d+/(\\d+)/') =
       (SELECT oid::text FROM pg_database WHERE datname = current_database())
 AND c.relfilenode::text = substring(w.block_ref from 'rel \\d+/\\d+/(\\d+)')
GROUP BY 1, 2, 3";

async fn index_scans(fixture: &Fixture) -> Result<Vec<(String, String, i64)>, BenchError> {
    // Statistics reach the shared view when a backend has been idle a moment; ask for it.
    let _ = sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&fixture.pool)
        .await;
    Ok(sqlx::query_as(
        "SELECT relname::text, indexrelname::text, idx_scan FROM pg_stat_user_indexes
         WHERE schemaname = current_schema() ORDER BY relname, indexrelname",
    )
    .fetch_all(&fixture.pool)
    .await?)
}

impl Report {
    /// The human-readable tables.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "leasewright bench writes: {} operations of each kind, one worker, one after another",
            self.options.operations
        );
        if !self.walinspect {
            let _ = writeln!(
                out,
                "(pg_walinspect could not be created: WAL bytes only, no breakdown)"
            );
        }
        let _ = writeln!(out);
        let opt =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        let _ = writeln!(
            out,
            "{:<36} {:>9} {:>9} {:>6} {:>6} {:>8} {:>8}",
            "per operation", "WAL B", "of it FPI", "rows", "locks", "entries", "commits"
        );
        for k in &self.kinds {
            let _ = writeln!(
                out,
                "{:<36} {:>9.0} {:>9} {:>6} {:>6} {:>8} {:>8}",
                k.name,
                k.wal_bytes,
                opt(k.fpi_bytes, 0),
                opt(k.rows, 2),
                opt(k.locks, 2),
                opt(k.index_entries, 2),
                opt(k.commits, 2),
            );
        }
        for k in &self.kinds {
            if k.relations.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n{} (per operation)", k.name);
            let _ = writeln!(
                out,
                "  {:<44} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8}",
                "relation", "ins", "upd", "hot", "del", "lock", "entries", "WAL B"
            );
            for r in &k.relations {
                let _ = writeln!(
                    out,
                    "  {:<44} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>8.2} {:>8.0}",
                    r.relation,
                    r.inserted,
                    r.updated,
                    r.hot_updated,
                    r.deleted,
                    r.locked,
                    r.index_entries,
                    r.wal_bytes
                );
            }
        }
        let _ = writeln!(
            out,
            "\nindex scans over the run (pg_stat_user_indexes.idx_scan):"
        );
        for (table, index, scans) in &self.index_scans {
            let _ = writeln!(out, "  {table:<22} {index:<44} {scans:>8}");
        }
        out
    }
}
