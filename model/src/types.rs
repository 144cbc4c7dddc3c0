//! The protocol's vocabulary: identifiers, states, verdicts and reasons (docs/protocol.md §2, §4–6).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A runner, by index into [`crate::State::runners`]. Identifiers are opaque: never compared by order.
pub type RunnerId = u8;
/// A job, by index into [`crate::State::jobs`] (and the job's own target slot, `deployment id` = job).
pub type JobId = u8;
/// An attempt, by index into the attempt ledger [`crate::State::attempts`].
pub type AttemptId = u8;
/// A lease id. Fresh at every claim and never reused; `0` is never issued (see [`FORGED_LEASE`]).
pub type LeaseId = u8;
/// An attempt's generation. Per job `1, 2, …`; `0` means "no attempt yet".
pub type Fence = u8;
/// A project. Project `0` is the checked project; project `1` is the outsider's.
pub type ProjectId = u8;
/// A target slot, by index into [`crate::State::targets`] (one global namespace, §8.1).
pub type SlotId = u8;
/// A slot token (§8.3): per slot `1, 2, …` in reservation order; `0` means "never reserved".
pub type Token = u8;
/// A result digest (§7 notes): opaque, only compared. A runner's first report carries `0`; a
/// second, conflicting report with the same outcome carries `1`.
pub type Digest = u8;

/// The lease id a forger puts in a tuple: never issued by `claim`.
pub const FORGED_LEASE: LeaseId = 0;
/// The fence a forger puts in a tuple (the "999" of scenario 2): larger than any fence issued.
pub const FORGED_FENCE: Fence = 99;

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The one name of this value in docs/protocol.md (stable; never renamed).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| {
                        let names: Vec<&str> = $name::ALL.iter().map(|v| v.as_str()).collect();
                        format!("unknown {} `{s}`; expected one of: {}", stringify!($name), names.join(", "))
                    })
            }
        }
    };
}

named_enum! {
    /// A job's state (§4 "Job").
    JobState {
        Queued => "queued",
        Running => "running",
        Cancelling => "cancelling",
        Uncertain => "uncertain",
        Passed => "passed",
        Failed => "failed",
        Cancelled => "cancelled",
        Aborted => "aborted",
    }
}

impl JobState {
    /// `passed`, `failed`, `cancelled`, `aborted`: never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Passed | Self::Failed | Self::Cancelled | Self::Aborted
        )
    }

    /// `running`, `cancelling`: the current attempt holds a lease.
    pub fn is_leased(self) -> bool {
        matches!(self, Self::Running | Self::Cancelling)
    }
}

named_enum! {
    /// An attempt's state (§4 "Attempt").
    AttemptState {
        Active => "active",
        Uncertain => "uncertain",
        Passed => "passed",
        Failed => "failed",
        Cancelled => "cancelled",
        Stopped => "stopped",
    }
}

impl AttemptState {
    /// The attempt holds a committed outcome.
    pub fn outcome(self) -> Option<Outcome> {
        match self {
            Self::Passed => Some(Outcome::Passed),
            Self::Failed => Some(Outcome::Failed),
            Self::Cancelled => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}

named_enum! {
    /// The outcome a `result` carries (with a result digest: two results are identical when
    /// outcome and digest are equal).
    Outcome {
        Passed => "passed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl Outcome {
    /// The job state that commits this outcome.
    pub fn job_state(self) -> JobState {
        match self {
            Self::Passed => JobState::Passed,
            Self::Failed => JobState::Failed,
            Self::Cancelled => JobState::Cancelled,
        }
    }

    /// The attempt state that holds this outcome.
    pub fn attempt_state(self) -> AttemptState {
        match self {
            Self::Passed => AttemptState::Passed,
            Self::Failed => AttemptState::Failed,
            Self::Cancelled => AttemptState::Cancelled,
        }
    }
}

named_enum! {
    /// What a reconciliation establishes about the old attempt's execution (R7).
    Finding {
        Stopped => "stopped",
        StillRunning => "still_running",
        ObservedPassed => "observed_passed",
        ObservedFailed => "observed_failed",
    }
}

named_enum! {
    /// What a reconciliation decides (R7).
    Decision {
        Retry => "retry",
        Abort => "abort",
        Adopt => "adopt",
    }
}

named_enum! {
    /// The verdict of one message (§5).
    Verdict {
        Accepted => "accepted",
        Acknowledged => "acknowledged",
        Rejected => "rejected",
        Uncertain => "uncertain",
    }
}

named_enum! {
    /// A rejection reason (§6, §8). `as_str()` is the stable code.
    Reason {
        UnknownRunner => "unknown_runner",
        UnknownJob => "unknown_job",
        WrongProject => "wrong_project",
        UnknownAttempt => "unknown_attempt",
        RunnerMismatch => "runner_mismatch",
        LeaseMismatch => "lease_mismatch",
        FenceMismatch => "fence_mismatch",
        NotCurrent => "not_current",
        ConflictingResult => "conflicting_result",
        JobFinished => "job_finished",
        LeaseExpired => "lease_expired",
        CancelRequested => "cancel_requested",
        CancelNotRequested => "cancel_not_requested",
        SequenceConflict => "sequence_conflict",
        NotFound => "not_found",
        NoQueuedJob => "no_queued_job",
        ReconcileRequired => "reconcile_required",
        NotUncertain => "not_uncertain",
        ExecutionNotStopped => "execution_not_stopped",
        NothingToAdopt => "nothing_to_adopt",
        StaleFence => "stale_fence",
    }
}

named_enum! {
    /// The deployment target's kind (§8).
    TargetKind {
        Fenced => "fenced",
        Idempotent => "idempotent",
        Unfenced => "unfenced",
    }
}

named_enum! {
    /// Which server the model runs: the protocol (`none`) or one flawed design that a property
    /// must catch. Each flawed design changes exactly one rule.
    Variant {
        /// The protocol of docs/protocol.md.
        None => "none",
        /// The `expiry sweep` returns a leased job to `queued` (a timer requeues running work).
        RequeueOnExpiry => "requeue-on-expiry",
        /// A `heartbeat` skips check 11's `now >= lease_expiry` test and so extends an expired,
        /// unswept lease.
        HeartbeatExtendsExpired => "heartbeat-extends-expired",
        /// A `result` is accepted when its sender is the runner of the job's current attempt; the
        /// rest of the tuple is not checked.
        CompletionChecksRunnerOnly => "completion-checks-runner-only",
        /// A `result` is accepted when its fence equals the named job's fence: a number not bound to
        /// project, runner, attempt or lease.
        CompletionChecksFenceOnly => "completion-checks-fence-only",
        /// A conflicting result from the attempt holding the committed outcome replaces it.
        ConflictOverwrites => "conflict-overwrites",
        /// The `expiry sweep` retries automatically (attempt `stopped`, job `queued`) without a
        /// reconciliation, against an `unfenced` target.
        AutoRetryUnfenced => "auto-retry-unfenced",
        /// A `result` skips check 11: the current attempt's result is accepted after its lease
        /// expired (swept or not).
        ResultAfterExpiry => "result-after-expiry",
        /// A reconciliation `retry` skips §6.3 check 6: a job with a cancel request is retried.
        RetryAfterCancel => "retry-after-cancel",
        /// §6.1 check 5 is skipped: the attempt's runner is not compared with the sender.
        RunnerNotChecked => "runner-not-checked",
        /// §6.1 check 6 is skipped: the lease id is not compared.
        LeaseNotChecked => "lease-not-checked",
        /// §6.1 check 7 is skipped: the fence is not compared.
        FenceNotChecked => "fence-not-checked",
        /// An accepted `heartbeat` takes the new expiry from the runner's clock
        /// (`runner_time + lease_ttl`) instead of the server's receipt time.
        RunnerClockExtendsLease => "runner-clock-extends-lease",
        /// A rejected result of a non-current or expired attempt is dropped, not recorded as a late
        /// observation of its attempt.
        LateReportDropped => "late-report-dropped",
        /// A conflicting result is rejected but not recorded (no observation).
        ConflictNotRecorded => "conflict-not-recorded",
        /// Results are identical when their outcomes are equal: the digest is not compared, so
        /// "same outcome, other digest" is acknowledged instead of recorded as a conflict.
        DigestIgnored => "digest-ignored",
        /// The `fenced` target ignores the slot token it is sent: it applies every mutation.
        TargetIgnoresFence => "target-ignores-fence",
        /// The fenced target compares job fences instead of slot tokens (the slot's highest job
        /// fence, whatever job it came from); checked with jobs of both projects on one slot.
        SlotComparesJobFences => "slot-compares-job-fences",
        /// A claim skips only jobs whose slot is reserved by a job of the claimer's own project,
        /// while slot names are global; checked with jobs of both projects on one slot.
        ReservationPerProject => "reservation-per-project",
        /// The `expiry sweep` releases the slot of a job it makes `uncertain`; checked with two
        /// jobs on one slot.
        UncertainReleasesSlot => "uncertain-releases-slot",
        /// A reconciliation `retry` leaves the slot reserved (it is released only when the job
        /// commits): the requeued job can never be claimed again.
        RetryKeepsSlot => "retry-keeps-slot",
        /// An accepted `heartbeat` sets the expiry to `now + lease_ttl / 2` (the heartbeat
        /// interval) instead of `now + lease_ttl`: a heartbeat soon after a grant shortens the lease.
        HeartbeatShortensLease => "heartbeat-shortens-lease",
        /// After a failover, claims issue `job.fence + 1` and `counter + 1` from the restored
        /// state, without the epoch: the fences and slot tokens the lost transition issued are
        /// issued again, to another attempt.
        FailoverWithoutEpoch => "failover-without-epoch",
        /// After a failover, claims go on at once instead of waiting until every lease of the
        /// earlier epoch has expired: a job whose claim was lost is claimed again while the lost
        /// attempt's execution still runs.
        FailoverWithoutWait => "failover-without-wait",
        /// With servers that differ in lease ttl ([`crate::Config::policy_ttl`]): a new primary
        /// is not given the live servers' lease policy again before claims go on, so when a
        /// failover lost the larger ttl's record the wait after the next failover is the smaller
        /// ttl, and a job whose claim was lost is claimed again while the lost attempt's runner
        /// still rightly executes under its larger lease.
        FailoverForgetsPolicy => "failover-forgets-policy",
        /// With replica clocks ([`crate::Config::replica_skew`]): the expiry sweep and the wait
        /// after an epoch change act `replica_skew` past a lease instead of `2 × replica_skew`
        /// (docs/protocol.md §3.1): a replica whose clock is behind records the epoch's start,
        /// one ahead lets the claims go, and a job whose claim was lost is claimed again while
        /// the lost attempt's runner still rightly executes.
        HalfSkewMargin => "half-skew-margin",
        /// With replica clocks: the expiry sweep acts `replica_skew` past a lease instead of
        /// `2 × replica_skew` (the wait after an epoch change keeps its margin): a replica ahead
        /// sweeps a lease a replica behind granted while its runner still rightly executes by
        /// its own reckoning (§2's duty), and a reconciliation that records `stopped` on the
        /// basis of that duty lets a retry run beside it (docs/protocol.md §3.1).
        SweepWithoutSkewMargin => "sweep-without-skew-margin",
        /// With replica clocks: the expiry sweep acts at the lease's expiry itself (no margin).
        SweepAtLeaseExpiry => "sweep-at-lease-expiry",
        /// `rejoin` is answered like a heartbeat and extends the lease, even an expired one.
        RejoinResurrectsLease => "rejoin-resurrects-lease",
        /// A reconciliation accepts the finding `still_running` (skips §6.3 check 4) and retries.
        /// Checked with runners that may break §2's duty ([`crate::Config::duty_ignored`]):
        /// where every runner keeps it, a swept job's execution has stopped.
        StillRunningAllowsRetry => "still-running-allows-retry",
        /// The operator's finding is not established: a reconciliation may record `stopped` while
        /// the execution still runs (an untruthful finding). Checked with runners that may break
        /// §2's duty ([`crate::Config::duty_ignored`]), where `stopped` cannot rest on the duty.
        UntruthfulFinding => "untruthful-finding",
        /// A claim does not advance the job's fence: every attempt gets fence 1.
        FenceReused => "fence-reused",
        /// The slot's token counter lives in its reservation and is dropped on release: every
        /// claim issues slot token 1.
        SlotTokenResets => "slot-token-resets",
        /// The `idempotent` target keys what it applied by attempt instead of by deployment id: a
        /// retry deploys again.
        IdempotencyKeyPerAttempt => "idempotency-key-per-attempt",
        /// The server attributes a record to the attempt the message names whenever that
        /// attempt exists, whoever sent it: another runner's, or another project's, message lands
        /// in the attempt's ledger (§7 notes: only checks 1–5 attribute).
        RecordByNamedAttempt => "record-by-named-attempt",
        /// The side effects of R8 check only who is speaking (§6.1 checks 1–5: the runner named
        /// the attempt it claimed), not the lease, the fence or whether the attempt may still act
        /// (checks 6–13): a stale worker's cache put is accepted after its lease expired.
        SideEffectsCheckRunnerOnly => "side-effects-check-runner-only",
        /// The cache is keyed by key alone, not by (project, key): one cache shared by every
        /// project, so another project's runner's entry is served (§7.1: per project).
        CacheSharedAcrossProjects => "cache-shared-across-projects",
        /// The batch claim takes every job of the K earliest claimable ones, two jobs of one slot
        /// included (no "at most one job per slot").
        BatchTwoPerSlot => "batch-two-per-slot",
        /// Of the K earliest claimable jobs, the batch claim takes the latest job of each slot
        /// instead of the earliest.
        BatchSkipsEarliest => "batch-skips-earliest",
        /// The batch claim looks at the K earliest queued jobs whatever their slot and keeps those
        /// whose slot is free: it does not walk past jobs waiting on busy slots, so it takes fewer
        /// than the rule's K earliest claimable jobs (the bug class of issue 28, item 2).
        BatchStopsAtBusySlot => "batch-stops-at-busy-slot",
        /// The batch claim issues one slot token for the whole batch: every job it takes gets
        /// the earliest job's slot token, and only that slot's counter advances, so a later
        /// reservation of another job's slot is issued a token that slot issued already.
        BatchOneSlotToken => "batch-one-slot-token",
    }
}

impl Variant {
    /// The target kind this variant needs to show its flaw, if it needs one.
    pub fn required_target(self) -> Option<TargetKind> {
        match self {
            Self::AutoRetryUnfenced => Some(TargetKind::Unfenced),
            Self::TargetIgnoresFence | Self::SlotComparesJobFences => Some(TargetKind::Fenced),
            Self::IdempotencyKeyPerAttempt => Some(TargetKind::Idempotent),
            _ => None,
        }
    }

    /// This variant's flaw is in the slot reservation or slot tokens: it shows only when several
    /// jobs share one slot.
    pub fn needs_shared_slot(self) -> bool {
        matches!(
            self,
            Self::SlotComparesJobFences | Self::ReservationPerProject | Self::UncertainReleasesSlot
        )
    }

    /// This variant's flaw is in what the server writes into its ledger: it is checked with the
    /// ledger in the state ([`crate::Config::ledger`]).
    pub fn needs_ledger(self) -> bool {
        matches!(
            self,
            Self::LateReportDropped | Self::ConflictNotRecorded | Self::RecordByNamedAttempt
        )
    }

    /// This variant's flaw shows only with a job of the outsider's project (on the shared slot,
    /// or in the cache).
    pub fn needs_outsider_job(self) -> bool {
        matches!(
            self,
            Self::SlotComparesJobFences
                | Self::ReservationPerProject
                | Self::CacheSharedAcrossProjects
        )
    }

    /// This variant's flaw shows only where replica clocks differ
    /// ([`crate::Config::replica_skew`]).
    pub fn needs_replica_clocks(self) -> bool {
        matches!(
            self,
            Self::HalfSkewMargin | Self::SweepWithoutSkewMargin | Self::SweepAtLeaseExpiry
        )
    }

    /// This variant's harm shows only where a runner may execute past the end of its own lease
    /// (a runner that breaks docs/protocol.md §2's duty, [`crate::Config::duty_ignored`]): where
    /// every runner keeps the duty, a lease that has expired by one clock has no execution left
    /// under it, so a timer's requeue or a retry after it runs nothing twice. These are the
    /// designs that trust the duty instead of an established finding: a reconciliation must not
    /// retry a job whose execution still runs, and no timer may requeue one.
    pub fn needs_duty_ignored(self) -> bool {
        matches!(
            self,
            Self::StillRunningAllowsRetry
                | Self::UntruthfulFinding
                | Self::RequeueOnExpiry
                | Self::AutoRetryUnfenced
        )
    }

    /// This variant's flaw shows after a failover: it is checked with one
    /// ([`crate::Config::failover`]).
    pub fn needs_failover(self) -> bool {
        matches!(
            self,
            Self::FailoverWithoutEpoch
                | Self::FailoverWithoutWait
                | Self::HalfSkewMargin
                | Self::FailoverForgetsPolicy
        ) || self.needs_reissued_ids()
    }

    /// This variant's harm shows only where an attempt id and lease id are issued twice: it is
    /// checked with a failover that reissues them ([`crate::Config::reissued_ids`]), so that the
    /// lost claim's execution and the next claim's differ only by the fence.
    pub fn needs_reissued_ids(self) -> bool {
        matches!(self, Self::FenceNotChecked | Self::FenceReused)
    }

    /// This variant's flaw is in the batch claim: it is checked with batch claims
    /// ([`crate::Config::batch_claim`]) and jobs that share a slot.
    pub fn needs_batch_claim(self) -> bool {
        matches!(
            self,
            Self::BatchTwoPerSlot
                | Self::BatchSkipsEarliest
                | Self::BatchStopsAtBusySlot
                | Self::BatchOneSlotToken
        )
    }

    /// This variant's flaw is in the side effects of R8: it is checked with them
    /// ([`crate::Config::side_effects`]).
    pub fn needs_side_effects(self) -> bool {
        matches!(
            self,
            Self::SideEffectsCheckRunnerOnly | Self::CacheSharedAcrossProjects
        )
    }
}

/// The answer the model's server (or target) gives to one step: a verdict and, for a rejection,
/// exactly one reason.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Expected {
    /// The verdict (§5).
    pub verdict: Verdict,
    /// The reason, present exactly when the verdict is `rejected`.
    pub reason: Option<Reason>,
}

impl Expected {
    /// `accepted`.
    pub const ACCEPTED: Expected = Expected {
        verdict: Verdict::Accepted,
        reason: None,
    };
    /// `acknowledged`.
    pub const ACKNOWLEDGED: Expected = Expected {
        verdict: Verdict::Acknowledged,
        reason: None,
    };
    /// `uncertain` (the expiry sweep made at least one job uncertain).
    pub const UNCERTAIN: Expected = Expected {
        verdict: Verdict::Uncertain,
        reason: None,
    };

    /// `rejected` with `reason`.
    pub fn rejected(reason: Reason) -> Expected {
        Expected {
            verdict: Verdict::Rejected,
            reason: Some(reason),
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            Some(reason) => write!(f, "{} ({})", self.verdict, reason),
            None => write!(f, "{}", self.verdict),
        }
    }
}
