//! One job's recorded history replayed through the model, record by record.
//!
//! The job becomes job 0 of a one-job model; its attempts are the model's attempts in claim
//! order; the runners that appear in its records are the model's runners, of project 0 when they
//! are of the job's project and of project 1 otherwise (a runner the database does not know is
//! outside the model's runners: `unknown_runner`). Time is real: before each record, every active
//! attempt's model lease is set valid or expired by comparing the record's server time with the
//! lease expiry the ledger granted (claim, accepted heartbeat), exactly as the server compared
//! them (`now < lease_expiry`). Each record's verdict, reason and attribution are compared with
//! the model's (`LeaseModel::expected`, `delivery_verdict`, `cancel_verdict`,
//! `reconcile_verdict`, `observation`), and the model's effect (`next_state`) is applied; at the
//! end the model's state is compared with the rows as they are now.

use super::read::{AttemptRow, JobLedger, ObservationRow};
use super::{Kind, Violation};
use chrono::{DateTime, Duration, Utc};
use leasewright_impl::epoch::{epoch_of, generation_of};
use leasewright_model as model;
use model::{Action, AttemptState, Expected, JobState, MessageKind, Reason};
use sha2::{Digest, Sha256};
use stateright::Model as _;
use std::collections::HashMap;
use std::str::FromStr;
use uuid::Uuid;

type Time = DateTime<Utc>;

/// The attempt index of an attempt the job does not have.
const NO_ATTEMPT: u8 = 250;
/// The runner index of a runner the database does not know.
const NO_RUNNER: u8 = u8::MAX;
/// At most this many attempts or runners per job fit the model's identifiers.
const MAX_IDS: usize = 200;

/// A reservation of a target slot by one attempt, in ledger order: `[start, end)`.
#[derive(Clone, Debug)]
pub struct Reservation {
    pub target: String,
    pub job: Uuid,
    pub attempt: Uuid,
    pub start: i64,
    /// The slot token the claim issued.
    pub slot_token: i64,
    /// `i64::MAX`: still held.
    pub end: i64,
}

/// For a job whose replay stopped at a violation: its reservation still open at that point ends
/// where the ledger shows its release (issue 37 item 4), so that the job's violation never makes a
/// later claimant of the slot, another job, a suspect: at the attempt's first accepted result or
/// the job's first accepted reconciliation after the claim; still held if the slot's row names the
/// attempt now; otherwise (no release on the record, the slot not held by it) at its claim, the
/// job's own violation being what explains the slot.
pub fn release_as_the_ledger_shows(jl: &JobLedger, held: &mut [Reservation]) {
    let Some(r) = held.last_mut().filter(|r| r.end == i64::MAX) else {
        return;
    };
    let result = jl
        .observations
        .iter()
        .filter(|o| {
            o.kind == "result"
                && o.verdict == "accepted"
                && o.attributed == Some(r.attempt)
                && o.ledger_seq > r.start
        })
        .map(|o| o.ledger_seq);
    let reconciled = jl
        .reconciliations
        .iter()
        .filter(|x| x.verdict == "accepted" && x.ledger_seq > r.start)
        .map(|x| x.ledger_seq);
    r.end = match result.chain(reconciled).min() {
        Some(end) => end,
        None if jl
            .reservation
            .as_ref()
            .is_some_and(|(_, a)| *a == r.attempt) =>
        {
            i64::MAX
        }
        None => r.start,
    };
}

/// What one job's replay found.
pub enum Outcome {
    /// Every record is one the model allows; the slot reservations it made.
    Clean(Vec<Reservation>),
    /// The first record the model does not allow; the slot reservations the records before it
    /// made (they still enter the slot check: a claim that displaced another job's holder is
    /// that claim's `slot_overlap`, whichever job's replay stopped first).
    Violation(Box<Violation>, Vec<Reservation>),
    /// The job cannot be replayed (why).
    Unauditable(String),
}

/// One record of the job, in ledger order.
enum Record<'a> {
    Claim(usize),
    Message(&'a ObservationRow),
    Reconcile(&'a super::read::ReconciliationRow),
    Cancel(&'a super::read::CancelRow),
    Sweep(&'a super::read::SweepRow),
}

impl Record<'_> {
    /// The server's receipt time of the record, and its name.
    fn received(&self, jl: &JobLedger) -> (Time, String) {
        match self {
            Record::Claim(i) => {
                let a = &jl.attempts[*i];
                (
                    a.claimed_at,
                    format!("attempt {} (claim, ledger {})", a.id, a.ledger_seq),
                )
            }
            Record::Message(o) => (
                o.received_at,
                format!("observation #{} (ledger {})", o.id, o.ledger_seq),
            ),
            Record::Reconcile(r) => (
                r.decided_at,
                format!("reconciliation #{} (ledger {})", r.id, r.ledger_seq),
            ),
            Record::Cancel(c) => (
                c.requested_at,
                format!("cancel #{} (ledger {})", c.id, c.ledger_seq),
            ),
            Record::Sweep(s) => (
                s.swept_at,
                format!("expiry sweep #{} (ledger {})", s.id, s.ledger_seq),
            ),
        }
    }

    fn seq(&self, jl: &JobLedger) -> i64 {
        match self {
            Record::Claim(i) => jl.attempts[*i].ledger_seq,
            Record::Message(o) => o.ledger_seq,
            Record::Reconcile(r) => r.ledger_seq,
            Record::Cancel(c) => c.ledger_seq,
            Record::Sweep(s) => s.ledger_seq,
        }
    }
}

fn short(id: &Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

fn time(t: &Time) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

fn expected_text(e: &Expected) -> String {
    e.to_string()
}

fn recorded_text(verdict: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("{verdict} ({reason})"),
        None => verdict.to_string(),
    }
}

fn matches(e: &Expected, verdict: &str, reason: Option<&str>) -> bool {
    e.verdict.as_str() == verdict && e.reason.map(Reason::as_str) == reason
}

/// SHA-256 of `outcome:digest`, as the implementation records a result's payload.
fn result_payload(outcome: &str, digest: &str) -> String {
    let hash = Sha256::digest(format!("{outcome}:{digest}").as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

struct Replay<'a> {
    jl: &'a JobLedger,
    model: model::LeaseModel,
    state: model::State,
    attempt_index: HashMap<Uuid, u8>,
    runners: HashMap<Uuid, u8>,
    /// The lease expiry the ledger granted each attempt (claim, then accepted heartbeats).
    expiry: Vec<Time>,
    /// The lease ttl of each attempt: its claim's expiry minus its claim time.
    ttl: Vec<Duration>,
    /// The payload of the accepted result that committed each attempt's outcome.
    committed_payload: Vec<Option<String>>,
    steps: Vec<String>,
    reservations: Vec<Reservation>,
    /// The database's lease policy: its largest ttl, and the tolerance of receipt times.
    policy: super::time::Policy,
}

/// Replay one job.
/// `policy`: the largest lease ttl a store of the database was configured with (`lease_policy`,
/// if the schema records it) and the tolerance of receipt times.
pub fn replay(
    jl: &JobLedger,
    runner_projects: &HashMap<Uuid, Uuid>,
    policy: super::time::Policy,
) -> Outcome {
    let job = &jl.job;
    if jl.attempts.len() > MAX_IDS {
        return Outcome::Unauditable(format!("{} attempts", jl.attempts.len()));
    }
    if let Some(a) = jl.attempts.iter().find(|a| a.claim_lease_expiry.is_none()) {
        return Outcome::Unauditable(format!(
            "attempt {} was claimed before the audit ledger existed (no claim_lease_expiry)",
            a.id
        ));
    }
    let mut runner_ids: Vec<Uuid> = jl.attempts.iter().map(|a| a.runner).collect();
    runner_ids.extend(jl.observations.iter().map(|o| o.sender));
    runner_ids.sort();
    runner_ids.dedup();
    runner_ids.retain(|r| runner_projects.contains_key(r));
    if runner_ids.len() > MAX_IDS {
        return Outcome::Unauditable(format!("{} runners", runner_ids.len()));
    }
    let lease_model =
        model::LeaseModel::new(model::Config::one_recorded_job(runner_ids.len() as u8));
    let mut state = lease_model.init_state();
    let mut runners = HashMap::new();
    for (i, r) in runner_ids.iter().enumerate() {
        runners.insert(*r, i as u8);
        state.runners[i].project = u8::from(runner_projects[r] != job.project);
    }
    let mut replay = Replay {
        jl,
        model: lease_model,
        state,
        attempt_index: jl
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id, i as u8))
            .collect(),
        runners,
        expiry: Vec::new(),
        ttl: Vec::new(),
        committed_payload: Vec::new(),
        steps: vec![format!(
            "job {} submitted (jobs row, ledger {}), target `{}`",
            job.id, job.ledger_seq, job.target
        )],
        reservations: Vec::new(),
        policy,
    };
    let mut records: Vec<Record<'_>> = (0..jl.attempts.len()).map(Record::Claim).collect();
    records.extend(jl.observations.iter().map(Record::Message));
    records.extend(jl.reconciliations.iter().map(Record::Reconcile));
    records.extend(jl.cancels.iter().map(Record::Cancel));
    records.extend(jl.sweeps.iter().map(Record::Sweep));
    records.sort_by_key(|r| r.seq(jl));
    let mut receipt_order = super::time::ReceiptOrder::new(policy.tolerance);
    for record in &records {
        let (at, name) = record.received(jl);
        if let Err(detail) = receipt_order.next(at, &name) {
            replay
                .steps
                .push(format!("{name}: received at {}", time(&at)));
            return Outcome::Violation(
                replay.violation(Kind::ReceiptTimeOrder, name, detail),
                replay.reservations,
            );
        }
        let result = match record {
            Record::Claim(i) => replay.claim(*i),
            Record::Message(o) => replay.message(o),
            Record::Reconcile(r) => replay.reconcile(r),
            Record::Cancel(c) => replay.cancel(c),
            Record::Sweep(s) => replay.sweep(s),
        };
        if let Err(violation) = result {
            return Outcome::Violation(violation, replay.reservations);
        }
    }
    if let Err(violation) = replay.final_state() {
        return Outcome::Violation(violation, replay.reservations);
    }
    Outcome::Clean(replay.reservations)
}

/// The checks that need no lease expiry, for a job the replay cannot judge (an attempt without
/// `claim_lease_expiry`, too many attempts or runners): each claim's fence follows the job's
/// previous claim's (`fence_order`, named on the claim), and receipt times do not go backwards in
/// commit order (`receipt_time_order`). The job is still counted as not judged: its verdicts,
/// leases and rows are not. (Its stored side effects and its slot's counter and holder are checked
/// for every job, judged or not.)
pub fn unjudged_checks(jl: &JobLedger, policy: super::time::Policy) -> Option<Violation> {
    let violation = |kind, record: String, detail: String| Violation {
        kind,
        job: jl.job.id,
        project: jl.job.project,
        record,
        detail,
        steps: vec![format!(
            "job {} submitted (jobs row, ledger {}), target `{}`; not judged (see below)",
            jl.job.id, jl.job.ledger_seq, jl.job.target
        )],
    };
    let mut records: Vec<Record<'_>> = (0..jl.attempts.len()).map(Record::Claim).collect();
    records.extend(jl.observations.iter().map(Record::Message));
    records.extend(jl.reconciliations.iter().map(Record::Reconcile));
    records.extend(jl.cancels.iter().map(Record::Cancel));
    records.extend(jl.sweeps.iter().map(Record::Sweep));
    records.sort_by_key(|r| r.seq(jl));
    let mut receipt_order = super::time::ReceiptOrder::new(policy.tolerance);
    for record in &records {
        let (at, name) = record.received(jl);
        if let Err(detail) = receipt_order.next(at, &name) {
            return Some(violation(Kind::ReceiptTimeOrder, name, detail));
        }
        if let Record::Claim(i) = record {
            let a = &jl.attempts[*i];
            let last = if *i == 0 { 0 } else { jl.attempts[i - 1].fence };
            if !fence_follows(last, a.fence) {
                return Some(violation(
                    Kind::FenceOrder,
                    name,
                    format!(
                        "fence {} at the job's claim number {}: fences are the job's last fence \
                         + 1 (expected {}), or the first of a later epoch (epoch * 2^32 + 1)",
                        a.fence,
                        i + 1,
                        last + 1
                    ),
                ));
            }
        }
    }
    None
}

type Step = Result<(), Box<Violation>>;

/// Whether a claim's fence `next` may follow the job's last fence `last` (0: none): it is
/// `greatest(last + 1, epoch * 2^32 + 1)` for the claim's epoch, which is never below `last`'s
/// (docs/protocol.md §2, "Epochs"): `last + 1` within an epoch, the first fence of a later one
/// otherwise.
pub fn fence_follows(last: i64, next: i64) -> bool {
    next == last + 1 || (epoch_of(next) > epoch_of(last) && generation_of(next) == 1)
}

impl Replay<'_> {
    fn violation(&self, kind: Kind, record: String, detail: String) -> Box<Violation> {
        Box::new(Violation {
            kind,
            job: self.jl.job.id,
            project: self.jl.job.project,
            record,
            detail,
            steps: self.steps.clone(),
        })
    }

    /// Set every active attempt's model lease valid or expired at server time `now`.
    fn at(&mut self, now: Time) {
        self.state.clock = 0;
        for (i, a) in self.state.attempts.iter_mut().enumerate() {
            let valid =
                a.state == AttemptState::Active && self.expiry.get(i).is_some_and(|e| now < *e);
            a.lease_expiry = u8::from(valid);
        }
    }

    fn apply(&mut self, action: Action) {
        if let Some(next) = self.model.next_state(&self.state, action) {
            self.state = next;
        }
    }

    fn attempt_name(&self, id: Option<Uuid>) -> String {
        match id {
            None => "none".to_string(),
            Some(id) => match self.attempt_index.get(&id) {
                Some(i) => format!(
                    "{} (fence {})",
                    short(&id),
                    self.jl.attempts[*i as usize].fence
                ),
                None => format!("{} (not an attempt of this job)", short(&id)),
            },
        }
    }

    /// The model's fence for a fence a message names: the named attempt's when its claim issued
    /// that fence, else the first claimed attempt's that issued it (a fence repeated by a later
    /// claim is that claim's violation, `fence_order`, never a verdict on earlier messages), else
    /// a forged fence.
    fn named_fence(&self, attempt: u8, fence: i64) -> u8 {
        let claimed = self.state.attempts.len();
        let issued = |i: usize| i < claimed && self.jl.attempts[i].fence == fence;
        let index = if issued(attempt as usize) {
            Some(attempt as usize)
        } else {
            (0..claimed.min(self.jl.attempts.len())).find(|&i| issued(i))
        };
        index.map_or(model::FORGED_FENCE, |i| self.state.attempts[i].fence)
    }

    fn model_attempt(&self, index: Option<u8>) -> Option<Uuid> {
        index.and_then(|i| self.jl.attempts.get(i as usize).map(|a| a.id))
    }

    fn end_reservation(&mut self, end: i64) {
        if let Some(r) = self.reservations.last_mut().filter(|r| r.end == i64::MAX) {
            r.end = end;
        }
    }

    fn claim(&mut self, i: usize) -> Step {
        let a: &AttemptRow = &self.jl.attempts[i];
        let record = format!("attempt {} (claim, ledger {})", a.id, a.ledger_seq);
        let claim_expiry = a.claim_lease_expiry.unwrap_or(a.claimed_at);
        self.steps.push(format!(
            "{record}: runner {} claimed at {}, fence {}, lease until {}",
            short(&a.runner),
            time(&a.claimed_at),
            a.fence,
            time(&claim_expiry)
        ));
        self.at(a.claimed_at);
        let runner = self.runners.get(&a.runner).copied().unwrap_or(NO_RUNNER);
        let action = Action::Claim { runner };
        let expected = self.model.expected(&self.state, &action);
        if expected != Some(Expected::ACCEPTED) {
            let job_state = self.state.jobs[0].state;
            let (kind, why) = match job_state {
                JobState::Uncertain => (
                    Kind::RetryWithoutReconciliation,
                    "the job was uncertain: no accepted reconciliation had decided retry"
                        .to_string(),
                ),
                JobState::Running | JobState::Cancelling => (
                    Kind::RetryWithoutReconciliation,
                    format!("the job was {job_state}: its attempt still held the lease"),
                ),
                _ if runner == NO_RUNNER || self.state.runners[runner as usize].project != 0 => (
                    Kind::Verdict,
                    "the runner is not of the job's project".to_string(),
                ),
                _ => (Kind::Verdict, format!("the job was {job_state}")),
            };
            return Err(self.violation(
                kind,
                record,
                format!(
                    "a claim created this attempt, but the model gives the claim {}: {why}",
                    expected.map_or("no verdict".to_string(), |e| expected_text(&e))
                ),
            ));
        }
        self.apply(action);
        let index = self.state.attempts.len() - 1;
        // The model's fences are 1, 2, 3, ...; the implementation's are the job's last fence + 1,
        // or the first of a later epoch (docs/protocol.md §2, "Epochs").
        let last = if i == 0 {
            0
        } else {
            self.jl.attempts[i - 1].fence
        };
        if index != i || !fence_follows(last, a.fence) {
            let expected = last + 1;
            return Err(self.violation(
                Kind::FenceOrder,
                record,
                format!(
                    "fence {} at the job's claim number {}: fences are the job's last fence + 1 \
                     (expected {expected}), or the first of a later epoch (epoch * 2^32 + 1)",
                    a.fence,
                    i + 1
                ),
            ));
        }
        let ttl = claim_expiry - a.claimed_at;
        if ttl <= Duration::zero() {
            return Err(self.violation(
                Kind::TimeAuthority,
                record,
                format!(
                    "the claim's lease expiry {} is not after its receipt time {}",
                    time(&claim_expiry),
                    time(&a.claimed_at)
                ),
            ));
        }
        if let Some(detail) = super::time::ttl_exceeded(ttl, self.policy.max_ttl) {
            return Err(self.violation(Kind::LeaseTtl, record, detail));
        }
        self.expiry.push(claim_expiry);
        self.ttl.push(ttl);
        self.committed_payload.push(None);
        self.end_reservation(a.ledger_seq);
        self.reservations.push(Reservation {
            target: self.jl.job.target.clone(),
            job: self.jl.job.id,
            attempt: a.id,
            start: a.ledger_seq,
            slot_token: a.slot_token,
            end: i64::MAX,
        });
        Ok(())
    }

    fn message(&mut self, o: &ObservationRow) -> Step {
        let record = format!("observation #{} (ledger {})", o.id, o.ledger_seq);
        self.steps.push(format!(
            "{record}: {}{} from runner {} naming attempt {} fence {} at {}{}: {}{}",
            o.kind,
            o.outcome
                .as_deref()
                .map(|x| format!("({x})"))
                .unwrap_or_default(),
            short(&o.sender),
            self.attempt_name(Some(o.named_attempt)),
            o.named_fence,
            time(&o.received_at),
            o.runner_time
                .map(|t| format!(" (runner time {})", time(&t)))
                .unwrap_or_default(),
            recorded_text(&o.verdict, o.reason.as_deref()),
            o.lease_expiry
                .map(|t| format!(", lease until {}", time(&t)))
                .unwrap_or_default(),
        ));
        let side_effect = !matches!(o.kind.as_str(), "heartbeat" | "rejoin" | "result");
        let kind = match o.kind.as_str() {
            "result" => {
                let outcome = o
                    .outcome
                    .as_deref()
                    .and_then(|x| model::Outcome::from_str(x).ok());
                match outcome {
                    Some(outcome) => MessageKind::Result(outcome),
                    None => {
                        return Err(self.violation(
                            Kind::Gap,
                            record,
                            "a result without an outcome".to_string(),
                        ))
                    }
                }
            }
            "rejoin" => MessageKind::Rejoin,
            _ => MessageKind::Heartbeat,
        };
        self.at(o.received_at);
        let (attempt, lease) = match self.attempt_index.get(&o.named_attempt) {
            Some(&i) => {
                let lease = if self.jl.attempts[i as usize].lease_id == o.named_lease {
                    self.state
                        .attempts
                        .get(i as usize)
                        .map_or(model::FORGED_LEASE, |a| a.lease)
                } else {
                    model::FORGED_LEASE
                };
                (i, lease)
            }
            None => (NO_ATTEMPT, model::FORGED_LEASE),
        };
        let fence = self.named_fence(attempt, o.named_fence);
        let m = model::Message {
            kind,
            sender: self.runners.get(&o.sender).copied().unwrap_or(NO_RUNNER),
            job: 0,
            attempt,
            lease,
            fence,
            runner_time: 0,
            digest: 0,
            token: 0,
        };
        let mut expected = self.model.delivery_verdict(&self.state, &m);
        // The model's result digest is its outcome; the protocol's identical result is the same
        // outcome and the same digest (an adopted outcome has none).
        if expected == Expected::ACKNOWLEDGED {
            let committed = self
                .committed_payload
                .get(attempt as usize)
                .and_then(|p| p.as_ref());
            if committed.is_some_and(|p| Some(p) != o.payload_sha256.as_ref()) {
                expected = Expected::rejected(Reason::ConflictingResult);
            }
        }
        // Side effects (§7.1) pass the heartbeat's checks 1-11, then check 12 refuses them while
        // the job is cancelling; past the checks their verdict depends on stored data.
        if side_effect
            && expected == Expected::ACCEPTED
            && self.state.jobs[0].state == JobState::Cancelling
        {
            expected = Expected::rejected(Reason::CancelRequested);
        }
        let agrees = if side_effect && expected == Expected::ACCEPTED {
            let allowed: &[(&str, Option<&str>)] = match o.kind.as_str() {
                "log_append" => &[
                    ("accepted", None),
                    ("acknowledged", None),
                    ("rejected", Some("sequence_conflict")),
                ],
                "artifact_get" | "cache_get" => {
                    &[("accepted", None), ("rejected", Some("not_found"))]
                }
                _ => &[("accepted", None)],
            };
            allowed.contains(&(o.verdict.as_str(), o.reason.as_deref()))
        } else {
            matches(&expected, &o.verdict, o.reason.as_deref())
        };
        if !agrees {
            let kind = if o.verdict == "accepted" && expected.verdict == model::Verdict::Rejected {
                match (o.kind.as_str(), expected.reason) {
                    ("heartbeat", Some(Reason::LeaseExpired)) => Kind::LeaseAfterExpiry,
                    ("result", Some(Reason::ConflictingResult)) => Kind::ReplacedOutcome,
                    (
                        _,
                        Some(
                            Reason::NotCurrent
                            | Reason::LeaseExpired
                            | Reason::FenceMismatch
                            | Reason::LeaseMismatch
                            | Reason::JobFinished
                            | Reason::RunnerMismatch
                            | Reason::UnknownAttempt,
                        ),
                    ) => Kind::StaleAcceptance,
                    _ => Kind::Verdict,
                }
            } else {
                Kind::Verdict
            };
            return Err(self.violation(
                kind,
                record,
                format!(
                    "recorded {}, the model gives {}",
                    recorded_text(&o.verdict, o.reason.as_deref()),
                    expected_text(&expected)
                ),
            ));
        }
        let attributed = self.model_attempt(self.model.observation(&self.state, &m).attempt);
        if attributed != o.attributed {
            return Err(self.violation(
                Kind::Attribution,
                record,
                format!(
                    "recorded against attempt {}, the model attributes it to attempt {}",
                    self.attempt_name(o.attributed),
                    self.attempt_name(attributed)
                ),
            ));
        }
        if o.verdict == "accepted" {
            match kind {
                MessageKind::Heartbeat if !side_effect => {
                    let i = attempt as usize;
                    let Some(granted) = o.lease_expiry else {
                        return Err(self.violation(
                            Kind::Gap,
                            record,
                            "an accepted heartbeat without the lease expiry it granted".to_string(),
                        ));
                    };
                    let due = o.received_at + self.ttl[i];
                    if granted != due {
                        return Err(self.violation(
                            Kind::TimeAuthority,
                            record,
                            format!(
                                "the heartbeat granted a lease until {}, but receipt time + lease \
                                 ttl is {}: the expiry did not come from the server's receipt time",
                                time(&granted),
                                time(&due)
                            ),
                        ));
                    }
                    self.expiry[i] = granted;
                }
                MessageKind::Result(_) => {
                    self.committed_payload[attempt as usize] = o.payload_sha256.clone();
                    self.end_reservation(o.ledger_seq);
                }
                _ => {}
            }
        }
        if !side_effect {
            self.apply(Action::Deliver { message: m });
        }
        Ok(())
    }

    fn operator_project(&self, project: Uuid) -> u8 {
        u8::from(project != self.jl.job.project)
    }

    /// An operator's record (cancel, reconciliation): the model's verdict for the operator's
    /// project, and the attempt it names (the job's current one, for the job's own project).
    fn operator_record(
        &self,
        record: &str,
        expected: &Expected,
        (verdict, reason): (&str, Option<&str>),
        attempt: Option<Uuid>,
        project: u8,
    ) -> Step {
        if !matches(expected, verdict, reason) {
            return Err(self.violation(
                Kind::Verdict,
                record.to_string(),
                format!(
                    "recorded {}, the model gives {}",
                    recorded_text(verdict, reason),
                    expected_text(expected)
                ),
            ));
        }
        let current = (project == 0)
            .then(|| self.model_attempt(self.state.jobs[0].current))
            .flatten();
        if current != attempt {
            return Err(self.violation(
                Kind::Attribution,
                record.to_string(),
                format!(
                    "recorded against attempt {}, the job's current attempt was {}",
                    self.attempt_name(attempt),
                    self.attempt_name(current)
                ),
            ));
        }
        Ok(())
    }

    fn cancel(&mut self, c: &super::read::CancelRow) -> Step {
        let record = format!("cancel #{} (ledger {})", c.id, c.ledger_seq);
        self.steps.push(format!(
            "{record}: cancel by an operator of project {} at {}: {}",
            short(&c.project),
            time(&c.requested_at),
            recorded_text(&c.verdict, c.reason.as_deref())
        ));
        self.at(c.requested_at);
        let project = self.operator_project(c.project);
        let expected = self.model.cancel_verdict(&self.state, project, 0);
        let recorded = (c.verdict.as_str(), c.reason.as_deref());
        self.operator_record(&record, &expected, recorded, c.attempt, project)?;
        if project == 0 {
            self.apply(Action::Cancel { job: 0 });
        }
        Ok(())
    }

    fn reconcile(&mut self, r: &super::read::ReconciliationRow) -> Step {
        let record = format!("reconciliation #{} (ledger {})", r.id, r.ledger_seq);
        self.steps.push(format!(
            "{record}: reconcile({}, {}) by an operator of project {} at {}: {}",
            r.finding,
            r.decision,
            short(&r.project),
            time(&r.decided_at),
            recorded_text(&r.verdict, r.reason.as_deref())
        ));
        let (Ok(finding), Ok(decision)) = (
            model::Finding::from_str(&r.finding),
            model::Decision::from_str(&r.decision),
        ) else {
            return Err(self.violation(
                Kind::Gap,
                record,
                "a finding or decision not in the spec".to_string(),
            ));
        };
        self.at(r.decided_at);
        let project = self.operator_project(r.project);
        let expected = self
            .model
            .reconcile_verdict(&self.state, project, 0, finding, decision);
        let recorded = (r.verdict.as_str(), r.reason.as_deref());
        self.operator_record(&record, &expected, recorded, r.attempt, project)?;
        if project == 0 {
            if expected == Expected::ACCEPTED {
                self.end_reservation(r.ledger_seq);
            }
            self.apply(Action::Reconcile {
                job: 0,
                finding,
                decision,
            });
        }
        Ok(())
    }

    fn sweep(&mut self, s: &super::read::SweepRow) -> Step {
        let record = format!("expiry sweep #{} (ledger {})", s.id, s.ledger_seq);
        self.steps.push(format!(
            "{record}: the expiry sweep made attempt {} uncertain at {}",
            self.attempt_name(Some(s.attempt)),
            time(&s.swept_at)
        ));
        self.at(s.swept_at);
        let expected = self.model.expected(&self.state, &Action::ExpirySweep);
        let current = self.model_attempt(self.state.jobs[0].current);
        if expected != Some(Expected::UNCERTAIN) || current != Some(s.attempt) {
            let why = match self.attempt_index.get(&s.attempt) {
                Some(&i) if current == Some(s.attempt) && s.swept_at < self.expiry[i as usize] => {
                    format!(
                        "its lease was valid until {}",
                        time(&self.expiry[i as usize])
                    )
                }
                _ => format!(
                    "the job was {} with current attempt {}",
                    self.state.jobs[0].state,
                    self.attempt_name(current)
                ),
            };
            return Err(self.violation(
                Kind::Verdict,
                record,
                format!(
                    "the model's sweep gives {}: {why}",
                    expected.map_or("no verdict".to_string(), |e| expected_text(&e))
                ),
            ));
        }
        self.apply(Action::ExpirySweep);
        Ok(())
    }

    /// The rows as they are now against the model's state after every record.
    fn final_state(&mut self) -> Step {
        let job = &self.jl.job;
        let record = format!("job {} (row)", job.id);
        let s = &self.state;
        let mj = s.jobs[0];
        let current = self.model_attempt(mj.current);
        let mut differences = Vec::new();
        if job.state != mj.state.as_str() {
            differences.push(format!(
                "state {} (the ledger leads to {})",
                job.state, mj.state
            ));
        }
        // The model's fence k is the fence of the job's k-th claim.
        let ledger_fence = match mj.fence {
            0 => 0,
            k => self
                .jl
                .attempts
                .get(usize::from(k) - 1)
                .map_or(i64::from(k), |a| a.fence),
        };
        if job.fence != ledger_fence {
            differences.push(format!(
                "fence {} (the ledger leads to {})",
                job.fence, ledger_fence
            ));
        }
        if job.current_attempt != current {
            differences.push(format!(
                "current attempt {} (the ledger leads to {})",
                self.attempt_name(job.current_attempt),
                self.attempt_name(current)
            ));
        }
        if job.cancel_requested != mj.cancel_requested {
            differences.push(format!(
                "cancel requested {} (the ledger leads to {})",
                job.cancel_requested, mj.cancel_requested
            ));
        }
        for (i, a) in self.jl.attempts.iter().enumerate() {
            let ma = &s.attempts[i];
            if a.state != ma.state.as_str() {
                differences.push(format!(
                    "attempt {} is {} (the ledger leads to {})",
                    self.attempt_name(Some(a.id)),
                    a.state,
                    ma.state
                ));
            }
            if ma.state == AttemptState::Active && a.lease_expiry != self.expiry[i] {
                differences.push(format!(
                    "attempt {}'s lease expires at {} (the ledger granted {})",
                    self.attempt_name(Some(a.id)),
                    time(&a.lease_expiry),
                    time(&self.expiry[i])
                ));
            }
        }
        let holds = s.reserved(0).then_some(current).flatten();
        let held = self.jl.reservation.as_ref().map(|(_, a)| *a);
        // Displaced by another job's claim of the slot: that claim is the violation
        // (`slot_overlap`, the cross-job slot check), not this job's rows.
        let displaced = held.is_none() && self.jl.slot_taken_by.is_some();
        if held != holds && !displaced {
            differences.push(format!(
                "target reserved by attempt {} (the ledger leads to {})",
                self.attempt_name(held),
                self.attempt_name(holds)
            ));
        }
        // The committed outcome: the one the ledger committed, by the result it accepted.
        let mut replaced = Vec::new();
        if mj.state.is_terminal() && job.outcome.as_deref() != Some(mj.state.as_str()) {
            replaced.push(format!(
                "outcome {} (the ledger committed {})",
                job.outcome.as_deref().unwrap_or("none"),
                mj.state
            ));
        }
        if let Some(i) = mj.current.map(usize::from) {
            let a = &self.jl.attempts[i];
            if let Some(payload) = &self.committed_payload[i] {
                let digest_of =
                    |outcome: &Option<String>, digest: &Option<String>| match (outcome, digest) {
                        (Some(outcome), Some(digest)) => Some(result_payload(outcome, digest)),
                        _ => None,
                    };
                if digest_of(&a.outcome, &a.result_digest).as_ref() != Some(payload)
                    || digest_of(&job.outcome, &job.result_digest).as_ref() != Some(payload)
                {
                    replaced.push(format!(
                        "outcome {} with digest {} (attempt: {} with {}), not the accepted result's",
                        job.outcome.as_deref().unwrap_or("none"),
                        job.result_digest.as_deref().unwrap_or("none"),
                        a.outcome.as_deref().unwrap_or("none"),
                        a.result_digest.as_deref().unwrap_or("none"),
                    ));
                }
            }
        }
        if !replaced.is_empty() {
            return Err(self.violation(
                Kind::ReplacedOutcome,
                record,
                format!("the job's row holds {}", replaced.join("; ")),
            ));
        }
        if differences.is_empty() {
            return Ok(());
        }
        let kind = if mj.state == JobState::Uncertain && job.state == "queued" {
            Kind::RetryWithoutReconciliation
        } else {
            Kind::Gap
        };
        Err(self.violation(
            kind,
            record,
            format!(
                "the rows are not where the ledger leads (a change without its record): {}",
                differences.join("; ")
            ),
        ))
    }
}
