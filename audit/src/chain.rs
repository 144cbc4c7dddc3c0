//! The ledger's chain (impl migration 0015; docs/audit.md, "The chain"): every record of a job
//! carries a per-job sequence number and a hash chained to the job's previous record. This module
//! recomputes every job's chain from its records' fields with its own implementation of the
//! canonical encoding (the writer's is SQL, in the migration), reports a deleted, copied, edited or
//! inserted record as `ledger_chain`, and makes and checks the watermark `--since` takes: a token
//! committing to the database, the epoch, the position and a digest over every job's chain head.
//! A hash-only pass: no model replay, every record of every job read once.

use crate::witness::{self, Tombstone, Witness};
use chrono::{DateTime, TimeZone as _, Utc};
use leasewright_impl::epoch::epoch_of;
use sha2::{Digest as _, Sha256};
use sqlx::{PgConnection, Row};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

type Time = DateTime<Utc>;

/// The canonical encoding of one record (docs/audit.md, "The canonical encoding").
#[derive(Clone, Debug, Default)]
pub struct Encoder(Vec<u8>);

impl Encoder {
    fn field(&mut self, bytes: Option<&[u8]>) -> &mut Self {
        match bytes {
            None => self.0.push(0),
            Some(b) => {
                self.0.push(1);
                self.0.extend_from_slice(&(b.len() as u32).to_be_bytes());
                self.0.extend_from_slice(b);
            }
        }
        self
    }
    pub fn text(&mut self, t: Option<&str>) -> &mut Self {
        self.field(t.map(str::as_bytes))
    }
    pub fn uuid(&mut self, u: Option<Uuid>) -> &mut Self {
        self.field(u.as_ref().map(|u| &u.as_bytes()[..]))
    }
    pub fn int(&mut self, i: Option<i64>) -> &mut Self {
        self.field(i.map(i64::to_be_bytes).as_ref().map(|b| &b[..]))
    }
    /// Microseconds since 2000-01-01 00:00:00 UTC, 8 bytes big-endian.
    pub fn time(&mut self, t: Option<Time>) -> &mut Self {
        let base = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
        let micros = t.map(|t| (t - base).num_microseconds().unwrap_or(i64::MAX));
        self.int(micros)
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A record's name in a report, e.g. `observation #12 (ledger 40)`: kept as its parts and written
/// only when a report names it (a million records are read, a handful named).
#[derive(Clone, Copy, Debug)]
enum Name {
    /// `claim of attempt {id} (ledger {seq})`.
    ClaimOf(Uuid, i64),
    /// `attempt {id} (claim, ledger {seq})`.
    AttemptClaim(Uuid, i64),
    Observation(i64, i64),
    Reconciliation(i64, i64),
    Cancel(i64, i64),
    ExpirySweep(i64, i64),
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::ClaimOf(id, seq) => write!(f, "claim of attempt {id} (ledger {seq})"),
            Name::AttemptClaim(id, seq) => write!(f, "attempt {id} (claim, ledger {seq})"),
            Name::Observation(id, seq) => write!(f, "observation #{id} (ledger {seq})"),
            Name::Reconciliation(id, seq) => write!(f, "reconciliation #{id} (ledger {seq})"),
            Name::Cancel(id, seq) => write!(f, "cancel #{id} (ledger {seq})"),
            Name::ExpirySweep(id, seq) => write!(f, "expiry sweep #{id} (ledger {seq})"),
        }
    }
}

/// One chained record as read: where it is, its place in the chain as stored, and its encoding.
#[derive(Clone, Debug)]
struct Record {
    name: Name,
    ledger_seq: i64,
    chain_seq: Option<i32>,
    chain_hash: Option<Vec<u8>>,
    /// The encoding after the kind and seq fields (the kind is its first field).
    kind: &'static str,
    rest: Vec<u8>,
}

impl Record {
    /// The record of `kind` in row `r` (its chain columns read from it), named `name`, with the
    /// encoding `rest` of its fields.
    fn of_row(
        r: &sqlx::postgres::PgRow,
        kind: &'static str,
        name: Name,
        ledger_seq: i64,
        rest: Encoder,
    ) -> Result<Record, sqlx::Error> {
        Ok(Record {
            name,
            ledger_seq,
            chain_seq: r.try_get("chain_seq")?,
            chain_hash: r.try_get("chain_hash")?,
            kind,
            rest: rest.0,
        })
    }

    /// The record's link: sha256 of the previous head and the record's encoding at chain seq
    /// `seq` (its kind, the seq, then `rest`), fed to the hash in place of a copy of it.
    fn link(&self, prev: &[u8], seq: i64) -> Vec<u8> {
        let mut h = Sha256::new();
        h.update(prev);
        let kind = self.kind.as_bytes();
        h.update([1]);
        h.update((kind.len() as u32).to_be_bytes());
        h.update(kind);
        h.update([1]);
        h.update(8u32.to_be_bytes());
        h.update(seq.to_be_bytes());
        h.update(&self.rest);
        h.finalize().to_vec()
    }
}

/// A job's row as far as its chain goes.
#[derive(Clone, Debug)]
struct JobHead {
    id: Uuid,
    project: Uuid,
    target: String,
    ledger_seq: i64,
    chain_seq: Option<i32>,
    chain_head: Option<Vec<u8>>,
    submission: Vec<u8>,
    /// The state its row holds (the start of its witness state entry: `witness`).
    row_state: Encoder,
    /// Passed, failed, cancelled or aborted.
    finished: bool,
}

/// A break in one job's chain (reported as `ledger_chain`).
#[derive(Clone, Debug)]
pub struct Break {
    pub job: Uuid,
    pub project: Uuid,
    pub record: String,
    pub detail: String,
}

/// What the chain pass found.
#[derive(Clone, Debug, Default)]
pub struct ChainReport {
    pub jobs: usize,
    pub records: usize,
    /// Jobs submitted before migration 0015 (no stored chain; their digest entry is computed).
    pub unchained_jobs: usize,
    pub breaks: Vec<Break>,
    /// The watermark's position (settled before the snapshot: `audit::settle`).
    pub position: i64,
    /// The digest over every job's head as of `position` (what the watermark commits to).
    pub digest: [u8; 32],
    /// With `--since W`: W's digest recomputed over every job's head as of W's position.
    pub digest_at_since: Option<[u8; 32]>,
    /// Jobs whose head as of W's position cannot be known (pruned with records after it).
    pub unverifiable_at_since: Vec<Uuid>,
    pub seconds: f64,
    /// Every job's stored side effects against its accepted side-effect messages
    /// (`side_effect_record`, audit/src/stored.rs).
    pub(crate) side_effects: Vec<crate::Violation>,
    /// The largest slot token every claim of every job issued, per slot (`slot_counter`).
    pub(crate) issued: crate::slots::Issued,
    /// The witness as of `position` (what the token's roots commit to).
    pub witness: Witness,
    /// With `--since W` (a token with a witness): the chain root recomputed as of W with W's
    /// bucket count.
    pub chain_root_at_since: Option<[u8; 32]>,
    /// What a witness as of `since` is compared with (`witness::compare`).
    pub(crate) chain_at_since: BTreeMap<Uuid, Vec<u8>>,
    pub(crate) state_now: BTreeMap<Uuid, (i64, Vec<u8>)>,
    pub(crate) moved: BTreeSet<Uuid>,
    pub(crate) tombstones: Vec<Tombstone>,
    pub(crate) runners: BTreeMap<Uuid, Option<i64>>,
    /// The lease policy's history (`lease_policy_history`), in position order.
    pub(crate) policy: Vec<witness::PolicyRow>,
    /// Tombstones that stand for a job that still exists (`tombstone`).
    pub tombstones_of_existing_jobs: Vec<Uuid>,
    /// Messages recorded from a runner after its revocation (`revocation`), and claims above the
    /// lease policy in force at their position (`lease_ttl`).
    pub(crate) after_revocation: Vec<crate::Violation>,
    /// Every job's claims per epoch (of their fence and slot token), and its attempts still
    /// active or uncertain: the epochs and the jobs running across one, in every run.
    pub(crate) claims_per_epoch: BTreeMap<i64, usize>,
    pub(crate) still_leased: Vec<crate::AcrossEpoch>,
}

/// Whether the schema has the chain (migration 0015).
pub async fn has_chain(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = 'ledger_pruned'",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(found == 1)
}

fn sha(prev: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    if let Some(p) = prev {
        h.update(p);
    }
    h.update(body);
    h.finalize().to_vec()
}

/// One job's chain checked: the first break (if any), and its head as of every position asked.
struct Checked {
    broken: Option<(String, String)>,
    /// For each position asked: (chain seq, recomputed head) after the last record at or below
    /// it (`None`: the job was submitted after it).
    head_at: Vec<Option<(i64, Vec<u8>)>>,
}

fn check_job(job: &JobHead, mut records: Vec<Record>, at: &[i64]) -> Checked {
    let chained = job.chain_seq.is_some();
    let mut broken: Option<(String, String)> = None;
    let mut note = |r: &dyn std::fmt::Display, d: String| {
        if broken.is_none() {
            broken = Some((r.to_string(), d));
        }
    };
    // Order: the stored chain order for a chained job (ledger order breaks ties), the ledger
    // order for a job submitted before the chain.
    if chained {
        records.sort_by_key(|r| (r.chain_seq.unwrap_or(i32::MAX), r.ledger_seq));
    } else {
        records.sort_by_key(|r| r.ledger_seq);
    }
    let mut head = sha(None, &job.submission);
    let mut seq: i64 = 1;
    let mut last_ledger_seq = job.ledger_seq;
    let mut head_at: Vec<Option<(i64, Vec<u8>)>> = at
        .iter()
        .map(|&p| (job.ledger_seq <= p).then(|| (1, head.clone())))
        .collect();
    if chained && job.chain_seq == Some(1) && job.chain_head.is_none() {
        note(&"the job's row", "its chain head is missing".into());
    }
    for r in &records {
        let expected_seq = seq + 1;
        if chained {
            match r.chain_seq {
                None => note(
                    &r.name,
                    format!(
                        "the record has no chain (written past the chain's trigger): chain seq \
                         {expected_seq} expected"
                    ),
                ),
                Some(s) if i64::from(s) == seq => note(
                    &r.name,
                    format!("a second record with chain seq {s} (a copy, or an insertion)"),
                ),
                Some(s) if i64::from(s) > expected_seq => {
                    let missing = if i64::from(s) - 1 == expected_seq {
                        format!("record {expected_seq} is")
                    } else {
                        format!("records {expected_seq}..={} are", s - 1)
                    };
                    note(
                        &r.name,
                        format!("chain seq {s} follows {seq}: {missing} missing (deleted)"),
                    )
                }
                Some(_) => {}
            }
        }
        head = r.link(&head, expected_seq);
        if chained && r.chain_hash.as_deref() != Some(&head[..]) && r.chain_seq.is_some() {
            note(
                &r.name,
                format!(
                    "its hash does not follow from the job's record {seq} and its own fields \
                     (a field of it, or of an earlier record, was edited)"
                ),
            );
        }
        if chained && r.chain_seq.is_some() && r.ledger_seq <= last_ledger_seq {
            note(
                &r.name,
                format!(
                    "its ledger position {} is not above the previous record's {} (the trigger \
                     draws positions in chain order: this one was written by hand)",
                    r.ledger_seq, last_ledger_seq
                ),
            );
        }
        last_ledger_seq = last_ledger_seq.max(r.ledger_seq);
        seq = expected_seq;
        for (&p, h) in at.iter().zip(head_at.iter_mut()) {
            if let Some(h) = h.as_mut().filter(|_| r.ledger_seq <= p) {
                *h = (seq, head.clone());
            }
        }
    }
    if chained {
        if job.chain_seq.map(i64::from) != Some(seq) {
            note(
                &"the job's row",
                format!(
                    "its chain ends at seq {} but the job's row says {} (a record deleted or \
                     added at the end)",
                    seq,
                    job.chain_seq.unwrap_or(0)
                ),
            );
        } else if job.chain_head.as_deref() != Some(&head[..]) {
            note(
                &"the job's row",
                "its chain head is not the hash of its last record".into(),
            );
        }
    } else if records.iter().any(|r| r.chain_seq.is_some()) {
        note(
            &"the job's row",
            "its records are chained but the job's row has no chain (its head was removed)".into(),
        );
    }
    Checked { broken, head_at }
}

fn digest_entry(h: &mut Sha256, job: Uuid, seq: i64, head: &[u8]) {
    h.update(job.as_bytes());
    h.update(seq.to_be_bytes());
    h.update(head);
}

/// Every job's chain checked, in one pass over every record (the audit's snapshot), with the
/// digest as of `position` (the watermark this run prints) and, with `since`, as of `since`. The
/// same pass checks every job's stored side effects against its accepted side-effect messages and
/// notes every claim's slot token (what needs every job in every run, full or `--since`).
///
/// Each table is read by one sequential scan in job order (`scan`), its cursors spread over
/// `conn` and the `readers` (connections sharing its snapshot: `read::readers`), and cut into
/// batches of `batch` jobs taken in job order, so the result does not depend on how many
/// connections there are. With `replay` (a full run), the rows read are also the
/// replay's: each batch's jobs (of the project, if one is named) are fed to it, and the ledger
/// is read once.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn check_all(
    conn: &mut PgConnection,
    readers: &mut [PgConnection],
    since: Option<i64>,
    since_buckets: Option<u32>,
    position: i64,
    batch: usize,
    tolerance: chrono::Duration,
    mut replay: Option<(&mut crate::replayer::Replayer, Option<Uuid>)>,
    progress: &mut impl FnMut(usize, usize, usize),
) -> Result<ChainReport, sqlx::Error> {
    let started = std::time::Instant::now();
    let mut report = ChainReport {
        position,
        ..ChainReport::default()
    };
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM jobs ORDER BY id")
        .fetch_all(&mut *conn)
        .await?;
    let pruned = tombstones(conn).await?;
    let runners = runners(conn).await?;
    report.runners = runners
        .iter()
        .map(|(id, (_, revoked))| (*id, revoked.map(witness::micros)))
        .collect();
    let mut holdings = holdings(conn).await?;
    report.policy = policy_history(conn).await?;
    let policy: Vec<(i64, chrono::Duration)> = report
        .policy
        .iter()
        .map(|&(seq, micros, _)| (seq, chrono::Duration::microseconds(micros)))
        .collect();
    let existing: BTreeSet<Uuid> = ids.iter().copied().collect();
    let mut cache = crate::stored::cache_rows(conn).await?;
    let mut side_effects = crate::stored::Checker::default();
    side_effects.entries(cache.values().flatten());
    // Digest entries in job id order, as of each position: [the watermark's, since's].
    let at: Vec<i64> = std::iter::once(position).chain(since).collect();
    // Each batch read is hashed and judged on a thread of its own while the next one is read
    // (batches in order: the result is the one a single loop gives).
    let (send, receive) = std::sync::mpsc::sync_channel::<Batch>(1);
    let worker = std::thread::spawn(move || {
        let mut entries: Vec<BTreeMap<Uuid, (i64, Vec<u8>)>> = vec![BTreeMap::new(); at.len()];
        let mut unfinished = Vec::new();
        for (jobs, mut read, mut stored) in receive {
            for (epoch, n) in std::mem::take(&mut read.claims_per_epoch) {
                *report.claims_per_epoch.entry(epoch).or_default() += n;
            }
            report.still_leased.append(&mut read.still_leased);
            for job in jobs {
                let recs = read.records.remove(&job.id).unwrap_or_default();
                report.jobs += 1;
                report.records += 1 + recs.len();
                if job.chain_seq.is_none() {
                    report.unchained_jobs += 1;
                }
                for (attempt, token) in read.claims.remove(&job.id).unwrap_or_default() {
                    report.issued.note(&job.target, token, job.id, attempt);
                }
                let mut rows = stored.remove(&job.id).unwrap_or_default();
                rows.extend(cache.remove(&job.id).unwrap_or_default());
                let messages = read.messages.remove(&job.id).unwrap_or_default();
                if let Some(v) = side_effects.job(job.id, job.project, &messages, &rows) {
                    report.side_effects.push(v);
                }
                for (claim, at, ttl) in read.claim_ttls.remove(&job.id).unwrap_or_default() {
                    if let Some(v) = above_policy(&job, claim, at, ttl, &policy) {
                        report.after_revocation.push(v);
                    }
                }
                for (o, runner, at) in read.accepted.remove(&job.id).unwrap_or_default() {
                    if let Some(v) = after_revocation(&job, &o, runner, at, &runners, tolerance) {
                        report.after_revocation.push(v);
                    }
                }
                if since
                    .is_some_and(|w| job.ledger_seq > w || recs.iter().any(|r| r.ledger_seq > w))
                {
                    report.moved.insert(job.id);
                }
                // The state held in rows: the job's, its attempts' (id order), the slot row it holds.
                let mut state = job.row_state.clone();
                let mut attempts = read.attempt_states.remove(&job.id).unwrap_or_default();
                attempts.sort_by_key(|(id, _)| *id);
                for (_, a) in &attempts {
                    state.0.extend_from_slice(a);
                }
                for h in holdings.remove(&job.id).unwrap_or_default() {
                    state.0.extend_from_slice(&h);
                }
                if job.ledger_seq <= position {
                    report.state_now.insert(job.id, (job.ledger_seq, state.0));
                    if !job.finished {
                        unfinished.push(job.id);
                    }
                }
                let checked = check_job(&job, recs, &at);
                if let Some((record, detail)) = checked.broken {
                    report.breaks.push(Break {
                        job: job.id,
                        project: job.project,
                        record,
                        detail,
                    });
                }
                for (e, h) in entries.iter_mut().zip(checked.head_at) {
                    if let Some(h) = h {
                        e.insert(job.id, h);
                    }
                }
            }
        }
        report.side_effects.extend(side_effects.finish());
        (report, entries, unfinished, at)
    });
    let (mut jobs_sent, mut records_sent) = (0, 0);
    let replaying = replay.is_some();
    // The replay's reservations: the held slots read once, not joined per batch (a scan of
    // every slot row each time).
    let held = match replaying {
        true => crate::read::held_slots(conn).await?,
        false => HashMap::new(),
    };
    // Every table read in job order by one sequential scan (`scan`), its cursors over `conn`
    // and the readers, and cut into the batches of `ids`.
    let mut conns: Vec<&mut PgConnection> = std::iter::once(&mut *conn)
        .chain(readers.iter_mut())
        .collect();
    let mut scan = crate::scan::Scan::declare(&mut conns).await?;
    for chunk in ids.chunks(batch.max(1)) {
        let rows = scan.batch(&mut conns, chunk).await?;
        let (jobs, mut read, stored, replayed) =
            read_batch(&mut *conns[0], chunk, rows, replaying).await?;
        jobs_sent += jobs.len();
        records_sent += jobs.len() + read.records.values().map(Vec::len).sum::<usize>();
        if let (Some((replayer, project)), Some(rows)) = (&mut replay, replayed) {
            let (rows, submitted): (Vec<_>, HashMap<_, _>) = rows
                .into_iter()
                .filter(|(row, _)| project.is_none_or(|p| p == row.project))
                .map(|(row, submitted)| {
                    let id = row.id;
                    (row, (id, submitted))
                })
                .unzip();
            let parts = std::mem::take(&mut read.parts);
            let reservations = crate::read::reservations_of(&rows, &held);
            replayer.feed(Some(crate::replayer::Batch {
                ledgers: crate::read::assemble(rows, parts, reservations),
                submitted,
                stored: HashMap::new(),
            }));
        }
        if send.send((jobs, read, stored)).is_err() {
            break; // the worker panicked: its join says so
        }
        progress(jobs_sent, ids.len(), records_sent);
    }
    scan.close(&mut conns).await?;
    drop(send);
    let (mut report, mut entries, unfinished, at) = worker
        .join()
        .expect("the chain pass's worker does not panic");
    progress(report.jobs, ids.len(), report.records);
    for (i, &p) in at.iter().enumerate() {
        for t in &pruned {
            if existing.contains(&t.job) {
                // A tombstone never stands in for a job that is there (judged below).
            } else if t.job_ledger_seq > p {
                // Submitted after the position: not in its digest.
            } else if t.max_ledger_seq <= p {
                entries[i].insert(t.job, (t.chain_seq, t.chain_head.clone()));
            } else if i == 1 {
                report.unverifiable_at_since.push(t.job);
            }
        }
    }
    report.tombstones_of_existing_jobs = pruned
        .iter()
        .filter(|t| existing.contains(&t.job))
        .map(|t| t.job)
        .collect();
    report.digest = digest(&entries[0]);
    report.digest_at_since = entries.get(1).map(digest);
    let chain_entries = |e: &BTreeMap<Uuid, (i64, Vec<u8>)>| -> BTreeMap<Uuid, Vec<u8>> {
        e.iter()
            .map(|(j, (seq, head))| (*j, witness::chain_entry(*seq, head)))
            .collect()
    };
    let now = chain_entries(&entries[0]);
    let buckets = witness::bucket_count(now.len());
    report.witness = Witness {
        buckets,
        chain: witness::bucket_digests(buckets, now.iter().map(|(j, e)| (*j, &e[..]))),
        state: witness::bucket_digests(
            buckets,
            report.state_now.iter().map(|(j, (_, e))| (*j, &e[..])),
        ),
        unfinished,
        runners: report.runners.iter().map(|(r, t)| (*r, *t)).collect(),
        jobs: Some(
            report
                .state_now
                .iter()
                .map(|(j, (_, e))| (*j, witness::job_digest(*j, e)))
                .collect(),
        ),
        policy: report
            .policy
            .iter()
            .filter(|r| r.0 <= position)
            .copied()
            .collect(),
    };
    if let (Some(e), Some(b)) = (entries.get(1), since_buckets) {
        report.chain_at_since = chain_entries(e);
        let digests =
            witness::bucket_digests(b, report.chain_at_since.iter().map(|(j, e)| (*j, &e[..])));
        report.chain_root_at_since = Some(witness::chain_root(b, &digests));
    }
    report.tombstones = pruned;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Every tombstone (`ledger_pruned`), with the prune's position where the schema records it
/// (migration 0019).
async fn tombstones(conn: &mut PgConnection) -> Result<Vec<Tombstone>, sqlx::Error> {
    let pruned_seq = if pruned_on_the_record(conn).await? {
        "pruned_seq"
    } else {
        "NULL::bigint AS pruned_seq"
    };
    sqlx::query(&format!(
        "SELECT job_id, chain_seq, chain_head, job_ledger_seq, max_ledger_seq, {pruned_seq} \
         FROM ledger_pruned ORDER BY job_id"
    ))
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|r| {
        Ok(Tombstone {
            job: r.try_get("job_id")?,
            chain_seq: i64::from(r.try_get::<i32, _>("chain_seq")?),
            chain_head: r.try_get("chain_head")?,
            job_ledger_seq: r.try_get("job_ledger_seq")?,
            max_ledger_seq: r.try_get("max_ledger_seq")?,
            pruned_seq: r.try_get("pruned_seq")?,
        })
    })
    .collect()
}

/// Whether a prune records its own position in its tombstones (migration 0019).
pub async fn pruned_on_the_record(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() \
           AND table_name = 'ledger_pruned' AND column_name = 'pruned_seq'",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(found == 1)
}

/// The lease policy's history (migration 0019): each ttl with the ledger position it was recorded
/// at, in order; empty without the table.
async fn policy_history(conn: &mut PgConnection) -> Result<Vec<witness::PolicyRow>, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('lease_policy_history') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, i64, Time)> = sqlx::query_as(
        "SELECT ledger_seq, (extract(epoch FROM max_lease_ttl) * 1000000)::bigint, recorded_at \
         FROM lease_policy_history ORDER BY ledger_seq",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, micros, at)| (seq, micros, witness::micros(at)))
        .collect())
}

/// A claim whose ttl is above the policy in force at its ledger position (the last recorded
/// before it; the first for a claim before the history began), but not above the largest policy
/// ever recorded (that one the replay reports, `lease_ttl`).
fn above_policy(
    job: &JobHead,
    claim: Name,
    at: i64,
    ttl: chrono::Duration,
    policy: &[(i64, chrono::Duration)],
) -> Option<crate::Violation> {
    let largest = policy.iter().map(|(_, t)| *t).max()?;
    let (since, in_force) = policy
        .iter()
        .rev()
        .find(|(seq, _)| *seq < at)
        .or(policy.first())?;
    (ttl > *in_force && ttl <= largest).then(|| crate::Violation {
        kind: crate::Kind::LeaseTtl,
        job: job.id,
        project: job.project,
        record: claim.to_string(),
        detail: format!(
            "the claim granted a lease ttl of {} s, above the policy in force at its ledger \
             position ({} s, recorded at ledger {since}, lease_policy_history): a ttl raised \
             later does not cover it",
            ttl.num_milliseconds() as f64 / 1e3,
            in_force.num_milliseconds() as f64 / 1e3
        ),
        steps: Vec::new(),
    })
}

/// Every runner: its project and its revocation time.
async fn runners(
    conn: &mut PgConnection,
) -> Result<BTreeMap<Uuid, (Uuid, Option<Time>)>, sqlx::Error> {
    sqlx::query("SELECT id, project_id, revoked_at FROM runners")
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| {
            Ok((
                r.try_get("id")?,
                (r.try_get("project_id")?, r.try_get("revoked_at")?),
            ))
        })
        .collect()
}

/// The slot rows that name a holder, by holder job: each encoded (slot, attempt, project, time).
async fn holdings(conn: &mut PgConnection) -> Result<HashMap<Uuid, Vec<Vec<u8>>>, sqlx::Error> {
    let mut out: HashMap<Uuid, Vec<Vec<u8>>> = HashMap::new();
    let rows = sqlx::query(
        "SELECT slot, holder_job_id, holder_attempt_id, holder_project_id, reserved_at \
         FROM target_slots WHERE holder_job_id IS NOT NULL ORDER BY slot",
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        let mut e = Encoder::default();
        e.text(Some("holds"))
            .text(Some(r.try_get("slot")?))
            .uuid(r.try_get("holder_attempt_id")?)
            .uuid(r.try_get("holder_project_id")?)
            .time(r.try_get("reserved_at")?);
        out.entry(r.try_get("holder_job_id")?)
            .or_default()
            .push(e.0);
    }
    Ok(out)
}

/// A message recorded from `runner` at `at`, after its revocation by more than the `tolerance` of
/// receipt times (`audit::time::Policy::tolerance`): a revoked runner authenticates nothing.
fn after_revocation(
    job: &JobHead,
    record: &Name,
    runner: Uuid,
    at: Time,
    runners: &BTreeMap<Uuid, (Uuid, Option<Time>)>,
    tolerance: chrono::Duration,
) -> Option<crate::Violation> {
    let revoked = runners.get(&runner)?.1?;
    (at > revoked + tolerance).then(|| crate::Violation {
        kind: crate::Kind::Revocation,
        job: job.id,
        project: job.project,
        record: record.to_string(),
        detail: format!(
            "accepted from runner {runner} at {}, after its revocation at {} (a revoked runner \
             authenticates nothing)",
            at.to_rfc3339(),
            revoked.to_rfc3339()
        ),
        steps: Vec::new(),
    })
}

fn digest(entries: &BTreeMap<Uuid, (i64, Vec<u8>)>) -> [u8; 32] {
    let mut h = Sha256::new();
    for (job, (seq, head)) in entries {
        digest_entry(&mut h, *job, *seq, head);
    }
    h.finalize().into()
}

/// What a batch's replay takes beyond its records: each job's row with its submission
/// (position, time).
type Replayed = Vec<(crate::read::JobRow, (i64, Time))>;

/// One batch read: its jobs, their records, their stored side-effect rows, and with `replay`
/// what the replay takes (its records in `Read::parts`).
async fn read_batch(
    conn: &mut PgConnection,
    ids: &[Uuid],
    rows: crate::scan::Rows,
    replay: bool,
) -> Result<(Vec<JobHead>, Read, StoredRows, Option<Replayed>), sqlx::Error> {
    let current = current_attempts(conn, &rows).await?;
    let (jobs, replayed) = read_jobs(&rows.jobs, &current, replay)?;
    let read = read_records(&rows, replay)?;
    let stored = crate::stored::rows(conn, ids).await?;
    Ok((jobs, read, stored, replay.then_some(replayed)))
}

type StoredRows = HashMap<Uuid, Vec<crate::stored::StoredRow>>;

/// The chain position and head an attempt holds for its job (migration 0017).
type AttemptHead = (Option<i32>, Option<Vec<u8>>);

/// The chain position and head each job's current attempt holds: from the batch's attempts
/// rows, and for a current attempt that is not one of its job's (a ledger edited by hand) by
/// its id.
async fn current_attempts(
    conn: &mut PgConnection,
    rows: &crate::scan::Rows,
) -> Result<HashMap<Uuid, AttemptHead>, sqlx::Error> {
    let mut heads = HashMap::new();
    for r in &rows.attempts {
        heads.insert(
            r.try_get::<Uuid, _>("id")?,
            (r.try_get("job_chain_seq")?, r.try_get("job_chain_head")?),
        );
    }
    let mut elsewhere = Vec::new();
    for r in &rows.jobs {
        if let Some(a) = r.try_get::<Option<Uuid>, _>("current_attempt_id")? {
            if !heads.contains_key(&a) {
                elsewhere.push(a);
            }
        }
    }
    if !elsewhere.is_empty() {
        let found = sqlx::query(
            "SELECT id, job_chain_seq, job_chain_head FROM attempts WHERE id = ANY($1)",
        )
        .bind(&elsewhere)
        .fetch_all(&mut *conn)
        .await?;
        for r in &found {
            heads.insert(
                r.try_get("id")?,
                (r.try_get("job_chain_seq")?, r.try_get("job_chain_head")?),
            );
        }
    }
    Ok(heads)
}

/// The jobs of `rows` (in id order), and with `replay` each one's row as the replay takes it
/// with its submission.
fn read_jobs(
    rows: &[sqlx::postgres::PgRow],
    current: &HashMap<Uuid, AttemptHead>,
    replay: bool,
) -> Result<(Vec<JobHead>, Replayed), sqlx::Error> {
    let replayed = match replay {
        true => rows
            .iter()
            .map(|r| {
                let submitted = (r.try_get("submitted_seq")?, r.try_get("submitted_at")?);
                Ok((crate::read::job_row(r)?, submitted))
            })
            .collect::<Result<_, sqlx::Error>>()?,
        false => Vec::new(),
    };
    let heads = rows
        .iter()
        .map(|r| {
            let id: Uuid = r.try_get("id")?;
            let ledger_seq: i64 = r.try_get("ledger_seq")?;
            let mut e = Encoder::default();
            e.text(Some("job"))
                .int(Some(1))
                .uuid(Some(id))
                .uuid(Some(r.try_get("project_id")?))
                .int(Some(ledger_seq))
                .time(Some(r.try_get("submitted_at")?))
                .text(Some(r.try_get("source_revision")?))
                .text(Some(r.try_get("source_digest")?))
                .text(Some(r.try_get("command")?))
                .text(Some(r.try_get("target")?))
                .text(Some(r.try_get("target_kind")?));
            let state: String = r.try_get("state")?;
            // The job's stored head: the later of its row's and its current attempt's (the
            // accepted heartbeats advance the attempt's, migration 0017).
            let (chain_seq, chain_head) = later_head(
                (r.try_get("chain_seq")?, r.try_get("chain_head")?),
                r.try_get::<Option<Uuid>, _>("current_attempt_id")?
                    .and_then(|a| current.get(&a)),
            );
            let mut row_state = Encoder::default();
            row_state
                .text(Some("job"))
                .text(Some(&state))
                .int(Some(r.try_get("fence")?))
                .uuid(r.try_get("current_attempt_id")?)
                .int(Some(i64::from(r.try_get::<bool, _>("cancel_requested")?)))
                .text(r.try_get("outcome")?)
                .text(r.try_get("result_digest")?)
                .time(r.try_get("finished_at")?);
            Ok(JobHead {
                finished: matches!(
                    state.as_str(),
                    "passed" | "failed" | "cancelled" | "aborted"
                ),
                row_state,
                id,
                project: r.try_get("project_id")?,
                target: r.try_get("target")?,
                ledger_seq,
                chain_seq,
                chain_head,
                submission: e.0,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok((heads, replayed))
}

/// The job's head or its current attempt's, the later (by chain position): what `CASE WHEN
/// a.job_chain_seq > j.chain_seq THEN a.… ELSE j.… END` gives (a missing position: the job's).
fn later_head(job: AttemptHead, attempt: Option<&AttemptHead>) -> AttemptHead {
    match (attempt, job.0) {
        (Some((Some(a), head)), Some(j)) if *a > j => (Some(*a), head.clone()),
        _ => job,
    }
}

/// One batch as read: its jobs, their records, their stored side-effect rows.
type Batch = (Vec<JobHead>, Read, StoredRows);

/// What the chain pass reads of a batch of jobs, by job.
#[derive(Default)]
struct Read {
    /// Every chained record.
    records: HashMap<Uuid, Vec<Record>>,
    /// The accepted side-effect messages (of the observations read).
    messages: HashMap<Uuid, Vec<crate::stored::Message>>,
    /// Every claim's attempt and slot token (of the attempts read).
    claims: HashMap<Uuid, Vec<(Uuid, i64)>>,
    /// Each attempt's state held in its row, encoded.
    attempt_states: HashMap<Uuid, Vec<(Uuid, Vec<u8>)>>,
    /// The claims and the accepted messages: the record's name, the runner, the receipt time.
    accepted: HashMap<Uuid, Vec<(Name, Uuid, Time)>>,
    claims_per_epoch: BTreeMap<i64, usize>,
    still_leased: Vec<crate::AcrossEpoch>,
    /// Each claim's name, ledger position and lease ttl (claim expiry − claim time).
    claim_ttls: HashMap<Uuid, Vec<(Name, i64, chrono::Duration)>>,
    /// With a replay: the same rows as the replay takes them.
    parts: crate::read::Parts,
}

/// Every chained record of a batch's rows, by job.
fn read_records(rows: &crate::scan::Rows, replay: bool) -> Result<Read, sqlx::Error> {
    let mut read = Read::default();
    let out = &mut read.records;
    for r in &rows.attempts {
        if replay {
            read.parts.add(crate::read::Table::Attempts, r)?;
        }
        let id: Uuid = r.try_get("id")?;
        let job: Uuid = r.try_get("job_id")?;
        let ledger_seq: i64 = r.try_get("ledger_seq")?;
        let slot_token: Option<i64> = r.try_get("slot_token")?;
        if let Some(token) = slot_token {
            read.claims.entry(job).or_default().push((id, token));
        }
        let claimed_at: Time = r.try_get("claimed_at")?;
        read.accepted.entry(job).or_default().push((
            Name::ClaimOf(id, ledger_seq),
            r.try_get("runner_id")?,
            claimed_at,
        ));
        if let Some(expiry) = r.try_get::<Option<Time>, _>("claim_lease_expiry")? {
            read.claim_ttls.entry(job).or_default().push((
                Name::AttemptClaim(id, ledger_seq),
                ledger_seq,
                expiry - claimed_at,
            ));
        }
        let attempt_state: String = r.try_get("state")?;
        let fence: i64 = r.try_get("fence")?;
        let claimed_in = epoch_of(fence).max(slot_token.map_or(0, epoch_of));
        *read.claims_per_epoch.entry(claimed_in).or_default() += 1;
        if attempt_state == "active" || attempt_state == "uncertain" {
            read.still_leased.push(crate::AcrossEpoch {
                job,
                project: r.try_get("project_id")?,
                attempt: id,
                state: attempt_state.clone(),
                claimed_in,
                latest: 0,
            });
        }
        let mut state = Encoder::default();
        state
            .text(Some("attempt"))
            .uuid(Some(id))
            .text(Some(&attempt_state))
            .time(Some(r.try_get("lease_expiry")?))
            .text(r.try_get("outcome")?)
            .text(r.try_get("result_digest")?)
            .time(r.try_get("ended_at")?);
        read.attempt_states
            .entry(job)
            .or_default()
            .push((id, state.0));
        let mut e = Encoder::default();
        e.uuid(Some(id))
            .uuid(Some(job))
            .uuid(Some(r.try_get("project_id")?))
            .int(Some(ledger_seq))
            .uuid(Some(r.try_get("runner_id")?))
            .uuid(Some(r.try_get("lease_id")?))
            .int(Some(r.try_get("fence")?))
            .int(slot_token)
            .time(Some(r.try_get("claimed_at")?))
            .time(r.try_get("claim_lease_expiry")?);
        out.entry(job).or_default().push(Record::of_row(
            r,
            "claim",
            Name::ClaimOf(id, ledger_seq),
            ledger_seq,
            e,
        )?);
    }
    for r in &rows.observations {
        if replay {
            read.parts.add(crate::read::Table::Observations, r)?;
        }
        let id: i64 = r.try_get("id")?;
        let job: Uuid = r.try_get("named_job_id")?;
        let ledger_seq: i64 = r.try_get("ledger_seq")?;
        let kind: String = r.try_get("kind")?;
        let verdict: String = r.try_get("verdict")?;
        let attempt: Option<Uuid> = r.try_get("attempt_id")?;
        let received_at: Time = r.try_get("received_at")?;
        let payload: Option<String> = r.try_get("payload_sha256")?;
        let sender: Uuid = r.try_get("sender_runner_id")?;
        if verdict == "accepted" {
            read.accepted.entry(job).or_default().push((
                Name::Observation(id, ledger_seq),
                sender,
                received_at,
            ));
        }
        if let Some(m) = crate::stored::Message::of(
            id,
            ledger_seq,
            &kind,
            &verdict,
            attempt,
            payload.clone(),
            received_at,
        ) {
            read.messages.entry(job).or_default().push(m);
        }
        let mut e = Encoder::default();
        e.int(Some(id))
            .uuid(Some(job))
            .int(Some(ledger_seq))
            .uuid(Some(sender))
            .text(Some(kind.as_str()))
            .uuid(Some(r.try_get("named_attempt_id")?))
            .uuid(Some(r.try_get("named_lease_id")?))
            .int(Some(r.try_get("named_fence")?))
            .uuid(attempt)
            .time(Some(received_at))
            .time(r.try_get("runner_time")?)
            .text(Some(verdict.as_str()))
            .text(r.try_get("reason")?)
            .text(r.try_get("outcome")?)
            .text(payload.as_deref())
            .time(r.try_get("lease_expiry")?);
        out.entry(job).or_default().push(Record::of_row(
            r,
            "observation",
            Name::Observation(id, ledger_seq),
            ledger_seq,
            e,
        )?);
    }
    for r in &rows.reconciliations {
        if replay {
            read.parts.add(crate::read::Table::Reconciliations, r)?;
        }
        let id: i64 = r.try_get("id")?;
        let job: Uuid = r.try_get("job_id")?;
        let ledger_seq: i64 = r.try_get("ledger_seq")?;
        let mut e = Encoder::default();
        e.int(Some(id))
            .uuid(Some(job))
            .int(Some(ledger_seq))
            .uuid(Some(r.try_get("project_id")?))
            .uuid(r.try_get("attempt_id")?)
            .text(Some(r.try_get("finding")?))
            .text(Some(r.try_get("decision")?))
            .text(Some(r.try_get("verdict")?))
            .text(r.try_get("reason")?)
            .time(Some(r.try_get("decided_at")?));
        out.entry(job).or_default().push(Record::of_row(
            r,
            "reconciliation",
            Name::Reconciliation(id, ledger_seq),
            ledger_seq,
            e,
        )?);
    }
    for r in &rows.cancels {
        if replay {
            read.parts.add(crate::read::Table::Cancels, r)?;
        }
        let id: i64 = r.try_get("id")?;
        let job: Uuid = r.try_get("job_id")?;
        let ledger_seq: i64 = r.try_get("ledger_seq")?;
        let mut e = Encoder::default();
        e.int(Some(id))
            .uuid(Some(job))
            .int(Some(ledger_seq))
            .uuid(Some(r.try_get("project_id")?))
            .uuid(r.try_get("attempt_id")?)
            .text(Some(r.try_get("verdict")?))
            .text(r.try_get("reason")?)
            .time(Some(r.try_get("requested_at")?));
        out.entry(job).or_default().push(Record::of_row(
            r,
            "cancel",
            Name::Cancel(id, ledger_seq),
            ledger_seq,
            e,
        )?);
    }
    for r in &rows.sweeps {
        if replay {
            read.parts.add(crate::read::Table::Sweeps, r)?;
        }
        let id: i64 = r.try_get("id")?;
        let job: Uuid = r.try_get("job_id")?;
        let ledger_seq: i64 = r.try_get("ledger_seq")?;
        let mut e = Encoder::default();
        e.int(Some(id))
            .uuid(Some(job))
            .int(Some(ledger_seq))
            .uuid(Some(r.try_get("attempt_id")?))
            .time(Some(r.try_get("swept_at")?));
        out.entry(job).or_default().push(Record::of_row(
            r,
            "sweep",
            Name::ExpirySweep(id, ledger_seq),
            ledger_seq,
            e,
        )?);
    }
    Ok(read)
}

/// The database an audit ran against: what a watermark names so that it is never used on another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseIdentity {
    /// `pg_control_system().system_identifier`: the cluster (shared by its physical replicas).
    pub system: String,
    pub database: String,
    pub schema: String,
}

/// The database's identity and its epoch now: on a primary migration 0012's `current_epoch()`;
/// on a hot standby (where `current_epoch()` fails: it reads the WAL insert position) the same
/// sum from what a standby answers: the timeline it receives (`pg_stat_wal_receiver`), else the
/// timeline of its last restart point, minus 1, plus the operator's offset.
pub async fn identity(conn: &mut PgConnection) -> Result<(DatabaseIdentity, i64), sqlx::Error> {
    let row = sqlx::query(
        "SELECT (SELECT system_identifier::text FROM pg_control_system()) AS system, \
                current_database()::text AS database, current_schema()::text AS schema, \
                CASE WHEN pg_is_in_recovery() \
                     THEN coalesce((SELECT w.received_tli::bigint FROM pg_stat_wal_receiver AS w), \
                                   (SELECT c.timeline_id::bigint FROM pg_control_checkpoint() AS c)) \
                          - 1 + coalesce((SELECT o.epoch_offset FROM epoch_offset AS o \
                                          WHERE o.id), 0) \
                     ELSE current_epoch()::bigint END AS epoch",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((
        DatabaseIdentity {
            system: row.try_get("system")?,
            database: row.try_get("database")?,
            schema: row.try_get("schema")?,
        },
        row.try_get("epoch")?,
    ))
}

/// The watermark `leasewright audit` prints and `--since` takes:
/// `lw2.<system>.<database>.<schema>.<epoch>.<position>.<buckets>.<chain root>.<state root>`, the
/// names hex-encoded (docs/audit.md, "Watermarks"; the roots: `witness`); a watermark of the
/// version before, `lw1.<system>.<database>.<schema>.<epoch>.<position>.<digest>`, is still taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watermark {
    pub identity: DatabaseIdentity,
    pub epoch: i64,
    /// The largest ledger sequence value the audit read (what `prune --audited-through` takes).
    pub position: i64,
    /// lw2: the root of the witness's chain digests; lw1: the digest over every job's head.
    pub digest: [u8; 32],
    /// lw2: the witness's bucket count and the root of the rest of it (`None`: lw1).
    pub witness: Option<(u32, [u8; 32])>,
}

/// What `--since` was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Since {
    /// A watermark of this version.
    Token(Watermark),
    /// A bare number (a watermark printed before migration 0015): accepted with a warning, no
    /// edit of what it covered can be detected.
    Position(i64),
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl std::fmt::Display for Watermark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}.{}.{}.",
            if self.witness.is_some() { "lw2" } else { "lw1" },
            self.identity.system,
            hex_encode(self.identity.database.as_bytes()),
            hex_encode(self.identity.schema.as_bytes()),
            self.epoch,
            self.position,
        )?;
        match &self.witness {
            None => write!(f, "{}", hex_encode(&self.digest)),
            Some((buckets, state)) => write!(
                f,
                "{buckets}.{}.{}",
                hex_encode(&self.digest),
                hex_encode(state)
            ),
        }
    }
}

impl std::str::FromStr for Since {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(n) = s.parse::<i64>() {
            return if n >= 0 {
                Ok(Since::Position(n))
            } else {
                Err("a watermark is 0 or more".into())
            };
        }
        let bad = || {
            format!(
                "`{s}` is not a watermark (`lw2.` and eight fields, as `leasewright audit` prints \
                 it, `lw1.` and six from the version before, or a number from a version before \
                 0015)"
            )
        };
        let parts: Vec<&str> = s.split('.').collect();
        let lw2 = match (parts.len(), parts[0]) {
            (7, "lw1") => false,
            (9, "lw2") => true,
            _ => return Err(bad()),
        };
        let text = |h: &str| hex_decode(h).and_then(|b| String::from_utf8(b).ok());
        let hash = |h: &str| -> Result<[u8; 32], String> {
            hex_decode(h)
                .and_then(|d| d.try_into().ok())
                .ok_or_else(bad)
        };
        let digest = hash(parts[6 + usize::from(lw2)])?;
        let witness = if lw2 {
            let buckets: u32 = parts[6]
                .parse()
                .ok()
                .filter(|b: &u32| b.is_power_of_two() && *b <= 1 << 16)
                .ok_or_else(bad)?;
            Some((buckets, hash(parts[8])?))
        } else {
            None
        };
        Ok(Since::Token(Watermark {
            identity: DatabaseIdentity {
                system: parts[1].to_string(),
                database: text(parts[2]).ok_or_else(bad)?,
                schema: text(parts[3]).ok_or_else(bad)?,
            },
            epoch: parts[4].parse().map_err(|_| bad())?,
            position: parts[5]
                .parse()
                .ok()
                .filter(|p: &i64| *p >= 0)
                .ok_or_else(bad)?,
            digest,
            witness,
        }))
    }
}

impl Since {
    /// The ledger position it names.
    pub fn position(&self) -> i64 {
        match self {
            Since::Token(w) => w.position,
            Since::Position(p) => *p,
        }
    }
}

/// Why a watermark is refused (the audit exits 2 and says so).
pub fn refusal(w: &Watermark, here: &DatabaseIdentity, epoch: i64) -> Option<String> {
    if w.identity != *here {
        return Some(format!(
            "the watermark is another database's (system {}, database {}, schema {}; this is \
             system {}, database {}, schema {}): what it covered is not this ledger. Run a full \
             audit (no --since) here and use the watermark it prints",
            w.identity.system,
            w.identity.database,
            w.identity.schema,
            here.system,
            here.database,
            here.schema
        ));
    }
    if epoch > w.epoch {
        return Some(format!(
            "the watermark is from epoch {} and the database is in epoch {epoch}: a failover \
             (or `migrate --advance-epoch`) happened since, and records written after the \
             watermark on the old primary may have been lost and their ledger positions issued \
             again, so records at or below its position may be new. Run a full audit (no \
             --since) and use the watermark it prints",
            w.epoch
        ));
    }
    if epoch < w.epoch {
        return Some(format!(
            "the watermark is from epoch {} but the database is in epoch {epoch}, an earlier \
             one: it is from another database, or this one was restored from before it. Run a \
             full audit (no --since)",
            w.epoch
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job's stored head is the later of its row's and its current attempt's, as the SQL
    /// `CASE WHEN a.job_chain_seq > j.chain_seq` the batch reads used to compute it: a tie, or a
    /// position missing on either side, is the row's.
    #[test]
    fn the_stored_head_is_the_later_of_the_row_and_the_current_attempt() {
        let row = (Some(2), Some(vec![2]));
        let at = |seq: Option<i32>| (seq, Some(vec![9]));
        assert_eq!(later_head(row.clone(), Some(&at(Some(5)))), at(Some(5)));
        assert_eq!(later_head(row.clone(), Some(&at(Some(2)))), row);
        assert_eq!(later_head(row.clone(), Some(&at(Some(1)))), row);
        assert_eq!(later_head(row.clone(), Some(&at(None))), row);
        assert_eq!(later_head(row.clone(), None), row);
        assert_eq!(later_head((None, None), Some(&at(Some(5)))), (None, None));
    }

    /// A record's link hashes the previous head followed by the canonical encoding of its kind,
    /// its seq and its fields: the bytes `Encoder` writes, fed to the hash without a copy.
    #[test]
    fn a_link_is_the_hash_of_the_previous_head_and_the_canonical_encoding() {
        let mut rest = Encoder::default();
        rest.int(Some(7)).text(Some("accepted")).text(None);
        let record = Record {
            name: Name::Observation(7, 40),
            ledger_seq: 40,
            chain_seq: Some(3),
            chain_hash: None,
            kind: "observation",
            rest: rest.0.clone(),
        };
        let mut whole = Encoder::default();
        whole.text(Some("observation")).int(Some(3));
        whole.0.extend_from_slice(&rest.0);
        let prev = sha(None, b"submission");
        assert_eq!(record.link(&prev, 3), sha(Some(&prev), whole.bytes()));
        assert_ne!(record.link(&prev, 4), sha(Some(&prev), whole.bytes()));
        assert_eq!(record.name.to_string(), "observation #7 (ledger 40)");
    }

    #[test]
    fn a_watermark_reads_back_as_itself() {
        let w = Watermark {
            identity: DatabaseIdentity {
                system: "7312345678901234567".into(),
                database: "leasewright.prod".into(),
                schema: "lw".into(),
            },
            epoch: 3,
            position: 12345,
            digest: [7; 32],
            witness: None,
        };
        assert_eq!(w.to_string().parse::<Since>(), Ok(Since::Token(w.clone())));
        let lw2 = Watermark {
            witness: Some((256, [9; 32])),
            ..w.clone()
        };
        assert!(lw2.to_string().starts_with("lw2."));
        assert_eq!(lw2.to_string().parse::<Since>(), Ok(Since::Token(lw2)));
        assert_eq!("42".parse::<Since>(), Ok(Since::Position(42)));
        assert!("lw1.1.2".parse::<Since>().is_err());
        assert!("-1".parse::<Since>().is_err());
    }

    #[test]
    fn the_encoding_is_the_documented_one() {
        let mut e = Encoder::default();
        e.text(Some("ab"))
            .int(None)
            .time(Some(Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 1).unwrap()));
        assert_eq!(
            e.bytes(),
            &[1, 0, 0, 0, 2, b'a', b'b', 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x40]
        );
    }
}
