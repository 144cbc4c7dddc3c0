//! Claim order across jobs (issue 27 item 4; docs/audit.md, "Claim order"): a claim takes the
//! earliest-submitted `queued` job of its project whose target slot is free (R1; a batch claim
//! the earliest of each slot among them). Under `SKIP LOCKED` a claim may pass over a job another
//! claimer holds locked at that moment, and nothing in the database records a lock: so a claim is
//! reported only where no recorded concurrency can explain the job it passed over.
//!
//! A claim `c` of job `J` at receipt time `t` (by runner `R`) is a `claim_order` violation when
//! an earlier-submitted job `E` of the same project (lower `submitted_seq`) shows, with
//! `m` = the margin ([`ClaimOrder::new`]):
//!
//! 1. `E` queued throughout `[t - m, t + m]`: its submission (or the accepted `retry` that
//!    requeued it) received before `t - m`, and its next claim or accepted cancel received after
//!    `t + m` (still queued: the latest receipt time read is after `t + m`);
//! 2. no record of `E` received within `[t - m, t + m]` (a late message, a rejected cancel or
//!    reconciliation locks `E`'s row for its transaction);
//! 3. `E`'s slot free throughout `[t - m, t + m]`: no attempt of any job of any project held it
//!    (claimed before `t + m`, released after `t - m` or never), except claims of `c`'s own
//!    batch (the same runner, the same receipt time) of jobs submitted after `E`.
//!
//! Why that suffices, and what it assumes: a concurrent claimer that held `E` locked during `c`
//! either took `E` (then `E`'s claim is within the margin: 1 fails), or left it because another
//! job of its batch took `E`'s slot, or `E`'s slot row was locked by a claim reserving it (then
//! that reservation is within the margin: 3 fails), or because `E`'s slot was held (3 fails); a
//! message or operator request naming `E` is recorded (2 fails). What is assumed: clocks of the
//! servers agree within the receipt-time tolerance ([`super::time::Policy::tolerance`]: 1 s, or
//! 2δ when the database records a larger δ), and a transaction commits within
//! [`super::time::TOLERANCE`] (`m` is their sum). What cannot be shown: a claim transaction that held `E` locked and then rolled back
//! (a killed connection, a statement timeout, a crash) leaves no record; if one did during `c`,
//! the report is wrong, and the operator's answer is the server's log of failed claims at `t`.

use super::{Kind, Violation};
use chrono::{DateTime, Duration, Utc};
use sqlx::{PgConnection, Row};
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

type Time = DateTime<Utc>;

/// A job's submission: its order and time (not in the replay's rows).
pub async fn submissions(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, (i64, Time)>, sqlx::Error> {
    let rows = sqlx::query("SELECT id, submitted_seq, submitted_at FROM jobs WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("id")?,
                (r.try_get("submitted_seq")?, r.try_get("submitted_at")?),
            ))
        })
        .collect()
}

struct Job {
    id: Uuid,
    project: Uuid,
    seq: i64,
    slot: u32,
    /// Received while queued: `[start, end)`, `None`: still queued.
    queued: Vec<(Time, Option<Time>)>,
    /// Receipt times of its records received while it was queued (other than those that ended a
    /// queued stretch).
    touched: Vec<Time>,
}

struct Claim {
    job: usize,
    attempt: Uuid,
    ledger_seq: i64,
    runner: Uuid,
    at: Time,
}

/// A slot held by an attempt: `[start, end)` in receipt time.
struct Held {
    start: Time,
    end: Option<Time>,
    runner: Uuid,
    /// The holder job's submission order.
    seq: i64,
}

/// What the claim-order check collects from the jobs read.
pub struct ClaimOrder {
    /// How far from a claim the earlier job's queue changes, its records and its slot's
    /// reservations must be for the claim to be judged.
    margin: Duration,
    jobs: Vec<Job>,
    claims: Vec<Claim>,
    slots: HashMap<String, u32>,
    held: Vec<Vec<Held>>,
    /// The latest receipt time read.
    horizon: Option<Time>,
}

enum Event {
    Claim(usize),
    Reconcile(bool),
    Cancel(bool),
    Other,
}

impl ClaimOrder {
    /// The check with a margin of one receipt-time `tolerance` for the servers' clocks
    /// ([`super::time::Policy::tolerance`]) and one [`super::time::TOLERANCE`] for a
    /// transaction's commit after its receipt time.
    pub fn new(tolerance: Duration) -> ClaimOrder {
        ClaimOrder {
            margin: tolerance + super::time::TOLERANCE,
            jobs: Vec::new(),
            claims: Vec::new(),
            slots: HashMap::new(),
            held: Vec::new(),
            horizon: None,
        }
    }

    /// Note one job's queue, claims and reservations (whatever its replay found).
    pub fn read(&mut self, jl: &super::read::JobLedger, submitted: Option<(i64, Time)>) {
        let Some((seq, submitted_at)) = submitted else {
            return;
        };
        let next = self.slots.len() as u32;
        let slot = *self.slots.entry(jl.job.target.clone()).or_insert(next);
        if slot as usize == self.held.len() {
            self.held.push(Vec::new());
        }
        let index = self.jobs.len();
        let mut events: Vec<(i64, Time, Event)> = Vec::with_capacity(jl.records());
        for (i, a) in jl.attempts.iter().enumerate() {
            events.push((a.ledger_seq, a.claimed_at, Event::Claim(i)));
        }
        for o in &jl.observations {
            events.push((o.ledger_seq, o.received_at, Event::Other));
        }
        for r in &jl.reconciliations {
            let retry = r.verdict == "accepted" && r.decision == "retry";
            events.push((r.ledger_seq, r.decided_at, Event::Reconcile(retry)));
        }
        for c in &jl.cancels {
            events.push((
                c.ledger_seq,
                c.requested_at,
                Event::Cancel(c.verdict == "accepted"),
            ));
        }
        for s in &jl.sweeps {
            events.push((s.ledger_seq, s.swept_at, Event::Other));
        }
        events.sort_by_key(|e| e.0);
        let mut job = Job {
            id: jl.job.id,
            project: jl.job.project,
            seq,
            slot,
            queued: Vec::new(),
            touched: Vec::new(),
        };
        let mut open = Some(submitted_at);
        let mut horizon = submitted_at;
        for (_, at, event) in &events {
            horizon = horizon.max(*at);
            let ends = matches!(event, Event::Claim(_) | Event::Cancel(true));
            match (open, ends) {
                (Some(start), true) => {
                    job.queued.push((start, Some(*at)));
                    open = None;
                }
                (Some(_), false) => job.touched.push(*at),
                (None, _) => {}
            }
            if let Event::Claim(i) = event {
                let a = &jl.attempts[*i];
                self.claims.push(Claim {
                    job: index,
                    attempt: a.id,
                    ledger_seq: a.ledger_seq,
                    runner: a.runner,
                    at: a.claimed_at,
                });
            }
            if matches!(event, Event::Reconcile(true)) && open.is_none() {
                open = Some(*at);
            }
        }
        if let Some(start) = open {
            job.queued.push((start, None));
        }
        for a in &jl.attempts {
            // Released by the accepted result of the attempt or an accepted reconciliation of it.
            let result = jl
                .observations
                .iter()
                .filter(|o| {
                    o.kind == "result" && o.verdict == "accepted" && o.attributed == Some(a.id)
                })
                .map(|o| o.received_at);
            let reconciled = jl
                .reconciliations
                .iter()
                .filter(|r| r.verdict == "accepted" && r.attempt == Some(a.id))
                .map(|r| r.decided_at);
            self.held[slot as usize].push(Held {
                start: a.claimed_at,
                end: result.chain(reconciled).min(),
                runner: a.runner,
                seq,
            });
        }
        self.horizon = Some(self.horizon.map_or(horizon, |h| h.max(horizon)));
        self.jobs.push(job);
    }

    /// Whether `slot` was held by an attempt within `[t - m, t + m]`, other than by a claim of
    /// the batch (`runner`, `t`) of a job submitted after `seq`.
    fn held_near(&self, slot: u32, t: Time, runner: Uuid, seq: i64) -> bool {
        let held = &self.held[slot as usize];
        let (lo, hi) = (t - self.margin, t + self.margin);
        let upto = held.partition_point(|h| h.start < hi);
        let mut earlier = 0;
        for h in held[..upto].iter().rev() {
            let own_batch = h.runner == runner && h.start == t && h.seq > seq;
            if !own_batch && h.end.is_none_or(|end| end > lo) {
                return true;
            }
            // Reservations of one slot do not overlap: a few before the window suffice.
            if h.start < lo {
                earlier += 1;
                if earlier > 4 {
                    break;
                }
            }
        }
        false
    }

    /// The claims that passed over an earlier claimable job. `conn`: the audit's snapshot, to
    /// confirm a finding against the reservations of jobs not read (`--since`, `--project`).
    pub async fn check(mut self, conn: &mut PgConnection) -> Result<Vec<Violation>, sqlx::Error> {
        let Some(horizon) = self.horizon else {
            return Ok(Vec::new());
        };
        // A prune deletes finished jobs whose records are all at or below the recorded audit
        // watermark, and with them reservations that blocked claims then: only claims above it
        // are judged (docs/audit.md, "Claim order").
        let pruned_through = pruned_through(conn).await?;
        self.claims
            .retain(|c| pruned_through.is_none_or(|w| c.ledger_seq > w));
        for held in &mut self.held {
            held.sort_by_key(|h| h.start);
        }
        // Per project, in time order: windows in which a job is surely queued open and close;
        // claims look at the jobs whose window is open.
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        enum At {
            Close(usize),
            Claim(usize),
            Open(usize),
        }
        let mut events: HashMap<Uuid, Vec<(Time, At)>> = HashMap::new();
        for (i, job) in self.jobs.iter().enumerate() {
            for &(start, end) in &job.queued {
                let (lo, hi) = (start + self.margin, end.unwrap_or(horizon) - self.margin);
                if lo < hi {
                    let e = events.entry(job.project).or_default();
                    e.push((lo, At::Open(i)));
                    e.push((hi, At::Close(i)));
                }
            }
        }
        for (c, claim) in self.claims.iter().enumerate() {
            if let Some(e) = events.get_mut(&self.jobs[claim.job].project) {
                e.push((claim.at, At::Claim(c)));
            }
        }
        let mut candidates = Vec::new();
        for (_, mut events) in events {
            events.sort();
            // Open windows by submission order.
            let mut open: BTreeMap<i64, usize> = BTreeMap::new();
            for (_, event) in events {
                match event {
                    At::Open(i) => {
                        open.insert(self.jobs[i].seq, i);
                    }
                    At::Close(i) => {
                        open.remove(&self.jobs[i].seq);
                    }
                    At::Claim(c) => {
                        let claim = &self.claims[c];
                        let taken = &self.jobs[claim.job];
                        let t = claim.at;
                        let passed_over: Vec<usize> = open
                            .range(..taken.seq)
                            .map(|(_, &e)| e)
                            .filter(|&e| {
                                let earlier = &self.jobs[e];
                                !earlier
                                    .touched
                                    .iter()
                                    .any(|&at| at > t - self.margin && at < t + self.margin)
                                    && !self.held_near(earlier.slot, t, claim.runner, earlier.seq)
                            })
                            .take(8)
                            .collect();
                        if !passed_over.is_empty() {
                            candidates.push((c, passed_over));
                        }
                    }
                }
            }
        }
        let slot_names: HashMap<u32, &str> =
            self.slots.iter().map(|(s, &i)| (i, s.as_str())).collect();
        let mut out = Vec::new();
        for (c, passed_over) in candidates {
            let claim = &self.claims[c];
            let taken = &self.jobs[claim.job];
            for e in passed_over {
                let earlier = &self.jobs[e];
                let slot = slot_names[&earlier.slot];
                if held_in_database(conn, slot, claim, earlier.seq, self.margin).await? {
                    continue;
                }
                let (start, end) = earlier
                    .queued
                    .iter()
                    .find(|(s, end)| *s < claim.at && end.is_none_or(|end| end > claim.at))
                    .copied()
                    .unwrap_or((claim.at, None));
                let fmt = |t: Time| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
                out.push(Violation {
                    kind: Kind::ClaimOrder,
                    job: taken.id,
                    project: taken.project,
                    record: format!(
                        "attempt {} (claim, ledger {})",
                        claim.attempt, claim.ledger_seq
                    ),
                    detail: format!(
                        "runner {} claimed job {} (submitted #{}) at {} while job {} (submitted \
                         #{}, earlier) was queued (from {} until {}) with its slot `{slot}` free: \
                         a claim takes the earliest-submitted queued job whose slot is free; no \
                         recorded claim, reservation or record of job {} within {} s explains it",
                        claim.runner,
                        taken.id,
                        taken.seq,
                        fmt(claim.at),
                        earlier.id,
                        earlier.seq,
                        fmt(start),
                        end.map_or("now".to_string(), fmt),
                        earlier.id,
                        self.margin.num_milliseconds() as f64 / 1e3
                    ),
                    steps: Vec::new(),
                });
                break;
            }
        }
        Ok(out)
    }
}

/// The audit watermark a prune may have deleted jobs up to (`ledger_audit_watermark`, migration
/// 0013), if the schema has one recorded.
pub(crate) async fn pruned_through(conn: &mut PgConnection) -> Result<Option<i64>, sqlx::Error> {
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass('ledger_audit_watermark') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !exists {
        return Ok(None);
    }
    sqlx::query_scalar("SELECT max(watermark) FROM ledger_audit_watermark")
        .fetch_one(&mut *conn)
        .await
}

/// Whether any attempt of any job naming `slot` (read or not) held it within the margin of
/// `claim`, other than a claim of its own batch of a job submitted after `seq` (`ended_at`: the
/// attempt's release).
async fn held_in_database(
    conn: &mut PgConnection,
    slot: &str,
    claim: &Claim,
    seq: i64,
    margin: Duration,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id \
         WHERE j.target = $1 AND a.claimed_at < $2 \
           AND (a.ended_at IS NULL OR a.ended_at > $3) \
           AND NOT (a.runner_id = $4 AND a.claimed_at = $5 AND j.submitted_seq > $6))",
    )
    .bind(slot)
    .bind(claim.at + margin)
    .bind(claim.at - margin)
    .bind(claim.runner)
    .bind(claim.at)
    .bind(seq)
    .fetch_one(&mut *conn)
    .await
}
