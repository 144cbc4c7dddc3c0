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
}

/// Read the ledger of every job of `project` (`parallel` readers).
pub async fn read_ledger(
    store: &imp::Store,
    project: ProjectId,
    parallel: usize,
) -> Result<Ledger, imp::Error> {
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE project_id = $1 ORDER BY submitted_seq")
            .bind(project.0)
            .fetch_all(store.pool())
            .await
            .map_err(imp::Error::Database)?;
    let parallel = parallel.max(1);
    let chunks: Vec<Vec<JobId>> = (0..parallel)
        .map(|k| {
            ids.iter()
                .skip(k)
                .step_by(parallel)
                .map(|id| JobId(*id))
                .collect()
        })
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for id in chunk {
                let Some(job) = store.job(id).await? else {
                    continue;
                };
                let attempts = store.attempts(id).await?;
                let reconciliations = store.reconciliations(id).await?;
                let observations = Some(store.observations(id).await?);
                out.push(JobLedger {
                    job,
                    attempts,
                    reconciliations,
                    observations,
                });
            }
            Ok::<_, imp::Error>(out)
        }));
    }
    let mut ledger = Ledger::default();
    for task in tasks {
        let jobs = task
            .await
            .map_err(|_| imp::Error::Invariant("a ledger reader panicked"))??;
        for job in jobs {
            ledger.jobs.insert(job.job.id, job);
        }
    }
    Ok(ledger)
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

/// The history split per job. An attempt in the ledger that no accepted claim answered is
/// attached to a claim of the same runner whose answer was lost (a synthetic op with the ledger's
/// lease is added to the job); sweeps that failed are added to every job that was ever uncertain.
fn split(
    history: &[Op],
    ledger: &Ledger,
    config: &CheckConfig,
    violations: &mut Vec<Violation>,
    report: &mut Report,
) -> BTreeMap<JobId, Vec<Op>> {
    let mut per_job: BTreeMap<JobId, Vec<Op>> = BTreeMap::new();
    let mut lost_claims: Vec<&Op> = Vec::new();
    let mut lost_sweeps: Vec<&Op> = Vec::new();
    let mut claimed: HashSet<AttemptId> = HashSet::new();
    for op in history {
        match (&op.call, &op.answer) {
            (Call::Claim { .. }, Some(Answer::Claimed { tuple, .. })) => {
                claimed.insert(tuple.attempt);
                per_job.entry(tuple.job).or_default().push(op.clone());
            }
            (Call::Claim { .. }, Some(Answer::Unknown(_)) | None) => lost_claims.push(op),
            (Call::Claim { .. }, _) => {}
            (Call::Sweep, Some(Answer::Swept(jobs))) => {
                for job in jobs {
                    per_job.entry(*job).or_default().push(op.clone());
                }
            }
            (Call::Sweep, Some(Answer::Unknown(_)) | None) => lost_sweeps.push(op),
            (Call::Sweep, _) => {}
            (call, _) => {
                if let Some(job) = call.job() {
                    per_job.entry(job).or_default().push(op.clone());
                }
            }
        }
    }
    let mut used: HashSet<usize> = HashSet::new();
    let mut next_id = history.len();
    for (job, job_ledger) in &ledger.jobs {
        for attempt in &job_ledger.attempts {
            if claimed.contains(&attempt.id) {
                continue;
            }
            let candidate = lost_claims.iter().find(|op| {
                !used.contains(&op.id)
                    && matches!(op.call, Call::Claim { runner } if runner == attempt.runner)
                    && op.invoked_at <= attempt.claimed_at
                    && op.completed_at.is_none_or(|at| attempt.claimed_at <= at)
            });
            match candidate {
                Some(op) => {
                    used.insert(op.id);
                    report.attempts_from_lost_claims += 1;
                    let mut synthetic = (*op).clone();
                    synthetic.id = next_id;
                    next_id += 1;
                    synthetic.client = format!("{} (answer lost; attempt from the ledger)", op.client);
                    synthetic.answer = Some(Answer::Claimed {
                        tuple: attempt.tuple(),
                        lease_expiry: attempt.claimed_at + config.lease_ttl,
                    });
                    per_job.entry(*job).or_default().push(synthetic);
                }
                None => violations.push(Violation {
                    kind: ViolationKind::PhantomAttempt,
                    job: Some(job.to_string()),
                    detail: format!(
                        "attempt {} (fence {}, runner {}, claimed at {}) was created by no claim in \
                         the history",
                        short_attempt(&attempt.id),
                        attempt.fence,
                        short(&attempt.runner.0),
                        attempt.claimed_at
                    ),
                }),
            }
        }
    }
    if !lost_sweeps.is_empty() {
        for (job, ops) in per_job.iter_mut() {
            let Some(job_ledger) = ledger.jobs.get(job) else {
                continue;
            };
            let virtual_sweeps = failed_sweeps_for(*job, ops, job_ledger, &lost_sweeps);
            for mut op in virtual_sweeps {
                op.id = next_id;
                next_id += 1;
                ops.push(op);
            }
        }
    }
    for ops in per_job.values_mut() {
        ops.sort_by_key(|op| op.invoked_seq);
    }
    per_job
}

/// The failed sweeps that may have made `job` uncertain, as few optional ops as possible: for
/// every attempt of the job that became uncertain with no answered sweep to show for it, one op
/// standing for all the failed sweeps that overlap the attempt's standing (from its claim to the
/// reconciliation or claim after it), invoked with the first and completed with the last of
/// them. It may be placed anywhere any of them could, so no history that one of them explains
/// is refused; and the search stays small when hundreds of sweeps fail during an outage.
fn failed_sweeps_for(job: JobId, ops: &[Op], jl: &JobLedger, failed: &[&Op]) -> Vec<Op> {
    let mut out = Vec::new();
    for claim in ops {
        let Some((tuple, _)) = claim_of(claim) else {
            continue;
        };
        let Some(attempt) = jl.attempts.iter().find(|a| a.id == tuple.attempt) else {
            continue;
        };
        let became_uncertain = attempt.state == imp::AttemptState::Uncertain
            || jl
                .reconciliations
                .iter()
                .any(|r| r.attempt == Some(attempt.id) && r.verdict.is_accepted());
        if !became_uncertain {
            continue;
        }
        let end = ops
            .iter()
            .filter(|x| x.invoked_seq > claim.invoked_seq)
            .filter(|x| {
                (matches!(x.call, Call::Reconcile { .. }) && x.answer == Some(Answer::Accepted))
                    || claim_of(x).is_some_and(|(t, _)| t.fence > tuple.fence)
            })
            .filter_map(|x| x.completed_seq)
            .min()
            .unwrap_or(u64::MAX);
        let explained = ops.iter().any(|x| {
            matches!(&x.answer, Some(Answer::Swept(jobs)) if jobs.contains(&job))
                && x.completed_seq.is_some_and(|c| c > claim.invoked_seq)
                && x.invoked_seq < end
        });
        if explained {
            continue;
        }
        let group: Vec<&&Op> = failed
            .iter()
            .filter(|s| {
                s.completed_seq.is_none_or(|c| c > claim.invoked_seq) && s.invoked_seq < end
            })
            .collect();
        let Some(first) = group.iter().min_by_key(|s| s.invoked_seq) else {
            continue;
        };
        let mut merged = (**first).clone();
        merged.client = format!("sweeper ({} failed sweeps, as one)", group.len());
        merged.answer = Some(Answer::Unknown("failed sweeps".into()));
        let all_completed = group.iter().all(|s| s.completed_seq.is_some());
        merged.completed_seq = if all_completed {
            group.iter().filter_map(|s| s.completed_seq).max()
        } else {
            None
        };
        merged.completed_at = if all_completed {
            group.iter().filter_map(|s| s.completed_at).max()
        } else {
            None
        };
        out.push(merged);
    }
    out
}

// ------------------------------------------------------------------------------------------
// Direct checks.

fn violation(kind: ViolationKind, job: JobId, detail: String) -> Violation {
    Violation {
        kind,
        job: Some(job.to_string()),
        detail,
    }
}

fn claim_of(op: &Op) -> Option<(&imp::Tuple, DateTime<Utc>)> {
    match (&op.call, &op.answer) {
        (
            Call::Claim { .. },
            Some(Answer::Claimed {
                tuple,
                lease_expiry,
            }),
        ) => Some((tuple, *lease_expiry)),
        _ => None,
    }
}

fn before(a: &Op, b: &Op) -> bool {
    a.completed_seq.is_some_and(|c| c < b.invoked_seq)
}

fn is_accepted_reconcile(op: &Op, decisions: &[Decision]) -> bool {
    matches!(&op.call, Call::Reconcile { decision, .. } if decisions.contains(decision))
        && op.answer == Some(Answer::Accepted)
}

/// The direct checks of one job (everything but linearizability).
pub fn check_job(
    job: JobId,
    ops: &[Op],
    job_ledger: Option<&JobLedger>,
    ledger: &Ledger,
    config: &CheckConfig,
    out: &mut Vec<Violation>,
) {
    let mut claims: Vec<(&Op, &imp::Tuple, DateTime<Utc>)> = ops
        .iter()
        .filter_map(|op| claim_of(op).map(|(t, e)| (op, t, e)))
        .collect();
    claims.sort_by_key(|(_, t, _)| t.fence);

    // fence_order: real-time-ordered claims have increasing fences.
    for (a, ta, _) in &claims {
        for (b, tb, _) in &claims {
            if before(a, b) && ta.fence >= tb.fence {
                out.push(violation(
                    ViolationKind::FenceOrder,
                    job,
                    format!(
                        "claim {} (fence {}) completed before claim {} (fence {}) was invoked\n  {}\n  {}",
                        a.id,
                        ta.fence,
                        b.id,
                        tb.fence,
                        a.describe(),
                        b.describe()
                    ),
                ));
            }
        }
    }

    // double_claim: a retry reconciliation between consecutive claims.
    for pair in claims.windows(2) {
        let (c1, t1, _) = pair[0];
        let (c2, t2, _) = pair[1];
        // A retry whose answer was lost (its replica killed, the connection cut) may have taken
        // effect: it explains the second claim when the ledger holds an accepted retry of the
        // first claim's attempt (or when no ledger was read).
        let retry_recorded = job_ledger.is_none_or(|jl| {
            jl.reconciliations.iter().any(|r| {
                r.decision == Decision::Retry
                    && r.attempt == Some(t1.attempt)
                    && r.verdict.is_accepted()
            })
        });
        let retry_between = ops.iter().any(|r| {
            let retry = is_accepted_reconcile(r, &[Decision::Retry])
                || (matches!(
                    &r.call,
                    Call::Reconcile {
                        decision: Decision::Retry,
                        ..
                    }
                ) && !r.is_known()
                    && retry_recorded);
            retry
                && c2.completed_seq.is_none_or(|c| r.invoked_seq < c)
                && r.completed_seq.is_none_or(|c| c > c1.invoked_seq)
        });
        if !retry_between {
            out.push(violation(
                ViolationKind::DoubleClaim,
                job,
                format!(
                    "the job was claimed again (fence {}) with no accepted retry reconciliation \
                     after the claim of fence {}\n  {}\n  {}",
                    t2.fence,
                    t1.fence,
                    c1.describe(),
                    c2.describe()
                ),
            ));
        }
    }

    // time_authority.
    if config.time_authority {
        for op in ops {
            let expiry = match &op.answer {
                Some(Answer::Claimed { lease_expiry, .. })
                | Some(Answer::Extended { lease_expiry, .. }) => *lease_expiry,
                _ => continue,
            };
            if op.client.contains("answer lost") {
                continue;
            }
            let now = expiry - config.lease_ttl;
            let within =
                op.invoked_at <= now && op.completed_at.is_some_and(|completed| now <= completed);
            if !within {
                out.push(violation(
                    ViolationKind::TimeAuthority,
                    job,
                    format!(
                        "the lease expiry {expiry} is not lease_ttl after a server time between the \
                         call's invocation and completion (runner time {:?})\n  {}",
                        op.runner_time,
                        op.describe()
                    ),
                ));
            }
        }
    }

    // stale_acceptance.
    for m in ops {
        let accepted = matches!(
            (&m.call, &m.answer),
            (Call::Heartbeat { .. }, Some(Answer::Extended { .. }))
                | (
                    Call::Rejoin { .. },
                    Some(Answer::Continue | Answer::CancelInstruction)
                )
                | (Call::Result { .. }, Some(Answer::Accepted))
        );
        if !accepted {
            continue;
        }
        let Some(tuple) = m.call.tuple() else {
            continue;
        };
        if let Some(reason) = stale_reason(m, tuple, ops, config) {
            out.push(violation(
                ViolationKind::StaleAcceptance,
                job,
                format!("{reason}\n  {}", m.describe()),
            ));
        }
    }

    let Some(job_ledger) = job_ledger else {
        if !claims.is_empty() {
            out.push(violation(
                ViolationKind::LedgerMismatch,
                job,
                "the job was claimed but is not in the ledger".into(),
            ));
        }
        return;
    };
    check_ledger(job, ops, job_ledger, ledger, out);
}

/// Why an accepted message `m` for `tuple` was certainly stale, if it was.
fn stale_reason(m: &Op, tuple: &imp::Tuple, ops: &[Op], config: &CheckConfig) -> Option<String> {
    let attempt = tuple.attempt;
    let own_claim = ops
        .iter()
        .find(|op| claim_of(op).is_some_and(|(t, _)| t.attempt == attempt));
    // (1) The lease had certainly ended: the latest expiry anything invoked before `m` completed
    // could have set.
    if let Some(claim) = own_claim {
        let mut latest = claim_of(claim).map(|(_, e)| e);
        for x in ops {
            if x.id == m.id || m.completed_seq.is_some_and(|c| x.invoked_seq > c) {
                continue;
            }
            let Call::Heartbeat { tuple: t } = &x.call else {
                continue;
            };
            if t.attempt != attempt {
                continue;
            }
            let bound = match &x.answer {
                Some(Answer::Extended { lease_expiry, .. }) => Some(*lease_expiry),
                Some(Answer::Unknown(_)) => Some(
                    x.completed_at
                        .map_or(DateTime::<Utc>::MAX_UTC, |c| c + config.lease_ttl),
                ),
                None => Some(DateTime::<Utc>::MAX_UTC),
                _ => None,
            };
            latest = latest.max(bound);
        }
        if let Some(latest) = latest {
            if m.invoked_at >= latest {
                return Some(format!(
                    "accepted although invoked at {} when the lease had ended at {latest} at the \
                     latest",
                    m.invoked_at
                ));
            }
        }
    }
    let claimed_before = |x: &Op| own_claim.is_some_and(|c| before(c, x));
    for x in ops {
        if x.id == m.id || !before(x, m) {
            continue;
        }
        if is_accepted_reconcile(x, &[Decision::Retry, Decision::Abort]) && claimed_before(x) {
            return Some(format!(
                "accepted after a reconciliation had ended the attempt\n  {}",
                x.describe()
            ));
        }
        if is_accepted_reconcile(x, &[Decision::Adopt]) && claimed_before(x) {
            return Some(format!(
                "accepted after a reconciliation had adopted an outcome\n  {}",
                x.describe()
            ));
        }
        if let Some((t, _)) = claim_of(x) {
            if t.fence > tuple.fence && t.attempt != attempt {
                return Some(format!(
                    "accepted after a later attempt had been claimed\n  {}",
                    x.describe()
                ));
            }
        }
        if matches!(x.call, Call::Result { .. }) && x.answer == Some(Answer::Accepted) {
            return Some(format!(
                "accepted after a result had been accepted for the job\n  {}",
                x.describe()
            ));
        }
        if let Some(Answer::Swept(jobs)) = &x.answer {
            if jobs.contains(&tuple.job) && claimed_before(x) {
                return Some(format!(
                    "accepted after a sweep had made the job uncertain\n  {}",
                    x.describe()
                ));
            }
        }
    }
    None
}

fn check_ledger(job: JobId, ops: &[Op], jl: &JobLedger, ledger: &Ledger, out: &mut Vec<Violation>) {
    let attempt = |id: AttemptId| jl.attempts.iter().find(|a| a.id == id);
    let accepted_reconciliation = |id: AttemptId, decisions: &[imp::Decision]| {
        jl.reconciliations.iter().find(|r| {
            r.attempt == Some(id) && r.verdict.is_accepted() && decisions.contains(&r.decision)
        })
    };
    // ledger_mismatch: every accepted claim is in the ledger as answered.
    for op in ops {
        if let Some((t, _)) = claim_of(op) {
            match attempt(t.attempt) {
                Some(a)
                    if a.fence == t.fence && a.lease_id == t.lease_id && a.runner == t.runner => {}
                Some(a) => out.push(violation(
                    ViolationKind::LedgerMismatch,
                    job,
                    format!(
                        "the ledger's attempt {} has fence {}, the claim answered fence {}\n  {}",
                        short_attempt(&a.id),
                        a.fence,
                        t.fence,
                        op.describe()
                    ),
                )),
                None => out.push(violation(
                    ViolationKind::LedgerMismatch,
                    job,
                    format!(
                        "an accepted claim's attempt is not in the ledger\n  {}",
                        op.describe()
                    ),
                )),
            }
        }
    }
    // fence_order in the ledger: fences increase in claim-time order, the counter is the last.
    let mut by_time: Vec<&imp::AttemptView> = jl.attempts.iter().collect();
    by_time.sort_by_key(|a| (a.claimed_at, a.fence));
    for pair in by_time.windows(2) {
        if pair[0].fence >= pair[1].fence {
            out.push(violation(
                ViolationKind::FenceOrder,
                job,
                format!(
                    "attempt {} claimed at {} has fence {}, the later attempt {} claimed at {} has \
                     fence {}",
                    short_attempt(&pair[0].id),
                    pair[0].claimed_at,
                    pair[0].fence,
                    short_attempt(&pair[1].id),
                    pair[1].claimed_at,
                    pair[1].fence
                ),
            ));
        }
    }
    let last_fence = jl.attempts.iter().map(|a| a.fence).max().unwrap_or(0);
    if jl.job.fence != last_fence {
        out.push(violation(
            ViolationKind::FenceOrder,
            job,
            format!(
                "the job's fence counter is {}, its last attempt's fence {last_fence}",
                jl.job.fence
            ),
        ));
    }
    // lost_result: accepted/acknowledged results and accepted adopt/abort are the final state.
    for op in ops {
        match (&op.call, &op.answer) {
            (
                Call::Result {
                    tuple,
                    outcome,
                    digest,
                },
                Some(answer @ (Answer::Accepted | Answer::Acknowledged)),
            ) => {
                let held = attempt(tuple.attempt).is_some_and(|a| {
                    a.outcome == Some(*outcome)
                        && a.state.as_str() == outcome.as_str()
                        && match answer {
                            Answer::Accepted => a.result_digest.as_deref() == Some(digest.as_str()),
                            _ => a
                                .result_digest
                                .as_deref()
                                .is_none_or(|d| d == digest.as_str()),
                        }
                });
                let committed = jl.job.current_attempt == Some(tuple.attempt)
                    && jl.job.state.as_str() == outcome.as_str();
                if !(held && committed) {
                    out.push(violation(
                        ViolationKind::LostResult,
                        job,
                        format!(
                            "an {} result is not the job's committed outcome: the job is {} with \
                             current attempt {:?}\n  {}",
                            answer_kind(answer),
                            jl.job.state,
                            jl.job.current_attempt.map(|a| short_attempt(&a)),
                            op.describe()
                        ),
                    ));
                }
            }
            (
                Call::Reconcile {
                    finding, decision, ..
                },
                Some(Answer::Accepted),
            ) => {
                let ok = match decision {
                    Decision::Adopt => {
                        let expected = match finding {
                            imp::Finding::ObservedPassed => imp::JobState::Passed,
                            _ => imp::JobState::Failed,
                        };
                        jl.job.state == expected
                    }
                    Decision::Abort => matches!(
                        jl.job.state,
                        imp::JobState::Aborted | imp::JobState::Cancelled
                    ),
                    Decision::Retry => true,
                };
                if !ok {
                    out.push(violation(
                        ViolationKind::LostResult,
                        job,
                        format!(
                            "an accepted reconciliation's decision is not the job's final state ({})\n  {}",
                            jl.job.state,
                            op.describe()
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    // silent_requeue: every attempt that is not current was stopped by a reconciliation.
    for a in &jl.attempts {
        if jl.job.current_attempt == Some(a.id) {
            continue;
        }
        let reconciled =
            accepted_reconciliation(a.id, &[imp::Decision::Retry, imp::Decision::Abort]);
        if a.state != imp::AttemptState::Stopped || reconciled.is_none() {
            out.push(violation(
                ViolationKind::SilentRequeue,
                job,
                format!(
                    "attempt {} (fence {}) is no longer current but is {} with {} accepted \
                     retry/abort reconciliation naming it",
                    short_attempt(&a.id),
                    a.fence,
                    a.state,
                    if reconciled.is_some() { "an" } else { "no" }
                ),
            ));
        }
    }
    if let Some(observations) = &jl.observations {
        check_observations(job, ops, observations, out);
    }
    // end_state.
    let current = jl.job.current_attempt.and_then(attempt);
    let last = jl.attempts.iter().max_by_key(|a| a.fence);
    let problem: Option<String> = match jl.job.state {
        imp::JobState::Queued => current.map(|_| "queued with a current attempt".to_string()),
        imp::JobState::Running | imp::JobState::Cancelling => match current {
            Some(a) if a.state == imp::AttemptState::Active => match ledger.final_sweep_at {
                Some(at) if a.lease_expiry <= at => Some(format!(
                    "leased with a lease that expired at {} before the final sweep at {at}",
                    a.lease_expiry
                )),
                _ => None,
            },
            _ => Some("leased without an active current attempt".into()),
        },
        imp::JobState::Uncertain => match current {
            Some(a) if a.state == imp::AttemptState::Uncertain => None,
            _ => Some("uncertain without an uncertain current attempt".into()),
        },
        imp::JobState::Passed | imp::JobState::Failed => match current {
            Some(a) if a.state.as_str() == jl.job.state.as_str() => None,
            _ => Some("finished without its attempt holding the outcome".into()),
        },
        imp::JobState::Cancelled => match (current, last) {
            (Some(a), _) if a.state == imp::AttemptState::Cancelled => None,
            (None, None) => None,
            // Aborted after a cancel request, or cancelled while queued after a retry.
            (None, Some(a))
                if (jl.job.cancel_requested
                    && accepted_reconciliation(a.id, &[imp::Decision::Abort]).is_some())
                    || accepted_reconciliation(a.id, &[imp::Decision::Retry]).is_some() =>
            {
                None
            }
            _ => Some("cancelled without a cancelled attempt or an abort after a cancel".into()),
        },
        imp::JobState::Aborted => match (current, last) {
            (None, Some(a)) if accepted_reconciliation(a.id, &[imp::Decision::Abort]).is_some() => {
                None
            }
            _ => Some("aborted without an abort reconciliation of its last attempt".into()),
        },
    };
    if let Some(problem) = problem {
        out.push(violation(ViolationKind::EndState, job, problem));
    }
}

/// The verdict key of an answered runner message: (verdict, reason).
fn message_verdict(answer: &Answer) -> Option<(&'static str, Option<&'static str>)> {
    Some(match answer {
        Answer::Extended { .. }
        | Answer::Accepted
        | Answer::Continue
        | Answer::CancelInstruction => ("accepted", None),
        Answer::Acknowledged => ("acknowledged", None),
        Answer::Rejected(reason) => ("rejected", Some(reason.as_str())),
        _ => return None,
    })
}

/// `unrecorded_message`: the observations of the job against its answered runner messages.
fn check_observations(
    job: JobId,
    ops: &[Op],
    observations: &[imp::ObservationView],
    out: &mut Vec<Violation>,
) {
    type Key = (AttemptId, &'static str);
    let mut recorded: HashMap<Key, BTreeMap<(&'static str, Option<&'static str>), usize>> =
        HashMap::new();
    for o in observations {
        let verdict = (
            o.verdict.as_str(),
            o.verdict.reason().map(imp::Reason::as_str),
        );
        *recorded
            .entry((o.named.attempt, o.kind.as_str()))
            .or_default()
            .entry(verdict)
            .or_insert(0) += 1;
    }
    let mut answered: HashMap<Key, BTreeMap<(&'static str, Option<&'static str>), usize>> =
        HashMap::new();
    let mut maybe: HashMap<Key, usize> = HashMap::new();
    for op in ops {
        let kind = match op.call {
            Call::Heartbeat { .. } => "heartbeat",
            Call::Rejoin { .. } => "rejoin",
            Call::Result { .. } => "result",
            _ => continue,
        };
        let Some(tuple) = op.call.tuple() else {
            continue;
        };
        match op.answer.as_ref().and_then(message_verdict) {
            Some(verdict) => {
                *answered
                    .entry((tuple.attempt, kind))
                    .or_default()
                    .entry(verdict)
                    .or_insert(0) += 1;
            }
            None => *maybe.entry((tuple.attempt, kind)).or_insert(0) += 1,
        }
    }
    let mut keys: HashSet<Key> = recorded.keys().copied().collect();
    keys.extend(answered.keys().copied());
    for key in keys {
        let empty = BTreeMap::new();
        let got = recorded.get(&key).unwrap_or(&empty);
        let want = answered.get(&key).unwrap_or(&empty);
        let mut extra = 0usize;
        for (verdict, n) in want {
            let have = got.get(verdict).copied().unwrap_or(0);
            if have < *n {
                out.push(violation(
                    ViolationKind::UnrecordedMessage,
                    job,
                    format!(
                        "{n} {} of attempt {} answered {:?} but {have} such observations recorded",
                        key.1,
                        short_attempt(&key.0),
                        verdict
                    ),
                ));
            }
        }
        for (verdict, n) in got {
            extra += n.saturating_sub(want.get(verdict).copied().unwrap_or(0));
        }
        let unknown = maybe.get(&key).copied().unwrap_or(0);
        if extra > unknown {
            out.push(violation(
                ViolationKind::UnrecordedMessage,
                job,
                format!(
                    "{extra} observations of {} of attempt {} match no answered call, and only \
                     {unknown} calls had an unknown outcome",
                    key.1,
                    short_attempt(&key.0)
                ),
            ));
        }
    }
}

// ------------------------------------------------------------------------------------------
// Linearizability against the model.

/// The outcome of one job's search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Linearized {
    Yes,
    /// Refuted, with the job's operations and the longest linearizable prefix.
    No(String),
    /// The search budget ran out.
    Undecided,
}

const FAR_PAST: DateTime<Utc> = DateTime::<Utc>::MIN_UTC;
const FAR_FUTURE: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;
/// The attempt index of an attempt the job does not have.
const NO_ATTEMPT: u8 = 250;

/// The job's identities renumbered for a one-job model.
struct Mapping {
    runners: BTreeMap<RunnerId, u8>,
    /// Attempt → (index = fence - 1, lease id).
    attempts: HashMap<AttemptId, (u8, imp::LeaseId)>,
}

impl Mapping {
    fn new(ops: &[Op], jl: &JobLedger) -> Option<Mapping> {
        let mut runners: Vec<RunnerId> = jl.attempts.iter().map(|a| a.runner).collect();
        let mut attempts = HashMap::new();
        for a in &jl.attempts {
            attempts.insert(a.id, (u8::try_from(a.fence - 1).ok()?, a.lease_id));
        }
        for op in ops {
            if let Some((t, _)) = claim_of(op) {
                attempts
                    .entry(t.attempt)
                    .or_insert((u8::try_from(t.fence - 1).ok()?, t.lease_id));
            }
            match &op.call {
                Call::Claim { runner } => runners.push(*runner),
                call => {
                    if let Some(t) = call.tuple() {
                        runners.push(t.runner);
                    }
                }
            }
        }
        runners.sort();
        runners.dedup();
        if runners.len() > 200 || attempts.len() > 200 {
            return None;
        }
        Some(Mapping {
            runners: runners
                .into_iter()
                .enumerate()
                .map(|(i, r)| (r, i as u8))
                .collect(),
            attempts,
        })
    }

    fn message(&self, kind: model::MessageKind, tuple: &imp::Tuple) -> model::Message {
        let (attempt, lease) = match self.attempts.get(&tuple.attempt) {
            Some((index, lease)) => (
                *index,
                if *lease == tuple.lease_id {
                    index + 1
                } else {
                    model::FORGED_LEASE
                },
            ),
            None => (NO_ATTEMPT, model::FORGED_LEASE),
        };
        let fence = u8::try_from(tuple.fence)
            .ok()
            .filter(|f| *f < model::FORGED_FENCE)
            .unwrap_or(model::FORGED_FENCE);
        model::Message {
            kind,
            sender: self.runners.get(&tuple.runner).copied().unwrap_or(u8::MAX),
            job: 0,
            attempt,
            lease,
            fence,
            runner_time: 0,
            digest: 0,
            token: 0,
        }
    }
}

fn model_finding(f: imp::Finding) -> model::Finding {
    match f {
        imp::Finding::Stopped => model::Finding::Stopped,
        imp::Finding::StillRunning => model::Finding::StillRunning,
        imp::Finding::ObservedPassed => model::Finding::ObservedPassed,
        imp::Finding::ObservedFailed => model::Finding::ObservedFailed,
    }
}

fn model_decision(d: imp::Decision) -> model::Decision {
    match d {
        imp::Decision::Retry => model::Decision::Retry,
        imp::Decision::Abort => model::Decision::Abort,
        imp::Decision::Adopt => model::Decision::Adopt,
    }
}

fn model_outcome(o: imp::Outcome) -> model::Outcome {
    match o {
        imp::Outcome::Passed => model::Outcome::Passed,
        imp::Outcome::Failed => model::Outcome::Failed,
        imp::Outcome::Cancelled => model::Outcome::Cancelled,
    }
}

/// One op of the job, as a model action.
struct JobOp<'a> {
    op: &'a Op,
    action: model::Action,
    /// The answer is known: the op must be placed.
    required: bool,
}

/// A search node's state: the one-job model state (time-free) and every attempt's lease expiry
/// as an interval `[lo, hi]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Node {
    model: model::State,
    expiry: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

struct Search<'a> {
    model: model::LeaseModel,
    ops: Vec<JobOp<'a>>,
    ledger: &'a JobLedger,
    mapping: Mapping,
    ttl: Duration,
    seen: HashSet<(Vec<u64>, Node)>,
    budget: usize,
    spent: usize,
    best: Vec<usize>,
    best_node: Option<Node>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Valid,
    Expired,
}

/// Linearize one job's ops against the model, ending in the ledger's state.
pub fn linearize(ops: &[Op], jl: &JobLedger, config: &CheckConfig) -> Linearized {
    let Some(mapping) = Mapping::new(ops, jl) else {
        return Linearized::Undecided;
    };
    let runners = mapping.runners.len().max(1) as u8;
    let lease_model = crate::audit::replay::one_job_model(runners);
    let mut job_ops = Vec::new();
    for op in ops {
        let action = match &op.call {
            Call::Claim { runner } => model::Action::Claim {
                runner: mapping.runners.get(runner).copied().unwrap_or(u8::MAX),
            },
            Call::Heartbeat { tuple } => model::Action::Deliver {
                message: mapping.message(model::MessageKind::Heartbeat, tuple),
            },
            Call::Rejoin { tuple } => model::Action::Deliver {
                message: mapping.message(model::MessageKind::Rejoin, tuple),
            },
            Call::Result { tuple, outcome, .. } => model::Action::Deliver {
                message: mapping
                    .message(model::MessageKind::Result(model_outcome(*outcome)), tuple),
            },
            Call::Sweep => model::Action::ExpirySweep,
            Call::Cancel { .. } => model::Action::Cancel { job: 0 },
            Call::Reconcile {
                finding, decision, ..
            } => model::Action::Reconcile {
                job: 0,
                finding: model_finding(*finding),
                decision: model_decision(*decision),
            },
        };
        job_ops.push(JobOp {
            op,
            action,
            required: op.is_known(),
        });
    }
    if job_ops.len() > 1000 {
        return Linearized::Undecided;
    }
    let mut init = lease_model.init_state();
    normalize(&mut init);
    let mut search = Search {
        model: lease_model,
        ops: job_ops,
        ledger: jl,
        mapping,
        ttl: config.lease_ttl,
        seen: HashSet::new(),
        budget: config.search_budget,
        spent: 0,
        best: Vec::new(),
        best_node: None,
    };
    let node = Node {
        model: init,
        expiry: Vec::new(),
    };
    let words = search.ops.len().div_ceil(64);
    let mut done = vec![0u64; words];
    let mut path = Vec::new();
    match search.dfs(&node, &mut done, &mut path, 0) {
        Some(true) => Linearized::Yes,
        None => Linearized::Undecided,
        Some(false) => Linearized::No(search.explain()),
    }
}

fn normalize(s: &mut model::State) {
    s.clock = 0;
    for a in &mut s.attempts {
        a.lease_expiry = 0;
        a.expired = false;
        a.execution = model::Execution::Executing;
    }
    for r in &mut s.runners {
        r.holding = None;
        r.connected = true;
    }
    s.in_flight.clear();
    for t in &mut s.targets {
        *t = model::Target::default();
    }
}

fn is_set(done: &[u64], i: usize) -> bool {
    done[i / 64] & (1 << (i % 64)) != 0
}

impl Search<'_> {
    /// `Some(true)`: linearizable from here; `Some(false)`: not; `None`: out of budget.
    fn dfs(
        &mut self,
        node: &Node,
        done: &mut Vec<u64>,
        path: &mut Vec<usize>,
        max_invoked: u64,
    ) -> Option<bool> {
        self.spent += 1;
        if self.spent > self.budget {
            return None;
        }
        if !self.seen.insert((done.clone(), node.clone())) {
            return Some(false);
        }
        if path.len() > self.best.len() || self.best_node.is_none() {
            self.best = path.clone();
            self.best_node = Some(node.clone());
        }
        let all_required = self
            .ops
            .iter()
            .enumerate()
            .all(|(i, o)| !o.required || is_set(done, i));
        if all_required && self.final_matches(node) {
            return Some(true);
        }
        // The earliest completion among required ops not yet placed: nothing invoked after it
        // can come next.
        let frontier = self
            .ops
            .iter()
            .enumerate()
            .filter(|(i, o)| o.required && !is_set(done, *i))
            .filter_map(|(_, o)| o.op.completed_seq)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if is_set(done, i) {
                continue;
            }
            let op = self.ops[i].op;
            if op.invoked_seq > frontier {
                continue;
            }
            // An op that completed before an already placed op was invoked cannot come after it.
            if op.completed_seq.is_some_and(|c| c < max_invoked) {
                continue;
            }
            for next in self.successors(i, node) {
                done[i / 64] |= 1 << (i % 64);
                path.push(i);
                let result = self.dfs(&next, done, path, max_invoked.max(op.invoked_seq));
                path.pop();
                done[i / 64] &= !(1 << (i % 64));
                match result {
                    Some(true) => return Some(true),
                    None => return None,
                    Some(false) => {}
                }
            }
        }
        Some(false)
    }

    /// The attempt whose lease decides the op's verdict, if time can matter.
    fn relevant_attempt(&self, action: &model::Action, node: &Node) -> Option<usize> {
        match action {
            model::Action::Deliver { message } => {
                let a = message.attempt as usize;
                (a < node.model.attempts.len()).then_some(a)
            }
            model::Action::ExpirySweep => node.model.jobs[0].current.map(usize::from),
            _ => None,
        }
    }

    /// The model's verdict and next state for op `i` in `node` under `case`.
    fn step(
        &self,
        action: &model::Action,
        node: &Node,
        case: Case,
    ) -> (model::Expected, model::State, model::State) {
        let mut m = node.model.clone();
        m.clock = 1;
        for a in &mut m.attempts {
            a.lease_expiry = if case == Case::Valid { 2 } else { 1 };
        }
        let expected = self
            .model
            .expected(&m, action)
            .unwrap_or(model::Expected::ACCEPTED);
        let mut next = self
            .model
            .next_state(&m, action.clone())
            .unwrap_or_else(|| m.clone());
        normalize(&mut next);
        (expected, m, next)
    }

    fn successors(&self, i: usize, node: &Node) -> Vec<Node> {
        let job_op = &self.ops[i];
        let op = job_op.op;
        let relevant = self.relevant_attempt(&job_op.action, node);
        let mut cases: Vec<(Case, bool)> = Vec::new();
        match relevant {
            Some(r) => {
                let (lo, hi) = node
                    .expiry
                    .get(r)
                    .copied()
                    .unwrap_or((FAR_PAST, FAR_FUTURE));
                let valid = op.invoked_at < hi;
                let expired = op.completed_at.is_none_or(|c| c >= lo);
                let (ev, _, _) = self.step(&job_op.action, node, Case::Valid);
                let (ee, _, _) = self.step(&job_op.action, node, Case::Expired);
                if valid && expired && ev == ee {
                    // Time does not matter for this op here: no narrowing.
                    cases.push((Case::Valid, false));
                } else {
                    if valid {
                        cases.push((Case::Valid, true));
                    }
                    if expired {
                        cases.push((Case::Expired, true));
                    }
                }
            }
            None => cases.push((Case::Valid, false)),
        }
        let mut out = Vec::new();
        for (case, narrow) in cases {
            let (expected, before, next_model) = self.step(&job_op.action, node, case);
            if let Some(answer) = op.answer.as_ref().filter(|_| job_op.required) {
                if !self.answer_matches(answer, &expected, &before, &next_model, &job_op.action) {
                    continue;
                }
            }
            let mut expiry = node.expiry.clone();
            if let (Some(r), true) = (relevant, narrow) {
                if let Some(interval) = expiry.get_mut(r) {
                    match case {
                        Case::Valid => {
                            interval.0 = interval.0.max(op.invoked_at + Duration::microseconds(1));
                        }
                        Case::Expired => {
                            if let Some(c) = op.completed_at {
                                interval.1 = interval.1.min(c);
                            }
                        }
                    }
                    if interval.0 > interval.1 {
                        continue;
                    }
                }
            }
            let accepted = expected.verdict == model::Verdict::Accepted;
            match (&job_op.action, accepted) {
                (model::Action::Claim { .. }, true) => {
                    let interval = match &op.answer {
                        Some(Answer::Claimed { lease_expiry, .. }) => {
                            (*lease_expiry, *lease_expiry)
                        }
                        _ => self.unknown_extension(op),
                    };
                    expiry.push(interval);
                }
                (model::Action::Deliver { message }, true)
                    if message.kind == model::MessageKind::Heartbeat =>
                {
                    let interval = match &op.answer {
                        Some(Answer::Extended { lease_expiry, .. }) => {
                            (*lease_expiry, *lease_expiry)
                        }
                        _ => self.unknown_extension(op),
                    };
                    if let Some(slot) = expiry.get_mut(message.attempt as usize) {
                        *slot = interval;
                    }
                }
                _ => {}
            }
            out.push(Node {
                model: next_model,
                expiry,
            });
        }
        out
    }

    /// The lease expiry an op with an unknown answer may have set: `now + ttl` for a `now`
    /// between its invocation and completion.
    fn unknown_extension(&self, op: &Op) -> (DateTime<Utc>, DateTime<Utc>) {
        (
            op.invoked_at + self.ttl,
            op.completed_at.map_or(FAR_FUTURE, |c| c + self.ttl),
        )
    }

    fn answer_matches(
        &self,
        answer: &Answer,
        expected: &model::Expected,
        before: &model::State,
        next: &model::State,
        action: &model::Action,
    ) -> bool {
        let accepted = expected.verdict == model::Verdict::Accepted;
        let cancel_requested = before.jobs[0].cancel_requested;
        match answer {
            Answer::Claimed { tuple, .. } => {
                accepted
                    && i64::from(next.jobs[0].fence) == tuple.fence
                    && next.attempts.last().map(|a| a.runner)
                        == self.mapping.runners.get(&tuple.runner).copied()
            }
            Answer::Extended {
                cancel_requested: c,
                ..
            } => accepted && *c == cancel_requested,
            Answer::Accepted => accepted,
            Answer::Acknowledged => expected.verdict == model::Verdict::Acknowledged,
            Answer::Continue => accepted && !cancel_requested,
            Answer::CancelInstruction => accepted && cancel_requested,
            Answer::Rejected(reason) => {
                expected.verdict == model::Verdict::Rejected
                    && expected.reason.map(model::Reason::as_str) == Some(reason.as_str())
            }
            Answer::Swept(_) => {
                matches!(action, model::Action::ExpirySweep)
                    && expected.verdict == model::Verdict::Uncertain
            }
            Answer::Unknown(_) => true,
        }
    }

    fn final_matches(&self, node: &Node) -> bool {
        self.final_difference(node).is_none()
    }

    /// How the node's state differs from the ledger, if it does.
    fn final_difference(&self, node: &Node) -> Option<String> {
        let jl = self.ledger;
        let job = &node.model.jobs[0];
        if job.state.as_str() != jl.job.state.as_str() {
            return Some(format!(
                "job state {} (ledger: {})",
                job.state, jl.job.state
            ));
        }
        if i64::from(job.fence) != jl.job.fence {
            return Some(format!("fence {} (ledger: {})", job.fence, jl.job.fence));
        }
        if job.cancel_requested != jl.job.cancel_requested {
            return Some(format!(
                "cancel requested {} (ledger: {})",
                job.cancel_requested, jl.job.cancel_requested
            ));
        }
        let ledger_current = jl
            .job
            .current_attempt
            .and_then(|a| self.mapping.attempts.get(&a).map(|(i, _)| *i));
        if job.current != ledger_current {
            return Some(format!(
                "current attempt {:?} (ledger: {:?})",
                job.current, ledger_current
            ));
        }
        if node.model.attempts.len() != jl.attempts.len() {
            return Some(format!(
                "{} attempts (ledger: {})",
                node.model.attempts.len(),
                jl.attempts.len()
            ));
        }
        for a in &jl.attempts {
            let Some((i, _)) = self.mapping.attempts.get(&a.id) else {
                return Some("an attempt of the ledger is not mapped".into());
            };
            let Some(m) = node.model.attempts.get(usize::from(*i)) else {
                return Some(format!("no attempt {i}"));
            };
            if m.state.as_str() != a.state.as_str() {
                return Some(format!(
                    "attempt of fence {} is {} (ledger: {})",
                    a.fence, m.state, a.state
                ));
            }
            if Some(m.runner) != self.mapping.runners.get(&a.runner).copied() {
                return Some(format!("attempt of fence {} has another runner", a.fence));
            }
            if a.state == imp::AttemptState::Active {
                let (lo, hi) = node
                    .expiry
                    .get(usize::from(*i))
                    .copied()
                    .unwrap_or((FAR_PAST, FAR_FUTURE));
                if a.lease_expiry < lo || a.lease_expiry > hi {
                    return Some(format!(
                        "active lease expiry {} outside [{lo}, {hi}]",
                        a.lease_expiry
                    ));
                }
            }
        }
        None
    }

    fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "no order of the job's {} calls consistent with real time gives the model's verdicts \
             and ends in the ledger's state; the longest linearizable prefix has {} calls:",
            self.ops.len(),
            self.best.len()
        );
        for &i in self.best.iter().take(60) {
            let _ = writeln!(out, "  ok    {}", self.ops[i].op.describe());
        }
        if let Some(node) = &self.best_node {
            let job = &node.model.jobs[0];
            let _ = writeln!(
                out,
                "  then the model's job is {} (fence {}, current attempt {:?}); remaining calls \
                 and the model's verdicts (lease valid / expired):",
                job.state, job.fence, job.current
            );
            for (i, o) in self.ops.iter().enumerate() {
                if self.best.contains(&i) {
                    continue;
                }
                let (ev, _, _) = self.step(&o.action, node, Case::Valid);
                let (ee, _, _) = self.step(&o.action, node, Case::Expired);
                let _ = writeln!(out, "  left  {} | model: {ev} / {ee}", o.op.describe());
            }
            if let Some(diff) = self.final_difference(node) {
                let _ = writeln!(
                    out,
                    "  the prefix's final state differs from the ledger: {diff}"
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    //! The checker must be able to fail: hand-made histories with one flaw each.
    use super::*;
    use crate::history::Call;
    use chrono::TimeZone;
    use imp::{AttemptState, JobState, LeaseId, Outcome, ProjectId, Tuple};

    const TTL_MS: i64 = 300;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).single().unwrap()
    }

    fn at(ms: i64) -> DateTime<Utc> {
        t0() + Duration::milliseconds(ms)
    }

    fn config() -> CheckConfig {
        CheckConfig::new(Duration::milliseconds(TTL_MS))
    }

    struct World {
        project: ProjectId,
        runner: RunnerId,
        job: JobId,
        ops: Vec<Op>,
    }

    impl World {
        fn new() -> Self {
            Self {
                project: ProjectId::new_random(),
                runner: RunnerId::new_random(),
                job: JobId::new_random(),
                ops: Vec::new(),
            }
        }

        fn tuple(&self, fence: i64) -> Tuple {
            Tuple {
                runner: self.runner,
                job: self.job,
                attempt: AttemptId(uuid::Uuid::from_u128(fence as u128)),
                lease_id: LeaseId(uuid::Uuid::from_u128(1000 + fence as u128)),
                fence,
            }
        }

        /// An op invoked at `inv` ms and completed at `comp` ms (real-time order follows time).
        fn op(&mut self, call: Call, answer: Option<Answer>, inv: i64, comp: Option<i64>) {
            self.ops.push(Op {
                id: self.ops.len(),
                client: "test".into(),
                call,
                runner_time: None,
                invoked_seq: (inv * 2) as u64,
                invoked_at: at(inv),
                completed_seq: comp.map(|c| (c * 2 + 1) as u64),
                completed_at: comp.map(at),
                answer,
            });
        }

        fn claim(&mut self, fence: i64, inv: i64, comp: i64) {
            let tuple = self.tuple(fence);
            let now = inv + (comp - inv) / 2;
            self.op(
                Call::Claim {
                    runner: self.runner,
                },
                Some(Answer::Claimed {
                    tuple,
                    lease_expiry: at(now + TTL_MS),
                }),
                inv,
                Some(comp),
            );
        }

        fn heartbeat(&mut self, fence: i64, answer: Answer, inv: i64, comp: i64) {
            let tuple = self.tuple(fence);
            self.op(Call::Heartbeat { tuple }, Some(answer), inv, Some(comp));
        }

        fn result(&mut self, fence: i64, outcome: Outcome, answer: Answer, inv: i64, comp: i64) {
            let tuple = self.tuple(fence);
            let call = Call::Result {
                tuple,
                outcome,
                digest: format!("d-{fence}-{outcome}"),
            };
            self.op(call, Some(answer), inv, Some(comp));
        }

        fn sweep(&mut self, inv: i64, comp: i64) {
            self.op(
                Call::Sweep,
                Some(Answer::Swept(vec![self.job])),
                inv,
                Some(comp),
            );
        }

        fn reconcile(&mut self, decision: Decision, inv: i64, comp: i64) {
            let call = Call::Reconcile {
                job: self.job,
                finding: imp::Finding::Stopped,
                decision,
            };
            self.op(call, Some(Answer::Accepted), inv, Some(comp));
        }

        fn attempt(
            &self,
            fence: i64,
            state: AttemptState,
            expiry: i64,
            outcome: Option<Outcome>,
        ) -> imp::AttemptView {
            let tuple = self.tuple(fence);
            imp::AttemptView {
                id: tuple.attempt,
                job: self.job,
                runner: self.runner,
                lease_id: tuple.lease_id,
                fence,
                // The job's own slot: every reservation of it is a claim of this job.
                slot_token: fence,
                state,
                lease_expiry: at(expiry),
                outcome,
                result_digest: outcome.map(|o| format!("d-{fence}-{o}")),
                claimed_at: at(expiry - TTL_MS),
                ended_at: None,
            }
        }

        fn retry_record(&self, fence: i64, ms: i64) -> imp::ReconciliationView {
            imp::ReconciliationView {
                id: fence,
                project: self.project,
                job: self.job,
                attempt: Some(self.tuple(fence).attempt),
                finding: imp::Finding::Stopped,
                decision: Decision::Retry,
                verdict: imp::Verdict::Accepted(()),
                decided_at: at(ms),
            }
        }

        fn ledger(
            &self,
            state: JobState,
            current: Option<i64>,
            attempts: Vec<imp::AttemptView>,
            reconciliations: Vec<imp::ReconciliationView>,
        ) -> Ledger {
            let fence = attempts.iter().map(|a| a.fence).max().unwrap_or(0);
            let job = imp::JobView {
                id: self.job,
                project: self.project,
                state,
                current_attempt: current.map(|f| self.tuple(f).attempt),
                fence,
                cancel_requested: false,
                outcome: state.is_terminal().then_some(state),
                result_digest: None,
                source_revision: "rev".into(),
                source_digest: "digest".into(),
                command: "true".into(),
                target: self.job.to_string(),
                target_kind: imp::TargetKind::Unfenced,
                submitted_at: t0(),
                finished_at: None,
            };
            let mut jobs = BTreeMap::new();
            jobs.insert(
                self.job,
                JobLedger {
                    job,
                    attempts,
                    reconciliations,
                    observations: None,
                },
            );
            Ledger {
                jobs,
                final_sweep_at: None,
            }
        }
    }

    fn kinds(report: &Report) -> Vec<ViolationKind> {
        let mut kinds: Vec<ViolationKind> = report.violations.iter().map(|v| v.kind).collect();
        kinds.dedup();
        kinds
    }

    #[test]
    fn a_correct_history_passes_and_is_linearizable() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.heartbeat(
            1,
            Answer::Extended {
                lease_expiry: at(100 + TTL_MS),
                cancel_requested: false,
            },
            95,
            105,
        );
        // A duplicate of the result, overlapping it: one accepted, one acknowledged.
        w.result(1, Outcome::Passed, Answer::Accepted, 200, 220);
        w.result(1, Outcome::Passed, Answer::Acknowledged, 210, 230);
        // A late heartbeat.
        w.heartbeat(1, Answer::Rejected(imp::Reason::JobFinished), 900, 910);
        let ledger = w.ledger(
            JobState::Passed,
            Some(1),
            vec![w.attempt(1, AttemptState::Passed, 400, Some(Outcome::Passed))],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert!(report.is_clean(), "{}", report.render(10));
        assert_eq!(report.linearizable_jobs, 1);
    }

    #[test]
    fn a_stale_completion_after_a_retry_is_reported() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.sweep(400, 410);
        w.reconcile(Decision::Retry, 420, 430);
        w.claim(2, 440, 450);
        // The old attempt's result, accepted: the flaw.
        w.result(1, Outcome::Passed, Answer::Accepted, 500, 510);
        let ledger = w.ledger(
            JobState::Running,
            Some(2),
            vec![
                w.attempt(1, AttemptState::Stopped, 305, None),
                w.attempt(2, AttemptState::Active, 745, None),
            ],
            vec![w.retry_record(1, 425)],
        );
        let report = check(&w.ops, &ledger, &config());
        assert!(report.stale_acceptances >= 1, "{}", report.render(10));
        assert!(report.count(ViolationKind::NotLinearizable) == 1);
        assert!(
            report.lost_results >= 1,
            "the accepted result is not the outcome"
        );
    }

    #[test]
    fn a_heartbeat_accepted_after_its_lease_ended_is_reported() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        // Invoked at 400 ms, the lease ended at 305 ms at the latest.
        w.heartbeat(
            1,
            Answer::Extended {
                lease_expiry: at(400 + TTL_MS),
                cancel_requested: false,
            },
            400,
            410,
        );
        let ledger = w.ledger(
            JobState::Running,
            Some(1),
            vec![w.attempt(1, AttemptState::Active, 700, None)],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert_eq!(
            kinds(&report),
            vec![
                ViolationKind::StaleAcceptance,
                ViolationKind::NotLinearizable
            ]
        );
    }

    #[test]
    fn a_second_claim_without_a_retry_is_a_double_claim() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.claim(2, 50, 60);
        let ledger = w.ledger(
            JobState::Running,
            Some(2),
            vec![
                w.attempt(1, AttemptState::Stopped, 305, None),
                w.attempt(2, AttemptState::Active, 355, None),
            ],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert_eq!(report.double_claims, 1, "{}", report.render(10));
        assert!(kinds(&report).contains(&ViolationKind::SilentRequeue));
        assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
    }

    /// A retry whose answer was lost explains the next claim when the ledger recorded it
    /// accepted, and only then.
    #[test]
    fn a_retry_with_a_lost_answer_explains_the_next_claim_only_when_the_ledger_kept_it() {
        let retry_lost = |recorded: Option<imp::Verdict<()>>| {
            let mut w = World::new();
            w.claim(1, 0, 10);
            let call = Call::Reconcile {
                job: w.job,
                finding: imp::Finding::Stopped,
                decision: Decision::Retry,
            };
            w.op(
                call,
                Some(Answer::Unknown("replica killed".into())),
                400,
                Some(410),
            );
            w.claim(2, 450, 460);
            let mut ledger = w.ledger(
                JobState::Running,
                Some(2),
                vec![
                    w.attempt(1, AttemptState::Stopped, 305, None),
                    w.attempt(2, AttemptState::Active, 755, None),
                ],
                vec![],
            );
            if let Some(verdict) = recorded {
                let jl = ledger.jobs.get_mut(&w.job).expect("the job's ledger");
                jl.reconciliations.push(imp::ReconciliationView {
                    id: 1,
                    project: jl.job.project,
                    job: w.job,
                    attempt: Some(w.tuple(1).attempt),
                    finding: imp::Finding::Stopped,
                    decision: Decision::Retry,
                    verdict,
                    decided_at: at(405),
                });
            }
            check(&w.ops, &ledger, &config()).double_claims
        };
        assert_eq!(retry_lost(Some(imp::Verdict::Accepted(()))), 0);
        assert_eq!(retry_lost(None), 1);
        assert_eq!(
            retry_lost(Some(imp::Verdict::Rejected(imp::Reason::NotUncertain))),
            1
        );
    }

    #[test]
    fn a_fence_that_goes_down_is_reported() {
        let mut w = World::new();
        // The claim of fence 2 completes before the claim of fence 1 is invoked.
        w.claim(2, 0, 10);
        w.sweep(400, 410);
        w.reconcile(Decision::Retry, 420, 430);
        w.claim(1, 440, 450);
        let ledger = w.ledger(
            JobState::Running,
            Some(1),
            vec![
                w.attempt(1, AttemptState::Active, 745, None),
                w.attempt(2, AttemptState::Stopped, 305, None),
            ],
            vec![w.retry_record(2, 425)],
        );
        let report = check(&w.ops, &ledger, &config());
        assert!(
            kinds(&report).contains(&ViolationKind::FenceOrder),
            "{}",
            report.render(10)
        );
        assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
    }

    #[test]
    fn an_accepted_result_missing_from_the_ledger_is_a_lost_result() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.result(1, Outcome::Passed, Answer::Accepted, 100, 110);
        // The ledger says the job is still running: the commit was lost.
        let ledger = w.ledger(
            JobState::Running,
            Some(1),
            vec![w.attempt(1, AttemptState::Active, 305, None)],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert_eq!(report.lost_results, 1, "{}", report.render(10));
        assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
    }

    #[test]
    fn expiry_that_requeues_without_a_reconciliation_is_a_silent_requeue() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.sweep(400, 410);
        let ledger = w.ledger(
            JobState::Queued,
            None,
            vec![w.attempt(1, AttemptState::Uncertain, 305, None)],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert!(
            kinds(&report).contains(&ViolationKind::SilentRequeue),
            "{}",
            report.render(10)
        );
        assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
    }

    #[test]
    fn a_rejection_the_model_would_not_give_is_not_linearizable() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        // `lease_expired` while the lease was certainly valid: only the model search sees it.
        w.heartbeat(1, Answer::Rejected(imp::Reason::LeaseExpired), 50, 60);
        let ledger = w.ledger(
            JobState::Running,
            Some(1),
            vec![w.attempt(1, AttemptState::Active, 305, None)],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert_eq!(kinds(&report), vec![ViolationKind::NotLinearizable]);
    }

    #[test]
    fn an_outage_of_failed_sweeps_explains_an_uncertain_job_without_blowing_up_the_search() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        // 200 sweeps fail during an outage; one of them made the job uncertain.
        for k in 0..200 {
            w.op(
                Call::Sweep,
                Some(Answer::Unknown("database unavailable".into())),
                200 + k * 5,
                Some(202 + k * 5),
            );
        }
        w.heartbeat(1, Answer::Rejected(imp::Reason::LeaseExpired), 1300, 1310);
        let ledger = w.ledger(
            JobState::Uncertain,
            Some(1),
            vec![w.attempt(1, AttemptState::Uncertain, 305, None)],
            vec![],
        );
        let started = std::time::Instant::now();
        let report = check(&w.ops, &ledger, &config());
        assert!(report.is_clean(), "{}", report.render(10));
        assert_eq!(report.linearizable_jobs, 1);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Without any sweep, nothing made the job uncertain.
        w.ops.retain(|op| !matches!(op.call, Call::Sweep));
        for (i, op) in w.ops.iter_mut().enumerate() {
            op.id = i;
        }
        let report = check(&w.ops, &ledger, &config());
        assert_eq!(kinds(&report), vec![ViolationKind::NotLinearizable]);
    }

    #[test]
    fn a_heartbeat_with_an_unknown_outcome_may_have_extended_the_lease() {
        let mut w = World::new();
        w.claim(1, 0, 10);
        w.op(
            Call::Heartbeat { tuple: w.tuple(1) },
            Some(Answer::Unknown("database unavailable".into())),
            100,
            Some(120),
        );
        // Accepted at 350: only valid if the failed heartbeat did extend the lease.
        w.heartbeat(
            1,
            Answer::Extended {
                lease_expiry: at(360 + TTL_MS),
                cancel_requested: false,
            },
            350,
            370,
        );
        let ledger = w.ledger(
            JobState::Running,
            Some(1),
            vec![w.attempt(1, AttemptState::Active, 660, None)],
            vec![],
        );
        let report = check(&w.ops, &ledger, &config());
        assert!(report.is_clean(), "{}", report.render(10));
        // Without the failed heartbeat, the same acceptance is stale.
        w.ops.remove(1);
        for (i, op) in w.ops.iter_mut().enumerate() {
            op.id = i;
        }
        let report = check(&w.ops, &ledger, &config());
        assert!(report.stale_acceptances == 1, "{}", report.render(10));
    }
}
