//! The model's state, actions and configuration.

use crate::types::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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
}

impl Default for Config {
    /// The default configuration (docs/model.md): 1 job, 2 runners (+ the outsider), 2 attempts
    /// per job, two-tick leases, runner time 0, disconnects, fenced target, the protocol.
    fn default() -> Self {
        Config {
            jobs: 1,
            runners: 2,
            attempts_per_job: 2,
            lease_ttl: 2,
            max_skew: 0,
            disconnects: true,
            outsider: true,
            forgery: false,
            target: TargetKind::Fenced,
            variant: Variant::None,
        }
    }
}

impl Config {
    /// This configuration with `variant`, switching to the target kind the variant needs
    /// (`auto-retry-unfenced` needs `unfenced`).
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        if let Some(target) = variant.required_target() {
            self.target = target;
        }
        self
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
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Physical truth on the runner.
    pub execution: Execution,
    /// History: the lease expired while the attempt was `active` (sticky; set by `tick`).
    pub expired: bool,
}

/// A job.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Job {
    /// The owning project.
    pub project: ProjectId,
    /// Its state.
    pub state: JobState,
    /// The fence counter (the last fence issued).
    pub fence: Fence,
    /// The current attempt.
    pub current: Option<AttemptId>,
    /// Set by `cancel` on a leased job, never cleared.
    pub cancel_requested: bool,
    /// The job's target slot is reserved (from claim until a reconciliation or a committed outcome).
    pub target_reserved: bool,
    /// History: the first committed outcome this job ever took (invariant 4).
    pub committed: Option<JobState>,
    /// History: the attempt named by, and the sender of, the last accepted `result` that completed
    /// this job (invariants 3 and 12).
    pub completed_by: Option<(AttemptId, RunnerId)>,
}

/// A runner.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Runner {
    /// Its project (0, or 1 for the outsider).
    pub project: ProjectId,
    /// In contact with the control plane.
    pub connected: bool,
    /// The attempt whose ownership tuple it holds (the last one it claimed).
    pub holding: Option<AttemptId>,
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
}

impl MessageKind {
    /// The protocol's name of the message.
    pub fn name(self) -> &'static str {
        match self {
            Self::Heartbeat => "heartbeat",
            Self::Result(_) => "result",
            Self::Rejoin => "rejoin",
            Self::TargetMutation => "target mutation",
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
}

/// One job's deployment target slot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Target {
    /// How many mutations it applied (saturating at 2).
    pub applied: u8,
    /// The fence of the last applied mutation (0: none).
    pub last_fence: Fence,
    /// The highest fence applied (the fenced target's stored generation).
    pub highest_fence: Fence,
}

/// The whole state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct State {
    /// Server time (`now`). Time is relative: after every step the origin moves to `now`, so
    /// `clock` is 0 in every reachable state and an active attempt's `lease_expiry` is the
    /// number of ticks its lease has left. The verdict functions compare the two, so they also
    /// work on states built with another origin.
    pub clock: u8,
    /// Jobs by id.
    pub jobs: Vec<Job>,
    /// The attempt ledger, in claim order (one ledger for all jobs; each entry names its job).
    pub attempts: Vec<Attempt>,
    /// Runners by id (project-0 runners first, then the outsider).
    pub runners: Vec<Runner>,
    /// Messages sent and never drained: any of them can be delivered (again) at any time.
    pub in_flight: BTreeSet<Message>,
    /// Target slots by job.
    pub targets: Vec<Target>,
}

/// One step of the model, in the protocol's vocabulary.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// R1 `claim` by a connected runner that is not executing (synchronous request and answer).
    Claim { runner: RunnerId },
    /// The runner sends `heartbeat` for the attempt it executes.
    Heartbeat { runner: RunnerId, runner_time: u8 },
    /// The runner sends `result`: it finished executing with `outcome`, or (once, after its
    /// result) a second, conflicting one.
    Result {
        runner: RunnerId,
        outcome: Outcome,
        runner_time: u8,
    },
    /// The runner mutates its job's target directly (once per attempt, connected or not).
    TargetMutation { runner: RunnerId },
    /// The runner's execution stops without an outcome (killed, crashed).
    StopExecuting { runner: RunnerId },
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
}

impl Action {
    /// The protocol's name of the action (the ITF `mbt::actionTaken`).
    pub fn name(&self) -> &'static str {
        match self {
            Action::Claim { .. } => "claim",
            Action::Heartbeat { .. } => "heartbeat",
            Action::Result { .. } => "result",
            Action::TargetMutation { .. } => "target_mutation",
            Action::StopExecuting { .. } => "stop_executing",
            Action::Disconnect { .. } => "disconnect",
            Action::Rejoin { .. } => "rejoin",
            Action::Replay { .. } => "replay",
            Action::Deliver { .. } => "deliver",
            Action::Tick => "tick",
            Action::ExpirySweep => "expiry_sweep",
            Action::Cancel { .. } => "cancel",
            Action::Reconcile { .. } => "reconcile",
            Action::OutsiderCancel { .. } => "outsider_cancel",
            Action::OutsiderReconcile { .. } => "outsider_reconcile",
        }
    }
}
