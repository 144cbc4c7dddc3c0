//! `leasewright audit`: a live database's ledger checked against the model (docs/audit.md).
//!
//! Conformance shows that the implementation agrees with the model on traces we generate; the
//! audit shows that what the database recorded (every claim, runner message, expiry sweep,
//! cancel and reconciliation of every job) is a behaviour the model allows. It reads the ledger
//! in one `REPEATABLE READ READ ONLY` transaction ([`read`]), replays each job's records in ledger
//! order through the model's own verdict and transition functions ([`replay`]), and checks across
//! jobs that no two attempts held one target slot at once.

pub mod chain;
mod mutations;
pub mod order;
pub mod read;
pub mod replay;
mod replayer;
mod scan;
pub mod settle;
mod slots;
mod stored;
pub mod time;
pub mod witness;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgConnectOptions;
use sqlx::Connection as _;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;
use uuid::Uuid;

/// What a violation is (stable names, used in `--json` and JUnit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A verdict or reason the model gives differently.
    Verdict,
    /// A message accepted that the model rejects as stale (not current, expired, wrong tuple).
    StaleAcceptance,
    /// A claim whose fence is not the job's last fence + 1.
    FenceOrder,
    /// A job claimed (or queued) again without an accepted reconciliation deciding retry.
    RetryWithoutReconciliation,
    /// A committed outcome replaced (by a result, or in the rows).
    ReplacedOutcome,
    /// A heartbeat accepted after its lease expired.
    LeaseAfterExpiry,
    /// A lease expiry that is not the server's receipt time + the lease ttl.
    TimeAuthority,
    /// A record attributed to another attempt than the model's.
    Attribution,
    /// Rows that the records do not lead to: a change without its record, or a record missing.
    Gap,
    /// Two attempts holding one target slot at once (invariant 14).
    SlotOverlap,
    /// A slot token not above every earlier reservation's of the slot (invariant 15).
    SlotTokenOrder,
    /// A slot's counter (`target_slots.slot_token`) below a token already issued for the slot:
    /// the next claim would issue it again.
    SlotCounter,
    /// A slot's holder the ledger does not lead to: a job naming another slot, an attempt not of
    /// the holder job, a job that does not exist.
    SlotHolder,
    /// A record received more than the tolerance before an earlier record of its job
    /// (`audit::time::TOLERANCE`): receipt times went backwards in commit order.
    ReceiptTimeOrder,
    /// A log chunk, artifact or cache entry with no accepted message behind it, or an accepted
    /// `log_append` whose chunk is not stored.
    SideEffectRecord,
    /// A lease granted for longer than the largest configured ttl (`lease_policy`).
    LeaseTtl,
    /// A demonstration target's mutation against the target's own rule (a stale slot token
    /// applied, a deployment applied twice), or applied with a token the ledger never issued to
    /// the attempt it names (`target_mutations`).
    TargetMutation,
    /// A claim that took a later job while an earlier one of its project, queued with its slot
    /// free, stayed queued, where no recorded concurrency explains it (audit/src/order.rs).
    ClaimOrder,
    /// A job's chain (migration 0015) broken: a record deleted, copied, edited or inserted
    /// (`audit::chain`).
    LedgerChain,
    /// The `--since` watermark's digest over every job's chain head does not match the ledger
    /// as of its position: a record at or below it was edited, deleted or inserted since.
    WatermarkMismatch,
    /// A tombstone (`ledger_pruned`) that stands for no pruned job: its job is still there, or
    /// was unfinished at the watermark with no record after it (a prune deletes only finished
    /// jobs).
    Tombstone,
    /// A message recorded from a runner after its revocation, or a revocation edited since the
    /// watermark.
    Revocation,
}

impl Kind {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Verdict => "verdict",
            Kind::StaleAcceptance => "stale_acceptance",
            Kind::FenceOrder => "fence_order",
            Kind::RetryWithoutReconciliation => "retry_without_reconciliation",
            Kind::ReplacedOutcome => "replaced_outcome",
            Kind::LeaseAfterExpiry => "lease_after_expiry",
            Kind::TimeAuthority => "time_authority",
            Kind::Attribution => "attribution",
            Kind::Gap => "gap",
            Kind::SlotOverlap => "slot_overlap",
            Kind::SlotTokenOrder => "slot_token_order",
            Kind::SlotCounter => "slot_counter",
            Kind::SlotHolder => "slot_holder",
            Kind::ReceiptTimeOrder => "receipt_time_order",
            Kind::LeaseTtl => "lease_ttl",
            Kind::SideEffectRecord => "side_effect_record",
            Kind::TargetMutation => "target_mutation",
            Kind::ClaimOrder => "claim_order",
            Kind::LedgerChain => "ledger_chain",
            Kind::WatermarkMismatch => "watermark_mismatch",
            Kind::Tombstone => "tombstone",
            Kind::Revocation => "revocation",
        }
    }
}

/// One record the model does not allow.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub kind: Kind,
    pub job: Uuid,
    pub project: Uuid,
    /// The record that shows it (`observation #123 (ledger 456)`).
    pub record: String,
    pub detail: String,
    /// The job's records up to and including that one, as replayed.
    pub steps: Vec<String>,
}

/// One epoch the ledger shows (docs/protocol.md §2, "Epochs"): in the `epochs` table, or in the
/// high 32 bits of a claim's fence or slot token.
#[derive(Clone, Debug, Serialize)]
pub struct EpochSeen {
    pub epoch: i64,
    /// When its first claim came (`None`: not in the `epochs` table, or the epoch current when
    /// migration 0012 ran, recorded as '-infinity').
    pub began_at: Option<DateTime<Utc>>,
    /// Whether the `epochs` table has it.
    pub recorded: bool,
    /// The audited claims (attempts) issued in it.
    pub claims: usize,
}

/// An attempt claimed in an epoch before the latest one that is still `active` or `uncertain`:
/// its job ran across an epoch boundary (a failover or restore happened while it held its lease).
#[derive(Clone, Debug, Serialize)]
pub struct AcrossEpoch {
    pub job: Uuid,
    pub project: Uuid,
    pub attempt: Uuid,
    /// The attempt's state now.
    pub state: String,
    /// The epoch of its claim (of its fence and slot token).
    pub claimed_in: i64,
    /// The latest epoch the ledger shows.
    pub latest: i64,
}

/// What to audit.
#[derive(Clone, Debug, Default)]
pub struct AuditOptions {
    /// A project's name or id (`None`: every project).
    pub project: Option<String>,
    /// Only jobs with a record after this ledger sequence value (a previous run's watermark).
    pub since: Option<i64>,
    /// Jobs read per round trip.
    pub batch: usize,
    /// A watermark token (`chain::Watermark`): verified, then its position is `since`.
    pub since_token: Option<chain::Watermark>,
    /// How long to wait for the transactions in progress at the start before the snapshot is
    /// taken, so that the watermark's position is settled (`audit::settle`; `None`: 60 s).
    pub settle_timeout: Option<std::time::Duration>,
    /// The witness the `since_token` commits to (the file the run that printed it wrote): with
    /// it, every job's rows are compared with the watermark's and a mismatch is named; without
    /// it, only the chain heads are (`witness`).
    pub since_witness: Option<witness::Witness>,
    /// Threads replaying jobs (0: one per core). The report does not depend on it.
    pub threads: usize,
    /// Connections reading the ledger, in one snapshot (0: one per core). The report does not
    /// depend on it.
    pub connections: usize,
}

impl AuditOptions {
    /// A whole audit on one connection and thread (every project; a settle wait of 30 s), from
    /// the start, or `--since` a watermark with the witness the run that printed it wrote: the
    /// audits of a prune between jobs.
    pub fn whole(since: Option<(chain::Watermark, witness::Witness)>) -> AuditOptions {
        let (since, since_token, since_witness) = match since {
            Some((token, witness)) => (Some(token.position), Some(token), Some(witness)),
            None => (None, None, None),
        };
        AuditOptions {
            project: None,
            since,
            batch: 2000,
            since_token,
            settle_timeout: Some(std::time::Duration::from_secs(30)),
            since_witness,
            threads: 1,
            connections: 1,
        }
    }
}

/// Progress of a long audit.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// `chain` (every job's records hashed) or `replay` (the jobs replayed).
    pub phase: &'static str,
    pub jobs_done: usize,
    pub jobs_total: usize,
    pub records: usize,
    pub seconds: f64,
}

/// The audit's result.
#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    pub jobs: usize,
    pub records: usize,
    /// Jobs that cannot be replayed (claimed before the ledger existed, too many attempts).
    /// Never clean: they make the report not clean (exit 1).
    pub unauditable: Vec<(Uuid, String)>,
    /// The records of those jobs: read, but not judged.
    pub unjudged_records: usize,
    pub seconds: f64,
    pub records_per_second: f64,
    /// The watermark's position: every record at or below it that the ledger will ever hold was
    /// in this run's snapshot (`audit::settle`). `--since` it next time.
    pub watermark: i64,
    /// Why the position could not be settled (`None`: it was): the transactions still in
    /// progress when the wait ran out. The watermark is then the one this run started from
    /// (`--since`'s position, or 0: the next `--since` run replays everything after it).
    pub watermark_unsettled: Option<String>,
    /// The largest lease ttl a store of the database was configured with (`lease_policy`), in
    /// seconds; `None`: the schema does not record it, and granted ttls were not checked.
    pub configured_lease_ttl_seconds: Option<f64>,
    /// How far one record's receipt time may be behind an earlier record's of its job, in
    /// seconds: 1, or twice the `max_clock_skew` the database records when that is more
    /// (`time::Policy::tolerance`).
    pub receipt_time_tolerance_seconds: f64,
    pub violations: Vec<Violation>,
    /// The epochs the ledger shows, lowest first (docs/audit.md, "A database that forgot
    /// commits").
    pub epochs: Vec<EpochSeen>,
    /// Audited attempts claimed in an earlier epoch than the latest and still active or
    /// uncertain.
    pub across_epochs: Vec<AcrossEpoch>,
    /// The watermark token to pass to `--since` next time (`None`: a schema without migration
    /// 0015, or a `--project` run).
    pub since: Option<String>,
    /// The chain pass (hash only, every record of every job): records hashed, its seconds.
    pub chain_records: usize,
    pub chain_seconds: f64,
    /// Jobs submitted before migration 0015 (no stored chain).
    pub unchained_jobs: usize,
    /// The witness the `since` token commits to: keep it beside the token (`--witness FILE`).
    #[serde(skip)]
    pub witness: Option<witness::Witness>,
    /// Under `--since` a token without its witness: why the rows were not compared.
    pub rows_not_compared: Option<String>,
}

impl AuditReport {
    /// No violation and every record judged: a job that could not be judged is never clean.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.unauditable.is_empty()
    }

    /// What the run found, one line each, empty when it is clean and its watermark settled: its
    /// violations (kind, detail, record), the jobs it could not judge, an unsettled watermark.
    /// What a prune between jobs checks (the conformance suite's, and a manual-clock server's
    /// test hooks').
    pub fn findings(&self) -> Vec<String> {
        let mut found: Vec<String> = self
            .violations
            .iter()
            .map(|v| format!("{}: {} ({})", v.kind.as_str(), v.detail, v.record))
            .collect();
        found.extend(
            self.unauditable
                .iter()
                .map(|(_, why)| format!("unauditable: {why}")),
        );
        found.extend(
            self.watermark_unsettled
                .iter()
                .map(|why| format!("the watermark is not settled: {why}")),
        );
        found
    }

    /// The summary's verdict.
    fn verdict(&self) -> String {
        let mut parts = Vec::new();
        if !self.violations.is_empty() {
            parts.push(format!("{} violations", self.violations.len()));
        }
        if !self.unauditable.is_empty() {
            parts.push(format!(
                "{} records of {} jobs could not be judged",
                self.unjudged_records,
                self.unauditable.len()
            ));
        }
        if parts.is_empty() {
            "every record is one the model allows".to_string()
        } else {
            parts.join("; ")
        }
    }

    /// A report a person reads: every violation as numbered steps, then the summary.
    pub fn render(&self, projects: &HashMap<Uuid, String>) -> String {
        let mut out = String::new();
        for (n, v) in self.violations.iter().enumerate() {
            let project = projects
                .get(&v.project)
                .cloned()
                .unwrap_or_else(|| v.project.to_string());
            let _ = writeln!(
                out,
                "VIOLATION {} [{}] job {} (project {project})\n  {}: {}",
                n + 1,
                v.kind.as_str(),
                v.job,
                v.record,
                v.detail
            );
            const SHOWN: usize = 20;
            let skip = v.steps.len().saturating_sub(SHOWN);
            if skip > 0 {
                let _ = writeln!(out, "  … {skip} earlier steps");
            }
            for (i, step) in v.steps.iter().enumerate().skip(skip) {
                let _ = writeln!(out, "  {:>4}. {step}", i + 1);
            }
            out.push('\n');
        }
        for (job, why) in &self.unauditable {
            let _ = writeln!(out, "not audited: job {job}: {why}");
        }
        if self.epochs.len() > 1 || !self.across_epochs.is_empty() {
            let epochs: Vec<String> = self
                .epochs
                .iter()
                .map(|e| {
                    let began = match (e.recorded, e.began_at) {
                        (true, Some(at)) => format!("began {}", at.to_rfc3339()),
                        (true, None) => "from the start".to_string(),
                        (false, _) => "not in the epochs table".to_string(),
                    };
                    format!("{} ({began}, {} claims)", e.epoch, e.claims)
                })
                .collect();
            let _ = writeln!(
                out,
                "epochs: {} (an epoch boundary is a failover or restore: commits before it may \
                 have been forgotten, docs/audit.md)",
                epochs.join(", ")
            );
        }
        for a in &self.across_epochs {
            let project = projects
                .get(&a.project)
                .cloned()
                .unwrap_or_else(|| a.project.to_string());
            let _ = writeln!(
                out,
                "across an epoch: job {} (project {project}) attempt {} claimed in epoch {}, {} \
                 at epoch {}",
                a.job, a.attempt, a.claimed_in, a.state, a.latest
            );
        }
        let _ = writeln!(
            out,
            "audit: {} jobs, {} records in {:.2} s ({:.0} records/s): {}",
            self.jobs,
            self.records,
            self.seconds,
            self.records_per_second,
            self.verdict()
        );
        if self.receipt_time_tolerance_seconds > time::TOLERANCE.num_seconds() as f64 {
            let _ = writeln!(
                out,
                "receipt times judged within {} s: twice the max_clock_skew the database records",
                self.receipt_time_tolerance_seconds
            );
        }
        if self.configured_lease_ttl_seconds.is_none() {
            let _ = writeln!(
                out,
                "lease ttl not checked: the schema does not record the configured ttl (no \
                 lease_policy table); each attempt's ttl was taken from its own claim"
            );
        }
        if self.chain_seconds > 0.0 {
            let _ = writeln!(
                out,
                "chain: {} records hashed in {:.2} s ({:.0} records/s){}",
                self.chain_records,
                self.chain_seconds,
                self.chain_records as f64 / self.chain_seconds,
                if self.unchained_jobs > 0 {
                    format!(
                        " ({} jobs submitted before migration 0015: no stored chain)",
                        self.unchained_jobs
                    )
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            out,
            "watermark: {} (prune --audited-through {}){}",
            self.watermark,
            self.watermark,
            if self.watermark_unsettled.is_some() {
                " (not settled: the position this run started from)"
            } else {
                ""
            }
        );
        match &self.since {
            Some(token) => {
                let _ = writeln!(
                    out,
                    "since: {token} (audit only what is new next time: --since {token})"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "since: none (a --project run, or a schema without migration 0015: the \
                     next --since takes the number above, and cannot detect edits below it)"
                );
            }
        }
        out
    }

    /// JUnit: one failing case per violation and per job that could not be judged, one passing
    /// case for the rest of the ledger (one `<testsuite>` named `audit`, written by quick-junit).
    pub fn junit(&self) -> String {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let failing = |name: String, message: &str, description: String| {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_message(message)
                .set_type("violation")
                .set_description(description);
            let mut case = TestCase::new(name, status);
            case.set_classname("audit.audit");
            case
        };
        let mut suite = TestSuite::new("audit");
        for v in &self.violations {
            let steps = v
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{}. {s}", i + 1))
                .collect::<Vec<_>>()
                .join("\n");
            let first = format!("{}: {}", v.record, v.detail);
            suite.add_test_case(failing(
                format!("{} {}", v.kind.as_str(), v.job),
                &first,
                format!("{first}\n{steps}"),
            ));
        }
        for (job, why) in &self.unauditable {
            let text = format!("job {job} could not be judged: {why}");
            suite.add_test_case(failing(format!("not_audited {job}"), &text, text.clone()));
        }
        let seconds = std::time::Duration::try_from_secs_f64(self.seconds).unwrap_or_default();
        let mut ledger = TestCase::new(
            format!("ledger ({} jobs, {} records)", self.jobs, self.records),
            TestCaseStatus::success(),
        );
        ledger.set_classname("audit.audit").set_time(seconds);
        suite.add_test_case(ledger);
        suite.set_time(seconds);
        let mut report = Report::new("leasewright audit");
        report.add_test_suite(suite).set_time(seconds);
        report
            .to_string()
            .unwrap_or_else(|e| format!("<!-- JUnit could not be written: {e} -->"))
    }
}

/// A failure to set up the audit (exit 2): no database, no ledger, an unknown project.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot reach the database: {0}")]
    Connect(sqlx::Error),
    #[error("reading the ledger failed: {0}")]
    Read(#[from] sqlx::Error),
    #[error(
        "the database has no audit ledger (impl migration 0003: ledger_seq, cancels, \
         expiry_sweeps); connect a server of this version to it once to apply it"
    )]
    NoLedger,
    #[error("no project named or numbered `{0}`")]
    UnknownProject(String),
    /// A `--since` watermark refused (another database, another epoch).
    #[error("refusing the --since watermark: {0}")]
    Watermark(String),
}

/// The connection options of `database_url`.
fn options_of(database_url: &str) -> Result<PgConnectOptions, AuditError> {
    database_url
        .parse::<PgConnectOptions>()
        .map_err(AuditError::Connect)
}

/// A connection to the database `options` reach, which must hold the ledger, and whether its
/// schema has the chain (migration 0015).
async fn connect(options: &PgConnectOptions) -> Result<(sqlx::PgConnection, bool), AuditError> {
    let mut conn = sqlx::PgConnection::connect_with(options)
        .await
        .map_err(AuditError::Connect)?;
    if !read::has_ledger(&mut conn).await? {
        return Err(AuditError::NoLedger);
    }
    let chained = chain::has_chain(&mut conn).await?;
    Ok((conn, chained))
}

/// A watermark checked against the database at `database_url` (its search path naming the
/// schema) before a prune records it (`leasewright prune --audited-through`): a token must be this
/// database's, schema's and epoch's, as `--since` requires; a bare number is taken only from a
/// schema without the chain (before migration 0015). Either way the position must be one the
/// ledger has reached (not above its sequence's last value). Its position.
pub async fn verify_watermark(database_url: &str, w: &chain::Since) -> Result<i64, AuditError> {
    let (mut conn, chained) = connect(&options_of(database_url)?).await?;
    match w {
        chain::Since::Token(w) => {
            if !chained {
                return Err(AuditError::Watermark(
                    "the schema has no chain (impl migration 0015): give the watermark's number"
                        .into(),
                ));
            }
            let (identity, epoch) = chain::identity(&mut conn).await?;
            if let Some(why) = chain::refusal(w, &identity, epoch) {
                return Err(AuditError::Watermark(why));
            }
        }
        chain::Since::Position(_) if chained => {
            return Err(AuditError::Watermark(
                "a bare number names no database: give the watermark token the audit printed \
                 (`since: lw2.…`, or `since` in --json)"
                    .into(),
            ))
        }
        chain::Since::Position(_) => {}
    }
    let reached: i64 = sqlx::query_scalar("SELECT last_value FROM ledger_seq")
        .fetch_one(&mut conn)
        .await?;
    let position = w.position();
    if position > reached {
        return Err(AuditError::Watermark(format!(
            "position {position} is above every position the ledger has issued ({reached}): no \
             audit printed it"
        )));
    }
    conn.close().await.ok();
    Ok(position)
}

/// The audit of the database at `database_url`. Read-only; `progress` is called now and then.
pub async fn audit(
    database_url: &str,
    options: &AuditOptions,
    progress: impl FnMut(Progress),
) -> Result<(AuditReport, HashMap<Uuid, String>), AuditError> {
    audit_connecting(&options_of(database_url)?, options, progress).await
}

/// [`audit`] of the database (and schema, by its `search_path`) that `connect` reaches: what a
/// caller holding a pool's options rather than a URL runs (the conformance suite's audits of a
/// trace's own schema).
pub async fn audit_connecting(
    connect_to: &PgConnectOptions,
    options: &AuditOptions,
    mut progress: impl FnMut(Progress),
) -> Result<(AuditReport, HashMap<Uuid, String>), AuditError> {
    let started = Instant::now();
    let (mut conn, chained) = connect(connect_to).await?;
    // The watermark's position, settled before the snapshot (no record in flight below it).
    let settled = settle::settle(
        &mut conn,
        chained,
        options.settle_timeout.unwrap_or(settle::DEFAULT_TIMEOUT),
    )
    .await?;
    read::begin(&mut conn).await?;
    // The snapshot shared by every reader: exported before anything is read in it.
    let connections = match options.connections {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let mut readers = if chained {
        read::readers(connect_to, &mut conn, connections).await?
    } else {
        Vec::new()
    };
    let projects = read::projects(&mut conn).await?;
    let project = match &options.project {
        None => None,
        Some(p) => Some(
            Uuid::try_parse(p)
                .ok()
                .filter(|id| projects.contains_key(id))
                .or_else(|| {
                    projects
                        .iter()
                        .find(|(_, name)| *name == p)
                        .map(|(id, _)| *id)
                })
                .ok_or_else(|| AuditError::UnknownProject(p.clone()))?,
        ),
    };
    let runner_projects = read::runner_projects(&mut conn).await?;
    let policy = read::lease_policy(&mut conn).await?;
    let here = if chained {
        Some(chain::identity(&mut conn).await?)
    } else {
        None
    };
    if let Some(w) = &options.since_token {
        let Some((identity, epoch)) = &here else {
            return Err(AuditError::Watermark(
                "the schema has no chain (impl migration 0015): give the watermark's number".into(),
            ));
        };
        if let Some(why) = chain::refusal(w, identity, *epoch) {
            return Err(AuditError::Watermark(why));
        }
        if let (Some(file), Some((buckets, state_root))) = (&options.since_witness, w.witness) {
            if file.buckets != buckets
                || file.state_root() != state_root
                || file.chain_root() != w.digest
            {
                return Err(AuditError::Watermark(
                    "the witness file is not the one this watermark commits to (give the file \
                     the run that printed the watermark wrote)"
                        .into(),
                ));
            }
        }
    }
    let since = options
        .since_token
        .as_ref()
        .map(|w| w.position)
        .or(options.since);
    // Settled: the largest position committed before the run (never below the one it started
    // from). Not settled: the one it started from, which its own run settled (0: everything).
    let (watermark, watermark_unsettled) = match settled.position {
        Some(p) => (p.max(since.unwrap_or(0)), None),
        None => (
            since.unwrap_or(0),
            Some(format!(
                "transactions {} of this database were still in progress after {:.1} s (the \
                 settle timeout): a record one of them holds may lie below the ledger's largest \
                 position and commit after this run's snapshot, so the watermark is the one this \
                 run started from ({}): the next --since run replays everything after it",
                settled.in_progress.join(", "),
                settled.waited.as_secs_f64(),
                since.unwrap_or(0)
            )),
        ),
    };
    // A full run replays what the chain pass reads (each record read once); a `--since` run
    // replays the jobs the chain pass finds moved or suspect, read again.
    let runner_projects = std::sync::Arc::new(runner_projects);
    let cache = if chained {
        Default::default()
    } else {
        stored::cache_rows(&mut conn).await?
    };
    let mut replayer = replayer::Replayer::new(
        chained,
        runner_projects.clone(),
        policy,
        options.threads,
        cache,
    );
    let one_read = chained && since.is_none();
    let mut chain_report = if chained {
        Some(
            chain::check_all(
                &mut conn,
                &mut readers,
                since,
                options
                    .since_token
                    .as_ref()
                    .and_then(|w| w.witness.map(|(b, _)| b)),
                watermark,
                options.batch,
                policy.tolerance,
                one_read.then_some((&mut replayer, project)),
                &mut |jobs_done, jobs_total, records| {
                    progress(Progress {
                        phase: if one_read { "chain+replay" } else { "chain" },
                        jobs_done,
                        jobs_total,
                        records,
                        seconds: started.elapsed().as_secs_f64(),
                    })
                },
            )
            .await?,
        )
    } else {
        None
    };
    // The jobs replayed after the chain pass: under `--since`, those with a record after it
    // (the chain pass found them: no query of its own), and the witness's suspects.
    let mut ids = match &chain_report {
        _ if one_read => Vec::new(),
        Some(c) if project.is_none() && since.is_some() => c.moved.iter().copied().collect(),
        _ => read::job_ids(&mut conn, project, since).await?,
    };
    // The witness compared: the suspects, and the jobs of every bucket whose rows moved on since,
    // are replayed in full with the jobs that have a new record.
    let compared = match (&chain_report, &options.since_witness, since) {
        (Some(c), Some(w), Some(since)) if options.since_token.is_some() => {
            let compared = witness::compare(
                w,
                &witness::Now {
                    since,
                    chain_at_since: &c.chain_at_since,
                    state: &c.state_now,
                    moved: &c.moved,
                    tombstones: &c.tombstones,
                    runners: &c.runners,
                    policy: &c.policy,
                },
            );
            if project.is_none() {
                let mut all: std::collections::BTreeSet<Uuid> = ids.into_iter().collect();
                all.extend(compared.replay.iter().copied());
                ids = all.into_iter().collect();
            }
            Some(compared)
        }
        _ => None,
    };
    let mut report = AuditReport {
        jobs: 0,
        records: 0,
        unauditable: Vec::new(),
        unjudged_records: 0,
        seconds: 0.0,
        records_per_second: 0.0,
        watermark,
        watermark_unsettled,
        configured_lease_ttl_seconds: policy
            .max_ttl
            .map(|t| t.num_microseconds().unwrap_or(0) as f64 / 1e6),
        receipt_time_tolerance_seconds: policy.tolerance.num_milliseconds() as f64 / 1e3,
        violations: Vec::new(),
        epochs: Vec::new(),
        across_epochs: Vec::new(),
        since: None,
        chain_records: 0,
        chain_seconds: 0.0,
        unchained_jobs: 0,
        witness: None,
        rows_not_compared: None,
    };
    let recorded_epochs = read::epochs(&mut conn).await?;
    // Each batch is replayed on threads while the next one is read (`Replayer`).
    for chunk in ids.chunks(options.batch.max(1)) {
        let stored = if chained {
            Default::default()
        } else {
            stored::rows(&mut conn, chunk).await?
        };
        let submitted = order::submissions(&mut conn, chunk).await?;
        let ledgers = read::ledgers(&mut conn, chunk).await?;
        replayer.feed(Some(replayer::Batch {
            ledgers,
            submitted,
            stored,
        }));
        progress(Progress {
            phase: "replay",
            jobs_done: replayer.jobs,
            jobs_total: ids.len(),
            records: replayer.records,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    replayer.finish();
    for reader in readers {
        reader.close().await.ok();
    }
    let replayer::Replayer {
        jobs,
        records,
        violations,
        unjudged_records,
        unauditable,
        mut claims_per_epoch,
        mut still_leased,
        reservations,
        issued,
        claim_order,
        stopped,
        ..
    } = replayer;
    (report.jobs, report.records) = (jobs, records);
    (report.unjudged_records, report.unauditable) = (unjudged_records, unauditable);
    report.violations = violations;
    // With the chain, the chain pass checked every job's side effects and noted every claim;
    // without it, the jobs replayed are.
    let issued = chain_report
        .as_mut()
        .map_or(issued, |c| std::mem::take(&mut c.issued));
    report
        .violations
        .extend(slot_overlaps(reservations, &stopped));
    // With the chain, every job's claims and leases (the chain pass reads them all), and the
    // epoch now: shown even when nothing was claimed since the last audit, or since the epoch
    // changed.
    if let Some(c) = chain_report.as_mut() {
        claims_per_epoch = std::mem::take(&mut c.claims_per_epoch);
        still_leased = std::mem::take(&mut c.still_leased)
            .into_iter()
            .filter(|a| project.is_none_or(|p| p == a.project))
            .collect();
    }
    if let Some((_, epoch)) = &here {
        claims_per_epoch.entry(*epoch).or_default();
    }
    (report.epochs, report.across_epochs) =
        epoch_boundaries(&recorded_epochs, &claims_per_epoch, still_leased);
    let slot_rows = read::slots(&mut conn).await?;
    report.violations.extend(issued.check(&slot_rows));
    report
        .violations
        .extend(claim_order.check(&mut conn).await?);
    let targets = mutations::read(&mut conn).await?;
    report
        .violations
        .extend(mutations::check(&targets, project, policy.tolerance));
    for o in read::orphan_observations(&mut conn, since).await? {
        let sender_project = runner_projects.get(&o.sender).copied();
        if project.is_some() && sender_project != project {
            continue;
        }
        report.records += 1;
        let expected = if sender_project.is_none() {
            "unknown_runner"
        } else {
            "unknown_job"
        };
        if o.verdict != "rejected" || o.reason.as_deref() != Some(expected) {
            report.violations.push(Violation {
                kind: Kind::Verdict,
                job: Uuid::nil(),
                project: sender_project.unwrap_or_default(),
                record: format!("observation #{} (ledger {})", o.id, o.ledger_seq),
                detail: format!(
                    "a {} naming job {}, which does not exist, was recorded {} {}; the model \
                     gives rejected ({expected})",
                    o.kind,
                    o.named_attempt,
                    o.verdict,
                    o.reason.as_deref().unwrap_or("")
                ),
                steps: Vec::new(),
            });
        }
    }
    if let (Some(c), Some((identity, epoch))) = (chain_report, here) {
        chain_findings(
            &mut report,
            c,
            project,
            options.since_token.as_ref(),
            compared,
            identity,
            epoch,
        );
    }
    conn.close().await.ok();
    report.seconds = started.elapsed().as_secs_f64();
    report.records_per_second = report.records as f64 / report.seconds.max(1e-9);
    Ok((report, projects))
}

/// The chain pass's findings (`ledger_chain`, `watermark_mismatch`, `tombstone`, `revocation`)
/// and the watermark token.
fn chain_findings(
    report: &mut AuditReport,
    c: chain::ChainReport,
    project: Option<Uuid>,
    since: Option<&chain::Watermark>,
    compared: Option<witness::Compared>,
    identity: chain::DatabaseIdentity,
    epoch: i64,
) {
    report.chain_records = c.records;
    report.chain_seconds = c.seconds.max(1e-9);
    report.unchained_jobs = c.unchained_jobs;
    let mine = |p: Uuid| project.is_none_or(|q| q == p);
    let mut found = Vec::new();
    let mut named = |kind: Kind, job: Uuid, record: String, detail: String| {
        found.push(Violation {
            kind,
            job,
            project: Uuid::nil(),
            record,
            detail,
            steps: Vec::new(),
        })
    };
    for b in c.breaks {
        if mine(b.project) {
            report.violations.push(Violation {
                kind: Kind::LedgerChain,
                job: b.job,
                project: b.project,
                record: b.record,
                detail: b.detail,
                steps: Vec::new(),
            });
        }
    }
    for job in &c.tombstones_of_existing_jobs {
        named(
            Kind::Tombstone,
            *job,
            "the job's tombstone (ledger_pruned)".into(),
            "a tombstone for a job that is still there: a prune deletes the job it writes the \
             tombstone for, so this one was written by hand, and it stands in for nothing (the \
             job's own chain is checked)"
                .into(),
        );
    }
    if let Some(w) = since {
        for job in &c.unverifiable_at_since {
            named(
                Kind::WatermarkMismatch,
                *job,
                "the job's tombstone (ledger_pruned)".into(),
                format!(
                    "the job was pruned with records after the watermark's position {}: its \
                     chain head as of the watermark cannot be known (a full run clears this)",
                    w.position
                ),
            );
        }
        let chain_matches = match w.witness {
            None => c.digest_at_since == Some(w.digest),
            Some(_) => c.chain_root_at_since == Some(w.digest),
        };
        if c.unverifiable_at_since.is_empty() && !chain_matches && compared.is_none() {
            named(
                Kind::WatermarkMismatch,
                Uuid::nil(),
                format!("the watermark's digest (position {})", w.position),
                format!(
                    "the chain heads of the jobs as of the watermark's position are not the ones \
                     the watermark committed to: a record at or below it was edited, deleted or \
                     inserted since (the ledger_chain violations, if any, name which; none: a \
                     whole job or chain was rewritten consistently, or a job deleted). {}",
                    if w.witness.is_some() {
                        "Give the watermark's witness file (--witness) to name the jobs"
                    } else {
                        "A watermark of this version with its witness file names the jobs"
                    }
                ),
            );
        }
        if w.witness.is_some() && compared.is_none() {
            report.rows_not_compared = Some(
                "no witness file was given with the watermark: the jobs' chain heads were \
                 verified, but not the state held in rows (job, attempt and slot rows, runner \
                 revocations) of the jobs without a new record"
                    .into(),
            );
        }
    }
    for d in compared.map(|c| c.differences).unwrap_or_default() {
        match d {
            witness::Difference::Bucket {
                bucket,
                what,
                jobs,
                tombstoned,
            } => {
                let list =
                    |v: &[Uuid]| v.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ");
                let detail =
                    format!(
                    "the {what} of the jobs of bucket {bucket} are not the ones the watermark's \
                     witness committed to: one of these jobs (or a tombstone among them) was \
                     edited, deleted or inserted since, also if every chain was recomputed \
                     afterwards; each was replayed in full (its findings, if any, are reported \
                     on their own). Jobs: {}{}",
                    if jobs.is_empty() { "none left".into() } else { list(&jobs) },
                    if tombstoned.is_empty() {
                        String::new()
                    } else {
                        format!("; pruned: {}", list(&tombstoned))
                    }
                );
                for job in jobs.iter().chain(&tombstoned) {
                    named(
                        Kind::WatermarkMismatch,
                        *job,
                        format!("the watermark's witness, bucket {bucket}"),
                        detail.clone(),
                    );
                }
                if jobs.is_empty() && tombstoned.is_empty() {
                    named(
                        Kind::WatermarkMismatch,
                        Uuid::nil(),
                        format!("the watermark's witness, bucket {bucket}"),
                        format!("{detail}: a job of this bucket was deleted with its tombstone"),
                    );
                }
            }
            witness::Difference::Job(job) => named(
                Kind::WatermarkMismatch,
                job,
                "the watermark's witness, the job's rows".into(),
                "the job has no record after the watermark, yet its rows (the job's, its \
                 attempts', the slot row it holds) are not the ones the watermark's witness \
                 committed to: they were edited since, also if every chain was recomputed \
                 afterwards; it was replayed in full (its findings, if any, are reported on \
                 their own)"
                    .into(),
            ),
            witness::Difference::Policy {
                position,
                then,
                now,
            } => {
                let row = |r: Option<witness::PolicyRow>| {
                    r.map_or("none".to_string(), |(_, ttl, at)| {
                        format!("max_lease_ttl {} s recorded at {at} µs", ttl as f64 / 1e6)
                    })
                };
                named(
                    Kind::WatermarkMismatch,
                    Uuid::nil(),
                    format!("lease_policy_history (ledger {position})"),
                    format!(
                        "the lease policy's history at ledger {position}, at or below the \
                         watermark, was {} and is {} now: a row of it was {} since (each \
                         claim's ttl is judged by the policy in force at its position)",
                        row(then),
                        row(now),
                        match (then, now) {
                            (None, _) => "inserted",
                            (_, None) => "deleted",
                            _ => "edited",
                        }
                    ),
                )
            }
            witness::Difference::UnfinishedPruned(job) => named(
                Kind::Tombstone,
                job,
                "the job's tombstone (ledger_pruned)".into(),
                "the job was unfinished at the watermark and has no record after it, yet it is \
                 gone behind a tombstone: a prune deletes only finished jobs"
                    .into(),
            ),
            witness::Difference::Revocation { runner, then, now } => named(
                Kind::Revocation,
                Uuid::nil(),
                format!("runner {runner} (row)"),
                format!(
                    "its revocation was {} at the watermark and is {} now: a revocation is \
                     written once and never changes",
                    then.map_or("none".to_string(), |t| format!("{t} µs")),
                    match now {
                        None => "gone (the runner's row was deleted)".to_string(),
                        Some(None) => "none".to_string(),
                        Some(Some(t)) => format!("{t} µs"),
                    }
                ),
            ),
        }
    }
    report.violations.extend(found);
    for v in c.side_effects.into_iter().chain(c.after_revocation) {
        if mine(v.project) {
            report.violations.push(v);
        }
    }
    if project.is_none() {
        report.since = Some(
            chain::Watermark {
                identity,
                epoch,
                position: report.watermark,
                digest: c.witness.chain_root(),
                witness: Some((c.witness.buckets, c.witness.state_root())),
            }
            .to_string(),
        );
        report.witness = Some(c.witness);
    }
}

/// The epochs seen (in the `epochs` table and in the claims' tokens) and, of the attempts still
/// active or uncertain, those claimed before the latest epoch.
fn epoch_boundaries(
    recorded: &[(i64, Option<DateTime<Utc>>)],
    claims: &std::collections::BTreeMap<i64, usize>,
    still_leased: Vec<AcrossEpoch>,
) -> (Vec<EpochSeen>, Vec<AcrossEpoch>) {
    let mut seen: std::collections::BTreeMap<i64, EpochSeen> = claims
        .iter()
        .map(|(&epoch, &claims)| {
            let seen = EpochSeen {
                epoch,
                began_at: None,
                recorded: false,
                claims,
            };
            (epoch, seen)
        })
        .collect();
    for &(epoch, began_at) in recorded {
        let entry = seen.entry(epoch).or_insert(EpochSeen {
            epoch,
            began_at: None,
            recorded: false,
            claims: 0,
        });
        entry.recorded = true;
        entry.began_at = began_at;
    }
    let latest = seen.keys().next_back().copied().unwrap_or(0);
    let across = still_leased
        .into_iter()
        .filter(|a| a.claimed_in < latest)
        .map(|a| AcrossEpoch { latest, ..a })
        .collect();
    (seen.into_values().collect(), across)
}

/// Invariant 14 across jobs: the reservations of one target slot, in ledger order, never overlap.
/// `stopped`: the violation each job whose replay stopped was stopped by (a finding against its
/// reservation says it follows from it).
fn slot_overlaps(
    mut reservations: Vec<replay::Reservation>,
    stopped: &HashMap<Uuid, String>,
) -> Vec<Violation> {
    reservations.sort_by(|a, b| a.target.cmp(&b.target).then(a.start.cmp(&b.start)));
    let mut out = Vec::new();
    // The reservation of each slot that ends last among those started so far.
    let mut holder: Option<&replay::Reservation> = None;
    // The largest slot token issued so far for the slot, and by which reservation.
    let mut highest: Option<&replay::Reservation> = None;
    for next in &reservations {
        match highest {
            Some(top) if top.target == next.target && next.slot_token <= top.slot_token => out
                .push(Violation {
                    kind: Kind::SlotTokenOrder,
                    job: next.job,
                    project: Uuid::nil(),
                    record: format!("attempt {} (claim, ledger {})", next.attempt, next.start),
                    detail: format!(
                        "slot token {} for slot `{}`, not above token {} of the earlier \
                         reservation by attempt {} (ledger {})",
                        next.slot_token, next.target, top.slot_token, top.attempt, top.start
                    ),
                    steps: Vec::new(),
                }),
            _ => highest = Some(next),
        }
        let first = match holder {
            Some(held) if held.target == next.target => held,
            _ => {
                holder = Some(next);
                continue;
            }
        };
        if first.job != next.job && next.start < first.end {
            out.push(Violation {
                kind: Kind::SlotOverlap,
                job: next.job,
                project: Uuid::nil(),
                record: format!("attempt {} (claim, ledger {})", next.attempt, next.start),
                detail: format!(
                    "claimed target slot `{}` while attempt {} of job {} held it (reserved at \
                     ledger {}, {})",
                    next.target,
                    first.attempt,
                    first.job,
                    first.start,
                    if first.end == i64::MAX {
                        "still held".to_string()
                    } else {
                        format!("released at ledger {}", first.end)
                    }
                ) + &stopped.get(&first.job).map_or(String::new(), |v| {
                    format!(
                        "; this follows from job {}'s violation {v}, whose replay stopped there",
                        first.job
                    )
                }),
                steps: Vec::new(),
            });
        }
        if next.end > first.end {
            holder = Some(next);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{replay::Reservation, slot_overlaps, Kind};
    use uuid::Uuid;

    fn held(target: &str, job: u128, start: i64, end: i64) -> Reservation {
        Reservation {
            target: target.into(),
            job: Uuid::from_u128(job),
            attempt: Uuid::from_u128(job * 100 + start as u128),
            start,
            // Tokens in reservation order, as the claims issue them.
            slot_token: start,
            end,
        }
    }

    #[test]
    fn reservations_of_one_slot_overlap_only_across_jobs_and_only_while_held() {
        // One after the other, two slots interleaved, a job's own retry: no overlap.
        let clean = vec![
            held("prod", 1, 1, 5),
            held("prod", 2, 6, i64::MAX),
            held("dev", 3, 2, 8),
            held("dev", 4, 9, 10),
            held("prod", 2, 20, 30),
        ];
        assert!(slot_overlaps(clean, &Default::default()).is_empty());
        // A long holder, then two later claims while it still holds the slot: both reported,
        // the second although the first of them had already been released.
        let overlapping = vec![
            held("prod", 1, 1, i64::MAX),
            held("prod", 2, 3, 4),
            held("prod", 3, 6, 7),
        ];
        let found = slot_overlaps(overlapping, &Default::default());
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found.iter().all(|v| v.kind == Kind::SlotOverlap));
        assert_eq!(found[1].job, Uuid::from_u128(3));
    }

    #[test]
    fn slot_tokens_must_increase_in_reservation_order_across_jobs() {
        let mut reused = held("prod", 2, 6, 7);
        reused.slot_token = 1;
        let found = slot_overlaps(
            vec![held("prod", 1, 1, 5), reused, held("dev", 3, 2, 3)],
            &Default::default(),
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            (found[0].kind, found[0].job),
            (Kind::SlotTokenOrder, Uuid::from_u128(2))
        );
    }
}
