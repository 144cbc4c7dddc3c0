//! Reading the ledger: plain rows, by job, in one read-only snapshot. Only `SELECT`s: the audit
//! runs under a read-only role and on a replica.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use std::collections::HashMap;
use uuid::Uuid;

type Time = DateTime<Utc>;

/// A job's row as it is now.
#[derive(Clone, Debug)]
pub struct JobRow {
    pub id: Uuid,
    pub project: Uuid,
    pub state: String,
    pub fence: i64,
    pub current_attempt: Option<Uuid>,
    pub cancel_requested: bool,
    pub outcome: Option<String>,
    pub result_digest: Option<String>,
    pub target: String,
    pub ledger_seq: i64,
}

/// An attempt's row: its claim's record, and its state now.
#[derive(Clone, Debug)]
pub struct AttemptRow {
    pub id: Uuid,
    pub runner: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
    pub state: String,
    pub lease_expiry: Time,
    pub claim_lease_expiry: Option<Time>,
    pub outcome: Option<String>,
    pub result_digest: Option<String>,
    pub claimed_at: Time,
    pub ledger_seq: i64,
    /// The slot token the claim issued (§8.3).
    pub slot_token: i64,
}

/// One received runner message.
#[derive(Clone, Debug)]
pub struct ObservationRow {
    pub id: i64,
    pub ledger_seq: i64,
    pub sender: Uuid,
    pub kind: String,
    pub named_attempt: Uuid,
    pub named_lease: Uuid,
    pub named_fence: i64,
    pub attributed: Option<Uuid>,
    pub received_at: Time,
    pub runner_time: Option<Time>,
    pub verdict: String,
    pub reason: Option<String>,
    pub outcome: Option<String>,
    pub payload_sha256: Option<String>,
    pub lease_expiry: Option<Time>,
}

/// One reconciliation asked for.
#[derive(Clone, Debug)]
pub struct ReconciliationRow {
    pub id: i64,
    pub ledger_seq: i64,
    pub project: Uuid,
    pub attempt: Option<Uuid>,
    pub finding: String,
    pub decision: String,
    pub verdict: String,
    pub reason: Option<String>,
    pub decided_at: Time,
}

/// One cancel asked for.
#[derive(Clone, Debug)]
pub struct CancelRow {
    pub id: i64,
    pub ledger_seq: i64,
    pub project: Uuid,
    pub attempt: Option<Uuid>,
    pub verdict: String,
    pub reason: Option<String>,
    pub requested_at: Time,
}

/// One job the expiry sweep made uncertain.
#[derive(Clone, Debug)]
pub struct SweepRow {
    pub id: i64,
    pub ledger_seq: i64,
    pub attempt: Uuid,
    pub swept_at: Time,
}

/// Everything recorded about one job, and its rows as they are now.
#[derive(Clone, Debug)]
pub struct JobLedger {
    pub job: JobRow,
    /// In claim (ledger) order.
    pub attempts: Vec<AttemptRow>,
    pub observations: Vec<ObservationRow>,
    pub reconciliations: Vec<ReconciliationRow>,
    pub cancels: Vec<CancelRow>,
    pub sweeps: Vec<SweepRow>,
    /// The target reservation held now: (target, attempt).
    pub reservation: Option<(String, Uuid)>,
    /// Another job holding this job's slot now, when that job names the slot (its claim is then
    /// judged by the cross-job slot check, `slot_overlap`, not as this job's `gap`).
    pub slot_taken_by: Option<Uuid>,
}

impl JobLedger {
    /// How many records (claims, messages, reconciliations, cancels, sweeps).
    pub fn records(&self) -> usize {
        self.attempts.len()
            + self.observations.len()
            + self.reconciliations.len()
            + self.cancels.len()
            + self.sweeps.len()
    }
}

/// Start the audit's snapshot: one `REPEATABLE READ READ ONLY` transaction.
pub async fn begin(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// `n - 1` more connections to the database `options` reach, reading in the snapshot of `conn`'s transaction
/// (begun by `begin`, nothing read in it yet): its snapshot exported (`pg_export_snapshot`, which
/// a hot standby answers too) and set in a `REPEATABLE READ READ ONLY` transaction on each, so
/// that every read of the audit, on any of them, sees the same ledger. `conn`'s transaction must
/// stay open while they read.
pub async fn readers(
    options: &sqlx::postgres::PgConnectOptions,
    conn: &mut PgConnection,
    n: usize,
) -> Result<Vec<PgConnection>, sqlx::Error> {
    if n <= 1 {
        return Ok(Vec::new());
    }
    let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()")
        .fetch_one(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(n - 1);
    for _ in 1..n {
        let mut reader = <PgConnection as sqlx::Connection>::connect_with(options).await?;
        begin(&mut reader).await?;
        // The identifier is the server's own (hex digits and dashes), never the caller's.
        sqlx::query(&format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
            .execute(&mut reader)
            .await?;
        out.push(reader);
    }
    Ok(out)
}

/// Whether the schema has the audit's ledger (impl migration 0003).
pub async fn has_ledger(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_schema = current_schema() \
           AND ((table_name = 'expiry_sweeps' AND column_name = 'ledger_seq') \
             OR (table_name = 'cancels' AND column_name = 'ledger_seq') \
             OR (table_name = 'observations' AND column_name = 'lease_expiry'))",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(found == 3)
}

/// Projects by id (with their names).
pub async fn projects(conn: &mut PgConnection) -> Result<HashMap<Uuid, String>, sqlx::Error> {
    let rows = sqlx::query("SELECT id, name FROM projects")
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("name")?)))
        .collect()
}

/// Every runner's project.
pub async fn runner_projects(conn: &mut PgConnection) -> Result<HashMap<Uuid, Uuid>, sqlx::Error> {
    let rows = sqlx::query("SELECT id, project_id FROM runners")
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("project_id")?)))
        .collect()
}

/// The jobs to audit, in id order: every job of `project` (all projects: `None`), or with
/// `since`, only the jobs with a record after that ledger sequence value.
pub async fn job_ids(
    conn: &mut PgConnection,
    project: Option<Uuid>,
    since: Option<i64>,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM jobs AS j \
         WHERE ($1::uuid IS NULL OR j.project_id = $1) \
           AND ($2::bigint IS NULL \
             OR j.ledger_seq > $2 \
             OR j.id IN (SELECT job_id FROM attempts WHERE ledger_seq > $2) \
             OR j.id IN (SELECT named_job_id FROM observations WHERE ledger_seq > $2) \
             OR j.id IN (SELECT job_id FROM reconciliations WHERE ledger_seq > $2) \
             OR j.id IN (SELECT job_id FROM cancels WHERE ledger_seq > $2) \
             OR j.id IN (SELECT job_id FROM expiry_sweeps WHERE ledger_seq > $2)) \
         ORDER BY id",
    )
    .bind(project)
    .bind(since)
    .fetch_all(&mut *conn)
    .await
}

/// Every held slot whose holder job names it: its holder job and attempt (what `reservations`
/// joins per batch, read once for a whole run).
pub async fn held_slots(
    conn: &mut PgConnection,
) -> Result<HashMap<String, (Uuid, Uuid)>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT s.slot, s.holder_job_id, s.holder_attempt_id \
         FROM target_slots AS s JOIN jobs AS h ON h.id = s.holder_job_id AND h.target = s.slot",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("slot")?,
                (r.try_get("holder_job_id")?, r.try_get("holder_attempt_id")?),
            ))
        })
        .collect()
}

/// The reservations of `jobs` from the held slots (`held_slots`): what `reservations` reads.
pub fn reservations_of<'a>(
    jobs: impl IntoIterator<Item = &'a JobRow>,
    held: &HashMap<String, (Uuid, Uuid)>,
) -> Reservations {
    let (mut reservations, mut taken) = (HashMap::new(), HashMap::new());
    for job in jobs {
        match held.get(&job.target) {
            Some(&(holder, attempt)) if holder == job.id => {
                reservations.insert(job.id, (job.target.clone(), attempt));
            }
            Some(&(holder, _)) => {
                taken.insert(job.id, holder);
            }
            None => {}
        }
    }
    (reservations, taken)
}

/// A job's row (its columns as `ledgers` names them).
pub fn job_row(r: &PgRow) -> Result<JobRow, sqlx::Error> {
    Ok(JobRow {
        id: r.try_get("id")?,
        project: r.try_get("project_id")?,
        state: r.try_get("state")?,
        fence: r.try_get("fence")?,
        current_attempt: r.try_get("current_attempt_id")?,
        cancel_requested: r.try_get("cancel_requested")?,
        outcome: r.try_get("outcome")?,
        result_digest: r.try_get("result_digest")?,
        target: r.try_get("target")?,
        ledger_seq: r.try_get("ledger_seq")?,
    })
}

fn attempt_row(r: &PgRow) -> Result<(Uuid, AttemptRow), sqlx::Error> {
    Ok((
        r.try_get("job_id")?,
        AttemptRow {
            id: r.try_get("id")?,
            runner: r.try_get("runner_id")?,
            lease_id: r.try_get("lease_id")?,
            fence: r.try_get("fence")?,
            state: r.try_get("state")?,
            lease_expiry: r.try_get("lease_expiry")?,
            claim_lease_expiry: r.try_get("claim_lease_expiry")?,
            outcome: r.try_get("outcome")?,
            result_digest: r.try_get("result_digest")?,
            claimed_at: r.try_get("claimed_at")?,
            ledger_seq: r.try_get("ledger_seq")?,
            slot_token: r.try_get("slot_token")?,
        },
    ))
}

fn observation_row(r: &PgRow) -> Result<(Uuid, ObservationRow), sqlx::Error> {
    Ok((
        r.try_get("named_job_id")?,
        ObservationRow {
            id: r.try_get("id")?,
            ledger_seq: r.try_get("ledger_seq")?,
            sender: r.try_get("sender_runner_id")?,
            kind: r.try_get("kind")?,
            named_attempt: r.try_get("named_attempt_id")?,
            named_lease: r.try_get("named_lease_id")?,
            named_fence: r.try_get("named_fence")?,
            attributed: r.try_get("attempt_id")?,
            received_at: r.try_get("received_at")?,
            runner_time: r.try_get("runner_time")?,
            verdict: r.try_get("verdict")?,
            reason: r.try_get("reason")?,
            outcome: r.try_get("outcome")?,
            payload_sha256: r.try_get("payload_sha256")?,
            lease_expiry: r.try_get("lease_expiry")?,
        },
    ))
}

fn reconciliation_row(r: &PgRow) -> Result<(Uuid, ReconciliationRow), sqlx::Error> {
    Ok((
        r.try_get("job_id")?,
        ReconciliationRow {
            id: r.try_get("id")?,
            ledger_seq: r.try_get("ledger_seq")?,
            project: r.try_get("project_id")?,
            attempt: r.try_get("attempt_id")?,
            finding: r.try_get("finding")?,
            decision: r.try_get("decision")?,
            verdict: r.try_get("verdict")?,
            reason: r.try_get("reason")?,
            decided_at: r.try_get("decided_at")?,
        },
    ))
}

fn cancel_row(r: &PgRow) -> Result<(Uuid, CancelRow), sqlx::Error> {
    Ok((
        r.try_get("job_id")?,
        CancelRow {
            id: r.try_get("id")?,
            ledger_seq: r.try_get("ledger_seq")?,
            project: r.try_get("project_id")?,
            attempt: r.try_get("attempt_id")?,
            verdict: r.try_get("verdict")?,
            reason: r.try_get("reason")?,
            requested_at: r.try_get("requested_at")?,
        },
    ))
}

fn sweep_row(r: &PgRow) -> Result<(Uuid, SweepRow), sqlx::Error> {
    Ok((
        r.try_get("job_id")?,
        SweepRow {
            id: r.try_get("id")?,
            ledger_seq: r.try_get("ledger_seq")?,
            attempt: r.try_get("attempt_id")?,
            swept_at: r.try_get("swept_at")?,
        },
    ))
}

/// The records of a batch of jobs, by job, as a replay takes them: filled from the rows of the
/// audit's own queries (`ledgers`) or from the rows the chain pass reads (`audit::chain`), so
/// that a full run reads each record once.
#[derive(Default)]
pub struct Parts {
    attempts: HashMap<Uuid, Vec<AttemptRow>>,
    observations: HashMap<Uuid, Vec<ObservationRow>>,
    reconciliations: HashMap<Uuid, Vec<ReconciliationRow>>,
    cancels: HashMap<Uuid, Vec<CancelRow>>,
    sweeps: HashMap<Uuid, Vec<SweepRow>>,
}

/// The ledger table a row is of.
#[derive(Clone, Copy)]
pub enum Table {
    Attempts,
    Observations,
    Reconciliations,
    Cancels,
    Sweeps,
}

fn push<T>(map: &mut HashMap<Uuid, Vec<T>>, (job, row): (Uuid, T)) {
    map.entry(job).or_default().push(row);
}

impl Parts {
    /// A row of `table` (its columns as `ledgers` names them).
    pub fn add(&mut self, table: Table, r: &PgRow) -> Result<(), sqlx::Error> {
        match table {
            Table::Attempts => push(&mut self.attempts, attempt_row(r)?),
            Table::Observations => push(&mut self.observations, observation_row(r)?),
            Table::Reconciliations => push(&mut self.reconciliations, reconciliation_row(r)?),
            Table::Cancels => push(&mut self.cancels, cancel_row(r)?),
            Table::Sweeps => push(&mut self.sweeps, sweep_row(r)?),
        }
        Ok(())
    }
}

/// The target reservations of a batch of jobs: held by the job, and taken by another job naming
/// its slot.
pub type Reservations = (HashMap<Uuid, (String, Uuid)>, HashMap<Uuid, Uuid>);

/// The reservations of the jobs `ids`. A reservation is its slot's holder columns (migration
/// 0009): each job's slot looked up by its key, held when it names the job; held by another job
/// naming the slot, taken. (A holder whose job names another slot is the slot rows' check,
/// `slot_holder`.)
pub async fn reservations(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<Reservations, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT j.id AS job_id, s.slot AS target, s.holder_attempt_id AS attempt_id, \
                s.holder_job_id AS holder_job_id \
         FROM jobs AS j JOIN target_slots AS s ON s.slot = j.target \
         JOIN jobs AS h ON h.id = s.holder_job_id AND h.target = s.slot \
         WHERE j.id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut reservations: HashMap<Uuid, (String, Uuid)> = HashMap::new();
    let mut taken: HashMap<Uuid, Uuid> = HashMap::new();
    for r in &rows {
        let job: Uuid = r.try_get("job_id")?;
        let holder: Uuid = r.try_get("holder_job_id")?;
        if holder == job {
            reservations.insert(job, (r.try_get("target")?, r.try_get("attempt_id")?));
        } else {
            taken.insert(job, holder);
        }
    }
    Ok((reservations, taken))
}

/// The ledgers of `jobs` (in their order) from their records and reservations, each job's
/// records in ledger order (claims, cancels and sweeps by position, messages and
/// reconciliations by id, as `ledgers` reads them).
pub fn assemble(
    jobs: Vec<JobRow>,
    mut parts: Parts,
    (mut reservations, mut taken): Reservations,
) -> Vec<JobLedger> {
    jobs.into_iter()
        .map(|job| {
            let id = job.id;
            let mut attempts = parts.attempts.remove(&id).unwrap_or_default();
            attempts.sort_by_key(|a| a.ledger_seq);
            let mut observations = parts.observations.remove(&id).unwrap_or_default();
            observations.sort_by_key(|o| o.id);
            let mut reconciliations = parts.reconciliations.remove(&id).unwrap_or_default();
            reconciliations.sort_by_key(|r| r.id);
            let mut cancels = parts.cancels.remove(&id).unwrap_or_default();
            cancels.sort_by_key(|c| c.ledger_seq);
            let mut sweeps = parts.sweeps.remove(&id).unwrap_or_default();
            sweeps.sort_by_key(|s| s.ledger_seq);
            JobLedger {
                job,
                attempts,
                observations,
                reconciliations,
                cancels,
                sweeps,
                reservation: reservations.remove(&id),
                slot_taken_by: taken.remove(&id),
            }
        })
        .collect()
}

/// Every record of the jobs `ids`, grouped by job, each job's records in ledger order.
pub async fn ledgers(conn: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<JobLedger>, sqlx::Error> {
    let jobs = sqlx::query(
        "SELECT id, project_id, state, fence, current_attempt_id, cancel_requested, outcome, \
                result_digest, target, ledger_seq \
         FROM jobs WHERE id = ANY($1) ORDER BY id",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut parts = Parts::default();
    for (table, sql) in [
        (
            Table::Attempts,
            "SELECT job_id, id, runner_id, lease_id, fence, state, lease_expiry, \
                    claim_lease_expiry, outcome, result_digest, claimed_at, ledger_seq, slot_token \
             FROM attempts WHERE job_id = ANY($1) ORDER BY job_id, ledger_seq",
        ),
        (
            Table::Observations,
            "SELECT named_job_id, id, ledger_seq, sender_runner_id, kind, named_attempt_id, \
                    named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, \
                    reason, outcome, payload_sha256, lease_expiry \
             FROM observations WHERE named_job_id = ANY($1) ORDER BY named_job_id, id",
        ),
        (
            Table::Reconciliations,
            "SELECT job_id, id, ledger_seq, project_id, attempt_id, finding, decision, verdict, \
                    reason, decided_at \
             FROM reconciliations WHERE job_id = ANY($1) ORDER BY job_id, id",
        ),
        (
            Table::Cancels,
            "SELECT job_id, id, ledger_seq, project_id, attempt_id, verdict, reason, \
                    requested_at \
             FROM cancels WHERE job_id = ANY($1) ORDER BY job_id, ledger_seq",
        ),
        (
            Table::Sweeps,
            "SELECT job_id, id, ledger_seq, attempt_id, swept_at \
             FROM expiry_sweeps WHERE job_id = ANY($1) ORDER BY job_id, ledger_seq",
        ),
    ] {
        for r in &sqlx::query(sql).bind(ids).fetch_all(&mut *conn).await? {
            parts.add(table, r)?;
        }
    }
    let reservations = reservations(conn, ids).await?;
    let jobs = jobs.iter().map(job_row).collect::<Result<_, _>>()?;
    Ok(assemble(jobs, parts, reservations))
}

/// Observations naming a job that does not exist (they belong to no job's replay): their
/// sender's project (if the sender exists) with the row.
pub async fn orphan_observations(
    conn: &mut PgConnection,
    since: Option<i64>,
) -> Result<Vec<ObservationRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT named_job_id, id, ledger_seq, sender_runner_id, kind, named_attempt_id, \
                named_lease_id, named_fence, attempt_id, received_at, runner_time, verdict, \
                reason, outcome, payload_sha256, lease_expiry \
         FROM observations AS o \
         WHERE ($1::bigint IS NULL OR o.ledger_seq > $1) \
           AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = o.named_job_id) \
         ORDER BY id",
    )
    .bind(since)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| observation_row(r).map(|(_, row)| row))
        .collect()
}

/// The `epochs` table (impl migration 0012): every epoch a claim has seen, with when its first
/// claim came (`None`: '-infinity', the epoch current when the migration ran). Empty on a schema
/// from before 0012.
pub async fn epochs(conn: &mut PgConnection) -> Result<Vec<(i64, Option<Time>)>, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('epochs') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "SELECT epoch, CASE WHEN isfinite(began_at) THEN began_at END AS began_at \
         FROM epochs ORDER BY epoch",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("epoch")?, r.try_get("began_at")?)))
        .collect()
}

/// A target slot's row as it is now: its counter and its holder columns (migration 0009), with
/// the holder's job's own slot (`None`: no holder, or a holder job that does not exist).
#[derive(Clone, Debug)]
pub struct SlotRow {
    pub slot: String,
    pub slot_token: i64,
    pub holder_job: Option<Uuid>,
    pub holder_attempt: Option<Uuid>,
    /// The slot the holder job names.
    pub holder_job_target: Option<String>,
    /// The job the holder attempt belongs to.
    pub holder_attempt_job: Option<Uuid>,
}

/// Every target slot's row.
pub async fn slots(conn: &mut PgConnection) -> Result<Vec<SlotRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT s.slot, s.slot_token, s.holder_job_id, s.holder_attempt_id, \
                j.target AS holder_job_target, a.job_id AS holder_attempt_job \
         FROM target_slots AS s \
         LEFT JOIN jobs AS j ON j.id = s.holder_job_id \
         LEFT JOIN attempts AS a ON a.id = s.holder_attempt_id \
         ORDER BY s.slot",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(SlotRow {
                slot: r.try_get("slot")?,
                slot_token: r.try_get("slot_token")?,
                holder_job: r.try_get("holder_job_id")?,
                holder_attempt: r.try_get("holder_attempt_id")?,
                holder_job_target: r.try_get("holder_job_target")?,
                holder_attempt_job: r.try_get("holder_attempt_job")?,
            })
        })
        .collect()
}

/// The lease policy the database records (`lease_policy`): the largest lease ttl a store of it
/// was configured with, and its `max_clock_skew` (δ); each `None` in a schema without it (the
/// table: before migration 0012; the δ column: before 0016) or without a row.
pub async fn lease_policy(conn: &mut PgConnection) -> Result<crate::time::Policy, sqlx::Error> {
    let (table, skew_column): (bool, bool) = sqlx::query_as(
        "SELECT to_regclass('lease_policy') IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute \
         WHERE attrelid = to_regclass('lease_policy') AND attname = 'max_clock_skew' \
         AND NOT attisdropped)",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !table {
        return Ok(crate::time::Policy::new(None, None));
    }
    let micros = |column: &str| format!("(extract(epoch FROM max({column})) * 1000000)::bigint");
    let skew = match skew_column {
        true => micros("max_clock_skew"),
        false => "NULL::bigint".to_owned(),
    };
    let (ttl, skew): (Option<i64>, Option<i64>) = sqlx::query_as(&format!(
        "SELECT {}, {skew} FROM lease_policy",
        micros("max_lease_ttl")
    ))
    .fetch_one(&mut *conn)
    .await?;
    Ok(crate::time::Policy::new(
        ttl.map(chrono::Duration::microseconds),
        skew.map(chrono::Duration::microseconds),
    ))
}
