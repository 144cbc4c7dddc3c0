//! The server's rules (docs/protocol.md §6–8) and the stateright [`Model`].
//!
//! Every verdict is computed in one place: [`LeaseModel::expected`] (and the `*_verdict` functions it
//! calls). `next_state` applies the effect of a verdict; it never decides one itself.

use crate::properties;
use crate::state::*;
use crate::types::*;
use stateright::{Model, Property};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

/// The fenced-lease protocol (or one flawed variant of it) as a stateright model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseModel {
    /// The bounds and choices of this model.
    pub config: Config,
    /// Offer only actions that can change the state: leave out deliveries, replays, heartbeats
    /// and cancels that the server would not accept (they change nothing, so every state stays reachable;
    /// the properties check the verdict of every message that could be delivered in every
    /// state anyway). Halves the transitions an exhaustive check computes; conformance keeps
    /// every action, because its traces are about those verdicts.
    pub skip_no_ops: bool,
    /// Check the `always` properties as one ([`properties::EVERY_INVARIANT`]): the checker pays a
    /// fixed cost per property and state. The checker stops at the first violation anyway, and
    /// [`properties::violated`] names the invariants that fail there.
    pub one_invariant: bool,
    /// With [`LeaseModel::one_invariant`]: check only this invariant (see [`LeaseModel::focused`]).
    pub focus: Option<&'static str>,
    /// Ask each `sometimes` property only until it is reached: stateright's depth-first checker
    /// evaluates every `sometimes` condition in every state even after it found one (it skips only
    /// `eventually` properties), and some of them (every rejection reason produced) cost as much
    /// as the invariants. Once a condition held in some state, it answers `false` without
    /// computing (the discovery the checker recorded stays), and [`Model::properties`] no longer
    /// lists it (the checker takes the list anew for every block of states). For exhaustive
    /// checking only: a caller that asks a condition twice about one state expects one answer.
    pub settle_sometimes: bool,
    /// The states whose probes were checked already, by the part of the state the probes'
    /// verdicts and records depend on ([`properties::probe_key`]): shared by the clones of this
    /// model (the checker's threads).
    pub(crate) probe_memo: ProbeMemo,
}

/// A set of [`properties::probe_key`]s whose probes passed every probe invariant, for one
/// configuration. Sharded so that the checker's threads rarely wait for each other. Not part of
/// the model's identity: two models that differ only in it are equal.
#[derive(Clone)]
pub(crate) struct ProbeMemo(Arc<MemoInner>);

type KeySet = HashSet<u64, BuildHasherDefault<KeyHasher>>;

/// A `sometimes` property's condition, and whether it was reached already.
pub(crate) type Settled = (fn(&LeaseModel, &State) -> bool, AtomicBool);

pub(crate) struct MemoInner {
    config: Config,
    shards: Vec<Mutex<KeySet>>,
    /// The `sometimes` conditions of [`LeaseModel::settle_sometimes`], in the order of the
    /// model's properties.
    sometimes: OnceLock<Vec<Settled>>,
    /// The distinct states (by hash) where the ledger bound ended a path ([`Config::ledger`]).
    ledger_cut: Mutex<KeySet>,
}

/// The memo's keys are hashes already: use them as they are.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

const MEMO_SHARDS: usize = 64;

impl ProbeMemo {
    fn new(config: &Config) -> Self {
        ProbeMemo(Arc::new(MemoInner {
            config: config.clone(),
            shards: (0..MEMO_SHARDS).map(|_| Mutex::default()).collect(),
            sometimes: OnceLock::new(),
            ledger_cut: Mutex::default(),
        }))
    }

    /// The shard of `key`, if this memo was made for `config`.
    fn shard(&self, config: &Config, key: u64) -> Option<&Mutex<KeySet>> {
        (self.0.config == *config).then(|| &self.0.shards[(key >> 58) as usize % MEMO_SHARDS])
    }

    /// The `sometimes` conditions and their flags (see [`LeaseModel::settle_sometimes`]).
    pub(crate) fn sometimes(&self) -> &OnceLock<Vec<Settled>> {
        &self.0.sometimes
    }

    /// Whether `key` was recorded for `config`.
    pub(crate) fn contains(&self, config: &Config, key: u64) -> bool {
        self.shard(config, key).is_some_and(|shard| {
            shard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&key)
        })
    }

    /// Records `key` for `config`.
    pub(crate) fn insert(&self, config: &Config, key: u64) {
        if let Some(shard) = self.shard(config, key) {
            shard.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
        }
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.0
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

impl std::fmt::Debug for ProbeMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProbeMemo({} keys)", self.len())
    }
}

impl PartialEq for ProbeMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ProbeMemo {}

impl std::hash::Hash for ProbeMemo {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl LeaseModel {
    /// A model of `config` that offers every enabled action.
    pub fn new(config: Config) -> Self {
        LeaseModel {
            probe_memo: ProbeMemo::new(&config),
            config,
            skip_no_ops: false,
            one_invariant: false,
            focus: None,
            settle_sometimes: false,
        }
    }

    /// A model of `config` for exhaustive checking: it leaves out the actions that change
    /// nothing (see [`LeaseModel::skip_no_ops`]) and checks the invariants as one property (see
    /// [`LeaseModel::one_invariant`]).
    pub fn for_checking(config: Config) -> Self {
        LeaseModel {
            probe_memo: ProbeMemo::new(&config),
            config,
            skip_no_ops: true,
            one_invariant: true,
            focus: None,
            settle_sometimes: true,
        }
    }

    /// This model checking only the invariant named `property` (as "every invariant holds"):
    /// a breadth-first search then finds the shortest counterexample to that one property.
    pub fn focused(mut self, property: &'static str) -> Self {
        self.one_invariant = true;
        self.focus = Some(property);
        self
    }

    /// How many distinct states had a successor that the ledger bound ([`Config::ledger`]) cut
    /// off so far: each is the end of the paths through it (`check` prints it).
    pub fn ledger_paths_cut(&self) -> usize {
        self.probe_memo
            .0
            .ledger_cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// How many distinct [`properties::probe_key`]s had their probes checked so far.
    pub fn probe_memo_len(&self) -> usize {
        self.probe_memo.len()
    }

    /// The runner id of the outsider (project 1), if the configuration has one.
    pub fn outsider(&self) -> Option<RunnerId> {
        self.config.outsider.then_some(self.config.runners)
    }

    /// The initial state: every job `queued`, every slot free, every runner connected and idle,
    /// nothing in flight. Project 0's jobs come first, then the outsider's.
    pub fn init_state(&self) -> State {
        let c = &self.config;
        let jobs: Jobs = (0..c.all_jobs())
            .map(|j| Job {
                project: if j < c.jobs { 0 } else { 1 },
                slot: c.slot_of(j),
                state: JobState::Queued,
                fence: 0,
                current: None,
                attempts_left: c.attempts_per_job,
                cancel_requested: false,
                committed: None,
                completed_by: None,
            })
            .collect();
        let mut runners: Runners = (0..c.runners)
            .map(|_| Runner {
                project: 0,
                connected: true,
                holding: None,
                batch: 0,
                revoked: false,
            })
            .collect();
        if c.outsider {
            runners.push(Runner {
                project: 1,
                connected: true,
                holding: None,
                batch: 0,
                revoked: false,
            });
        }
        State {
            clock: self.time_slack(),
            jobs,
            attempts: Attempts::new(),
            runners,
            in_flight: Default::default(),
            targets: Targets::from_elem(Target::default(), c.slots() as usize),
            ledger: Ledger::default(),
            cache: Default::default(),
            epoch: 0,
            epoch_wait: 0,
            before: None,
            replica: 0,
            second_server: false,
            policy_recorded: false,
        }
    }

    // ----- replica clocks (docs/protocol.md §3.1) ----------------------------------------------

    /// The server's receipt time in `s`: the clock of the replica serving the next step
    /// (`clock + replica`; the clock itself with one replica clock).
    pub fn now(s: &State) -> u8 {
        (i16::from(s.clock) + i16::from(s.replica)).clamp(0, i16::from(u8::MAX)) as u8
    }

    /// How far past a lease's expiry the wait after an epoch change acts: `2 × replica_skew`
    /// (the variant `half-skew-margin`: `replica_skew`).
    pub fn skew_margin(&self) -> u8 {
        let k = self.config.replica_skew;
        if self.config.variant == Variant::HalfSkewMargin {
            k
        } else {
            k.saturating_mul(2)
        }
    }

    /// How far past a lease's expiry the expiry sweep acts: `2 × replica_skew`
    /// (`half-skew-margin` and `sweep-without-skew-margin`: `replica_skew`;
    /// `sweep-at-lease-expiry`: 0).
    pub fn sweep_margin(&self) -> u8 {
        match self.config.variant {
            Variant::SweepWithoutSkewMargin => self.config.replica_skew,
            Variant::SweepAtLeaseExpiry => 0,
            _ => self.skew_margin(),
        }
    }

    /// Where the time origin stands after each step: `clock` is this, and a time that has
    /// fallen below 0 is kept as 0. With replica clocks it leaves room for every replica's
    /// `now` (down to `clock - replica_skew`) to compare with a time past by up to the margin
    /// exactly: a time that reached 0 is at least `replica_skew + margin` in the past, expired
    /// and sweepable for every replica. 0 with one clock.
    pub fn time_slack(&self) -> u8 {
        self.config.replica_skew.saturating_mul(3)
    }

    /// The runner's own expiry of a lease granted or renewed in `s` (§2: `lease_ttl` after it
    /// sent the request, on the true clock; a request is answered at receipt).
    fn runner_expiry_now(&self, s: &State) -> u8 {
        s.clock.saturating_add(self.ttl(s))
    }

    /// The lease ttl of the server that serves requests in `s`: the second server's once it has
    /// started ([`Config::policy_ttl`]), else [`Config::lease_ttl`].
    pub fn ttl(&self, s: &State) -> u8 {
        if s.second_server {
            self.config.policy_ttl
        } else {
            self.config.lease_ttl
        }
    }

    /// The largest lease ttl the database's policy record holds in `s` (what the wait after a
    /// failover rests on).
    fn recorded_ttl(&self, s: &State) -> u8 {
        if s.policy_recorded {
            self.config.lease_ttl.max(self.config.policy_ttl)
        } else {
            self.config.lease_ttl
        }
    }

    /// Whether the runner of `a` stops executing at the end of its own lease (§2's duty): every
    /// runner, unless [`Config::duty_ignored`], where only a runner whose claim a failover lost
    /// does (no sweep or reconciliation of the server can reach an attempt it forgot).
    fn keeps_duty(&self, a: &Attempt) -> bool {
        !self.config.duty_ignored || a.lost
    }

    /// The project of `job` (project 0 for an id that names no job).
    pub fn project_of(s: &State, job: JobId) -> ProjectId {
        s.jobs.get(job as usize).map_or(0, |j| j.project)
    }

    // ----- the server's verdicts ---------------------------------------------------------------

    /// The verdict the server (R1–R7) or the target (R9) gives to `action` in `state`, or `None`
    /// for steps that get no verdict (runner-local steps, sends, `tick`). Pure: `state` is not
    /// changed. This is the function the conformance suite compares the implementation with.
    pub fn expected(&self, state: &State, action: &Action) -> Option<Expected> {
        match action {
            Action::Deliver { message } => Some(self.delivery_verdict(state, message)),
            Action::Replay {
                runner,
                message,
                forge,
            } => {
                Some(self.delivery_verdict(state, &Self::replayed(state, message, *runner, *forge)))
            }
            Action::Heartbeat {
                runner,
                runner_time,
                attempt,
            } => Self::message_of(
                state,
                *runner,
                *attempt,
                MessageKind::Heartbeat,
                *runner_time,
            )
            .map(|m| self.delivery_verdict(state, &m)),
            Action::SideEffect { runner, effect } => {
                Self::message(state, *runner, MessageKind::SideEffect(*effect), 0)
                    .map(|m| self.delivery_verdict(state, &m))
            }
            Action::Claim { runner } => Some(match state.runners.get(*runner as usize) {
                None => Expected::rejected(Reason::UnknownRunner),
                Some(r) if r.revoked => Expected::rejected(Reason::UnknownRunner),
                Some(_) if self.claimable_job(state, *runner).is_some() => Expected::ACCEPTED,
                Some(_) => Expected::rejected(Reason::NoQueuedJob),
            }),
            Action::ClaimBatch { runner, limit } => {
                Some(self.batch_claim_verdict(state, *runner, *limit))
            }
            Action::ExpirySweep => Some(if self.expired_leases(state).next().is_some() {
                Expected::UNCERTAIN
            } else {
                Expected::ACCEPTED
            }),
            Action::Cancel { job } => {
                Some(self.cancel_verdict(state, Self::project_of(state, *job), *job))
            }
            Action::Reconcile {
                job,
                finding,
                decision,
            } => Some(self.reconcile_verdict(
                state,
                Self::project_of(state, *job),
                *job,
                *finding,
                *decision,
            )),
            Action::OutsiderCancel { job } => {
                Some(self.cancel_verdict(state, 1 - Self::project_of(state, *job), *job))
            }
            Action::OutsiderReconcile {
                job,
                finding,
                decision,
            } => Some(self.reconcile_verdict(
                state,
                1 - Self::project_of(state, *job),
                *job,
                *finding,
                *decision,
            )),
            _ => None,
        }
    }

    /// The verdict of delivering `m`: the target's rule for a target mutation, the server's §6.1
    /// checks for everything else.
    pub fn delivery_verdict(&self, s: &State, m: &Message) -> Expected {
        match m.kind {
            MessageKind::TargetMutation => self.target_verdict(s, m),
            _ => self.server_verdict(s, m),
        }
    }

    /// What the target compares: the mutation's slot token (or, in a flawed design, the job fence).
    fn carried_token(&self, m: &Message) -> Token {
        if self.config.variant == Variant::SlotComparesJobFences {
            m.fence
        } else {
            m.token
        }
    }

    /// R9: the target's own rule (§8.4), for the slot the named job deploys to.
    fn target_verdict(&self, s: &State, m: &Message) -> Expected {
        let Some(slot) = s
            .jobs
            .get(m.job as usize)
            .and_then(|j| s.targets.get(j.slot as usize))
        else {
            return Expected::rejected(Reason::UnknownJob);
        };
        let variant = self.config.variant;
        match self.config.target {
            TargetKind::Fenced
                if variant != Variant::TargetIgnoresFence
                    && self.carried_token(m) < slot.highest_token =>
            {
                Expected::rejected(Reason::StaleFence)
            }
            TargetKind::Idempotent if variant == Variant::IdempotencyKeyPerAttempt => {
                if slot.attempts_applied & bit(m.attempt) != 0 {
                    Expected::ACKNOWLEDGED
                } else {
                    Expected::ACCEPTED
                }
            }
            TargetKind::Idempotent if slot.deployed & bit(m.job) != 0 => Expected::ACKNOWLEDGED,
            _ => Expected::ACCEPTED,
        }
    }

    /// The flawed completion checks of two variants: `Some(verdict)` when the variant decides.
    fn flawed_completion(&self, s: &State, m: &Message) -> Option<Expected> {
        let MessageKind::Result(_) = m.kind else {
            return None;
        };
        let job = s.jobs.get(m.job as usize)?;
        let current = s.attempts.get(job.current? as usize)?;
        let accepted = job.state.is_leased()
            && match self.config.variant {
                Variant::CompletionChecksRunnerOnly => current.runner == m.sender,
                Variant::CompletionChecksFenceOnly => m.fence == job.fence,
                _ => return None,
            };
        accepted.then_some(Expected::ACCEPTED)
    }

    /// §6.1 checks 1–5: who is speaking and which attempt they name. `Ok(attempt)` when the
    /// observation is attributable to the named attempt.
    fn identify(&self, s: &State, m: &Message) -> Result<AttemptId, Reason> {
        // A revoked runner's token authenticates nothing: the server knows no such runner.
        let runner = s
            .runners
            .get(m.sender as usize)
            .filter(|r| !r.revoked)
            .ok_or(Reason::UnknownRunner)?;
        let job = s.jobs.get(m.job as usize).ok_or(Reason::UnknownJob)?;
        if job.project != runner.project {
            return Err(Reason::WrongProject);
        }
        let a = self
            .server_attempt(s, m.attempt)
            .filter(|&a| s.attempts[a as usize].job == m.job)
            .ok_or(Reason::UnknownAttempt)?;
        if s.attempts[a as usize].runner != m.sender
            && self.config.variant != Variant::RunnerNotChecked
        {
            return Err(Reason::RunnerMismatch);
        }
        Ok(a)
    }

    /// The attempt the server finds when a message names the attempt id of the one recorded at
    /// `named`: the attempt its database knows by that id. An attempt whose claim a failover lost
    /// is one the database does not know (`None`), unless its id was issued again
    /// ([`Config::reissued_ids`]): then it is the attempt that now has that id.
    pub fn server_attempt(&self, s: &State, named: AttemptId) -> Option<AttemptId> {
        let attempt = s.attempts.get(named as usize)?;
        if !self.config.reissued_ids {
            return (!attempt.lost).then_some(named);
        }
        let name = s.attempt_name(named, true);
        (0..s.attempts.len() as AttemptId)
            .find(|&a| !s.attempts[a as usize].lost && s.attempt_name(a, true) == name)
    }

    /// §6.1 for `heartbeat`, `result` and `rejoin`, in precedence order.
    fn server_verdict(&self, s: &State, m: &Message) -> Expected {
        self.judge(s, m).0
    }

    /// [`LeaseModel::server_verdict`], and the attempt the message's record is attributed to.
    fn judge(&self, s: &State, m: &Message) -> (Expected, Option<AttemptId>) {
        let identified = self.identify(s, m);
        let verdict = match (self.flawed_completion(s, m), identified, m.kind) {
            (Some(flawed), _, _) => flawed,
            (None, Err(reason), _) => Expected::rejected(reason),
            (None, Ok(a), MessageKind::SideEffect(effect))
                if self.config.variant == Variant::SideEffectsCheckRunnerOnly =>
            {
                self.side_effect_verdict(s, m, effect, a)
            }
            (None, Ok(a), _) => self.standing(s, m, a),
        };
        (verdict, identified.ok())
    }

    /// §6.1 checks 6–13 for a message attributed to attempt `a`.
    fn standing(&self, s: &State, m: &Message, a: AttemptId) -> Expected {
        let variant = self.config.variant;
        let job = &s.jobs[m.job as usize];
        let attempt = &s.attempts[a as usize];
        if m.lease != attempt.lease && variant != Variant::LeaseNotChecked {
            return Expected::rejected(Reason::LeaseMismatch);
        }
        if m.fence != attempt.fence && variant != Variant::FenceNotChecked {
            return Expected::rejected(Reason::FenceMismatch);
        }
        if job.current != Some(a) {
            return Expected::rejected(Reason::NotCurrent);
        }
        if let (MessageKind::Result(outcome), Some(committed)) = (m.kind, attempt.state.outcome()) {
            let same_digest =
                attempt.digest.is_none_or(|d| d == m.digest) || variant == Variant::DigestIgnored;
            return if outcome == committed && same_digest {
                Expected::ACKNOWLEDGED
            } else if variant == Variant::ConflictOverwrites {
                Expected::ACCEPTED
            } else {
                Expected::rejected(Reason::ConflictingResult)
            };
        }
        if job.state.is_terminal() {
            return Expected::rejected(Reason::JobFinished);
        }
        let skip_expiry = match m.kind {
            MessageKind::Heartbeat => variant == Variant::HeartbeatExtendsExpired,
            MessageKind::Rejoin => variant == Variant::RejoinResurrectsLease,
            MessageKind::Result(_) => variant == Variant::ResultAfterExpiry,
            MessageKind::TargetMutation | MessageKind::SideEffect(_) => false,
        };
        let swept = attempt.state == AttemptState::Uncertain;
        let expired = Self::now(s) >= attempt.lease_expiry;
        if !skip_expiry && (swept || expired) {
            return Expected::rejected(Reason::LeaseExpired);
        }
        let allowed_while_cancelling = matches!(
            m.kind,
            MessageKind::Heartbeat | MessageKind::Rejoin | MessageKind::Result(Outcome::Cancelled)
        );
        if job.state == JobState::Cancelling && !allowed_while_cancelling {
            return Expected::rejected(Reason::CancelRequested);
        }
        if m.kind == MessageKind::Result(Outcome::Cancelled) && job.state != JobState::Cancelling {
            return Expected::rejected(Reason::CancelNotRequested);
        }
        if let MessageKind::SideEffect(effect) = m.kind {
            return self.side_effect_verdict(s, m, effect, a);
        }
        Expected::ACCEPTED
    }

    /// §6.3 `cancel`, by an operator of `project`.
    pub fn cancel_verdict(&self, s: &State, project: ProjectId, job: JobId) -> Expected {
        let Some(j) = s.jobs.get(job as usize) else {
            return Expected::rejected(Reason::UnknownJob);
        };
        if j.project != project {
            return Expected::rejected(Reason::WrongProject);
        }
        match j.state {
            st if st.is_terminal() => Expected::rejected(Reason::JobFinished),
            JobState::Uncertain => Expected::rejected(Reason::ReconcileRequired),
            JobState::Cancelling => Expected::ACKNOWLEDGED,
            _ => Expected::ACCEPTED,
        }
    }

    /// §6.3 `reconcile`, by an operator of `project`.
    pub fn reconcile_verdict(
        &self,
        s: &State,
        project: ProjectId,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Expected {
        let Some(j) = s.jobs.get(job as usize) else {
            return Expected::rejected(Reason::UnknownJob);
        };
        if j.project != project {
            return Expected::rejected(Reason::WrongProject);
        }
        if j.state != JobState::Uncertain {
            return Expected::rejected(Reason::NotUncertain);
        }
        let variant = self.config.variant;
        if finding == Finding::StillRunning && variant != Variant::StillRunningAllowsRetry {
            return Expected::rejected(Reason::ExecutionNotStopped);
        }
        let observed = matches!(finding, Finding::ObservedPassed | Finding::ObservedFailed);
        if decision == Decision::Adopt && !observed {
            return Expected::rejected(Reason::NothingToAdopt);
        }
        if decision == Decision::Retry && j.cancel_requested && variant != Variant::RetryAfterCancel
        {
            return Expected::rejected(Reason::CancelRequested);
        }
        Expected::ACCEPTED
    }

    /// Whether a claim by a runner of `project` finds `slot` free (§8.2): reserved by no job of
    /// any project.
    pub(crate) fn slot_free(&self, s: &State, project: ProjectId, slot: SlotId) -> bool {
        match s.targets[slot as usize].holder {
            None => true,
            Some(holder) => {
                self.config.variant == Variant::ReservationPerProject
                    && s.jobs[holder as usize].project != project
            }
        }
    }

    /// R1: the job a claim by `runner` takes, if any: the lowest-numbered `queued` job of the
    /// runner's project whose target slot is free (and which the model's bounds allow another
    /// attempt).
    pub fn claimable_job(&self, s: &State, runner: RunnerId) -> Option<JobId> {
        let r = s.runners.get(runner as usize).filter(|r| !r.revoked)?;
        // After a failover no job is claimed until every lease of the earlier epoch has expired.
        // (`epoch_wait` is 0 when there is no wait, and the receipt time is never below 0.)
        if Self::now(s) < s.epoch_wait && self.config.variant != Variant::FailoverWithoutWait {
            return None;
        }
        s.jobs
            .iter()
            .position(|j| {
                j.project == r.project
                    && j.state == JobState::Queued
                    && j.attempts_left > 0
                    && self.slot_free(s, r.project, j.slot)
            })
            .map(|j| j as JobId)
    }

    /// Jobs whose current attempt holds an expired but unswept lease.
    fn expired_leases<'a>(&self, s: &'a State) -> impl Iterator<Item = (JobId, AttemptId)> + 'a {
        let margin = u16::from(self.sweep_margin());
        s.jobs.iter().enumerate().filter_map(move |(j, job)| {
            let a = job.current?;
            let attempt = &s.attempts[a as usize];
            (job.state.is_leased()
                && attempt.state == AttemptState::Active
                && u16::from(Self::now(s)) >= u16::from(attempt.lease_expiry) + margin)
                .then_some((j as JobId, a))
        })
    }

    // ----- physical truth ----------------------------------------------------------------------

    /// The attempt `runner` holds, if it is executing it (of a batch, the earliest it took).
    pub fn executing(&self, s: &State, runner: RunnerId) -> Option<AttemptId> {
        let a = s.runners.get(runner as usize)?.holding?;
        (s.attempts[a as usize].execution == Execution::Executing).then_some(a)
    }

    /// Whether `runner` is executing any attempt its last claim gave it (a batch's included).
    pub fn executing_any(&self, s: &State, runner: RunnerId) -> bool {
        s.runners.get(runner as usize).is_some_and(|r| {
            r.held()
                .any(|(_, a)| s.attempts[a as usize].execution == Execution::Executing)
        })
    }

    /// The truthful finding about `attempt`: what its runner really did.
    pub fn truthful_finding(&self, s: &State, attempt: AttemptId) -> Finding {
        match s.attempts[attempt as usize].execution {
            Execution::Executing => Finding::StillRunning,
            Execution::Stopped | Execution::Finished(Outcome::Cancelled) => Finding::Stopped,
            Execution::Finished(Outcome::Passed) => Finding::ObservedPassed,
            Execution::Finished(Outcome::Failed) => Finding::ObservedFailed,
        }
    }

    /// The message of `kind` that `runner` sends about the attempt it holds (with runner time
    /// `skew`; target mutations carry none, and the attempt's slot token instead), if it holds
    /// one. A result carries digest 0 ([`LeaseModel::result_message`] for another).
    pub fn message(s: &State, runner: RunnerId, kind: MessageKind, skew: u8) -> Option<Message> {
        Self::message_of(s, runner, None, kind, skew)
    }

    /// [`LeaseModel::message`] about `attempt` of the runner's batch ([`Runner::batch`];
    /// `None`: the attempt it holds), if its last claim gave it that attempt.
    pub fn message_of(
        s: &State,
        runner: RunnerId,
        attempt: Option<AttemptId>,
        kind: MessageKind,
        skew: u8,
    ) -> Option<Message> {
        let r = s.runners.get(runner as usize)?;
        let a = match attempt {
            None => r.holding?,
            Some(a) => Some(a).filter(|&a| r.batch & bit(a) != 0)?,
        };
        let attempt = &s.attempts[a as usize];
        let mutation = kind == MessageKind::TargetMutation;
        Some(Message {
            kind,
            sender: runner,
            job: attempt.job,
            attempt: a,
            lease: attempt.lease,
            fence: attempt.fence,
            runner_time: if mutation { 0 } else { skew },
            digest: 0,
            token: if mutation { attempt.token } else { 0 },
        })
    }

    /// The result `runner` sends about `attempt` (`None`: the attempt it holds).
    pub fn result_message(
        s: &State,
        runner: RunnerId,
        attempt: Option<AttemptId>,
        outcome: Outcome,
        skew: u8,
        digest: Digest,
    ) -> Option<Message> {
        let m = Self::message_of(s, runner, attempt, MessageKind::Result(outcome), skew)?;
        Some(Message { digest, ..m })
    }

    /// Every message the server or the target could receive next: the messages in flight and
    /// the heartbeat each connected, executing runner could send now (and, when rejoins are
    /// answered at receipt, every rejoin that could be in flight: [`LeaseModel::rejoins_in_play`]).
    pub fn deliverable<'a>(&'a self, s: &'a State) -> impl Iterator<Item = Message> + 'a {
        // A connected runner's heartbeat: sent now while it executes, or, once its execution
        // has ended (by its duty, a crash or a result), one it sent before that and the network
        // delivers late.
        let heartbeats = (0..s.runners.len() as RunnerId).flat_map(move |runner| {
            let r = &s.runners[runner as usize];
            r.held()
                .filter(|_| r.connected)
                .filter_map(move |(attempt, _)| {
                    Self::message_of(s, runner, attempt, MessageKind::Heartbeat, 0)
                })
        });
        s.in_flight
            .iter()
            .copied()
            .chain(heartbeats)
            .chain(self.rejoins_in_play(s))
    }

    /// Every message the server could receive next, genuine or forged. Genuine: each deliverable
    /// message (see [`LeaseModel::deliverable`]), and each result in flight again with another
    /// digest (digests are opaque, so one other digest stands for every other). Forged: for each
    /// distinct tuple a genuine message carries, a heartbeat and a result naming it, sent by every
    /// other runner (of either project) and by an unknown runner, with a forged lease id, with a
    /// forged fence, naming every other attempt's tuple (another runner's, another job's, a
    /// superseded one), an unknown attempt or an unknown job; and a `result` of `cancelled` and a
    /// `rejoin` with each heartbeat's tuple. The properties check the verdict, record and effect
    /// of every probe in every state, so every forgery is checked in every configuration without
    /// adding a state.
    pub fn probes(&self, s: &State) -> Vec<Message> {
        let mut out: Vec<Message> = Vec::with_capacity(64);
        let mut tuples: Vec<Message> = Vec::with_capacity(8);
        for m in self.deliverable(s) {
            out.push(m);
            match m.kind {
                MessageKind::TargetMutation => continue,
                MessageKind::Result(_) => out.push(Message {
                    digest: m.digest ^ 1,
                    ..m
                }),
                MessageKind::Heartbeat => {
                    for kind in [MessageKind::Result(Outcome::Cancelled), MessageKind::Rejoin] {
                        out.push(Message { kind, ..m });
                    }
                }
                MessageKind::Rejoin | MessageKind::SideEffect(_) => {}
            }
            let tuple = Message {
                kind: MessageKind::Heartbeat,
                runner_time: 0,
                digest: 0,
                ..m
            };
            if !tuples.contains(&tuple) {
                tuples.push(tuple);
            }
        }
        // R8: every side effect under each tuple, from its own sender.
        if self.config.side_effects {
            for m in &tuples {
                for effect in crate::side_effects::SideEffect::ALL {
                    out.push(Message {
                        kind: MessageKind::SideEffect(effect),
                        ..*m
                    });
                }
            }
        }
        let runners = s.runners.len() as RunnerId;
        for m in tuples {
            let first = out.len();
            for sender in (0..=runners).filter(|&r| r != m.sender) {
                out.push(Message { sender, ..m });
            }
            out.push(Message {
                lease: FORGED_LEASE,
                ..m
            });
            out.push(Message {
                fence: FORGED_FENCE,
                ..m
            });
            for (a, attempt) in s.attempts.iter().enumerate() {
                if a as AttemptId != m.attempt {
                    out.push(Message {
                        job: attempt.job,
                        attempt: a as AttemptId,
                        lease: attempt.lease,
                        fence: attempt.fence,
                        ..m
                    });
                }
            }
            out.push(Message {
                attempt: s.attempts.len() as AttemptId,
                ..m
            });
            out.push(Message {
                job: s.jobs.len() as JobId,
                ..m
            });
            for i in first..out.len() {
                for outcome in [Outcome::Passed, Outcome::Failed] {
                    out.push(Message {
                        kind: MessageKind::Result(outcome),
                        ..out[i]
                    });
                }
                if self.config.side_effects {
                    for effect in crate::side_effects::SideEffect::EACH_KIND {
                        out.push(Message {
                            kind: MessageKind::SideEffect(effect),
                            ..out[i]
                        });
                    }
                }
            }
        }
        out
    }

    /// The copy of `m` that `runner` sends in a [`Action::Replay`]: delivered at once, never put in
    /// flight.
    pub fn replayed(s: &State, m: &Message, runner: RunnerId, forge: Forge) -> Message {
        let mut copy = Message {
            sender: runner,
            ..*m
        };
        match forge {
            Forge::AsIs => {}
            Forge::WrongLease => copy.lease = FORGED_LEASE,
            Forge::WrongFence => copy.fence = FORGED_FENCE,
            Forge::OtherAttempt { attempt } => {
                if let Some(other) = s.attempts.get(attempt as usize) {
                    copy.job = other.job;
                    copy.attempt = attempt;
                    copy.lease = other.lease;
                    copy.fence = other.fence;
                }
            }
        }
        copy
    }

    // ----- effects -----------------------------------------------------------------------------

    /// Whether `m`'s sender is a runner an operator revoked ([`Config::revocation`]): the server
    /// refuses it `unknown_runner` and records it nowhere (docs/protocol.md §7, "A message from
    /// no runner is recorded nowhere").
    pub fn revoked_sender(s: &State, m: &Message) -> bool {
        m.kind != MessageKind::TargetMutation
            && s.runners.get(m.sender as usize).is_some_and(|r| r.revoked)
    }

    /// The observation a correct server records when `m` is delivered in `s` (§7 notes):
    /// attributed to the named attempt when checks 1–5 pass, unattributed otherwise. Target
    /// mutations are recorded by the target, unattributed. (What this model's server, possibly a
    /// flawed variant, records is [`LeaseModel::record`].)
    pub fn observation(&self, s: &State, m: &Message) -> Observation {
        let (verdict, attempt) = match m.kind {
            MessageKind::TargetMutation => (self.target_verdict(s, m), None),
            _ => self.judge(s, m),
        };
        Observation {
            attempt,
            sender: m.sender,
            kind: m.kind,
            job: m.job,
            named_attempt: m.attempt,
            verdict: verdict.verdict,
            reason: verdict.reason,
            result: match m.kind {
                MessageKind::Result(o) => Some((o, m.digest)),
                _ => None,
            },
        }
    }

    /// The record this model's server writes into its ledger when it receives `m` in `s`, or
    /// `None` when it writes none. The protocol records every runner message it receives
    /// ([`LeaseModel::observation`]); two flawed variants drop some.
    pub fn record(&self, s: &State, m: &Message) -> Option<Observation> {
        if Self::revoked_sender(s, m) {
            // A message from no runner is recorded nowhere (§7).
            return None;
        }
        let o = self.observation(s, m);
        let dropped = matches!(
            (self.config.variant, m.kind, o.reason),
            (
                Variant::LateReportDropped,
                MessageKind::Result(_),
                Some(Reason::NotCurrent | Reason::LeaseExpired),
            ) | (
                Variant::ConflictNotRecorded,
                _,
                Some(Reason::ConflictingResult)
            )
        );
        let mut o = o;
        if self.config.variant == Variant::RecordByNamedAttempt {
            // Attributed by the tuple it names, whoever sent it.
            o.attempt = s
                .attempts
                .get(m.attempt as usize)
                .filter(|a| a.job == m.job && m.kind != MessageKind::TargetMutation)
                .map(|_| m.attempt);
        }
        (!dropped).then_some(o)
    }

    /// With [`Config::ledger`]: the server receives `m` (a heartbeat, result or rejoin; target
    /// mutations go to the target) in `last` and writes its record into the ledger of `s`.
    fn receive(&self, last: &State, s: &mut State, m: &Message) {
        // A revoked runner's message is from no runner: recorded nowhere (§7).
        if self.config.ledger > 0
            && m.kind != MessageKind::TargetMutation
            && !Self::revoked_sender(last, m)
        {
            s.ledger.insert(self.entry(last, m));
        }
    }

    /// The ledger entry of receiving `m` in `s`: the message, the record this model's server
    /// writes, and the ground truth the properties compare the record with.
    fn entry(&self, s: &State, m: &Message) -> LedgerEntry {
        LedgerEntry {
            received: *m,
            record: self.record(s, m),
            sent_by: properties::true_attribution(s, m),
            late_or_conflicting: properties::late_or_conflicting(s, m),
        }
    }

    /// Applies the effect of delivering `m` in `s` (the verdict decides; a rejected message
    /// changes nothing but the record, which the model does not keep: see [`LeaseModel::record`]).
    pub fn deliver(&self, s: &mut State, m: &Message) {
        let verdict = self.delivery_verdict(s, m);
        if verdict.verdict != Verdict::Accepted {
            return;
        }
        let variant = self.config.variant;
        match m.kind {
            MessageKind::TargetMutation => {
                let kind = self.config.target;
                let carried = self.carried_token(m);
                // Ground truth: when the sender's reservation was really issued (not its token,
                // which a flawed design may issue twice).
                let issued = s.attempts.get(m.attempt as usize).map_or(0, |a| a.issued);
                let Some(job) = s.jobs.get(m.job as usize) else {
                    return;
                };
                let slot = &mut s.targets[job.slot as usize];
                // A fenced target's rule does not depend on how often it applied: count to 1.
                let cap = if kind == TargetKind::Fenced { 1 } else { 2 };
                slot.applied = (slot.applied + 1).min(cap);
                match kind {
                    TargetKind::Fenced | TargetKind::Unfenced => {
                        if kind == TargetKind::Fenced {
                            slot.highest_token = slot.highest_token.max(carried);
                        }
                        slot.last_applied = issued;
                        slot.highest_applied = slot.highest_applied.max(issued);
                    }
                    TargetKind::Idempotent => {
                        if slot.deployed & bit(m.job) != 0 {
                            slot.applied_twice = true;
                        }
                        slot.deployed |= bit(m.job);
                        if variant == Variant::IdempotencyKeyPerAttempt {
                            slot.attempts_applied |= bit(m.attempt);
                        }
                    }
                }
            }
            MessageKind::Heartbeat => {
                let now = Self::now(s);
                let expiry = if variant == Variant::RunnerClockExtendsLease {
                    m.runner_time.saturating_add(self.ttl(s))
                } else if variant == Variant::HeartbeatShortensLease {
                    now + self.ttl(s) / 2
                } else {
                    now + self.ttl(s)
                };
                let runner_expiry = self.runner_expiry_now(s);
                // The attempt the server found by the id the heartbeat names.
                let Ok(a) = self.identify(s, m) else { return };
                let attempt = &mut s.attempts[a as usize];
                attempt.lease_expiry = expiry;
                attempt.runner_expiry = runner_expiry;
            }
            MessageKind::Rejoin => {
                if variant == Variant::RejoinResurrectsLease {
                    if let Ok(a) = self.identify(s, m) {
                        s.attempts[a as usize].lease_expiry = Self::now(s) + self.ttl(s);
                    }
                }
            }
            MessageKind::SideEffect(effect) => self.apply_side_effect(s, m, effect),
            MessageKind::Result(outcome) => {
                let job = &mut s.jobs[m.job as usize];
                // The protocol completes the named attempt (it is the current one); the flawed
                // completion variants complete whatever attempt is current.
                let Some(a) = job.current else { return };
                job.state = outcome.job_state();
                job.completed_by = Some((m.attempt, m.sender));
                job.committed.get_or_insert(job.state);
                let slot = job.slot;
                let attempt = &mut s.attempts[a as usize];
                attempt.state = outcome.attempt_state();
                attempt.digest = Some(m.digest);
                release(s, m.job, slot);
            }
        }
    }

    pub(crate) fn claim(&self, s: &mut State, runner: RunnerId, job: JobId) {
        let a = s.attempts.len() as AttemptId;
        // Lease ids are fresh, or with reissued ids issued with the attempt id from the server's
        // counter (a failover rolls both back).
        let lease = s.attempt_name(a, self.config.reissued_ids) + 1;
        let (now, runner_expiry) = (Self::now(s), self.runner_expiry_now(s));
        let variant = self.config.variant;
        // Fences and slot tokens carry the epoch: a claim issues at least the epoch's first one.
        let floor = if variant == Variant::FailoverWithoutEpoch {
            1
        } else {
            s.epoch * EPOCH_BASE + 1
        };
        let j = &mut s.jobs[job as usize];
        j.fence = if variant == Variant::FenceReused {
            1
        } else {
            (j.fence + 1).max(floor)
        };
        j.attempts_left = j.attempts_left.saturating_sub(1);
        j.current = Some(a);
        j.state = JobState::Running;
        let (fence, slot) = (j.fence, j.slot);
        let target = &mut s.targets[slot as usize];
        target.tokens = if variant == Variant::SlotTokenResets {
            1
        } else {
            (target.tokens + 1).max(floor)
        };
        target.holder = Some(job);
        target.reservations += 1;
        let (token, issued) = (target.tokens, target.reservations);
        s.attempts.push(Attempt {
            job,
            runner,
            lease,
            fence,
            lease_expiry: now + self.ttl(s),
            state: AttemptState::Active,
            token,
            digest: None,
            execution: Execution::Executing,
            expired: false,
            log: 0,
            artifact: 0,
            lost: false,
            issued,
            runner_expiry,
        });
        let r = &mut s.runners[runner as usize];
        r.holding = Some(a);
        r.batch = 0;
    }

    fn sweep(&self, s: &mut State) {
        let expired: Vec<_> = self.expired_leases(s).collect();
        for (j, a) in expired {
            let variant = self.config.variant;
            let job = &mut s.jobs[j as usize];
            let slot = job.slot;
            let attempt = &mut s.attempts[a as usize];
            match variant {
                Variant::RequeueOnExpiry => {
                    job.state = JobState::Queued;
                    job.current = None;
                    attempt.state = AttemptState::Uncertain;
                }
                Variant::AutoRetryUnfenced => {
                    job.state = JobState::Queued;
                    job.current = None;
                    attempt.state = AttemptState::Stopped;
                }
                _ => {
                    job.state = JobState::Uncertain;
                    attempt.state = AttemptState::Uncertain;
                }
            }
            if matches!(
                variant,
                Variant::RequeueOnExpiry
                    | Variant::AutoRetryUnfenced
                    | Variant::UncertainReleasesSlot
            ) {
                release(s, j, slot);
            }
        }
    }

    fn reconcile(&self, s: &mut State, job: JobId, finding: Finding, decision: Decision) {
        let j = &mut s.jobs[job as usize];
        let Some(a) = j.current else { return };
        let slot = j.slot;
        let attempt = &mut s.attempts[a as usize];
        match decision {
            Decision::Retry => {
                attempt.state = AttemptState::Stopped;
                j.current = None;
                j.state = JobState::Queued;
            }
            Decision::Abort => {
                attempt.state = AttemptState::Stopped;
                j.current = None;
                j.state = if j.cancel_requested {
                    JobState::Cancelled
                } else {
                    JobState::Aborted
                };
                j.committed.get_or_insert(j.state);
            }
            Decision::Adopt => {
                let outcome = if finding == Finding::ObservedPassed {
                    Outcome::Passed
                } else {
                    Outcome::Failed
                };
                attempt.state = outcome.attempt_state();
                j.state = outcome.job_state();
                j.committed.get_or_insert(j.state);
            }
        }
        if !(decision == Decision::Retry && self.config.variant == Variant::RetryKeepsSlot) {
            release(s, job, slot);
        }
    }
}

impl LeaseModel {
    /// What the server's database holds in `s` (what a failover can roll back): every job, the
    /// changeable part of every attempt it knows, each slot's reservation and token counter.
    pub fn server(s: &State) -> Server {
        Server {
            jobs: s.jobs.clone(),
            attempts: s
                .attempts
                .iter()
                .filter(|a| !a.lost)
                .map(|a| ServerAttempt {
                    lease_expiry: a.lease_expiry,
                    state: a.state,
                    digest: a.digest,
                })
                .collect(),
            slots: s.targets.iter().map(|t| (t.holder, t.tokens)).collect(),
            policy_recorded: s.policy_recorded,
        }
    }

    /// The failover: the server's state goes back to [`State::before`] (its last committed
    /// transition is lost); an attempt claimed in it is `lost` (its runner keeps executing and
    /// holding it); runners, messages in flight and the targets' own state are kept. The epoch
    /// rises, and claims wait `lease_ttl` (until every lease of the earlier epoch has expired).
    fn failover(&self, s: &mut State) -> Option<()> {
        let before = *s.before.take()?;
        let known = s.attempts.iter().filter(|a| !a.lost).count();
        s.jobs = before.jobs;
        // `before` knows the attempts an earlier failover did not lose, in claim order.
        let mut was_known = before.attempts.iter();
        for a in s.attempts.iter_mut().filter(|a| !a.lost) {
            match was_known.next() {
                Some(was) => {
                    a.lease_expiry = was.lease_expiry;
                    a.state = was.state;
                    a.digest = was.digest;
                    let k = self.config.replica_skew;
                    if k > 0 {
                        // With replica clocks a forgotten heartbeat may have shortened the lease
                        // (docs/protocol.md §3.1): the restored grant is expired only if it is.
                        a.expired = u16::from(s.clock) >= u16::from(a.lease_expiry) + u16::from(k);
                    }
                }
                None => a.lost = true,
            }
        }
        debug_assert!(before.attempts.len() + 1 >= known, "one transition is lost");
        for (t, (holder, tokens)) in s.targets.iter_mut().zip(before.slots) {
            t.holder = holder;
            t.tokens = tokens;
        }
        s.policy_recorded = before.policy_recorded;
        // Before its gate opens every live server records its lease policy on the new primary
        // again (server/src/app/database.rs): the record the failover lost is restored.
        if s.second_server && self.config.variant != Variant::FailoverForgetsPolicy {
            s.policy_recorded = true;
        }
        s.epoch += 1;
        s.epoch_wait = if self.config.variant == Variant::FailoverWithoutWait {
            0
        } else {
            // Claims wait until `began_at + lease_ttl + 2 × replica_skew` (§2 "Epochs", §3.1),
            // with the largest ttl the lease policy records. The specification's `began_at` is
            // the first claim of the new epoch, which takes nothing; the model takes the failover
            // itself, the earliest that claim can come: its wait is never the longer one, so
            // what holds here holds with the specification's (docs/model.md "Failover").
            Self::now(s) + self.recorded_ttl(s) + self.skew_margin()
        };
        Some(())
    }
}

/// A one-bit set of the small id `id` (ids beyond 7 are not tracked).
pub(crate) fn bit(id: u8) -> u8 {
    1u8.checked_shl(id as u32).unwrap_or(0)
}

/// Releases `slot` if `job` holds it.
fn release(s: &mut State, job: JobId, slot: SlotId) {
    let target = &mut s.targets[slot as usize];
    if target.holder == Some(job) {
        target.holder = None;
    }
}

impl LeaseModel {
    /// A message the network may as well lose: its sender has moved on to another claim (so it
    /// will never send it again), and its verdict can never change and changes nothing. That is
    /// a result, heartbeat or rejoin naming an attempt that is no longer its job's current
    /// attempt (`not_current` from then on: a current attempt is never current again) or of a
    /// terminal job (`acknowledged` or rejected, and a terminal job never changes); and a target
    /// mutation the target refuses or acknowledges for good (a fenced target's stale token: its
    /// highest token only grows; an idempotent target's repeat). Once a message is forgotten in
    /// a state it is forgotten in every later one. Only for the protocol: a flawed variant may
    /// accept such a message later.
    fn forgotten(&self, s: &State, m: &Message) -> bool {
        // A failover can make a superseded attempt current again.
        if self.config.variant != Variant::None || self.config.failover {
            return false;
        }
        let held = s
            .runners
            .get(m.sender as usize)
            .is_some_and(|r| r.holds(m.attempt));
        let Some(job) = s.jobs.get(m.job as usize) else {
            return false;
        };
        let slot = &s.targets[job.slot as usize];
        !held
            && match m.kind {
                MessageKind::TargetMutation => match self.config.target {
                    TargetKind::Fenced => m.token < slot.highest_token,
                    TargetKind::Idempotent => slot.deployed & bit(m.job) != 0,
                    TargetKind::Unfenced => false,
                },
                _ => job.state.is_terminal() || job.current != Some(m.attempt),
            }
    }

    /// The result `runner`, having finished its attempt with `first`, may still send: the other
    /// of passed/failed (a conflicting result). The same outcome with another digest is a probe
    /// ([`LeaseModel::probes`]): digests are opaque, so which of two digests was committed is a
    /// symmetry, and its verdict and record are checked in every state without a state of its own.
    fn conflicting_results(first: Outcome) -> [(Outcome, Digest); 1] {
        let other = if first == Outcome::Passed {
            Outcome::Failed
        } else {
            Outcome::Passed
        };
        [(other, 0)]
    }

    fn push_results(
        &self,
        s: &State,
        runner: RunnerId,
        attempt: Option<AttemptId>,
        results: &[(Outcome, Digest)],
        actions: &mut Vec<Action>,
    ) {
        for &(outcome, digest) in results {
            for skew in 0..=self.config.max_skew {
                let already = Self::result_message(s, runner, attempt, outcome, skew, digest)
                    .is_some_and(|m| s.in_flight.contains(&m));
                if !already {
                    actions.push(Action::Result {
                        runner,
                        outcome,
                        runner_time: skew,
                        digest,
                        attempt,
                    });
                }
            }
        }
    }

    /// The steps of `runner` about attempt `a` its last claim gave it (`attempt`: how a step
    /// names it): while it executes, its heartbeats, results, target mutation and stop; once its
    /// execution has ended, a heartbeat delivered late (the second, conflicting result is
    /// [`LeaseModel::conflict_actions`]).
    fn lease_actions(
        &self,
        s: &State,
        runner: RunnerId,
        (attempt, a): (Option<AttemptId>, AttemptId),
        actions: &mut Vec<Action>,
    ) {
        let r = &s.runners[runner as usize];
        let skews = 0..=self.config.max_skew;
        let heartbeats = |actions: &mut Vec<Action>| {
            if r.connected {
                for runner_time in skews.clone() {
                    actions.push(Action::Heartbeat {
                        runner,
                        runner_time,
                        attempt,
                    });
                }
            }
        };
        match s.attempts[a as usize].execution {
            Execution::Executing => {
                heartbeats(actions);
                if r.connected {
                    // A runner reports `cancelled` only once it can have learned of the
                    // cancellation (the job is `cancelling`; answers are not modelled).
                    let cancelling =
                        s.jobs[s.attempts[a as usize].job as usize].state == JobState::Cancelling;
                    let outcomes: &[(Outcome, Digest)] = if cancelling {
                        &[
                            (Outcome::Passed, 0),
                            (Outcome::Failed, 0),
                            (Outcome::Cancelled, 0),
                        ]
                    } else {
                        &[(Outcome::Passed, 0), (Outcome::Failed, 0)]
                    };
                    self.push_results(s, runner, attempt, outcomes, actions);
                }
                if r.connected && self.config.side_effects && attempt.is_none() {
                    self.side_effect_actions(s, runner, actions);
                }
                let mutation = Self::message_of(s, runner, attempt, MessageKind::TargetMutation, 0);
                if mutation.is_some_and(|m| !s.in_flight.contains(&m)) {
                    actions.push(Action::TargetMutation { runner, attempt });
                }
                actions.push(Action::StopExecuting { runner, attempt });
            }
            // A heartbeat it sent while it still executed, delivered late (after the end of its
            // lease by its own reckoning, a crash, or its result): a request answered at
            // receipt, like any heartbeat.
            _ => heartbeats(actions),
        }
    }

    /// A second, conflicting result `runner` may send about attempt `a` after it reported its
    /// outcome.
    fn conflict_actions(
        &self,
        s: &State,
        runner: RunnerId,
        (attempt, a): (Option<AttemptId>, AttemptId),
        actions: &mut Vec<Action>,
    ) {
        if let Execution::Finished(first @ (Outcome::Passed | Outcome::Failed)) =
            s.attempts[a as usize].execution
        {
            if s.runners[runner as usize].connected {
                let results = Self::conflicting_results(first);
                self.push_results(s, runner, attempt, &results, actions);
            }
        }
    }

    /// With [`Config::revocation`]: an operator revokes a runner of project 0 that holds an
    /// active lease (mid-lease); a revoked runner that is not executing tries a claim while
    /// the project has a queued job (refused `unknown_runner`, a step that changes nothing).
    fn revocation_actions(
        &self,
        s: &State,
        runner: RunnerId,
        executing: bool,
        actions: &mut Vec<Action>,
    ) {
        let r = &s.runners[runner as usize];
        if r.project != 0 {
            return;
        }
        if r.revoked {
            let queued = s
                .jobs
                .iter()
                .any(|j| j.project == r.project && j.state == JobState::Queued);
            if !executing && r.connected && queued {
                actions.push(Action::Claim { runner });
            }
        } else if r
            .held()
            .any(|(_, a)| s.attempts[a as usize].state == AttemptState::Active)
        {
            actions.push(Action::RunnerRevoke { runner });
        }
    }

    fn all_actions(&self, s: &State, actions: &mut Vec<Action>) {
        let c = &self.config;
        let skews = 0..=c.max_skew;
        let runners = s.runners.len() as RunnerId;
        for runner in 0..runners {
            let r = &s.runners[runner as usize];
            for held in r.held() {
                self.lease_actions(s, runner, held, actions);
            }
            let executing = self.executing_any(s, runner);
            if !executing && r.connected && self.claimable_job(s, runner).is_some() {
                actions.push(Action::Claim { runner });
                self.batch_claim_actions(s, runner, actions);
            }
            if c.revocation {
                self.revocation_actions(s, runner, executing, actions);
            }
            for held in r.held() {
                self.conflict_actions(s, runner, held, actions);
            }
            if c.disconnects && r.connected && executing {
                actions.push(Action::Disconnect { runner });
            }
            if !r.connected {
                for skew in skews.clone() {
                    actions.push(Action::Rejoin {
                        runner,
                        runner_time: skew,
                    });
                }
            }
        }
        // Replays are forged messages, which the properties check as probes in every state
        // (`probes`): a replay the server accepts breaks an invariant in the state it is sent
        // from. So an exhaustive check (`skip_no_ops`) leaves them out; conformance keeps them.
        let replays = !self.skip_no_ops;
        // With the ledger, the outsider's copies are received and recorded: they are steps.
        let outsider_replays = self.outsider().filter(|_| c.ledger > 0);
        let results = s.in_flight.iter().filter(|m| {
            (replays || outsider_replays.is_some()) && matches!(m.kind, MessageKind::Result(_))
        });
        // Another runner (of either project) replays a result in flight under its own identity.
        for m in results {
            let senders =
                (0..runners).filter(|&r| r != m.sender && (replays || Some(r) == outsider_replays));
            for runner in senders {
                actions.push(Action::Replay {
                    runner,
                    message: *m,
                    forge: Forge::AsIs,
                });
            }
        }
        if c.forgery && replays {
            // A runner re-sends one of its messages in flight, or the heartbeat it could send
            // now, with a forged lease id or fence, or naming another attempt's tuple.
            let messages: Vec<Message> = self
                .deliverable(s)
                .filter(|m| m.kind != MessageKind::TargetMutation)
                .collect();
            for m in messages {
                let mut forges = vec![Forge::WrongLease, Forge::WrongFence];
                // Another attempt's tuple: another runner's, or the sender's own superseded one
                // (its own current tuple would be no forgery).
                let own_current = |a: AttemptId| {
                    let attempt = &s.attempts[a as usize];
                    attempt.runner == m.sender && s.jobs[attempt.job as usize].current == Some(a)
                };
                forges.extend(
                    (0..s.attempts.len() as AttemptId)
                        .filter(|&a| a != m.attempt && !own_current(a))
                        .map(|attempt| Forge::OtherAttempt { attempt }),
                );
                for forge in forges {
                    actions.push(Action::Replay {
                        runner: m.sender,
                        message: m,
                        forge,
                    });
                }
            }
        }
        for m in &s.in_flight {
            actions.push(Action::Deliver { message: *m });
        }
        // Time passes only while it can expire a lease: while some `active` attempt's lease
        // is still valid.
        // After a failover, also while claims wait for the earlier epoch's leases to expire.
        // With replica clocks, until the slowest replica's clock has passed the wait, the
        // sweep's margin, and every lost execution's own deadline.
        // And while some runner that keeps its duty has not reached its own lease's end.
        let k = u16::from(c.replica_skew);
        let late = k + u16::from(self.skew_margin().max(self.sweep_margin()));
        let clock = u16::from(s.clock);
        if u16::from(s.epoch_wait) + k > clock
            || s.attempts.iter().any(|a| {
                (a.state == AttemptState::Active && clock < u16::from(a.lease_expiry) + late)
                    || (a.execution == Execution::Executing
                        && self.keeps_duty(a)
                        && clock < u16::from(a.runner_expiry))
            })
        {
            actions.push(Action::Tick);
        }
        // The environment chooses which replica's clock judges the next server steps.
        for offset in -(c.replica_skew as i8)..=(c.replica_skew as i8) {
            if offset != s.replica {
                actions.push(Action::ReplicaClock { offset });
            }
        }
        if c.failover && s.before.is_some() {
            actions.push(Action::Failover);
        }
        if c.policy_ttl > 0 && !s.second_server {
            actions.push(Action::ServerStarts);
        }
        if self.expired_leases(s).next().is_some() {
            actions.push(Action::ExpirySweep);
        }
        let outsider = self.outsider().is_some();
        for (j, job) in s.jobs.iter().enumerate() {
            let j = j as JobId;
            // The other project's operator tries what the job's own operator may do
            // (`wrong_project`).
            if matches!(job.state, JobState::Queued | JobState::Running) {
                actions.push(Action::Cancel { job: j });
                if outsider {
                    actions.push(Action::OutsiderCancel { job: j });
                }
            }
            if job.state == JobState::Uncertain {
                let Some(a) = job.current else { continue };
                let truthful = self.truthful_finding(s, a);
                if outsider {
                    actions.push(Action::OutsiderReconcile {
                        job: j,
                        finding: truthful,
                        decision: Decision::Abort,
                    });
                }
                let mut findings = vec![truthful];
                // The job is `uncertain`: swept, so its lease has certainly ended (§3.1), and a
                // runner that keeps §2's duty has stopped: the operator may record `stopped` on
                // that basis without observing the execution. Offered where the truthful finding
                // differs (where it agrees, it is the truthful one): in the protocol, only if
                // the sweep came too early. Where runners may break the duty
                // (`Config::duty_ignored`) nothing rests on it, and only the flawed
                // `untruthful-finding` records `stopped` all the same.
                let on_duty =
                    !self.config.duty_ignored || self.config.variant == Variant::UntruthfulFinding;
                if on_duty && truthful == Finding::StillRunning {
                    findings.push(Finding::Stopped);
                }
                let retry_left = job.attempts_left > 0;
                for finding in findings {
                    for decision in [Decision::Retry, Decision::Abort, Decision::Adopt] {
                        let offered = decision != Decision::Retry || retry_left;
                        let accepted = self.reconcile_verdict(s, job.project, j, finding, decision)
                            == Expected::ACCEPTED;
                        if offered && accepted {
                            actions.push(Action::Reconcile {
                                job: j,
                                finding,
                                decision,
                            });
                        }
                    }
                }
            }
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init_state()]
    }

    /// Only enabled actions, in a fixed order: runner steps by runner, replays, deliveries,
    /// server-internal steps, operator steps by job.
    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.all_actions(s, actions);
        if self.config.ledger > 0 && s.ledger.len() >= self.config.ledger as usize {
            // The ledger is full: the exploration ends here (the bound of `Config::ledger`).
            if !actions.is_empty() {
                let key = ahash::RandomState::with_seeds(5, 6, 7, 8).hash_one(s);
                self.probe_memo
                    .0
                    .ledger_cut
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key);
            }
            actions.clear();
        }
        if self.skip_no_ops {
            // With the ledger a delivery, heartbeat or replay the server rejects still adds its
            // record: it is a step (a target's refusal is not recorded).
            let ledger = self.config.ledger > 0;
            actions.retain(|a| match a {
                Action::Heartbeat { .. } | Action::Replay { .. } | Action::SideEffect { .. }
                    if ledger =>
                {
                    true
                }
                Action::Deliver { message }
                    if ledger && message.kind != MessageKind::TargetMutation =>
                {
                    true
                }
                Action::Deliver { .. }
                | Action::Replay { .. }
                | Action::Heartbeat { .. }
                | Action::SideEffect { .. }
                | Action::Claim { .. }
                | Action::Cancel { .. }
                | Action::OutsiderCancel { .. }
                | Action::OutsiderReconcile { .. } => self
                    .expected(s, a)
                    .is_some_and(|e| e.verdict == Verdict::Accepted),
                _ => true,
            });
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let send = |s: &mut State, runner, attempt, kind, skew| -> Option<()> {
            let m = Self::message_of(s, runner, attempt, kind, skew)?;
            s.in_flight.insert(m);
            Some(())
        };
        match action {
            // A revoked runner's claim is refused and changes nothing.
            Action::Claim { runner } if s.runners.get(runner as usize)?.revoked => {}
            Action::Claim { runner } => {
                let job = self.claimable_job(&s, runner)?;
                self.claim(&mut s, runner, job);
            }
            Action::RunnerRevoke { runner } => {
                let r = s.runners.get_mut(runner as usize)?;
                if r.revoked {
                    return None;
                }
                r.revoked = true;
            }
            Action::ClaimBatch { runner, limit } => self.claim_batch(&mut s, runner, limit)?,
            // A heartbeat is a request the server answers at receipt: its verdict depends only on
            // the server's time then, so a heartbeat delayed in the network is one sent later,
            // and the model has no heartbeats in flight.
            Action::Heartbeat {
                runner,
                runner_time: skew,
                attempt,
            } => {
                let m = Self::message_of(&s, runner, attempt, MessageKind::Heartbeat, skew)?;
                self.receive(last, &mut s, &m);
                self.deliver(&mut s, &m);
            }
            // A side effect is a request the server answers at receipt, as a heartbeat is.
            Action::SideEffect { runner, effect } => {
                let m = Self::message(&s, runner, MessageKind::SideEffect(effect), 0)?;
                self.receive(last, &mut s, &m);
                self.deliver(&mut s, &m);
            }
            Action::Result {
                runner,
                outcome,
                runner_time: skew,
                digest,
                attempt,
            } => {
                let m = Self::result_message(&s, runner, attempt, outcome, skew, digest)?;
                let attempt = &mut s.attempts[m.attempt as usize];
                if attempt.execution == Execution::Executing {
                    attempt.execution = Execution::Finished(outcome);
                }
                s.in_flight.insert(m);
            }
            Action::TargetMutation { runner, attempt } => {
                send(&mut s, runner, attempt, MessageKind::TargetMutation, 0)?;
            }
            Action::StopExecuting { runner, attempt } => {
                let a = Self::message_of(&s, runner, attempt, MessageKind::Heartbeat, 0)?.attempt;
                let attempt = &mut s.attempts[a as usize];
                if attempt.execution != Execution::Executing {
                    return None;
                }
                attempt.execution = Execution::Stopped;
            }
            Action::Disconnect { runner } => s.runners.get_mut(runner as usize)?.connected = false,
            Action::Rejoin {
                runner,
                runner_time: skew,
            } => {
                s.runners.get_mut(runner as usize)?.connected = true;
                if !self.rejoins_at_receipt() {
                    let _ = send(&mut s, runner, None, MessageKind::Rejoin, skew);
                }
            }
            Action::Replay {
                runner,
                message,
                forge,
            } => {
                let copy = Self::replayed(&s, &message, runner, forge);
                self.receive(last, &mut s, &copy);
                self.deliver(&mut s, &copy);
            }
            Action::Deliver { message } => {
                self.receive(last, &mut s, &message);
                self.deliver(&mut s, &message);
            }
            Action::Tick => {
                s.clock += 1;
                let now = s.clock;
                let k = self.config.replica_skew;
                for a in s.attempts.iter_mut() {
                    // Expired by every replica's clock once the slowest one has passed the
                    // expiry (with one clock: once the clock has).
                    if a.state == AttemptState::Active
                        && u16::from(now) >= u16::from(a.lease_expiry) + u16::from(k)
                    {
                        a.expired = true;
                    }
                    // §2's duty: a runner whose lease has run out by its own reckoning, without
                    // a renewal, stops executing, connected or not; no replica's clock moves
                    // its reckoning.
                    if self.keeps_duty(a)
                        && a.execution == Execution::Executing
                        && now >= a.runner_expiry
                    {
                        a.execution = Execution::Stopped;
                    }
                }
            }
            Action::ReplicaClock { offset } => s.replica = offset,
            Action::Failover => self.failover(&mut s)?,
            Action::ExpirySweep => self.sweep(&mut s),
            Action::ServerStarts => {
                s.second_server = true;
                s.policy_recorded = true;
            }
            // The operator of the other project is always refused.
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. } => {
                debug_assert_ne!(self.expected(&s, &action), Some(Expected::ACCEPTED));
            }
            Action::Cancel { job } => {
                if self.cancel_verdict(&s, Self::project_of(&s, job), job) != Expected::ACCEPTED {
                    return Some(s);
                }
                let j = &mut s.jobs[job as usize];
                if j.state == JobState::Queued {
                    j.state = JobState::Cancelled;
                    j.committed.get_or_insert(JobState::Cancelled);
                } else {
                    j.state = JobState::Cancelling;
                    j.cancel_requested = true;
                }
            }
            Action::Reconcile {
                job,
                finding,
                decision,
            } => {
                let project = Self::project_of(&s, job);
                if self.reconcile_verdict(&s, project, job, finding, decision) == Expected::ACCEPTED
                {
                    self.reconcile(&mut s, job, finding, decision);
                }
            }
        }
        // The lease expiry of an attempt that is no longer `active` decides nothing (checks 8–10
        // answer first, or the attempt is `uncertain`): forget it, so that states that differ only
        // there are one state.
        for a in s.attempts.iter_mut() {
            if a.state != AttemptState::Active {
                a.lease_expiry = 0;
            }
            // The runner's own reckoning decides only while it executes under its duty.
            if a.execution != Execution::Executing || !self.keeps_duty(a) {
                a.runner_expiry = 0;
            }
        }
        // A message that could no longer matter in the last state (`forgotten`) is lost: it was
        // in flight there, so the properties checked its final verdict there.
        for m in last.in_flight.iter().filter(|m| self.forgotten(last, m)) {
            s.in_flight.remove(m);
        }
        // Only the time left on each active lease decides anything (check 11, the sweep, `tick`):
        // move the time origin to `now`, so that states that differ only by when they happened
        // are one state. Time itself is unbounded: `tick` is offered while some lease is valid.
        // The server's state before its last committed transition (what a failover goes back
        // to): kept while a failover can still come. A step that changed the server's state
        // makes the state before it the one a failover returns to.
        // (The failover itself is no committed transition.)
        if self.config.failover && s.epoch < self.config.failovers() && s.epoch == last.epoch {
            let was = Self::server(last);
            if Self::server(&s) != was {
                s.before = Some(Box::new(was));
            }
        }
        // With replica clocks the origin stays `time_slack` behind now (see there).
        let now = s.clock.saturating_sub(self.time_slack());
        for a in s.attempts.iter_mut() {
            a.lease_expiry = a.lease_expiry.saturating_sub(now);
            a.runner_expiry = a.runner_expiry.saturating_sub(now);
        }
        if let Some(before) = s.before.as_mut() {
            for a in before.attempts.iter_mut() {
                a.lease_expiry = a.lease_expiry.saturating_sub(now);
            }
        }
        s.epoch_wait = s.epoch_wait.saturating_sub(now);
        s.clock -= now;
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut all = if self.one_invariant {
            properties::combined(&self.config)
        } else {
            properties::all(&self.config)
        };
        if self.settle_sometimes {
            properties::settle(self, &mut all);
        }
        all
    }

    fn format_action(&self, action: &Action) -> String {
        crate::describe::action(action)
    }
}
