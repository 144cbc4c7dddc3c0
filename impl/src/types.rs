//! The vocabulary of docs/protocol.md as Rust types: identifiers, the ownership tuple, verdicts,
//! reasons and the state names.

use chrono::{DateTime, Utc};
use std::fmt;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh random identifier.
            pub fn new_random() -> Self {
                Self(Uuid::new_v4())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A `project`: owns jobs and runners.
    ProjectId
);
id_type!(
    /// A `runner`: the authenticated sender of runner messages.
    RunnerId
);
id_type!(
    /// A `job`.
    JobId
);
id_type!(
    /// An `attempt`: one execution of a job.
    AttemptId
);
id_type!(
    /// A `lease id`: fresh at every claim, never reused.
    LeaseId
);

/// The `ownership tuple` every runner message carries: the runner is the authenticated sender,
/// the other four are named in the message. Every check binds all five (and the project).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub runner: RunnerId,
    pub job: JobId,
    pub attempt: AttemptId,
    pub lease_id: LeaseId,
    pub fence: i64,
}

/// The verdict of one message (docs/protocol.md §5). The sweep's `uncertain` verdict is
/// [`SweepVerdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<T> {
    /// The rule's effect was applied.
    Accepted(T),
    /// An identical repeat of something already committed: nothing changed, no right renewed.
    Acknowledged,
    /// Nothing changed except the record of the message.
    Rejected(Reason),
}

impl<T> Verdict<T> {
    /// `accepted`, `acknowledged` or `rejected`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Accepted(_) => "accepted",
            Verdict::Acknowledged => "acknowledged",
            Verdict::Rejected(_) => "rejected",
        }
    }

    /// The reason of a rejection.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Verdict::Rejected(reason) => Some(*reason),
            _ => None,
        }
    }

    /// Whether the verdict is `accepted`.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Verdict::Accepted(_))
    }

    /// The accepted value, if any.
    pub fn accepted(self) -> Option<T> {
        match self {
            Verdict::Accepted(value) => Some(value),
            _ => None,
        }
    }

    /// The verdict without its accepted value.
    pub fn without_value(&self) -> Verdict<()> {
        match self {
            Verdict::Accepted(_) => Verdict::Accepted(()),
            Verdict::Acknowledged => Verdict::Acknowledged,
            Verdict::Rejected(reason) => Verdict::Rejected(*reason),
        }
    }
}

/// The verdict of the `expiry sweep` (rule R4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepVerdict {
    /// At least one leased job became `uncertain`: these jobs.
    Uncertain(Vec<JobId>),
    /// No lease had expired; nothing changed.
    Accepted,
}

/// The stable rejection reasons of docs/protocol.md §6 and §8, in the order of §6.1 first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    UnknownRunner,
    UnknownJob,
    WrongProject,
    UnknownAttempt,
    RunnerMismatch,
    LeaseMismatch,
    FenceMismatch,
    NotCurrent,
    ConflictingResult,
    JobFinished,
    LeaseExpired,
    CancelRequested,
    CancelNotRequested,
    SequenceConflict,
    NotFound,
    NoQueuedJob,
    ReconcileRequired,
    NotUncertain,
    ExecutionNotStopped,
    NothingToAdopt,
    StaleFence,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 21] = [
        Reason::UnknownRunner,
        Reason::UnknownJob,
        Reason::WrongProject,
        Reason::UnknownAttempt,
        Reason::RunnerMismatch,
        Reason::LeaseMismatch,
        Reason::FenceMismatch,
        Reason::NotCurrent,
        Reason::ConflictingResult,
        Reason::JobFinished,
        Reason::LeaseExpired,
        Reason::CancelRequested,
        Reason::CancelNotRequested,
        Reason::SequenceConflict,
        Reason::NotFound,
        Reason::NoQueuedJob,
        Reason::ReconcileRequired,
        Reason::NotUncertain,
        Reason::ExecutionNotStopped,
        Reason::NothingToAdopt,
        Reason::StaleFence,
    ];

    /// The stable reason code of docs/protocol.md.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UnknownRunner => "unknown_runner",
            Reason::UnknownJob => "unknown_job",
            Reason::WrongProject => "wrong_project",
            Reason::UnknownAttempt => "unknown_attempt",
            Reason::RunnerMismatch => "runner_mismatch",
            Reason::LeaseMismatch => "lease_mismatch",
            Reason::FenceMismatch => "fence_mismatch",
            Reason::NotCurrent => "not_current",
            Reason::ConflictingResult => "conflicting_result",
            Reason::JobFinished => "job_finished",
            Reason::LeaseExpired => "lease_expired",
            Reason::CancelRequested => "cancel_requested",
            Reason::CancelNotRequested => "cancel_not_requested",
            Reason::SequenceConflict => "sequence_conflict",
            Reason::NotFound => "not_found",
            Reason::NoQueuedJob => "no_queued_job",
            Reason::ReconcileRequired => "reconcile_required",
            Reason::NotUncertain => "not_uncertain",
            Reason::ExecutionNotStopped => "execution_not_stopped",
            Reason::NothingToAdopt => "nothing_to_adopt",
            Reason::StaleFence => "stale_fence",
        }
    }

    /// The reason with this stable code.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == code)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $code:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in the spec's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spec's name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $code),+
                }
            }

            /// The value with the spec's name `code`.
            pub fn from_code(code: &str) -> Option<Self> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named_enum!(
    /// The job states of docs/protocol.md §4.
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
);

impl JobState {
    /// `passed`, `failed`, `cancelled` and `aborted` never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Passed | JobState::Failed | JobState::Cancelled | JobState::Aborted
        )
    }
}

named_enum!(
    /// The attempt states of docs/protocol.md §4.
    AttemptState {
        Active => "active",
        Uncertain => "uncertain",
        Passed => "passed",
        Failed => "failed",
        Cancelled => "cancelled",
        Stopped => "stopped",
    }
);

named_enum!(
    /// The outcome a `result` reports.
    Outcome {
        Passed => "passed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

named_enum!(
    /// What a reconciliation established about the uncertain attempt's execution.
    Finding {
        Stopped => "stopped",
        StillRunning => "still_running",
        ObservedPassed => "observed_passed",
        ObservedFailed => "observed_failed",
    }
);

named_enum!(
    /// What a reconciliation decides.
    Decision {
        Retry => "retry",
        Abort => "abort",
        Adopt => "adopt",
    }
);

named_enum!(
    /// The kinds of deployment target of docs/protocol.md §8.
    TargetKind {
        Fenced => "fenced",
        Idempotent => "idempotent",
        Unfenced => "unfenced",
    }
);

named_enum!(
    /// The kinds of runner message that are recorded as observations.
    MessageKind {
        Heartbeat => "heartbeat",
        Result => "result",
        Rejoin => "rejoin",
        SourceFetch => "source_fetch",
        LogAppend => "log_append",
        ArtifactPut => "artifact_put",
        ArtifactGet => "artifact_get",
        CacheGet => "cache_get",
        CachePut => "cache_put",
    }
);

/// A job to submit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    /// The git revision of the source identity.
    pub source_revision: String,
    /// The canonical source digest of the source identity.
    pub source_digest: String,
    /// The shell command to run.
    pub command: String,
    /// The deployment target slot the job reserves from claim until reconciliation or outcome.
    /// `None`: the job's own slot (`deployment id` = the job, as in docs/protocol.md §8).
    pub target: Option<String>,
    /// The kind of the job's target.
    pub target_kind: TargetKind,
}

impl NewJob {
    /// A job with its own `unfenced` target slot.
    pub fn new(
        source_revision: impl Into<String>,
        source_digest: impl Into<String>,
        command: impl Into<String>,
    ) -> Self {
        Self {
            source_revision: source_revision.into(),
            source_digest: source_digest.into(),
            command: command.into(),
            target: None,
            target_kind: TargetKind::Unfenced,
        }
    }
}

/// One item of a batch result ([`crate::Store::report_results`]): what a single `result` carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultReport {
    pub tuple: Tuple,
    pub outcome: Outcome,
    pub result_digest: String,
    pub runner_time: Option<DateTime<Utc>>,
}

/// What a runner gets from an accepted `claim`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub tuple: Tuple,
    pub lease_expiry: DateTime<Utc>,
    /// The slot token the claim issued for the job's target slot (docs/protocol.md §8.3): carried
    /// on every target mutation of the attempt. Not a fence: it orders the reservations of one
    /// slot, whatever job or project held them.
    pub slot_token: i64,
    /// The job's target slot, the one this claim reserved (docs/protocol.md §8.2), and its kind.
    pub target: String,
    pub target_kind: TargetKind,
    pub source_revision: String,
    pub source_digest: String,
    pub command: String,
}

/// The answer to an accepted `heartbeat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub lease_expiry: DateTime<Utc>,
    pub cancel_requested: bool,
}

/// The answer to `rejoin` (rule R5): the heartbeat verdict the tuple would get, as an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejoinAnswer {
    /// Accepted: keep executing (and heartbeating).
    Continue,
    /// Accepted, but a cancel was requested: stop and report `cancelled`.
    Cancel,
    /// Rejected with this reason: stop executing and report what you observed; it will be kept
    /// as a late observation.
    Stop(Reason),
}

impl RejoinAnswer {
    /// The verdict recorded for the rejoin message.
    pub fn verdict(self) -> Verdict<()> {
        match self {
            RejoinAnswer::Continue | RejoinAnswer::Cancel => Verdict::Accepted(()),
            RejoinAnswer::Stop(reason) => Verdict::Rejected(reason),
        }
    }
}

/// What `source fetch` serves: the job's immutable source identity and command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceIdentity {
    pub source_revision: String,
    pub source_digest: String,
    pub command: String,
}

/// A runner as stored (its token's hash aside): what an operator lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerView {
    pub id: RunnerId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// When it was revoked (`None`: its token authenticates).
    pub revoked_at: Option<DateTime<Utc>>,
    /// Its place in its project's listing (the cursor of a page).
    pub listed_seq: i64,
}

/// A job as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    pub id: JobId,
    pub project: ProjectId,
    pub state: JobState,
    pub current_attempt: Option<AttemptId>,
    pub fence: i64,
    pub cancel_requested: bool,
    /// The committed outcome (`passed`, `failed`, `cancelled` or `aborted`) of a terminal job.
    pub outcome: Option<JobState>,
    pub result_digest: Option<String>,
    pub source_revision: String,
    pub source_digest: String,
    pub command: String,
    pub target: String,
    pub target_kind: TargetKind,
    pub submitted_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// An attempt of the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    pub id: AttemptId,
    pub job: JobId,
    pub runner: RunnerId,
    pub lease_id: LeaseId,
    pub fence: i64,
    /// The slot token the attempt's claim issued (docs/protocol.md §8.3).
    pub slot_token: i64,
    pub state: AttemptState,
    pub lease_expiry: DateTime<Utc>,
    pub outcome: Option<Outcome>,
    pub result_digest: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl AttemptView {
    /// The attempt's ownership tuple.
    pub fn tuple(&self) -> Tuple {
        Tuple {
            runner: self.runner,
            job: self.job,
            attempt: self.id,
            lease_id: self.lease_id,
            fence: self.fence,
        }
    }
}

/// A project's cache entry with who stored it last (a read: [`crate::Store::cache_entry`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntryView {
    pub content: Vec<u8>,
    /// The hex SHA-256 of `content`, recorded when it was stored.
    pub content_sha256: String,
    /// The attempt that stored it last (it may have been pruned since: the entry outlives it).
    pub stored_by_attempt: AttemptId,
    /// That attempt's job; `None` once the job is pruned.
    pub stored_by_job: Option<JobId>,
    pub stored_at: DateTime<Utc>,
}

/// The record of one received runner message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservationView {
    pub id: i64,
    pub kind: MessageKind,
    /// The named tuple as received (the runner is the sender).
    pub named: Tuple,
    /// The attempt the observation is attributed to (§7 notes), if checks 1-5 passed.
    pub attempt: Option<AttemptId>,
    pub received_at: DateTime<Utc>,
    pub runner_time: Option<DateTime<Utc>>,
    pub verdict: Verdict<()>,
    /// The reported outcome of a `result`.
    pub outcome: Option<Outcome>,
    pub payload_sha256: Option<String>,
}

/// The record of one reconciliation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconciliationView {
    pub id: i64,
    pub project: ProjectId,
    pub job: JobId,
    pub attempt: Option<AttemptId>,
    pub finding: Finding,
    pub decision: Decision,
    pub verdict: Verdict<()>,
    pub decided_at: DateTime<Utc>,
}
