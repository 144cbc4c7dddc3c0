//! Concurrent histories: many runners against the real implementation, every call recorded with
//! its invocation and completion, and the history checked against the model (docs/reliability.md).
//!
//! - this module: the vocabulary of a history ([`Call`], [`Answer`], [`Op`]), the [`Recorder`],
//!   the monotonic server clock the recorder and the store share ([`MonotonicClock`]), and
//!   [`Recorded`], a `Store` whose every protocol call is recorded;
//! - [`check`]: the checker (per job: fences, stale acceptances, double claims, lost results,
//!   silent requeues, the end state, and linearizability against the model's verdict functions);
//! - [`load`]: the load generator (runner tasks with random delays, duplicated, late and forged
//!   messages, an expiry sweeper, an operator reconciling uncertain jobs) and its faults;
//! - [`net`]: the same runners over HTTP, through a loopback proxy that drops, delays and
//!   duplicates requests, with control-plane restarts.
//!
//! Time. Real-time order comes from one global counter: every invocation and every completion
//! takes the next number, so "A completed before B was invoked" is `A.completed_seq <
//! B.invoked_seq`. Next to it each op carries the server clock's reading at invocation and at
//! completion; the server's receipt time `now` of the call lies between them (the store reads its
//! clock inside the call). That is what lets the checker decide `lease_expired` without trusting
//! anything the runner says about time.

pub mod check;
pub mod load;
pub mod net;

use chrono::{DateTime, SubsecRound, Utc};
use imp::{
    AttemptId, Clock, Decision, Finding, JobId, Outcome, Reason, RejoinAnswer, RunnerId,
    SweepVerdict, Tuple, Verdict,
};
use leasewright_impl as imp;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// One protocol call as the caller made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// R1 `claim` (one job).
    Claim { runner: RunnerId },
    /// R2 `heartbeat`.
    Heartbeat { tuple: Tuple },
    /// R3 `result`.
    Result {
        tuple: Tuple,
        outcome: Outcome,
        digest: String,
    },
    /// R5 `rejoin`.
    Rejoin { tuple: Tuple },
    /// R4 `expiry sweep` (of the run's project).
    Sweep,
    /// R6 `cancel`.
    Cancel { job: JobId },
    /// R7 `reconcile`.
    Reconcile {
        job: JobId,
        finding: Finding,
        decision: Decision,
    },
}

impl Call {
    /// The rule's name.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Claim { .. } => "claim",
            Call::Heartbeat { .. } => "heartbeat",
            Call::Result { .. } => "result",
            Call::Rejoin { .. } => "rejoin",
            Call::Sweep => "expiry_sweep",
            Call::Cancel { .. } => "cancel",
            Call::Reconcile { .. } => "reconcile",
        }
    }

    /// The job the call names, if it names one.
    pub fn job(&self) -> Option<JobId> {
        match self {
            Call::Heartbeat { tuple } | Call::Result { tuple, .. } | Call::Rejoin { tuple } => {
                Some(tuple.job)
            }
            Call::Cancel { job } | Call::Reconcile { job, .. } => Some(*job),
            Call::Claim { .. } | Call::Sweep => None,
        }
    }

    /// The tuple a runner message carries.
    pub fn tuple(&self) -> Option<&Tuple> {
        match self {
            Call::Heartbeat { tuple } | Call::Result { tuple, .. } | Call::Rejoin { tuple } => {
                Some(tuple)
            }
            _ => None,
        }
    }
}

/// What the implementation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `claim` accepted: the lease.
    Claimed {
        tuple: Tuple,
        lease_expiry: DateTime<Utc>,
    },
    /// `heartbeat` accepted: the new lease expiry.
    Extended {
        lease_expiry: DateTime<Utc>,
        cancel_requested: bool,
    },
    /// `result`, `cancel`, `reconcile` accepted; `expiry sweep` with nothing expired.
    Accepted,
    /// An identical repeat.
    Acknowledged,
    /// `rejoin` accepted: keep executing.
    Continue,
    /// `rejoin` accepted with a cancel request: stop and report `cancelled`.
    CancelInstruction,
    /// Rejected with this reason (a rejected `rejoin` is the instruction `stop`).
    Rejected(Reason),
    /// `expiry sweep`: these jobs became `uncertain`.
    Swept(Vec<JobId>),
    /// The call failed (database unavailable, connection killed, network): it may or may not
    /// have taken effect. The text is for the report only.
    Unknown(String),
}

impl Answer {
    /// A short name of the answer (`accepted`, `rejected(lease_expired)`, ...).
    pub fn describe(&self) -> String {
        match self {
            Answer::Claimed { tuple, .. } => format!("accepted (fence {})", tuple.fence),
            Answer::Extended {
                cancel_requested, ..
            } => {
                if *cancel_requested {
                    "accepted (cancel requested)".into()
                } else {
                    "accepted".into()
                }
            }
            Answer::Accepted => "accepted".into(),
            Answer::Acknowledged => "acknowledged".into(),
            Answer::Continue => "accepted (continue)".into(),
            Answer::CancelInstruction => "accepted (cancel)".into(),
            Answer::Rejected(reason) => format!("rejected ({reason})"),
            Answer::Swept(jobs) => format!("uncertain ({} jobs)", jobs.len()),
            Answer::Unknown(why) => format!("unknown ({why})"),
        }
    }
}

/// One recorded call: who made it, what it was, when it was invoked and completed, and the answer.
#[derive(Clone, Debug)]
pub struct Op {
    /// Its index in the history.
    pub id: usize,
    /// Who made it (`runner-3`, `late`, `sweeper`, `operator`, `proxy-duplicate`, ...).
    pub client: String,
    pub call: Call,
    /// The runner's observed time it carried (diagnostic only).
    pub runner_time: Option<DateTime<Utc>>,
    /// Position of the invocation in the global order.
    pub invoked_seq: u64,
    /// The server clock at invocation (microseconds, rounded down).
    pub invoked_at: DateTime<Utc>,
    /// Position of the completion in the global order; `None`: never completed (the caller was
    /// killed, or the run ended first).
    pub completed_seq: Option<u64>,
    /// The server clock at completion.
    pub completed_at: Option<DateTime<Utc>>,
    /// The answer; `None` exactly when the call never completed.
    pub answer: Option<Answer>,
}

impl Op {
    /// Whether the answer is known (the call completed with a verdict, not an error).
    pub fn is_known(&self) -> bool {
        !matches!(self.answer, None | Some(Answer::Unknown(_)))
    }

    /// One line: `#12 runner-3 heartbeat(job .., fence 2) -> accepted [inv 40, comp 43]`.
    pub fn describe(&self) -> String {
        let call = match &self.call {
            Call::Claim { .. } => "claim".to_string(),
            Call::Heartbeat { tuple } | Call::Rejoin { tuple } => format!(
                "{}(attempt {}, fence {})",
                self.call.name(),
                short(&tuple.attempt.0),
                tuple.fence
            ),
            Call::Result { tuple, outcome, .. } => format!(
                "result {outcome}(attempt {}, fence {})",
                short(&tuple.attempt.0),
                tuple.fence
            ),
            Call::Sweep => "expiry_sweep".to_string(),
            Call::Cancel { .. } => "cancel".to_string(),
            Call::Reconcile {
                finding, decision, ..
            } => format!("reconcile({finding}, {decision})"),
        };
        let answer = match &self.answer {
            Some(answer) => answer.describe(),
            None => "never completed".into(),
        };
        let completed = match (self.completed_seq, self.completed_at) {
            (Some(seq), Some(at)) => format!("{seq} @{}", at.format("%H:%M:%S%.6f")),
            _ => "-".into(),
        };
        format!(
            "#{} {} {call} -> {answer} [invoked {} @{}, completed {completed}]",
            self.id,
            self.client,
            self.invoked_seq,
            self.invoked_at.format("%H:%M:%S%.6f")
        )
    }
}

/// The first eight hex digits of an id, for reports.
/// Retries of the harness's own set-up calls (a final sweep or ledger read after a database
/// outage, a server restarted under load): `times` more tries, `every` apart.
pub(crate) fn retries(every: std::time::Duration, times: usize) -> backon::ConstantBuilder {
    backon::ConstantBuilder::default()
        .with_delay(every)
        .with_max_times(times)
}

pub fn short(id: &uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

/// A server clock that never goes back: a fixed start plus the time elapsed on a monotonic
/// `Instant`. The store under test and the recorder read the same one, so the recorder's
/// readings bracket the store's receipt time of every call.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    start_utc: DateTime<Utc>,
    start: Instant,
}

impl MonotonicClock {
    /// A clock that starts at the system time now.
    pub fn new() -> Self {
        Self {
            start_utc: Utc::now().trunc_subsecs(6),
            start: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = chrono::Duration::from_std(self.start.elapsed()).unwrap_or_default();
        self.start_utc + elapsed
    }
}

/// Records every call: invocation and completion numbers from one counter, clock readings, the
/// answer. Cheap to share (`Arc`).
pub struct Recorder {
    clock: Arc<dyn Clock>,
    seq: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("ops", &self.len())
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder reading `clock` (the server's clock, or one that brackets it).
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            seq: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
        })
    }

    fn ops(&self) -> std::sync::MutexGuard<'_, Vec<Op>> {
        self.ops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Record the invocation of `call`; returns the op's index for [`Recorder::complete`].
    pub fn invoke(&self, client: &str, call: Call, runner_time: Option<DateTime<Utc>>) -> usize {
        let mut ops = self.ops();
        // Under the lock: the counter's order is the order of the entries.
        let invoked_seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let invoked_at = self.clock.now().trunc_subsecs(6);
        let id = ops.len();
        ops.push(Op {
            id,
            client: client.to_owned(),
            call,
            runner_time,
            invoked_seq,
            invoked_at,
            completed_seq: None,
            completed_at: None,
            answer: None,
        });
        id
    }

    /// Record the completion of op `id` with `answer`.
    pub fn complete(&self, id: usize, answer: Answer) {
        let mut ops = self.ops();
        let completed_seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let completed_at = self.clock.now();
        if let Some(op) = ops.get_mut(id) {
            op.completed_seq = Some(completed_seq);
            op.completed_at = Some(completed_at);
            op.answer = Some(answer);
        }
    }

    /// How many calls were invoked so far.
    pub fn len(&self) -> usize {
        self.ops().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the history so far.
    pub fn snapshot(&self) -> Vec<Op> {
        self.ops().clone()
    }

    /// The clock the recorder reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

fn unknown(error: &imp::Error) -> Answer {
    Answer::Unknown(error.to_string())
}

/// A [`imp::Store`] whose every protocol call is recorded. Errors are recorded as
/// [`Answer::Unknown`] and returned.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub store: imp::Store,
    pub recorder: Arc<Recorder>,
    /// The project the sweeps are restricted to.
    pub project: imp::ProjectId,
}

impl Recorded {
    /// R1 `claim` by `runner`.
    pub async fn claim(
        &self,
        client: &str,
        runner: RunnerId,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::Lease>, imp::Error> {
        let id = self
            .recorder
            .invoke(client, Call::Claim { runner }, runner_time);
        let result = self.store.claim(runner, runner_time).await;
        self.recorder.complete(
            id,
            match &result {
                Ok(Verdict::Accepted(lease)) => Answer::Claimed {
                    tuple: lease.tuple,
                    lease_expiry: lease.lease_expiry,
                },
                Ok(Verdict::Acknowledged) => Answer::Acknowledged,
                Ok(Verdict::Rejected(reason)) => Answer::Rejected(*reason),
                Err(error) => unknown(error),
            },
        );
        result
    }

    /// R2 `heartbeat`.
    pub async fn heartbeat(
        &self,
        client: &str,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::HeartbeatAnswer>, imp::Error> {
        let id = self
            .recorder
            .invoke(client, Call::Heartbeat { tuple: *tuple }, runner_time);
        let result = self.store.heartbeat(tuple, runner_time).await;
        self.recorder.complete(
            id,
            match &result {
                Ok(Verdict::Accepted(answer)) => Answer::Extended {
                    lease_expiry: answer.lease_expiry,
                    cancel_requested: answer.cancel_requested,
                },
                Ok(Verdict::Acknowledged) => Answer::Acknowledged,
                Ok(Verdict::Rejected(reason)) => Answer::Rejected(*reason),
                Err(error) => unknown(error),
            },
        );
        result
    }

    /// R3 `result`.
    pub async fn result(
        &self,
        client: &str,
        tuple: &Tuple,
        outcome: Outcome,
        digest: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, imp::Error> {
        let call = Call::Result {
            tuple: *tuple,
            outcome,
            digest: digest.to_owned(),
        };
        let id = self.recorder.invoke(client, call, runner_time);
        let result = self
            .store
            .report_result(tuple, outcome, digest, runner_time)
            .await;
        self.recorder.complete(id, verdict_answer(&result));
        result
    }

    /// R5 `rejoin`.
    pub async fn rejoin(
        &self,
        client: &str,
        tuple: &Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<RejoinAnswer, imp::Error> {
        let id = self
            .recorder
            .invoke(client, Call::Rejoin { tuple: *tuple }, runner_time);
        let result = self.store.rejoin(tuple, runner_time).await;
        self.recorder.complete(
            id,
            match &result {
                Ok(RejoinAnswer::Continue) => Answer::Continue,
                Ok(RejoinAnswer::Cancel) => Answer::CancelInstruction,
                Ok(RejoinAnswer::Stop(reason)) => Answer::Rejected(*reason),
                Err(error) => unknown(error),
            },
        );
        result
    }

    /// R4 `expiry sweep` of the run's project.
    pub async fn sweep(&self, client: &str) -> Result<SweepVerdict, imp::Error> {
        let id = self.recorder.invoke(client, Call::Sweep, None);
        let result = self.store.sweep_expired_in(Some(self.project)).await;
        self.recorder.complete(
            id,
            match &result {
                Ok(SweepVerdict::Uncertain(jobs)) => Answer::Swept(jobs.clone()),
                Ok(SweepVerdict::Accepted) => Answer::Accepted,
                Err(error) => unknown(error),
            },
        );
        result
    }

    /// R6 `cancel`.
    pub async fn cancel(&self, client: &str, job: JobId) -> Result<Verdict<()>, imp::Error> {
        let id = self.recorder.invoke(client, Call::Cancel { job }, None);
        let result = self.store.cancel(self.project, job).await;
        self.recorder.complete(id, verdict_answer(&result));
        result
    }

    /// R7 `reconcile`.
    pub async fn reconcile(
        &self,
        client: &str,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Result<Verdict<()>, imp::Error> {
        let call = Call::Reconcile {
            job,
            finding,
            decision,
        };
        let id = self.recorder.invoke(client, call, None);
        let result = self
            .store
            .reconcile(self.project, job, finding, decision)
            .await;
        self.recorder.complete(id, verdict_answer(&result));
        result
    }
}

fn verdict_answer(result: &Result<Verdict<()>, imp::Error>) -> Answer {
    match result {
        Ok(Verdict::Accepted(())) => Answer::Accepted,
        Ok(Verdict::Acknowledged) => Answer::Acknowledged,
        Ok(Verdict::Rejected(reason)) => Answer::Rejected(*reason),
        Err(error) => unknown(error),
    }
}

/// How many faults of each kind a run injected.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultCounts {
    /// `pg_terminate_backend` rounds (each kills every client connection of the database).
    pub connection_kills: u64,
    /// Connections terminated in all.
    pub connections_killed: u64,
    /// PostgreSQL restarts.
    pub postgres_restarts: u64,
    /// Runner tasks killed abruptly (dropped mid-operation).
    pub runner_kills: u64,
    /// Runners whose observed time is hours off.
    pub skewed_runners: u64,
    /// Requests the proxy dropped (before or after forwarding).
    pub proxy_drops: u64,
    /// Requests the proxy delayed.
    pub proxy_delays: u64,
    /// Requests the proxy delivered twice.
    pub proxy_duplicates: u64,
    /// Control-plane server restarts.
    pub server_restarts: u64,
}

impl FaultCounts {
    /// The number of fault events (kills, restarts, proxy interventions, skewed runners).
    pub fn total(&self) -> u64 {
        self.connection_kills
            + self.postgres_restarts
            + self.runner_kills
            + self.skewed_runners
            + self.proxy_drops
            + self.proxy_delays
            + self.proxy_duplicates
            + self.server_restarts
    }
}

/// A short attempt id for reports.
pub fn short_attempt(attempt: &AttemptId) -> String {
    short(&attempt.0)
}
