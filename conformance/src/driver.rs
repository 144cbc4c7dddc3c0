//! The driver interface: how an implementation plugs into the conformance suite.
//!
//! A driver applies one model step to the implementation and answers with the verdict it observed,
//! then projects the implementation's state onto the model's abstract state so that the two can be
//! compared after every step. Abstract identities (runner 0, job 1, attempt 2, lease 3) are the
//! driver's to map to the implementation's concrete ids.

use std::fmt;
use std::future::Future;

use chrono::{DateTime, Duration, TimeZone, Utc};
use leasewright_model as model;
use leasewright_model::{
    Action, AttemptState, Expected, Fence, JobState, LeaseModel, MessageKind, Outcome, Reason,
    RunnerId, State, Verdict,
};
use serde::Serialize;
use uuid::Uuid;

/// The verdict and reason an implementation gave to one step.
pub type Observed = Expected;

/// The part of the state both sides must agree on after every step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Projection {
    /// Jobs, by the model's job index.
    pub jobs: Vec<JobProjection>,
    /// Target slots, by the model's slot index.
    pub targets: Vec<TargetProjection>,
    /// The observation the last step recorded (docs/protocol.md §2: attribution, sender, kind,
    /// named job and attempt, verdict, reason), if it recorded one. Comparing every step's record
    /// checks that every received message is recorded, against the right attempt.
    pub observation: Option<ObservationProjection>,
    /// The rest of what the last step recorded and returned (class 5 of docs/conformance.md),
    /// from the drivers that read it (`None` from a driver that does not: then it is not
    /// compared).
    pub details: Option<Details>,
    /// What the side effects of R8 stored, with who stored it (`None` from a driver that does
    /// not read it, or for a configuration without side effects: then it is not compared).
    pub stored: Option<Stored>,
    /// The parts this driver cannot read from its implementation: neither side's is compared
    /// ([`blank`]), and the summary says so ([`crate::suite::SuiteDriver::not_compared`]).
    #[serde(skip)]
    pub unread: Vec<Part>,
    /// The model jobs the implementation has pruned ([`crate::drivers::prune`]): their rows, and
    /// what their attempts stored, are compared on neither side ([`blank_pruned`]).
    #[serde(skip)]
    pub pruned: Vec<u8>,
}

/// A part of the projection that a driver may be unable to read (an implementation that does not
/// offer the read, docs/conformance.md "What the HTTP driver needs").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// Each job's state, current attempt, fence, cancel flag and target reservation.
    Jobs,
    /// Each job's attempt ledger (and the lease holder, which is derived from it).
    Ledger,
    /// The observation a step recorded, and its remaining fields.
    Observation,
    /// The remaining fields of the observation a step recorded (lease id, fence, outcome, runner
    /// time, payload digest), when the core of the observation is read.
    ObservationDetails,
    /// The target slots' applied mutations and highest token.
    Targets,
    /// The values the rules return (a claim's job, fence and lease time, a heartbeat's lease time
    /// and cancel flag, a rejoin's instruction, the jobs a sweep made uncertain).
    Answers,
    /// What the side effects stored: each attempt's log chunks and artifact, each project's
    /// cache entry and the attempt that stored it.
    Stored,
}

impl Part {
    /// What the summary says is not compared.
    pub fn describe(self) -> &'static str {
        match self {
            Part::Jobs => {
                "the jobs' state, current attempt, fence, cancel flag and target reservation"
            }
            Part::Ledger => "the attempt ledger (runner, fence, state) and the lease holder",
            Part::Observation => "the recorded observations (every field)",
            Part::ObservationDetails => {
                "the observations' lease id, fence, outcome, runner time and payload digest"
            }
            Part::Targets => "the target slots (mutations applied, highest token)",
            Part::Answers => {
                "the values the rules return (claim, heartbeat, rejoin, sweep, a get's content)"
            }
            Part::Stored => {
                "what the side effects stored (log chunks, artifacts, the cache entry and the \
                 attempt that stored it)"
            }
        }
    }
}

/// `p` with the parts in `unread` blanked, so that they compare equal whatever they held.
pub fn blank(p: &mut Projection, unread: &[Part]) {
    for part in unread {
        match part {
            Part::Jobs => {
                for j in &mut p.jobs {
                    *j = JobProjection::blank(std::mem::take(&mut j.ledger));
                }
            }
            Part::Ledger => {
                for j in &mut p.jobs {
                    j.ledger.clear();
                    j.lease_holder = None;
                }
            }
            Part::Observation => {
                p.observation = None;
                if let Some(d) = &mut p.details {
                    d.observation = None;
                }
            }
            Part::ObservationDetails => {
                if let Some(d) = &mut p.details {
                    d.observation = None;
                }
            }
            Part::Targets => p.targets.clear(),
            Part::Answers => {
                if let Some(d) = &mut p.details {
                    d.answer = None;
                }
            }
            Part::Stored => p.stored = None,
        }
    }
}

/// `want` and `got` with the jobs in `pruned` blanked on both sides, so that they compare equal
/// whatever each side holds of them: a pruned job's row and attempts, and the log chunks and
/// artifacts of its attempts (the attempts the model's ledger of the job names). A project's cache
/// entry outlives the attempt that stored it and stays compared.
pub fn blank_pruned(want: &mut Projection, got: &mut Projection, pruned: &[u8]) {
    let mut attempts = std::collections::BTreeSet::new();
    for &j in pruned {
        for p in [&*want, &*got] {
            if let Some(job) = p.jobs.get(usize::from(j)) {
                attempts.extend(job.ledger.iter().map(|a| a.attempt));
            }
        }
    }
    for p in [want, got] {
        for &j in pruned {
            if let Some(job) = p.jobs.get_mut(usize::from(j)) {
                *job = JobProjection::blank(Vec::new());
            }
        }
        if let Some(stored) = &mut p.stored {
            stored.attempts.retain(|a| !attempts.contains(&a.attempt));
        }
    }
}

/// The payloads one trace has sent, each with the digest the implementation first recorded for it:
/// a payload digest is compared as the payload it is the digest of, and one payload must always
/// have one digest, two payloads two digests.
#[derive(Debug, Default)]
pub struct PayloadDigests(std::collections::BTreeMap<String, String>);

impl PayloadDigests {
    /// The label the model expects for a recorded `digest` of the payload `sent` (its label, see
    /// [`payload_label`]), or a label saying what is wrong with it.
    pub fn label(&mut self, digest: Option<&str>, sent: Option<&str>) -> Option<String> {
        let digest = digest?;
        let Some(label) = sent else {
            return Some(format!("a digest ({digest}) of no payload"));
        };
        Some(match self.0.get(label) {
            Some(first) if first == digest => label.to_owned(),
            Some(first) => format!("{label}, with a digest other than its first ({first})"),
            None => match self.0.iter().find(|(_, d)| d.as_str() == digest) {
                Some((other, _)) => format!("{label}, with the digest of {other}"),
                None => {
                    self.0.insert(label.to_owned(), digest.to_owned());
                    label.to_owned()
                }
            },
        })
    }
}

/// What a step recorded and returned beyond the verdict and the observation's core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Details {
    /// The observation's remaining fields, if the step recorded one.
    pub observation: Option<ObservationDetails>,
    /// The value the step's rule returned with an accepted verdict (or a rejoin's instruction).
    pub answer: Option<Answer>,
}

/// The recorded fields of an observation that [`ObservationProjection`] leaves out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObservationDetails {
    /// The named lease id (model lease id; 0: forged).
    pub lease: u8,
    /// The named fence.
    pub fence: Fence,
    /// The reported outcome of a `result`.
    pub outcome: Option<Outcome>,
    /// The runner's observed time, as the model's runner time.
    pub runner_time: Option<u8>,
    /// Which payload the payload digest is the digest of (`None`: no digest recorded). The drivers
    /// check that one payload always has one digest and two payloads two digests.
    pub payload: Option<String>,
}

/// The value a rule returns with its verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// An accepted claim: the job it took, the fence it issued, the lease time granted (ticks)
    /// and the slot token it issued for the job's target slot (§8.3).
    Claim {
        job: u8,
        fence: Fence,
        lease_ticks: i64,
        slot_token: u8,
    },
    /// An accepted batch claim (docs/protocol.md "Batch claim"): each job it took, in submission
    /// order, with what a claim of that one job answers.
    ClaimBatch { leases: Vec<ClaimedJob> },
    /// An accepted heartbeat: the lease time granted (ticks) and whether a cancel was requested.
    Heartbeat {
        lease_ticks: i64,
        cancel_requested: bool,
    },
    /// A rejoin's instruction: `continue`, `cancel` or `stop` (R5).
    Rejoin { instruction: &'static str },
    /// The expiry sweep: the jobs it made `uncertain`.
    Sweep { uncertain: Vec<u8> },
    /// An accepted `artifact get` or `cache get` (R8): the content it served
    /// ([`crate::side_effects::served_label`]).
    Served { content: String },
}

/// One job an accepted batch claim took: the job (the model's index), the fence it issued, the
/// lease time granted (ticks) and the slot token it issued.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ClaimedJob {
    pub job: u8,
    pub fence: Fence,
    pub lease_ticks: i64,
    pub slot_token: u8,
}

impl ClaimedJob {
    /// What a lease the implementation issued for the model's job `job` answers, its fence and
    /// slot token in the model's range (a larger one is the implementation's divergence, never
    /// truncated): the one mapping of a claim's lease every driver makes.
    pub fn of_lease(
        job: u8,
        fence: i64,
        lease_ticks: i64,
        slot_token: i64,
    ) -> Result<ClaimedJob, DriverError> {
        let out_of_range = |what: &str, value: i64| {
            DriverError::Implementation(format!("{what} {value} out of range"))
        };
        Ok(ClaimedJob {
            job,
            fence: Fence::try_from(fence).map_err(|_| out_of_range("fence", fence))?,
            lease_ticks,
            slot_token: u8::try_from(slot_token)
                .map_err(|_| out_of_range("slot token", slot_token))?,
        })
    }

    /// The answer of a claim that took this one job.
    pub fn answer(self) -> Answer {
        Answer::Claim {
            job: self.job,
            fence: self.fence,
            lease_ticks: self.lease_ticks,
            slot_token: self.slot_token,
        }
    }
}

/// The model's fence or slot token of an implementation's `token`, in a trace whose first tokens
/// are of epoch `first_epoch`: its epoch counted from the trace's first ([`model::EPOCH_BASE`] a
/// step), plus its generation (a token the model cannot hold is the implementation's divergence).
/// 0 is no token (a job no claim took yet has fence 0) in every epoch. The one mapping every
/// driver makes ([`token_to_impl`] inverts it).
pub fn token_to_model(first_epoch: i64, token: i64) -> Result<u8, DriverError> {
    use leasewright_impl::epoch::{epoch_of, generation_of};
    if token == 0 {
        return Ok(0);
    }
    (epoch_of(token) - first_epoch)
        .checked_mul(i64::from(leasewright_model::EPOCH_BASE))
        .and_then(|e| e.checked_add(generation_of(token)))
        .and_then(|t| u8::try_from(t).ok())
        .ok_or_else(|| {
            DriverError::Implementation(format!("fence or slot token {token} out of range"))
        })
}

/// The implementation's fence or slot token of the model's `token` ([`token_to_model`]).
pub fn token_to_impl(first_epoch: i64, token: u8) -> i64 {
    if token == 0 {
        return 0;
    }
    let base = i64::from(leasewright_model::EPOCH_BASE);
    ((first_epoch + i64::from(token) / base) << leasewright_impl::epoch::EPOCH_SHIFT)
        + i64::from(token) % base
}

/// The payload label of a message: what it carries beyond its tuple (a result's outcome and the
/// digest the drivers send with it, [`result_digest`]: the model's runners report
/// digest 0, its probes also another digest of the same outcome).
pub fn payload_label(m: &leasewright_model::Message) -> Option<String> {
    match m.kind {
        MessageKind::Result(outcome) => Some(format!(
            "result {outcome} {}",
            result_digest(outcome, m.digest)
        )),
        MessageKind::SideEffect(effect) => crate::side_effects::payload_label(effect),
        _ => None,
    }
}

/// A rejoin's instruction for its verdict (R5): `continue` when accepted, `cancel` when accepted
/// while a cancel is requested, `stop` on any rejection.
pub fn rejoin_instruction(accepted: bool, cancel_requested: bool) -> &'static str {
    match (accepted, cancel_requested) {
        (true, false) => "continue",
        (true, true) => "cancel",
        (false, _) => "stop",
    }
}

/// What the side effects of R8 stored (docs/protocol.md §7.1): every field the implementation
/// records of a stored log chunk, artifact and cache entry that the model has, the storer of a
/// cache entry included. Contents are the model's (0 or 1; [`UNKNOWN_CONTENT`]: bytes no step
/// sent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stored {
    /// Each attempt that stored a log chunk or an artifact, by model attempt index.
    pub attempts: Vec<StoredByAttempt>,
    /// Each project's cache entry (model project 0, then the outsider's project).
    pub cache: Vec<Option<CacheProjection>>,
}

/// What one attempt stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredByAttempt {
    /// Model attempt index.
    pub attempt: u8,
    /// Its log chunks: (seq, content), in sequence order.
    pub log: Vec<(u8, u8)>,
    /// The content of its artifact, if it stored one.
    pub artifact: Option<u8>,
}

/// A project's cache entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheProjection {
    /// Its content.
    pub content: u8,
    /// The attempt whose `cache put` stored it last (model attempt index; its job and runner
    /// are the ledger's).
    pub stored_by: u8,
}

/// The content of stored bytes that no step of a trace sends.
pub const UNKNOWN_CONTENT: u8 = u8::MAX;

/// The model's content of stored `bytes` of kind `what` ([`crate::side_effects::content_bytes`]).
pub fn stored_content(what: &str, bytes: &[u8]) -> u8 {
    (0..2)
        .find(|&c| crate::side_effects::content_bytes(what, c) == bytes)
        .unwrap_or(UNKNOWN_CONTENT)
}

/// What one attempt stored, as a driver fetched it: its log chunks (seq, bytes) in sequence
/// order, and its artifact's bytes.
pub type FetchedAttempt = (Vec<(i64, Vec<u8>)>, Option<Vec<u8>>);

/// What an implementation stored, as a driver fetched it, in the model's terms: `attempts`,
/// by model attempt index, each attempt's log chunks (seq, bytes) in sequence order and its
/// artifact's bytes; `cache`, each project's cache entry (model project 0, then the outsider's)
/// with its bytes and the model attempt index of its storer. Every driver builds its
/// [`Stored`] here, so they compare the same fields.
pub fn implementation_stored(
    attempts: Vec<FetchedAttempt>,
    cache: Vec<Option<(Vec<u8>, u8)>>,
) -> Result<Stored, DriverError> {
    let mut stored = Stored::default();
    for (i, (chunks, artifact)) in attempts.into_iter().enumerate() {
        let mut log = Vec::with_capacity(chunks.len());
        for (seq, bytes) in chunks {
            let seq = u8::try_from(seq)
                .map_err(|_| DriverError::Implementation(format!("log seq {seq} out of range")))?;
            log.push((seq, stored_content("log chunk", &bytes)));
        }
        let artifact = artifact.map(|bytes| stored_content("artifact", &bytes));
        if !log.is_empty() || artifact.is_some() {
            stored.attempts.push(StoredByAttempt {
                attempt: i as u8,
                log,
                artifact,
            });
        }
    }
    stored.cache = cache
        .into_iter()
        .map(|e| {
            e.map(|(bytes, stored_by)| CacheProjection {
                content: stored_content("cache", &bytes),
                stored_by,
            })
        })
        .collect();
    Ok(stored)
}

/// What the model's state `s` holds as stored by side effects.
pub fn model_stored(s: &State) -> Stored {
    use leasewright_model::side_effects::{artifact_of, chunk_at};
    Stored {
        attempts: s
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| StoredByAttempt {
                attempt: i as u8,
                log: (0..2)
                    .filter_map(|seq| chunk_at(a.log, seq).map(|c| (seq, c)))
                    .collect(),
                artifact: artifact_of(a.artifact),
            })
            .filter(|a| !a.log.is_empty() || a.artifact.is_some())
            .collect(),
        cache: s
            .cache
            .iter()
            .map(|e| {
                e.map(|e| CacheProjection {
                    content: e.content,
                    stored_by: e.stored_by,
                })
            })
            .collect(),
    }
}

/// One job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobProjection {
    /// Its state.
    pub state: JobState,
    /// Its current attempt (model attempt index).
    pub current_attempt: Option<u8>,
    /// Its fence counter.
    pub fence: Fence,
    /// The runner holding the lease (the current attempt's runner while the job is leased).
    pub lease_holder: Option<RunnerId>,
    /// Its cancel request flag.
    pub cancel_requested: bool,
    /// Its target is reserved.
    pub target_reserved: bool,
    /// Its attempt ledger, in claim order.
    pub ledger: Vec<AttemptProjection>,
}

impl JobProjection {
    /// A job projection that says nothing: what a part compared on neither side is set to.
    pub fn blank(ledger: Vec<AttemptProjection>) -> Self {
        JobProjection {
            state: JobState::Queued,
            current_attempt: None,
            fence: 0,
            lease_holder: None,
            cancel_requested: false,
            target_reserved: false,
            ledger,
        }
    }
}

/// One entry of the attempt ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttemptProjection {
    /// Model attempt index.
    pub attempt: u8,
    /// The runner that claimed it.
    pub runner: RunnerId,
    /// Its fence.
    pub fence: Fence,
    /// Its state (`passed`/`failed`/`cancelled` is the committed outcome it holds).
    pub state: AttemptState,
}

/// One target slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TargetProjection {
    /// Mutations applied, saturating as the model counts them: at 1 for a `fenced` target (whose
    /// rule depends only on the highest fence), at 2 otherwise (enough to see a second deployment).
    pub applied: u8,
    /// The highest fence applied (0: none).
    pub highest_fence: Fence,
}

/// One received runner message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObservationProjection {
    /// The attempt it is recorded against, if any.
    pub attempt: Option<u8>,
    /// The sending runner.
    pub sender: RunnerId,
    /// `heartbeat`, `result` or `rejoin`.
    pub kind: &'static str,
    /// The job the message named.
    pub job: u8,
    /// The attempt the message named.
    pub named_attempt: u8,
    /// The verdict it got.
    pub verdict: Verdict,
    /// The reason it got.
    pub reason: Option<Reason>,
}

impl fmt::Display for ObservationProjection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} from runner {} naming job {} attempt {} -> {}{} (recorded against {})",
            self.kind,
            self.sender,
            self.job,
            self.named_attempt,
            self.verdict,
            self.reason.map(|r| format!(" {r}")).unwrap_or_default(),
            self.attempt
                .map(|a| format!("attempt {a}"))
                .unwrap_or_else(|| "no attempt".into())
        )
    }
}

/// The projection of the model's step from `before` by `action` to `state`: what the
/// implementation must show after the same steps.
pub fn project_model(
    model: &LeaseModel,
    before: &State,
    action: &Action,
    state: &State,
) -> Projection {
    let jobs = state
        .jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let ledger: Vec<AttemptProjection> = state
                .attempts
                .iter()
                .enumerate()
                // An attempt whose claim a failover lost is in no database's ledger.
                .filter(|(_, a)| a.job as usize == j && !a.lost)
                .map(|(i, a)| AttemptProjection {
                    attempt: i as u8,
                    runner: a.runner,
                    fence: a.fence,
                    state: a.state,
                })
                .collect();
            let lease_holder = match job.current {
                Some(a) if job.state.is_leased() => Some(state.attempts[a as usize].runner),
                _ => None,
            };
            JobProjection {
                target_reserved: state.reserved(j as u8),
                state: job.state,
                current_attempt: job.current,
                fence: job.fence,
                lease_holder,
                cancel_requested: job.cancel_requested,
                ledger,
            }
        })
        .collect();
    let targets = state
        .targets
        .iter()
        .map(|t| TargetProjection {
            applied: t.applied.min(applied_cap(model.config.target)),
            highest_fence: if model.config.target == leasewright_model::TargetKind::Fenced {
                t.highest_token
            } else {
                0
            },
        })
        .collect();
    let details = Some(model_details(model, before, action, state));
    Projection {
        jobs,
        targets,
        details,
        stored: model.config.side_effects.then(|| model_stored(state)),
        unread: Vec::new(),
        pruned: Vec::new(),
        observation: match action {
            Action::Deliver { message } if recorded_by_server(message.kind) => {
                Some(model.observation(before, message))
            }
            Action::Heartbeat {
                runner,
                runner_time,
                attempt,
            } => LeaseModel::message_of(
                before,
                *runner,
                *attempt,
                MessageKind::Heartbeat,
                *runner_time,
            )
            .map(|m| model.observation(before, &m)),
            Action::SideEffect { runner, effect } => {
                LeaseModel::message(before, *runner, MessageKind::SideEffect(*effect), 0)
                    .map(|m| model.observation(before, &m))
            }
            Action::Replay {
                runner,
                message,
                forge,
            } if recorded_by_server(message.kind) => Some(model.observation(
                before,
                &LeaseModel::replayed(before, message, *runner, *forge),
            )),
            _ => None,
        }
        // A revoked runner's message is from no runner: recorded nowhere (§7).
        .filter(|o| {
            !before
                .runners
                .get(o.sender as usize)
                .is_some_and(|r| r.revoked)
        })
        .map(observation_projection),
    }
}

/// The projection of the model's record of a message.
pub fn observation_projection(o: leasewright_model::Observation) -> ObservationProjection {
    ObservationProjection {
        attempt: o.attempt,
        sender: o.sender,
        kind: o.kind.name(),
        job: o.job,
        named_attempt: o.named_attempt,
        verdict: o.verdict,
        reason: o.reason,
    }
}

/// The second result a driver sends right after the result `m` delivered in the model's state
/// `after` (the echo: for the same job, the same result again, or with `conflicting` the same
/// with another digest), with the verdict and the record the model expects for it, judged as if
/// sent right after `m` (docs/protocol.md, "Batch result"). `None` when the model would accept
/// it (it would change the state, which the model's trace does not): never, as a result that
/// differs from `m` only by its digest passes the same checks, and `m` or an earlier result
/// committed the attempt when it is accepted.
pub fn result_echo(
    model: &LeaseModel,
    after: &State,
    m: &leasewright_model::Message,
    conflicting: bool,
) -> Option<(leasewright_model::Message, Expected, ObservationProjection)> {
    if !matches!(m.kind, MessageKind::Result(_)) {
        return None;
    }
    let mut echo = *m;
    if conflicting {
        // A digest no runner of the model reports.
        echo.digest ^= 0x40;
    }
    let expected = model.delivery_verdict(after, &echo);
    (expected.verdict != Verdict::Accepted).then(|| {
        let record = observation_projection(model.observation(after, &echo));
        (echo, expected, record)
    })
}

/// One extra item a driver sends in a result batch beside the step's own result, with what the
/// model expects of it.
#[derive(Clone, Debug)]
pub struct BatchItem {
    /// The message.
    pub message: leasewright_model::Message,
    /// The verdict the model expects.
    pub expected: Expected,
    /// The record the model expects.
    pub record: ObservationProjection,
    /// What it is, for a difference's line.
    pub what: &'static str,
}

/// The result batches a run sent beside its steps (docs/conformance.md, "Batch results"): counted
/// like the batch claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BatchResults {
    /// Batches of the batch result route with an item beside the step's own result (every
    /// result a driver that sends them delivers).
    pub sent: u64,
    /// Of those, with items for two jobs or more (an earlier result of another job).
    pub several_jobs: u64,
}

impl BatchResults {
    /// Adds another count into this one.
    pub fn absorb(&mut self, other: &BatchResults) {
        self.sent += other.sent;
        self.several_jobs += other.several_jobs;
    }

    /// One line for the summary.
    pub fn describe(&self) -> String {
        format!(
            "{} (with items for several jobs: {})",
            self.sent, self.several_jobs
        )
    }
}

/// The extra items of one trace's result batches, the same for every driver that sends them:
/// after every delivered result, (1) its echo ([`result_echo`]) and (2) the latest earlier result
/// of another job, re-sent now by the same runner, each judged by the model in the state after
/// the step (none of them changes it: an item the model would accept is not sent). The driver
/// sends the step's result and the extra items in one batch (a trace that sends batches) or the
/// step's result through the single route and the extra items as one batch; then it hands the
/// verdicts to [`ResultBatches::check_verdicts`] and the step's records to
/// [`ResultBatches::check_records`].
#[derive(Debug, Default)]
pub struct ResultBatches {
    conflicting: bool,
    /// Send no other job's earlier result ([`ResultBatches::without_other_jobs`]).
    own_job_only: bool,
    /// The latest result delivered for each job of the trace.
    delivered: std::collections::BTreeMap<u8, leasewright_model::Message>,
    /// The extra items of the current step, in the order sent.
    pending: Vec<BatchItem>,
    /// The records still to be checked, in the order sent.
    records: Vec<ObservationProjection>,
    counts: BatchResults,
    differences: Vec<String>,
}

impl ResultBatches {
    /// The batches of a trace whose echo is `conflicting` (another digest) or a duplicate.
    pub fn new(conflicting: bool) -> Self {
        Self {
            conflicting,
            ..Self::default()
        }
    }

    /// These batches without the item of another job's earlier result (the echo is still sent).
    pub fn without_other_jobs(mut self) -> Self {
        self.own_job_only = true;
        self
    }

    /// Whether the echo is a conflicting result.
    pub fn conflicting(&self) -> bool {
        self.conflicting
    }

    /// Forgets the last step's expectations (a new step begins).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.records.clear();
    }

    /// The extra items to send beside the result `m`, delivered in the model's state `after`
    /// (none without it), each with its outcome.
    pub fn extra_items(
        &mut self,
        model: &LeaseModel,
        after: Option<&State>,
        m: &leasewright_model::Message,
    ) -> Vec<(leasewright_model::Message, Outcome)> {
        self.pending.clear();
        let (Some(after), MessageKind::Result(outcome)) = (after, m.kind) else {
            return Vec::new();
        };
        if let Some((echo, expected, record)) = result_echo(model, after, m, self.conflicting) {
            self.pending.push(BatchItem {
                message: echo,
                expected,
                record,
                what: if self.conflicting {
                    "a conflicting result"
                } else {
                    "a duplicate"
                },
            });
        }
        let other = self
            .delivered
            .iter()
            .filter(|(job, _)| **job != m.job && !self.own_job_only)
            .map(|(_, earlier)| leasewright_model::Message {
                sender: m.sender,
                runner_time: m.runner_time,
                ..*earlier
            })
            .next();
        if let Some(other) = other {
            let expected = model.delivery_verdict(after, &other);
            if expected.verdict != Verdict::Accepted {
                self.pending.push(BatchItem {
                    message: other,
                    expected,
                    record: observation_projection(model.observation(after, &other)),
                    what: "another job's earlier result",
                });
            }
        }
        self.delivered.insert(m.job, *m);
        if !self.pending.is_empty() {
            self.counts.sent += 1;
            if self.pending.iter().any(|i| i.message.job != m.job) {
                self.counts.several_jobs += 1;
            }
        }
        self.records = self.pending.iter().map(|i| i.record).collect();
        self.pending
            .iter()
            .map(|i| match i.message.kind {
                MessageKind::Result(o) => (i.message, o),
                _ => (i.message, outcome),
            })
            .collect()
    }

    /// Compares the verdicts the implementation gave the extra items (in the order sent) with
    /// the model's.
    pub fn check_verdicts(&mut self, got: &[Observed], in_batch_with_step: bool) {
        if got.len() != self.pending.len() {
            self.differences.push(format!(
                "a batch result's {} extra items answered {} verdicts",
                self.pending.len(),
                got.len()
            ));
            return;
        }
        for (i, (item, got)) in self.pending.iter().zip(got).enumerate() {
            if *got != item.expected {
                self.differences.push(format!(
                    "the batch result's item {} for job {} ({}, {}): expected {}, observed {got}",
                    i + usize::from(in_batch_with_step) + 1,
                    item.message.job,
                    item.what,
                    payload_label(&item.message).unwrap_or_default(),
                    item.expected
                ));
            }
        }
        self.pending.clear();
    }

    /// Checks the step's last records, the extra items' (in the order sent), and removes them
    /// from `recorded` (oldest first): what is left is the step's own.
    pub fn check_records<T>(
        &mut self,
        recorded: &mut Vec<T>,
        mut project: impl FnMut(&T) -> Result<ObservationProjection, DriverError>,
    ) -> Result<(), DriverError> {
        let want = std::mem::take(&mut self.records);
        if want.len() > recorded.len() {
            self.differences.push(format!(
                "the batch result's {} extra items left {} records",
                want.len(),
                recorded.len()
            ));
            recorded.clear();
            return Ok(());
        }
        let got = recorded.split_off(recorded.len() - want.len());
        for (want, got) in want.iter().zip(&got) {
            let got = project(got)?;
            if got != *want {
                self.differences.push(format!(
                    "the record of a batch result's extra item for job {}: expected {want},                      observed {got}",
                    want.job
                ));
            }
        }
        Ok(())
    }

    /// Drops the records still expected (a step whose records are not compared).
    pub fn forget_records(&mut self) {
        self.records.clear();
    }

    /// What differed since the last call, drained.
    pub fn differences(&mut self) -> Vec<String> {
        std::mem::take(&mut self.differences)
    }

    /// The batches sent since the last call, drained.
    pub fn counts(&mut self) -> BatchResults {
        std::mem::take(&mut self.counts)
    }
}

/// The server-recorded message `action` delivers in `before`, if any.
fn recorded_message(before: &State, action: &Action) -> Option<leasewright_model::Message> {
    crate::coverage::delivered(before, action)
        .filter(|m| recorded_by_server(m.kind) && !LeaseModel::revoked_sender(before, m))
}

/// The details the model's step implies: the recorded fields of its observation and the value
/// its rule returns.
fn model_details(model: &LeaseModel, before: &State, action: &Action, after: &State) -> Details {
    let expected = model.expected(before, action);
    let accepted = expected.is_some_and(|e| e.verdict == Verdict::Accepted);
    let message = recorded_message(before, action);
    let observation = message.map(|m| ObservationDetails {
        lease: m.lease,
        fence: m.fence,
        outcome: match m.kind {
            MessageKind::Result(o) => Some(o),
            _ => None,
        },
        runner_time: Some(m.runner_time),
        payload: payload_label(&m),
    });
    let answer = match (action, message) {
        (Action::Claim { .. }, _) if accepted => {
            after
                .attempts
                .get(before.attempts.len())
                .map(|a| Answer::Claim {
                    job: a.job,
                    fence: a.fence,
                    lease_ticks: i64::from(model.config.lease_ttl),
                    slot_token: a.token,
                })
        }
        (Action::ClaimBatch { .. }, _) if accepted => Some(Answer::ClaimBatch {
            leases: after.attempts[before.attempts.len().min(after.attempts.len())..]
                .iter()
                .map(|a| ClaimedJob {
                    job: a.job,
                    fence: a.fence,
                    lease_ticks: i64::from(model.config.lease_ttl),
                    slot_token: a.token,
                })
                .collect(),
        }),
        (Action::ExpirySweep, _) => Some(Answer::Sweep {
            uncertain: (0..after.jobs.len())
                .filter(|&j| {
                    after.jobs[j].state == JobState::Uncertain
                        && before.jobs[j].state != JobState::Uncertain
                })
                .map(|j| j as u8)
                .collect(),
        }),
        (_, Some(m)) if m.kind == MessageKind::Heartbeat && accepted => Some(Answer::Heartbeat {
            lease_ticks: i64::from(model.config.lease_ttl),
            cancel_requested: after.jobs[m.job as usize].cancel_requested,
        }),
        (_, Some(m)) if accepted && matches!(m.kind, MessageKind::SideEffect(e) if e.serves()) => {
            let MessageKind::SideEffect(effect) = m.kind else {
                unreachable!("matched above")
            };
            model.served(before, &m).map(|content| Answer::Served {
                content: crate::side_effects::model_served_label(effect, content),
            })
        }
        (_, Some(m)) if m.kind == MessageKind::Rejoin => Some(Answer::Rejoin {
            instruction: rejoin_instruction(
                accepted,
                before
                    .jobs
                    .get(m.job as usize)
                    .is_some_and(|j| j.cancel_requested),
            ),
        }),
        _ => None,
    };
    Details {
        observation,
        answer,
    }
}

/// The count at which the model stops counting a target's applied mutations.
pub fn applied_cap(kind: leasewright_model::TargetKind) -> u8 {
    if kind == leasewright_model::TargetKind::Fenced {
        1
    } else {
        2
    }
}

/// The ids a trace's messages use for the model's runners, jobs and attempts that no one created
/// (§6.1 checks 1, 2 and 4: `unknown_runner`, `unknown_job`, `unknown_attempt`): unique to the
/// trace, created by no one, and mapped back to their model index when the implementation shows
/// one. Every driver that makes its own ids (in-process, HTTP) uses these.
#[derive(Clone, Copy, Debug)]
pub struct UnknownIds {
    base: u128,
}

impl UnknownIds {
    /// The kinds of identity: a runner, a job, an attempt.
    pub const RUNNER: u8 = 0;
    pub const JOB: u8 = 1;
    pub const ATTEMPT: u8 = 2;

    /// Ids for one trace (random, so two traces never share one).
    pub fn fresh() -> Self {
        UnknownIds {
            base: Uuid::new_v4().as_u128() & !0xffff,
        }
    }

    /// The id that stands for the model's never-created runner, job or attempt `index`.
    pub fn id(&self, what: u8, index: u8) -> Uuid {
        Uuid::from_u128(self.base ^ (u128::from(what) << 8 | u128::from(index)))
    }

    /// The model index `id` stands for, if it is one of [`UnknownIds::id`]'s.
    pub fn index(&self, what: u8, id: Uuid) -> Option<u8> {
        let x = id.as_u128() ^ self.base;
        (x >> 16 == 0 && (x >> 8) as u8 == what).then_some(x as u8)
    }

    /// The model index of a runner, job or attempt id: its position in `created`, or the index
    /// of one of [`UnknownIds::id`]'s.
    pub fn model_index(&self, what: u8, created: &[Uuid], id: Uuid) -> Result<u8, DriverError> {
        match created.iter().position(|y| *y == id) {
            Some(i) => Ok(i as u8),
            None => self.index(what, id).ok_or_else(|| {
                DriverError::Implementation(format!(
                    "the implementation shows an unknown {}",
                    ["runner", "job", "attempt"][usize::from(what)]
                ))
            }),
        }
    }
}

/// What went wrong inside a driver (not a divergence: the step could not be carried out).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The implementation failed (database down, HTTP error, ...).
    #[error("the implementation failed: {0}")]
    Implementation(String),
    /// The trace named something the driver cannot map.
    #[error("the driver cannot map this step: {0}")]
    Unmappable(String),
}

/// A way to reach one implementation. `open` gives a fresh, isolated namespace for one trace.
pub trait Driver: Send + Sync {
    /// One trace's session.
    type Session: Session;

    /// A short name for reports (`postgres`, `http`).
    fn name(&self) -> String;

    /// A fresh namespace for one trace of `model` (its own projects, runners, jobs and clock).
    fn open(
        &self,
        model: &LeaseModel,
        trace: &str,
    ) -> impl Future<Output = Result<Self::Session, DriverError>> + Send;

    /// A fresh namespace for `trace` of `model`: [`Driver::open`] with its name, unless the
    /// driver needs the whole trace to choose (the in-process driver gives a trace with a failover
    /// step a schema of its own: `drivers::failover`).
    fn open_trace(
        &self,
        model: &LeaseModel,
        trace: &crate::generate::Generated<LeaseModel>,
    ) -> impl Future<Output = Result<Self::Session, DriverError>> + Send {
        self.open(model, &trace.name)
    }
}

/// One trace's view of the implementation.
pub trait Session: Send {
    /// Apply `action`, taken by the model from state `before` to state `after` (the driver reads
    /// the abstract ids the step creates, such as a new attempt's lease id, from `after`). Returns
    /// the verdict the implementation gave, or `None` for a step with no server-side verdict (a
    /// runner sending a message, a runner stopping, a disconnect, the passing of time).
    fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> impl Future<Output = Result<Option<Observed>, DriverError>> + Send;

    /// The implementation's state, projected onto the model's abstract state.
    fn project(&mut self) -> impl Future<Output = Result<Projection, DriverError>> + Send;

    /// Called before a step whose projection follows steps that were not projected (the last
    /// step of a cover trace): from now on, [`Session::project`] reports only what is recorded
    /// after this point.
    fn mark(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// What the driver itself found to differ from the model in the last step or projection,
    /// one line each, drained: the extra items a driver sends beside a step (a batch result's
    /// second item for the same job, judged as if sent right after the step's own message) are
    /// compared by the driver, which has the model. Empty by default.
    fn differences(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The result batches the driver sent since the last call ([`ResultBatches`]), drained: none
    /// by default.
    fn batch_results(&mut self) -> BatchResults {
        BatchResults::default()
    }
}

/// The message kinds whose observations the server records (target mutations are the target's).
pub fn recorded_by_server(kind: MessageKind) -> bool {
    !matches!(kind, MessageKind::TargetMutation)
}

// What every driver sends for a model step: the shared vocabulary of times, ids and digests.

/// One model tick in server time.
pub const TICK: Duration = Duration::seconds(10);

/// A lease id no claim ever issues: what the model's forged lease id maps to.
pub const FORGED_LEASE: Uuid = Uuid::from_u128(0x1ea5_e000_0000_4000_8000_0000_0000_0000);

/// The server time every trace starts at.
pub fn trace_epoch() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
}

/// The runner's observed time for the model's runner time `t`: hours away from the server's time
/// in either direction (0: three hours behind, 1: three hours ahead, ...). Verdicts must not
/// depend on it.
pub fn runner_time(t: u8) -> DateTime<Utc> {
    trace_epoch() + Duration::hours(i64::from(t) * 6 - 3)
}

/// The model's runner time of a recorded runner time ([`runner_time`] inverted; 255 when it is
/// none of them).
pub fn model_runner_time(at: DateTime<Utc>) -> u8 {
    let hours = (at - trace_epoch()).num_hours() + 3;
    if hours % 6 == 0
        && (0..6 * 255).contains(&hours)
        && (at - trace_epoch()).num_minutes() % 60 == 0
    {
        (hours / 6) as u8
    } else {
        u8::MAX
    }
}

/// The result digest the driver sends for an outcome: identical results have identical digests.
pub fn result_digest(outcome: model::Outcome, digest: model::Digest) -> String {
    if digest == 0 {
        format!("sha256:{}", outcome.as_str())
    } else {
        format!("sha256:{}-{digest}", outcome.as_str())
    }
}

/// Parses one of the spec's stable names into the model's type: the two sides share only names.
pub fn code<T: std::str::FromStr>(name: &str) -> Result<T, DriverError> {
    name.parse().map_err(|_| {
        DriverError::Implementation(format!(
            "the implementation answered `{name}`, not a name of the spec"
        ))
    })
}

/// The heartbeat `runner` sends about `attempt` of its batch (`None`: the attempt it holds) in
/// the model's state `before` (a request the server answers at once; the model keeps no
/// heartbeats in flight).
pub fn heartbeat(
    before: &State,
    runner: model::RunnerId,
    attempt: Option<model::AttemptId>,
    runner_time: u8,
) -> Result<model::Message, DriverError> {
    LeaseModel::message_of(before, runner, attempt, MessageKind::Heartbeat, runner_time).ok_or_else(
        || {
            DriverError::Unmappable(format!(
                "a heartbeat from runner {runner}, which holds no such attempt"
            ))
        },
    )
}

/// The side effect (R8) `runner` sends in the model's state `before`, answered at once like a
/// heartbeat.
pub fn side_effect(
    before: &State,
    runner: model::RunnerId,
    effect: model::SideEffect,
) -> Result<model::Message, DriverError> {
    LeaseModel::message(before, runner, MessageKind::SideEffect(effect), 0).ok_or_else(|| {
        DriverError::Unmappable(format!(
            "a side effect from runner {runner}, which holds no attempt"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasewright_model::{Config, TargetKind};
    use stateright::Model;

    /// The model's projection after a claim and a heartbeat: every part filled.
    fn filled() -> Projection {
        let model = LeaseModel::new(Config::one_job());
        let init = model.init_state();
        let claim = Action::Claim { runner: 0 };
        let claimed = model.next_state(&init, claim).expect("a claim");
        let heartbeat = Action::Heartbeat {
            runner: 0,
            runner_time: 1,
            attempt: None,
        };
        let after = model
            .next_state(&claimed, heartbeat.clone())
            .expect("a heartbeat");
        let p = project_model(&model, &claimed, &heartbeat, &after);
        assert!(p.observation.is_some() && !p.jobs[0].ledger.is_empty());
        assert!(p.details.as_ref().is_some_and(|d| d.answer.is_some()));
        assert_eq!(model.config.target, TargetKind::Fenced);
        p
    }

    /// Each unread part compares equal whatever the two sides held, and only that part.
    #[test]
    fn blanking_a_part_hides_that_part_and_nothing_else() {
        let want = filled();
        type Change = (Part, fn(&mut Projection));
        let changes: [Change; 6] = [
            (Part::Jobs, |p| p.jobs[0].fence += 1),
            (Part::Ledger, |p| p.jobs[0].ledger[0].fence += 1),
            (Part::Observation, |p| {
                p.observation.as_mut().unwrap().sender += 1;
            }),
            (Part::ObservationDetails, |p| {
                p.details
                    .as_mut()
                    .unwrap()
                    .observation
                    .as_mut()
                    .unwrap()
                    .runner_time = Some(9);
            }),
            (Part::Targets, |p| p.targets[0].applied += 1),
            (Part::Answers, |p| {
                p.details.as_mut().unwrap().answer = None;
            }),
        ];
        for (part, change) in changes {
            let mut got = want.clone();
            change(&mut got);
            assert_ne!(want, got, "{part:?}: the change changes nothing");
            let (mut w, mut g) = (want.clone(), got.clone());
            blank(&mut w, &[part]);
            blank(&mut g, &[part]);
            assert_eq!(w, g, "{part:?}: still compared");
            for other in changes.iter().map(|(p, _)| *p).filter(|p| *p != part) {
                let (mut w, mut g) = (want.clone(), got.clone());
                blank(&mut w, &[other]);
                blank(&mut g, &[other]);
                // Blanking the observation hides its details too.
                if !(part == Part::ObservationDetails && other == Part::Observation) {
                    assert_ne!(w, g, "{part:?} hidden by blanking {other:?}");
                }
            }
        }
    }
}
