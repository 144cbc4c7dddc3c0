//! The history checker.
//!
//! Input: the recorded history ([`Op`]s) and the final ledger read from the database after the run
//! ([`Ledger`]). Output: a [`Report`] whose violations each name one of these properties, checked
//! per job:
//!
//! | kind | what must hold |
//! |---|---|
//! | `fence_order` | Accepted claims of a job that are ordered in real time have increasing fences; the ledger's fences increase in claim-time order; the job's fence counter is the last fence. |
//! | `stale_acceptance` | No heartbeat, rejoin or result is accepted for an attempt that was certainly no longer entitled when the call was invoked: its lease had certainly ended (the invocation time is at or after the largest lease expiry any accepted or possibly-applied claim or heartbeat of the attempt invoked before the call completed could have set), or a retry/abort reconciliation, a later claim, an accepted result or a sweep that made the job uncertain had completed before the call was invoked. |
//! | `double_claim` | Between two accepted claims of one job there is an accepted `reconcile(retry)` of the job that fits between them in real time (invoked before the second claim completed, completed after the first was invoked): a job is never claimed again while an earlier claim may still hold it. |
//! | `lost_result` | Every accepted (or acknowledged) result's outcome is the job's committed outcome in the ledger, held by that attempt, with that digest; every accepted adopt or abort is the job's final state. |
//! | `silent_requeue` | Every attempt that is no longer current was ended by an accepted `retry` or `abort` reconciliation naming it (`stopped`): nothing returned a job to the queue without one. |
//! | `end_state` | Every job is `queued` (no current attempt), `running`/`cancelling` with an active attempt whose lease had not expired at the final sweep, `uncertain` with an uncertain attempt, or terminal with the outcome held by its attempt (or aborted/cancelled by a reconciliation). |
//! | `phantom_attempt` | Every attempt in the ledger comes from a claim in the history: an accepted one, or one whose answer was lost (an error, or a caller killed) by the same runner in a matching time window. |
//! | `ledger_mismatch` | Every accepted claim's attempt is in the ledger with the answered fence, lease and runner. |
//! | `unrecorded_message` | Every answered heartbeat, rejoin and result has its observation, with the same named attempt, kind, verdict and reason; the observations beyond those are no more than the calls of that attempt and kind whose outcome is unknown. |
//! | `time_authority` | (store runs, where the recorder reads the store's clock) An accepted claim's or heartbeat's lease expiry is `now + lease_ttl` for a `now` between the call's invocation and completion: the server's receipt time, never the runner's. |
//! | `not_linearizable` | The job's operations can be put in one order consistent with real time in which each answer is the model's verdict (`LeaseModel::expected`) in the model's state after the preceding operations, each effect is the model's (`next_state`), and the final model state equals the ledger (job state, fence, current attempt, cancel request, every attempt's runner and state, the active lease's expiry). |
//!
//! The linearizability search (Wing & Gong with memoization) runs per job on a one-job model: the
//! job's runners and attempts are renumbered (attempt `fence - 1`, lease `fence`), forged tuples map
//! to the model's forged lease and fence. Time enters only through check 11 (`now >=
//! lease_expiry`) and the sweep: each call's `now` is only known to lie between the clock readings
//! at its invocation and completion, and each attempt's lease expiry is tracked as an interval
//! (exact after an accepted claim or heartbeat, whose answer carries it). A call is evaluated with
//! the lease valid and with it expired, wherever the intervals allow each, and the interval is
//! narrowed by the case taken when the two cases give different answers.
//!
//! Calls with an unknown outcome (an error: the transaction may or may not have committed) and
//! calls that never completed may be left out, or placed anywhere after their invocation (and
//! before their completion, if they completed) with whatever answer the model gives. A claim
//! whose answer was lost is only visible in the ledger: the attempt it created is attached to it.
//! Not checked per job: rejected claims (`no_queued_job` does not name a job, and `SKIP LOCKED`
//! may answer it while queued jobs are locked), and sweeps that did not touch the job (a sweep that
//! failed with an error is considered for every job that was ever uncertain).

use super::{short, short_attempt, Answer, Call, Op};
use chrono::{DateTime, Duration, Utc};
use imp::{AttemptId, Decision, JobId, ProjectId, RunnerId};
use leasewright_impl as imp;
use leasewright_model as model;
use serde::Serialize;
use stateright::Model as _;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

mod direct;
mod ledger;
mod linearize;
mod observations;
mod read;
mod split;
#[cfg(test)]
mod tests;

use direct::*;
use ledger::*;
pub use linearize::{linearize, Linearized};
use observations::*;
pub use read::{read_ledger, sweep_margin};
use split::*;

/// One job's final ledger.
#[derive(Clone, Debug)]
pub struct JobLedger {
    pub job: imp::JobView,
    /// In fence order.
    pub attempts: Vec<imp::AttemptView>,
    pub reconciliations: Vec<imp::ReconciliationView>,
    /// Every observation naming the job (`None`: not read, not checked).
    pub observations: Option<Vec<imp::ObservationView>>,
}

/// Every job's final ledger, read after the run.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    pub jobs: BTreeMap<JobId, JobLedger>,
    /// The invocation time of the last sweep, run after every runner had stopped: no job may be
    /// leased with a lease that expired before it.
    pub final_sweep_at: Option<DateTime<Utc>>,
    /// How far past a lease the expiry sweep acts: twice the largest `max_clock_skew` a server
    /// of the database recorded (docs/protocol.md §3.1; zero with one clock).
    pub sweep_margin: chrono::Duration,
}

/// How to check.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// The store's lease ttl.
    pub lease_ttl: Duration,
    /// Whether the recorder read the store's own clock (then `time_authority` is checked).
    pub time_authority: bool,
    /// The most search nodes spent on one job's linearizability; beyond it the job is counted as
    /// undecided (not as a violation).
    pub search_budget: usize,
}

impl CheckConfig {
    /// The defaults for a lease ttl.
    pub fn new(lease_ttl: Duration) -> Self {
        Self {
            lease_ttl,
            time_authority: true,
            search_budget: 200_000,
        }
    }
}

/// Which property a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    FenceOrder,
    StaleAcceptance,
    DoubleClaim,
    LostResult,
    SilentRequeue,
    EndState,
    PhantomAttempt,
    LedgerMismatch,
    UnrecordedMessage,
    TimeAuthority,
    NotLinearizable,
}

impl ViolationKind {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::FenceOrder => "fence_order",
            ViolationKind::StaleAcceptance => "stale_acceptance",
            ViolationKind::DoubleClaim => "double_claim",
            ViolationKind::LostResult => "lost_result",
            ViolationKind::SilentRequeue => "silent_requeue",
            ViolationKind::EndState => "end_state",
            ViolationKind::PhantomAttempt => "phantom_attempt",
            ViolationKind::LedgerMismatch => "ledger_mismatch",
            ViolationKind::UnrecordedMessage => "unrecorded_message",
            ViolationKind::TimeAuthority => "time_authority",
            ViolationKind::NotLinearizable => "not_linearizable",
        }
    }
}

/// One broken property.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// The job, if the violation is about one.
    pub job: Option<String>,
    pub detail: String,
}

/// What the checker found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Calls recorded.
    pub operations: usize,
    /// Calls with a known answer.
    pub completed: usize,
    /// Calls that failed with an error (outcome unknown).
    pub unknown: usize,
    /// Calls that never completed (their caller was killed).
    pub pending: usize,
    /// Jobs in the ledger.
    pub jobs: usize,
    /// Attempts in the ledger.
    pub attempts: usize,
    /// Attempts created by a claim whose answer was lost.
    pub attempts_from_lost_claims: usize,
    /// Accepted results.
    pub accepted_results: usize,
    /// Jobs whose history was found linearizable.
    pub linearizable_jobs: usize,
    /// Jobs whose search ran out of budget (neither found linearizable nor refuted).
    pub undecided_jobs: usize,
    /// The most calls one job's history had.
    pub largest_job: usize,
    /// Final job states.
    pub end_states: BTreeMap<String, usize>,
    /// Answers by call (`heartbeat rejected (lease_expired)`: n): what the run exercised.
    pub answers: BTreeMap<String, usize>,
    pub lost_results: usize,
    pub stale_acceptances: usize,
    pub double_claims: usize,
    pub violations: Vec<Violation>,
}

impl Report {
    /// Violations of `kind`.
    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    /// No violation at all.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Violation counts by kind.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.kind.as_str()).or_insert(0) += 1;
        }
        counts
    }

    /// A readable summary (the first `max_violations` violations in full).
    pub fn render(&self, max_violations: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "operations: {} ({} answered, {} failed with an unknown outcome, {} never completed)",
            self.operations, self.completed, self.unknown, self.pending
        );
        let _ = writeln!(
            out,
            "jobs: {} ({} attempts, {} from claims whose answer was lost); accepted results: {}",
            self.jobs, self.attempts, self.attempts_from_lost_claims, self.accepted_results
        );
        let states: Vec<String> = self
            .end_states
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        let _ = writeln!(out, "end states: {}", states.join(", "));
        let _ = writeln!(
            out,
            "linearizable jobs: {} of {} ({} undecided within the search budget; the largest \
             job history has {} calls)",
            self.linearizable_jobs, self.jobs, self.undecided_jobs, self.largest_job
        );
        let _ = writeln!(
            out,
            "lost results: {}, stale acceptances: {}, double claims: {}, violations in all: {}",
            self.lost_results,
            self.stale_acceptances,
            self.double_claims,
            self.violations.len()
        );
        for v in self.violations.iter().take(max_violations) {
            let job = v.job.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "VIOLATION {} (job {job}):\n{}",
                v.kind.as_str(),
                v.detail
            );
        }
        if self.violations.len() > max_violations {
            let _ = writeln!(
                out,
                "... and {} more violations",
                self.violations.len() - max_violations
            );
        }
        out
    }
}

/// Check `history` against `ledger`.
pub fn check(history: &[Op], ledger: &Ledger, config: &CheckConfig) -> Report {
    let mut report = Report {
        operations: history.len(),
        jobs: ledger.jobs.len(),
        ..Report::default()
    };
    for op in history {
        match &op.answer {
            None => report.pending += 1,
            Some(Answer::Unknown(_)) => report.unknown += 1,
            Some(answer) => {
                report.completed += 1;
                let key = format!("{} {}", op.call.name(), answer_kind(answer));
                *report.answers.entry(key).or_insert(0) += 1;
                if matches!(op.call, Call::Result { .. }) && *answer == Answer::Accepted {
                    report.accepted_results += 1;
                }
            }
        }
    }
    let mut violations = Vec::new();
    let per_job = split(history, ledger, config, &mut violations, &mut report);
    for (job, ops) in &per_job {
        report.largest_job = report.largest_job.max(ops.len());
        let job_ledger = ledger.jobs.get(job);
        check_job(*job, ops, job_ledger, ledger, config, &mut violations);
        if let Some(job_ledger) = job_ledger {
            match linearize(ops, job_ledger, config) {
                Linearized::Yes => report.linearizable_jobs += 1,
                Linearized::Undecided => report.undecided_jobs += 1,
                Linearized::No(detail) => violations.push(Violation {
                    kind: ViolationKind::NotLinearizable,
                    job: Some(job.to_string()),
                    detail,
                }),
            }
        }
    }
    for (job, job_ledger) in &ledger.jobs {
        report.attempts += job_ledger.attempts.len();
        *report
            .end_states
            .entry(job_ledger.job.state.as_str().to_string())
            .or_insert(0) += 1;
        if !per_job.contains_key(job) {
            // Never named by any call: it must still be queued, untouched.
            if job_ledger.job.state != imp::JobState::Queued || !job_ledger.attempts.is_empty() {
                violations.push(Violation {
                    kind: ViolationKind::PhantomAttempt,
                    job: Some(job.to_string()),
                    detail: format!(
                        "the job is {} with {} attempts, but no call in the history named it",
                        job_ledger.job.state,
                        job_ledger.attempts.len()
                    ),
                });
            }
        }
    }
    report.lost_results = count(&violations, ViolationKind::LostResult);
    report.stale_acceptances = count(&violations, ViolationKind::StaleAcceptance);
    report.double_claims = count(&violations, ViolationKind::DoubleClaim);
    violations.sort_by_key(|v| v.kind);
    report.violations = violations;
    report
}

fn count(violations: &[Violation], kind: ViolationKind) -> usize {
    violations.iter().filter(|v| v.kind == kind).count()
}

fn answer_kind(answer: &Answer) -> String {
    match answer {
        Answer::Claimed { .. } | Answer::Extended { .. } | Answer::Accepted => "accepted".into(),
        Answer::Acknowledged => "acknowledged".into(),
        Answer::Continue => "accepted (continue)".into(),
        Answer::CancelInstruction => "accepted (cancel)".into(),
        Answer::Rejected(reason) => format!("rejected ({reason})"),
        Answer::Swept(_) => "uncertain".into(),
        Answer::Unknown(_) => "unknown".into(),
    }
}
