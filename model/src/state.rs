//! The model's state, actions and configuration.

use crate::side_effects::{Cache, SideEffect};
use crate::types::*;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// The ledger's room ([`Config::ledger`]) for the variants whose flaw is in the ledger.
pub const LEDGER_FOR_VARIANTS: u8 = 3;

/// The bounds and choices of one model-checking run.
#[derive(Clone, Debug, Hash, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Jobs, all of project 0, submitted in index order (claim takes the lowest queued index).
    pub jobs: u8,
    /// Runners of project 0 (symmetric: interchangeable under symmetry reduction).
    pub runners: u8,
    /// At most this many attempts per job: `claim` and a `retry` decision are not offered beyond it.
    pub attempts_per_job: u8,
    /// `lease_expiry = now + lease_ttl` (in ticks).
    pub lease_ttl: u8,
    /// A runner message carries a runner observed time `0..=max_skew`: arbitrary data, unrelated to
    /// the server's clock (a runner's clock may be skewed by any amount).
    pub max_skew: u8,
    /// Let an executing runner lose contact (`disconnect`) and come back (`rejoin`).
    pub disconnects: bool,
    /// Add a runner of project 1 that owns no jobs and can replay any in-flight message under its
    /// own identity (exercises `wrong_project` and invariant 12).
    pub outsider: bool,
    /// Let a runner re-send one of its own in-flight messages with a forged lease id or fence
    /// (exercises `lease_mismatch` / `fence_mismatch`).
    pub forgery: bool,
    /// The deployment target's kind.
    pub target: TargetKind,
    /// The protocol, or one flawed design.
    pub variant: Variant,
    /// Jobs of the outsider's project (project 1), after project 0's jobs, claimed by the outsider
    /// runner (needs `outsider`): its messages go in flight like anyone's.
    #[serde(default)]
    pub outsider_jobs: u8,
    /// Every job, of either project, names one target slot (slot 0); otherwise job `j` names slot
    /// `j` (§8.1: slot names are one global namespace).
    #[serde(default)]
    pub shared_slot: bool,
    /// Keep the server's ledger in the state ([`State::ledger`]), with room for this many
    /// distinct entries (`0`: no ledger in the state; the records are then checked as probes
    /// only). Every message the server receives adds its entry with the record it wrote. Rejected
    /// deliveries then change the state (they add a record), so they are explored as steps, and
    /// the outsider replays results in flight under its own identity (a message of another
    /// project the ledger must keep apart). The bound: a receipt that would add an entry to a full
    /// ledger is not explored (the exploration of that path ends there for receipts; the
    /// verdict and record of that message are still checked as a probe). `check` prints it.
    #[serde(default)]
    pub ledger: u8,
    /// Let executing runners send the side effects of rule R8 (`source fetch`, `log append`,
    /// `artifact put`, `artifact get`, `cache put`, `cache get`; [`crate::side_effects`]), and
    /// probe them in every state. Off by default: each attempt's log and artifact and each
    /// project's cache entry multiply the states.
    #[serde(default)]
    pub side_effects: bool,
    /// Let the database fail over once (`Action::Failover`): the server's state goes back to
    /// the one before its last committed transition ([`State::before`]) while runners, messages
    /// in flight and targets keep theirs, and the epoch rises (docs/model.md "Failover"). Not with
    /// the ledger or the side effects.
    #[serde(default)]
    pub failover: bool,
    /// With [`Config::failover`]: attempt ids and lease ids are issued from the server's
    /// counters, which the failover rolls back with the rest of its state, so the claim after a
    /// failover is issued the lost claim's attempt id and lease id again (its fence is not: it
    /// carries the epoch). Each attempt is then named by [`State::attempt_name`] (its record in
    /// [`State::attempts`] stays its own: the ground truth of which execution sent a message),
    /// and the server finds an attempt by its name (docs/model.md "Reissued ids"). Off: every
    /// attempt id and lease id is fresh (the implementation's UUIDs).
    #[serde(default)]
    pub reissued_ids: bool,
    /// Replica clocks (docs/protocol.md §3.1): every server-side step is judged at the receipt
    /// time `clock + d` of the replica that serves it, for a `d` in `[-replica_skew,
    /// replica_skew]` the environment chooses (`Action::ReplicaClock`), and the expiry sweep and
    /// the wait after an epoch change act `2 × replica_skew` past a lease. `0` (the default):
    /// one clock, today's configurations and traces unchanged.
    #[serde(default)]
    pub replica_skew: u8,
    /// The batch claim (docs/protocol.md R1, "Batch claim"): the largest K a runner may ask for
    /// (`Action::ClaimBatch` with `limit` 2..=K). `0` or `1`: no batch claims (a claim of one job
    /// is `Action::Claim`).
    #[serde(default)]
    pub batch_claim: u8,
    /// The first this many jobs (of either project) name slot 0, every later job a slot of its
    /// own (job `j` slot `j - N + 1`): some jobs wait on a busy slot while others' are free, so a
    /// batch claim walks past them. `0`: as [`Config::shared_slot`] says.
    #[serde(default)]
    pub slot_shared_by: u8,
    /// Jobs name the first N slots in turn (job `j` slot `j mod N`), so each of those slots is
    /// shared by several jobs and a batch may start on any of them. `0` or `1`: as
    /// [`Config::slot_shared_by`] and [`Config::shared_slot`] say.
    #[serde(default)]
    pub slots_in_turn: u8,
    /// Runners may break docs/protocol.md §2's duty: they go on executing past the end of
    /// their own lease (only a runner whose claim a failover lost stops there, as the model did
    /// before issue 39), so a reconciliation's finding is only what the operator established
    /// (the truthful finding), never `stopped` on the basis of the duty. `false` (the default):
    /// every runner stops executing when its lease ends by its own reckoning (`lease_ttl` after
    /// it sent the claim or heartbeat that granted or renewed it, on the true clock), and the
    /// operator may record `stopped` for a swept (`uncertain`) job on that basis, since the sweep
    /// acts only once the lease has certainly ended (§3.1).
    #[serde(default)]
    pub duty_ignored: bool,
    /// A second server whose lease policy grants leases of this ttl (larger than
    /// [`Config::lease_ttl`]) starts (`Action::ServerStarts`): it records its policy in the
    /// database ([`State::policy_recorded`], server state a failover can roll back) and serves
    /// every later request; a path may then hold two failovers. The wait after a failover is the
    /// largest ttl the new primary's record holds, re-recorded by every live server before its
    /// gate opens (docs/protocol.md §2 "Epochs"). `0` (the default): one server, one ttl.
    #[serde(default)]
    pub policy_ttl: u8,
    /// An operator of project 0 may revoke a runner of project 0 while it holds a lease
    /// (`Action::RunnerRevoke`, docs/protocol.md §6.1 check 1): from then on the server refuses
    /// every message of that runner `unknown_runner` and records none of them (§7: a message
    /// from no runner is recorded nowhere), and the runner claims nothing. Revocation changes no
    /// job, attempt or lease: the revoked runner's lease runs out, the expiry sweep makes its job
    /// `uncertain`, and only a reconciliation decides what follows. Off by default (a
    /// configuration of the conformance suite turns it on).
    #[serde(default)]
    pub revocation: bool,
}

/// A fence or slot token carries its epoch: `epoch * EPOCH_BASE + generation`, compared as one
/// number, so epoch first (the implementation's `epoch * 2^32 + generation`, scaled to the
/// model's small generations).
pub const EPOCH_BASE: u8 = 32;

impl Default for Config {
    /// The default configuration (docs/model.md), what `leasewright check` checks: 2 jobs, 2
    /// runners (+ the outsider), 2 attempts per job, one-tick leases, runner time 0, no
    /// disconnects, fenced target, the protocol. Duplicate and late delivery are always on (the
    /// set of messages in flight is never drained). Disconnects and rejoins are checked with one
    /// job: [`Config::one_job`].
    fn default() -> Self {
        Config {
            jobs: 2,
            runners: 2,
            attempts_per_job: 2,
            lease_ttl: 1,
            max_skew: 0,
            disconnects: false,
            outsider: true,
            forgery: true,
            target: TargetKind::Fenced,
            variant: Variant::None,
            outsider_jobs: 0,
            shared_slot: false,
            ledger: 0,
            side_effects: false,
            failover: false,
            reissued_ids: false,
            replica_skew: 0,
            batch_claim: 0,
            slot_shared_by: 0,
            slots_in_turn: 0,
            duty_ignored: false,
            policy_ttl: 0,
            revocation: false,
        }
    }
}

impl Config {
    /// One job with every feature: 2 runners (+ the outsider), 2 attempts, two-tick leases,
    /// disconnects and rejoins, fenced target. The second configuration `leasewright check` is
    /// run on in CI, and the base of the conformance suites (`leasewright conform`).
    pub fn one_job() -> Self {
        Config {
            jobs: 1,
            lease_ttl: 2,
            disconnects: true,
            ..Config::default()
        }
    }

    /// The model a recorded job is judged on (by `leasewright audit` and by the history checker):
    /// one job, `runners` runners, no outsider, unbounded attempts. Only its verdict and effect
    /// functions are used, with time set from the record before each step.
    pub fn one_recorded_job(runners: u8) -> Self {
        Config {
            jobs: 1,
            runners,
            attempts_per_job: u8::MAX,
            lease_ttl: 1,
            max_skew: 0,
            disconnects: false,
            outsider: false,
            forgery: false,
            target: TargetKind::Unfenced,
            variant: Variant::None,
            ..Config::default()
        }
    }

    /// This configuration with `variant`, switching to the target kind the variant needs
    /// (`auto-retry-unfenced` needs `unfenced`).
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        if let Some(target) = variant.required_target() {
            self.target = target;
        }
        if variant.needs_shared_slot() {
            self.shared_slot = true;
            self.jobs = self.jobs.max(2);
        }
        if variant == Variant::RejoinResurrectsLease {
            // Only a runner that lost contact rejoins.
            self.disconnects = true;
        }
        if variant.needs_ledger() {
            self.ledger = self.ledger.max(LEDGER_FOR_VARIANTS);
        }
        if variant == Variant::RunnerClockExtendsLease {
            // The runner's clock must be able to differ from the server's for the lease to show it.
            self.max_skew = self.max_skew.max(1);
        }
        if variant.needs_outsider_job() {
            self.outsider = true;
            self.outsider_jobs = self.outsider_jobs.max(1);
        }
        if variant.needs_replica_clocks() {
            // The flaw shows only where two replicas' clocks differ; one job tells it.
            self.replica_skew = self.replica_skew.max(1);
            self.jobs = 1;
        }
        if variant.needs_duty_ignored() {
            // A runner executing past its lease is what these designs mishandle.
            self.duty_ignored = true;
        }
        if variant.needs_failover() {
            // One job: the loss of its claim is the whole story.
            self.failover = true;
            self.jobs = 1;
        }
        if variant.needs_reissued_ids() {
            self.reissued_ids = true;
        }
        if variant == Variant::FailoverForgetsPolicy {
            return Config {
                variant,
                ..Config::policy_failover()
            };
        }
        if variant == Variant::BatchOneSlotToken {
            // Executed batches: the slot a batch's later job reserved is reserved again by a
            // later claim, while the earlier holder's mutation may still be in flight.
            return Config {
                variant,
                ..Config::batch_execution()
            };
        }
        if variant.needs_batch_claim() {
            // The batch claims' shape with a fourth job (jobs 0 and 1 on slot 0, jobs 2 and 3 a
            // slot each): a batch that walks past job 1 while job 0 holds slot 0 can take two.
            let batch = Config::batch_claims();
            self.jobs = self.jobs.max(batch.jobs + 1);
            self.batch_claim = self.batch_claim.max(batch.batch_claim);
            self.slot_shared_by = batch.slot_shared_by;
        }
        if variant.needs_side_effects() {
            // Checked with the side effects, and one job of the checked project: the flaw shows
            // in the first attempt.
            self.side_effects = true;
            self.jobs = 1;
        }
        self
    }

    /// Every job, of both projects.
    pub fn all_jobs(&self) -> u8 {
        self.jobs + if self.outsider { self.outsider_jobs } else { 0 }
    }

    /// The slot job `job` names.
    pub fn slot_of(&self, job: JobId) -> SlotId {
        if self.shared_slot {
            0
        } else if self.slots_in_turn > 1 {
            job % self.slots_in_turn
        } else if self.slot_shared_by > 1 {
            job.saturating_sub(self.slot_shared_by - 1)
        } else {
            job
        }
    }

    /// How many target slots there are.
    pub fn slots(&self) -> u8 {
        if self.shared_slot {
            1
        } else if self.slots_in_turn > 1 {
            self.slots_in_turn.min(self.all_jobs()).max(1)
        } else if self.slot_shared_by > 1 {
            self.all_jobs()
                .saturating_sub(self.slot_shared_by - 1)
                .max(1)
        } else {
            self.all_jobs()
        }
    }

    /// The batch claims' configuration (`batch-claim` of `check --profile ci`, and a
    /// configuration of the conformance suite): 3 jobs of 1 attempt, jobs 0 and 1 on slot 0, job
    /// 2 on slot 1, batch claims of up to 2 jobs, one runner (and the outsider), one-tick leases,
    /// no disconnects. A batch takes fewer than K when its two earliest claimable jobs name slot
    /// 0, and walks past job 1 to job 2 while job 0 holds slot 0. (4 jobs, or 2 runners, exceed
    /// a million states.)
    pub fn batch_claims() -> Self {
        Config {
            jobs: 3,
            runners: 1,
            attempts_per_job: 1,
            batch_claim: 2,
            slot_shared_by: 2,
            ..Config::default()
        }
    }
}

impl Config {
    /// The batch claims executed, with two runners (`batch-execution-walk` of `check --profile
    /// ci`, paths of bounded length; the configuration of `batch-one-slot-token`): four jobs on
    /// two slots in turn (jobs 0 and 2 on slot 0, jobs 1 and 3 on slot 1), two attempts each
    /// (a swept job retried, issue 39 item 2), batch claims of up to 2 jobs, one-tick leases, no
    /// outsider. Every lease a batch gives is executed, heartbeated and reported; a batch may
    /// start on either slot, and a slot a batch's later job reserved is reserved again by the
    /// other runner's claim.
    pub fn batch_execution() -> Self {
        Config {
            jobs: 4,
            runners: 2,
            attempts_per_job: 2,
            batch_claim: 2,
            slots_in_turn: 2,
            outsider: false,
            ..Config::default()
        }
    }
}

impl Config {
    /// Servers that differ in lease ttl across two failovers (`policy-failover`; the
    /// configuration of `failover-forgets-policy`): one job, two runners, one attempt, no
    /// outsider or forgery; one-tick leases until a second server granting two-tick leases
    /// starts and records its policy, which a failover may lose.
    pub fn policy_failover() -> Self {
        Config {
            jobs: 1,
            attempts_per_job: 1,
            outsider: false,
            forgery: false,
            failover: true,
            policy_ttl: 2,
            ..Config::default()
        }
    }

    /// How many failovers a path may hold: two with a second server's policy, else one.
    pub fn failovers(&self) -> u8 {
        if self.policy_ttl > 0 {
            2
        } else {
            1
        }
    }
}

/// What physically happens to an attempt's execution on its runner (the ground truth that only a
/// reconciliation's finding reports to the server).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// The shell command is still going on.
    Executing,
    /// It stopped without the runner observing an outcome (killed, crashed).
    Stopped,
    /// It finished and the runner observed (and reported) this outcome.
    Finished(Outcome),
}

/// One entry of a job's attempt ledger.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attempt {
    /// The job it is an attempt of.
    pub job: JobId,
    /// The runner that claimed it.
    pub runner: RunnerId,
    /// Its lease id (fresh).
    pub lease: LeaseId,
    /// Its fence (`job.fence + 1` at claim).
    pub fence: Fence,
    /// Server time at which the lease expires (ticks from now in a reachable state; `0` once
    /// expired, and once the attempt is no longer `active`).
    pub lease_expiry: u8,
    /// Its state.
    pub state: AttemptState,
    /// Its slot token (§8.3): the slot's counter + 1 at claim.
    pub token: Token,
    /// The digest of the result that committed its outcome (`None`: no result committed; an
    /// adopted outcome has none).
    pub digest: Option<Digest>,
    /// Physical truth on the runner.
    pub execution: Execution,
    /// History: the lease expired while the attempt was `active` (sticky; set by `tick`).
    pub expired: bool,
    /// Its log chunks (R8, [`Config::side_effects`]): two bits per sequence number, `0` none,
    /// `1 + chunk` the chunk stored ([`crate::side_effects::chunk_at`]).
    #[serde(default)]
    pub log: u8,
    /// Its artifact (R8, the one artifact name): `0` none, `1 + content` stored.
    #[serde(default)]
    pub artifact: u8,
    /// The server lost its claim in a failover (its database knows no such attempt: every
    /// message naming it is `unknown_attempt`); the execution on the runner goes on until it
    /// stops. The runner keeps its lease as it was told it (`lease_expiry`, its own deadline).
    #[serde(default)]
    pub lost: bool,
    /// History (ground truth, never rolled back): the order in which this attempt's reservation
    /// of its slot was really issued (`1, 2, ...` per slot). Equal to `token` unless tokens were
    /// issued twice or reset; invariants 7 and 15 compare with it, not with the token.
    #[serde(default)]
    pub issued: u8,
    /// When the lease runs out by its runner's own reckoning (§2: `lease_ttl` after it sent the
    /// claim or heartbeat that granted or renewed it), on the true clock (`clock`); a replica's
    /// receipt time may differ from it, and a failover that forgets a heartbeat rolls the
    /// server's `lease_expiry` back but not this. The runner stops executing when `clock`
    /// reaches it (unless [`Config::duty_ignored`]). Relative, like every time; forgotten (0)
    /// once the execution is no longer going on.
    #[serde(default)]
    pub runner_expiry: u8,
}

/// What the server's database holds of an attempt besides what is fixed at its claim: what a
/// failover can roll back.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServerAttempt {
    /// [`Attempt::lease_expiry`].
    pub lease_expiry: u8,
    /// [`Attempt::state`].
    pub state: AttemptState,
    /// [`Attempt::digest`].
    pub digest: Option<Digest>,
}

/// The server's state at one point of its history ([`State::before`]): what a failover goes
/// back to. The attempts it knew are the first `attempts.len()` of [`State::attempts`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Server {
    /// Every job, whole (a job's history is the server's record too).
    pub jobs: Jobs,
    /// The attempts it knew, in claim order.
    pub attempts: SmallVec<[ServerAttempt; 4]>,
    /// [`State::policy_recorded`].
    #[serde(default)]
    pub policy_recorded: bool,
    /// Each slot's reservation and token counter.
    pub slots: SmallVec<[(Option<JobId>, Token); 2]>,
}

/// A job.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Job {
    /// The owning project.
    pub project: ProjectId,
    /// The target slot it deploys to (fixed at submission).
    pub slot: SlotId,
    /// Its state.
    pub state: JobState,
    /// The fence counter (the last fence issued).
    pub fence: Fence,
    /// The current attempt.
    pub current: Option<AttemptId>,
    /// How many more attempts the model's bounds allow (`Config::attempts_per_job` at first; one
    /// less at every claim). Model bookkeeping, not protocol state: `claim` and a `retry` decision
    /// are offered only while it is above 0.
    pub attempts_left: u8,
    /// Set by `cancel` on a leased job, never cleared.
    pub cancel_requested: bool,
    /// History: the first committed outcome this job ever took (invariant 4).
    pub committed: Option<JobState>,
    /// History: the attempt named by, and the sender of, the last accepted `result` that completed
    /// this job (invariants 3 and 12).
    pub completed_by: Option<(AttemptId, RunnerId)>,
}

/// A runner.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Runner {
    /// Its project (0, or 1 for the outsider).
    pub project: ProjectId,
    /// In contact with the control plane.
    pub connected: bool,
    /// The attempt whose ownership tuple it holds (the last one it claimed; of a batch claim,
    /// the earliest it took).
    pub holding: Option<AttemptId>,
    /// The other attempts its last claim gave it, as a bit set of attempt ids: a batch claim's
    /// later leases, each executed, heartbeated and reported like the one it holds (0 after a
    /// claim of one job).
    #[serde(default)]
    pub batch: u8,
    /// An operator revoked it ([`Config::revocation`]): its token authenticates nothing, so
    /// the server knows no such runner (`unknown_runner`) whatever it sends. Never undone.
    #[serde(default)]
    pub revoked: bool,
}

impl Runner {
    /// Whether its last claim gave it attempt `a`.
    pub fn holds(&self, a: AttemptId) -> bool {
        self.holding == Some(a) || self.batch & crate::model::bit(a) != 0
    }

    /// Every attempt its last claim gave it, the one it holds first: each as the `attempt` a
    /// runner step names (`None`: the one it holds).
    pub fn held(&self) -> impl Iterator<Item = (Option<AttemptId>, AttemptId)> + '_ {
        let batch = (0..8).filter(|&a| self.batch & crate::model::bit(a) != 0);
        self.holding
            .map(|a| (None, a))
            .into_iter()
            .chain(batch.map(|a| (Some(a), a)))
    }
}

/// What a message is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// R2 `heartbeat`.
    Heartbeat,
    /// R3 `result` with its outcome.
    Result(Outcome),
    /// R5 `rejoin`.
    Rejoin,
    /// R9 `target mutation`, runner → target, deployment id = the job.
    TargetMutation,
    /// R8: a side effect with its payload ([`Config::side_effects`]).
    SideEffect(SideEffect),
}

impl MessageKind {
    /// The protocol's name of the message.
    pub fn name(self) -> &'static str {
        match self {
            Self::Heartbeat => "heartbeat",
            Self::Result(_) => "result",
            Self::Rejoin => "rejoin",
            Self::TargetMutation => "target mutation",
            Self::SideEffect(effect) => effect.name(),
        }
    }
}

/// A message in flight: the sender and the ownership tuple it names, plus the runner's observed
/// time (diagnostic only).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Message {
    /// What it is.
    pub kind: MessageKind,
    /// The authenticated sender.
    pub sender: RunnerId,
    /// The named job.
    pub job: JobId,
    /// The named attempt.
    pub attempt: AttemptId,
    /// The named lease id.
    pub lease: LeaseId,
    /// The named fence.
    pub fence: Fence,
    /// The runner's observed time (`0` for target mutations).
    pub runner_time: u8,
    /// A result's digest (`0` for other messages).
    #[serde(default)]
    pub digest: Digest,
    /// A target mutation's slot token (`0` for other messages).
    #[serde(default)]
    pub token: Token,
}

/// The abstract record of one received message (§2 "observation"), without times so that the
/// set stays finite: attribution, sender, named tuple, kind, verdict and reason.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Observation {
    /// The attempt it is recorded against (checks 1–5 passed), or `None` (unattributed).
    /// Target mutations are recorded by the target: always `None`.
    pub attempt: Option<AttemptId>,
    /// The sender.
    pub sender: RunnerId,
    /// The kind of message.
    pub kind: MessageKind,
    /// The job named.
    pub job: JobId,
    /// The attempt named.
    pub named_attempt: AttemptId,
    /// The verdict given.
    pub verdict: Verdict,
    /// The reason given.
    pub reason: Option<Reason>,
    /// A result's outcome and digest, kept with the record (a late report's or a conflict's
    /// evidence).
    pub result: Option<(Outcome, Digest)>,
}

/// One entry of the server's ledger ([`State::ledger`]): a message the server received (what
/// the network delivered: ground truth) and the record the server wrote for it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The message as the server received it.
    pub received: Message,
    /// The record the server wrote (`None`: it wrote none, which only a flawed design does).
    pub record: Option<Observation>,
    /// Ground truth at receipt, computed by the properties, not by the server: the attempt that
    /// really sent it (it exists, is an attempt of the named job, was claimed by the sender, whose
    /// project owns the job), or `None`.
    pub sent_by: Option<AttemptId>,
    /// Ground truth at receipt, computed by the properties, not by the server: the message is a
    /// result with the exact tuple of the attempt its sender claimed, which either could no
    /// longer act (not current, or its lease expired, swept or not: a late report) or holds a
    /// committed outcome the result differs from (a conflict).
    pub late_or_conflicting: bool,
}

/// The server's ledger: the set of distinct [`LedgerEntry`]s, kept sorted. A set, not a list:
/// receiving the same message again with the same verdict adds nothing, so the ledger of a
/// configuration is bounded by its distinct messages and verdicts, and the state space stays
/// finite. (The server writes at most one record per receipt by construction, `record` is an
/// `Option`; the properties check that it writes one.)
#[derive(Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Ledger(SmallVec<[LedgerEntry; 2]>);

impl Clone for Ledger {
    fn clone(&self) -> Self {
        Ledger(SmallVec::from_slice(&self.0))
    }
}

impl Ledger {
    /// Adds `e`; `false` if it was already in.
    pub fn insert(&mut self, e: LedgerEntry) -> bool {
        match self.0.binary_search(&e) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, e);
                true
            }
        }
    }

    /// Whether `e` is in.
    pub fn contains(&self, e: &LedgerEntry) -> bool {
        self.0.binary_search(e).is_ok()
    }

    /// Replaces every entry `e` by `f(e)` in place, then restores the order (and drops the
    /// duplicates): the set `self.iter().map(f).collect()` would build, without building it.
    pub fn map_in_place(&mut self, f: impl Fn(&LedgerEntry) -> LedgerEntry) {
        for e in self.0.iter_mut() {
            *e = f(e);
        }
        restore_set_order(&mut self.0);
    }

    /// The entries, ascending.
    pub fn iter(&self) -> std::slice::Iter<'_, LedgerEntry> {
        self.0.iter()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<LedgerEntry> for Ledger {
    fn from_iter<I: IntoIterator<Item = LedgerEntry>>(iter: I) -> Self {
        let mut all: SmallVec<[LedgerEntry; 2]> = iter.into_iter().collect();
        all.sort_unstable();
        all.dedup();
        Ledger(all)
    }
}

impl<'a> IntoIterator for &'a Ledger {
    type Item = &'a LedgerEntry;
    type IntoIter = std::slice::Iter<'a, LedgerEntry>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'de> Deserialize<'de> for Ledger {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vec::<LedgerEntry>::deserialize(d)?.into_iter().collect())
    }
}

/// One target slot (§8): its global reservation and token counter (control-plane state), and the
/// target's own state.
#[derive(
    Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct Target {
    /// The job whose current attempt reserves the slot (§8.2), whatever its project.
    pub holder: Option<JobId>,
    /// The slot's token counter: the last slot token issued (§8.3).
    pub tokens: Token,
    /// How many mutations it applied (saturating: at 1 for a fenced target, whose rule does not
    /// depend on it, at 2 otherwise).
    pub applied: u8,
    /// The fenced target's stored generation: the highest token it applied (what it compares).
    pub highest_token: Token,
    /// History: the slot token issued to the attempt whose mutation was applied last (`0`:
    /// none). What the properties compare, whatever the target compared.
    pub last_applied: Token,
    /// History: the highest slot token issued to an attempt whose mutation was applied.
    pub highest_applied: Token,
    /// History: the deployments (jobs, as a bit set) it applied.
    pub deployed: u8,
    /// History: it applied some deployment a second time.
    pub applied_twice: bool,
    /// The attempts (as a bit set) whose mutations it applied: kept only by the flawed
    /// `idempotency-key-per-attempt` target, which decides by it.
    pub attempts_applied: u8,
    /// History (ground truth, never rolled back): how many reservations of this slot were
    /// really issued ([`Attempt::issued`] of the last one).
    #[serde(default)]
    pub reservations: u8,
}

// The state's collections are small (a few jobs, runners, attempts and messages), and the
// checker clones, hashes and compares millions of states: they live inline, on the stack, and
// spill to the heap only beyond these sizes. `SmallVec` orders, hashes and serializes as a slice
// does, so the state's `Ord` (which picks the symmetry representative) and its ITF form are those
// of plain vectors.

/// Jobs by id.
pub type Jobs = SmallVec<[Job; 2]>;
/// The attempt ledger.
pub type Attempts = SmallVec<[Attempt; 4]>;
/// Runners by id.
pub type Runners = SmallVec<[Runner; 3]>;
/// Target slots by slot id.
pub type Targets = SmallVec<[Target; 2]>;

/// A set of messages: kept sorted and without duplicates, inline up to eight messages. Ordered,
/// hashed and serialized (a JSON array, ascending) as a `BTreeSet` would be.
#[derive(Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MessageSet(SmallVec<[Message; 8]>);

impl Clone for MessageSet {
    fn clone(&self) -> Self {
        MessageSet(SmallVec::from_slice(&self.0))
    }
}

impl MessageSet {
    /// Adds `m`; `false` if it was already in.
    pub fn insert(&mut self, m: Message) -> bool {
        match self.0.binary_search(&m) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, m);
                true
            }
        }
    }

    /// Removes `m`; `false` if it was not in.
    pub fn remove(&mut self, m: &Message) -> bool {
        match self.0.binary_search(m) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `m` is in.
    pub fn contains(&self, m: &Message) -> bool {
        self.0.binary_search(m).is_ok()
    }

    /// The messages, ascending.
    pub fn iter(&self) -> std::slice::Iter<'_, Message> {
        self.0.iter()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes every message.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Replaces every message `m` by `f(m)` in place, then restores the order (and drops the
    /// duplicates): the set `self.iter().map(f).collect()` would build, without building it.
    pub fn map_in_place(&mut self, f: impl Fn(&Message) -> Message) {
        for m in self.0.iter_mut() {
            *m = f(m);
        }
        restore_set_order(&mut self.0);
    }

    /// The messages in `self` and not in `other`, ascending.
    pub fn difference<'a>(&'a self, other: &'a MessageSet) -> impl Iterator<Item = &'a Message> {
        self.iter().filter(move |m| !other.contains(m))
    }
}

/// Sorts `items` and drops duplicates, unless they are strictly ascending already (the usual
/// case after a renaming that keeps the order).
fn restore_set_order<A: smallvec::Array>(items: &mut SmallVec<A>)
where
    A::Item: Ord,
{
    if !items.windows(2).all(|w| w[0] < w[1]) {
        items.sort_unstable();
        items.dedup();
    }
}

impl FromIterator<Message> for MessageSet {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        let mut all: SmallVec<[Message; 8]> = iter.into_iter().collect();
        all.sort_unstable();
        all.dedup();
        MessageSet(all)
    }
}

impl<'a> IntoIterator for &'a MessageSet {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'de> Deserialize<'de> for MessageSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vec::<Message>::deserialize(d)?.into_iter().collect())
    }
}

/// The whole state.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct State {
    /// Server time (`now`). Time is relative: after every step the origin moves to `now`, so
    /// `clock` is 0 in every reachable state and an active attempt's `lease_expiry` is the
    /// number of ticks its lease has left. The verdict functions compare the two, so they also
    /// work on states built with another origin.
    pub clock: u8,
    /// Jobs by id.
    pub jobs: Jobs,
    /// The attempt ledger, in claim order (one ledger for all jobs; each entry names its job).
    pub attempts: Attempts,
    /// Runners by id (project-0 runners first, then the outsider).
    pub runners: Runners,
    /// Messages sent and never drained: any of them can be delivered (again) at any time.
    pub in_flight: MessageSet,
    /// Target slots by slot id.
    pub targets: Targets,
    /// The server's ledger (only with [`Config::ledger`]; empty otherwise).
    #[serde(default)]
    pub ledger: Ledger,
    /// Each project's cache entry of the one cache key (R8; only with [`Config::side_effects`]).
    #[serde(default)]
    pub cache: Cache,
    /// The server's epoch (durable: a failover raises it and never forgets it). Fences and slot
    /// tokens issued in epoch `e` are at least `e * EPOCH_BASE + 1`.
    #[serde(default)]
    pub epoch: u8,
    /// Ticks left before a claim may be made: after a failover, until every lease of the earlier
    /// epoch has expired (`lease_ttl` after the failover). Relative, like every time.
    #[serde(default)]
    pub epoch_wait: u8,
    /// With [`Config::failover`], before the failover: the server's state before its last
    /// committed transition (what a failover goes back to). `None` otherwise.
    #[serde(default)]
    pub before: Option<Box<Server>>,
    /// With [`Config::replica_skew`]: the offset of the clock of the replica that judges the
    /// server's next steps (its `now` is `clock + replica`), in `[-replica_skew, replica_skew]`.
    /// Always 0 with one clock.
    #[serde(default)]
    pub replica: i8,
    /// With [`Config::policy_ttl`]: the second server has started (it serves every request
    /// from then on, granting `policy_ttl`). Not database state: a failover keeps it.
    #[serde(default)]
    pub second_server: bool,
    /// With [`Config::policy_ttl`]: the database's lease policy record holds the second
    /// server's ttl (the largest ttl recorded is then `policy_ttl`, else `lease_ttl`). Server
    /// state: a failover can roll it back.
    #[serde(default)]
    pub policy_recorded: bool,
}

impl Clone for State {
    /// A copy of each collection at once (their records are `Copy`): the checker clones a state
    /// for every successor and every symmetry candidate, and `SmallVec`'s own `clone` pushes
    /// element by element.
    fn clone(&self) -> Self {
        State {
            clock: self.clock,
            jobs: SmallVec::from_slice(&self.jobs),
            attempts: SmallVec::from_slice(&self.attempts),
            runners: SmallVec::from_slice(&self.runners),
            in_flight: self.in_flight.clone(),
            targets: SmallVec::from_slice(&self.targets),
            ledger: self.ledger.clone(),
            cache: self.cache,
            epoch: self.epoch,
            epoch_wait: self.epoch_wait,
            before: self.before.clone(),
            replica: self.replica,
            second_server: self.second_server,
            policy_recorded: self.policy_recorded,
        }
    }
}

impl State {
    /// The attempt id the server issued to the attempt recorded at `attempt` (what its runner's
    /// messages carry, and all the server can tell it by). Without `reissued` ids it is the
    /// record itself (ids are fresh). With them ([`Config::reissued_ids`]) the server's counter
    /// is how many attempts it knows, and a failover rolls it back: an attempt is named by how
    /// many attempts the server knew before it (every attempt recorded before it that a failover
    /// did not lose), so the first claim after a failover is named as the lost claim was.
    pub fn attempt_name(&self, attempt: AttemptId, reissued: bool) -> AttemptId {
        if !reissued {
            return attempt;
        }
        self.attempts
            .iter()
            .take(attempt as usize)
            .filter(|a| !a.lost)
            .count() as AttemptId
    }

    /// Whether `job`'s slot is reserved for it.
    pub fn reserved(&self, job: JobId) -> bool {
        self.jobs
            .get(job as usize)
            .and_then(|j| self.targets.get(j.slot as usize))
            .is_some_and(|t| t.holder == Some(job))
    }
}

/// One step of the model, in the protocol's vocabulary.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// R1 `claim` by a connected runner that is not executing (synchronous request and answer).
    Claim { runner: RunnerId },
    /// R1 `claim` as a set, the batch claim of up to `limit` jobs ([`Config::batch_claim`];
    /// docs/protocol.md "Batch claim"): one request, one answer, at most one job per slot. The
    /// runner executes every job it took, each under its own lease ([`Runner::batch`]).
    ClaimBatch { runner: RunnerId, limit: u8 },
    /// The runner sends `heartbeat` for an attempt it executes.
    Heartbeat {
        runner: RunnerId,
        runner_time: u8,
        /// Which attempt of its batch ([`Runner::batch`]); `None`: the one it holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptId>,
    },
    /// The runner sends `result`: it finished executing with `outcome`, or (once, after its
    /// result) a second, conflicting one.
    Result {
        runner: RunnerId,
        outcome: Outcome,
        runner_time: u8,
        /// The result digest (`0` for the first report; `1` for a second report of the same
        /// outcome with another digest).
        #[serde(default)]
        digest: Digest,
        /// Which attempt of its batch ([`Runner::batch`]); `None`: the one it holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptId>,
    },
    /// The runner mutates its job's target directly (once per attempt, connected or not).
    TargetMutation {
        runner: RunnerId,
        /// Which attempt of its batch ([`Runner::batch`]); `None`: the one it holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptId>,
    },
    /// The runner sends a side effect (R8) about the attempt it executes; like a heartbeat, a
    /// request the server answers at receipt ([`Config::side_effects`]).
    SideEffect {
        runner: RunnerId,
        effect: SideEffect,
    },
    /// The runner's execution stops without an outcome (killed, crashed).
    StopExecuting {
        runner: RunnerId,
        /// Which attempt of its batch ([`Runner::batch`]); `None`: the one it holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptId>,
    },
    /// The runner loses contact with the control plane (its in-flight messages may still arrive).
    Disconnect { runner: RunnerId },
    /// The runner reconnects and sends R5 `rejoin` with the tuple it holds, if any.
    Rejoin { runner: RunnerId, runner_time: u8 },
    /// `runner` copies an in-flight message and sends it under its own identity (the outsider), or
    /// with a forged lease id or fence (its own message); the server receives the copy at once.
    Replay {
        runner: RunnerId,
        message: Message,
        forge: Forge,
    },
    /// The server (or the target) receives an in-flight message: first, late or duplicate delivery.
    Deliver { message: Message },
    /// Server time passes by one.
    Tick,
    /// R4 `expiry sweep`.
    ExpirySweep,
    /// A second server starts ([`Config::policy_ttl`]): it records its lease policy and serves
    /// every later request with its ttl.
    ServerStarts,
    /// R6 `cancel` by an operator of project 0.
    Cancel { job: JobId },
    /// R7 `reconcile` by an operator of project 0, with a truthful finding.
    Reconcile {
        job: JobId,
        finding: Finding,
        decision: Decision,
    },
    /// R6 `cancel` of a project-0 job by the outsider's operator (project 1): `wrong_project`.
    OutsiderCancel { job: JobId },
    /// R7 `reconcile` of a project-0 job by the outsider's operator (project 1), with the
    /// truthful finding and `abort`: `wrong_project`.
    OutsiderReconcile {
        job: JobId,
        finding: Finding,
        decision: Decision,
    },
    /// The database fails over ([`Config::failover`]): the server's state goes back to before its
    /// last committed transition, runners, messages in flight and targets keep theirs, the
    /// epoch rises.
    Failover,
    /// With [`Config::replica_skew`]: from now on the server's steps are served by a replica
    /// whose clock reads `clock + offset` (docs/protocol.md §3.1).
    ReplicaClock { offset: i8 },
    /// With [`Config::revocation`]: an operator of project 0 revokes `runner` while it holds a
    /// lease (`runner_revoke`; `POST /v1/projects/{p}/runners/{runner}/revoke`). Only the
    /// runner's authentication changes ([`Runner::revoked`]).
    RunnerRevoke { runner: RunnerId },
}

/// How a replayed message is altered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forge {
    /// Only the sender changes.
    AsIs,
    /// The lease id is replaced by [`FORGED_LEASE`].
    WrongLease,
    /// The fence is replaced by [`FORGED_FENCE`].
    WrongFence,
    /// The job, attempt, lease id and fence are replaced by those of another attempt (of another
    /// runner, of another job, or the sender's own superseded one).
    OtherAttempt { attempt: AttemptId },
}

impl Action {
    /// The protocol's name of the action (the ITF `mbt::actionTaken`).
    pub fn name(&self) -> &'static str {
        match self {
            Action::Claim { .. } => "claim",
            Action::ClaimBatch { .. } => "claim_batch",
            Action::Heartbeat { .. } => "heartbeat",
            Action::Result { .. } => "result",
            Action::TargetMutation { .. } => "target_mutation",
            Action::SideEffect { .. } => "side_effect",
            Action::StopExecuting { .. } => "stop_executing",
            Action::Disconnect { .. } => "disconnect",
            Action::Rejoin { .. } => "rejoin",
            Action::Replay { .. } => "replay",
            Action::Deliver { .. } => "deliver",
            Action::Tick => "tick",
            Action::ExpirySweep => "expiry_sweep",
            Action::ServerStarts => "server_starts",
            Action::Cancel { .. } => "cancel",
            Action::Reconcile { .. } => "reconcile",
            Action::OutsiderCancel { .. } => "outsider_cancel",
            Action::OutsiderReconcile { .. } => "outsider_reconcile",
            Action::Failover => "failover",
            Action::ReplicaClock { .. } => "replica_clock",
            Action::RunnerRevoke { .. } => "runner_revoke",
        }
    }
}

impl std::hash::Hash for State {
    /// One word per record instead of one write per field: the checker identifies a state by
    /// its hash, and hashing every state it reaches field by field is a good part of its time.
    /// Every record is packed one-to-one (each field in its own byte, an `Option` as a tag byte
    /// and a value byte) after its collection's length, so equal states hash alike and the
    /// stream of words determines the state. Each record is destructured in full: a new field
    /// does not compile until it is hashed here.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        fn pack<const N: usize>(bytes: [u8; N]) -> u128 {
            let mut word = [0; 16];
            word[..N].copy_from_slice(&bytes);
            u128::from_le_bytes(word)
        }
        fn option(value: Option<u8>) -> [u8; 2] {
            [value.is_some() as u8, value.unwrap_or(0)]
        }
        fn outcome(o: Outcome) -> u8 {
            o as u8
        }
        let State {
            clock,
            jobs,
            attempts,
            runners,
            in_flight,
            targets,
            ledger,
            cache,
            epoch,
            epoch_wait,
            before,
            replica,
            second_server,
            policy_recorded,
        } = self;
        h.write_u8(*clock);
        h.write_u8(u8::from(*second_server) | u8::from(*policy_recorded) << 1);
        h.write_i8(*replica);
        h.write_u8(*epoch);
        h.write_u8(*epoch_wait);
        before.hash(h);
        h.write_usize(jobs.len());
        for job in jobs {
            let Job {
                project,
                slot,
                state,
                fence,
                current,
                attempts_left,
                cancel_requested,
                committed,
                completed_by,
            } = *job;
            let [current_tag, current] = option(current);
            let [committed_tag, committed] = option(committed.map(|c| c as u8));
            let [by_tag, by_attempt] = option(completed_by.map(|(a, _)| a));
            let by_runner = completed_by.map_or(0, |(_, r)| r);
            h.write_u128(pack([
                project,
                slot,
                state as u8,
                fence,
                current_tag,
                current,
                attempts_left,
                cancel_requested as u8,
                committed_tag,
                committed,
                by_tag,
                by_attempt,
                by_runner,
            ]));
        }
        h.write_usize(attempts.len());
        for attempt in attempts {
            let Attempt {
                job,
                runner,
                lease,
                fence,
                lease_expiry,
                state,
                token,
                digest,
                execution,
                expired,
                log,
                artifact,
                lost,
                issued,
                runner_expiry,
            } = *attempt;
            let [digest_tag, digest] = option(digest);
            let execution = match execution {
                Execution::Executing => 0,
                Execution::Stopped => 1,
                Execution::Finished(o) => 2 + outcome(o),
            };
            h.write_u128(pack([
                job,
                runner,
                lease,
                fence,
                lease_expiry,
                state as u8,
                token,
                digest_tag,
                digest,
                execution,
                expired as u8,
                log,
                artifact,
                lost as u8,
                issued,
                runner_expiry,
            ]));
        }
        h.write_usize(runners.len());
        for runner in runners {
            let Runner {
                project,
                connected,
                holding,
                batch,
                revoked,
            } = *runner;
            let [holding_tag, holding] = option(holding);
            h.write_u64(pack([
                project,
                connected as u8,
                holding_tag,
                holding,
                batch,
                revoked as u8,
            ]) as u64);
        }
        h.write_usize(in_flight.len());
        for m in in_flight {
            let Message {
                kind,
                sender,
                job,
                attempt,
                lease,
                fence,
                runner_time,
                digest,
                token,
            } = *m;
            let kind = match kind {
                MessageKind::Heartbeat => 0,
                MessageKind::Rejoin => 1,
                MessageKind::TargetMutation => 2,
                MessageKind::Result(o) => 3 + outcome(o),
                MessageKind::SideEffect(effect) => 6 + effect.code(),
            };
            h.write_u128(pack([
                kind,
                sender,
                job,
                attempt,
                lease,
                fence,
                runner_time,
                digest,
                token,
            ]));
        }
        h.write_usize(ledger.len());
        for entry in ledger {
            entry.hash(h);
        }
        h.write_usize(targets.len());
        for target in targets {
            let Target {
                holder,
                tokens,
                applied,
                highest_token,
                last_applied,
                highest_applied,
                deployed,
                applied_twice,
                attempts_applied,
                reservations,
            } = *target;
            let [holder_tag, holder] = option(holder);
            h.write_u128(pack([
                holder_tag,
                holder,
                tokens,
                applied,
                highest_token,
                last_applied,
                highest_applied,
                deployed,
                applied_twice as u8,
                attempts_applied,
                reservations,
            ]));
        }
        for entry in cache {
            let [tag, content] = option(entry.map(|e| e.content));
            h.write_u32(pack([tag, content, entry.map_or(0, |e| e.stored_by)]) as u32);
        }
    }
}
