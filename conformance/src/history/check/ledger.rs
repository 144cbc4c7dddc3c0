//! The ledger's checks of one job: `lost_result`, `silent_requeue`, `end_state`,
//! `phantom_attempt`, `ledger_mismatch`.

use super::*;

pub(super) fn check_ledger(
    job: JobId,
    ops: &[Op],
    jl: &JobLedger,
    ledger: &Ledger,
    out: &mut Vec<Violation>,
) {
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
                Some(at) if a.lease_expiry + ledger.sweep_margin <= at => Some(format!(
                    "leased with a lease that expired at {} (the sweep acts {} ms past a lease) \
                     before the final sweep at {at}",
                    a.lease_expiry,
                    ledger.sweep_margin.num_milliseconds()
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
