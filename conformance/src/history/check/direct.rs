//! The direct checks of one job: `fence_order`, `stale_acceptance`, `double_claim`,
//! `time_authority` (everything but the ledger's and the observations' checks and linearizability).

use super::*;

pub(super) fn violation(kind: ViolationKind, job: JobId, detail: String) -> Violation {
    Violation {
        kind,
        job: Some(job.to_string()),
        detail,
    }
}

pub(super) fn claim_of(op: &Op) -> Option<(&imp::Tuple, DateTime<Utc>)> {
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

pub(super) fn before(a: &Op, b: &Op) -> bool {
    a.completed_seq.is_some_and(|c| c < b.invoked_seq)
}

pub(super) fn is_accepted_reconcile(op: &Op, decisions: &[Decision]) -> bool {
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
pub(super) fn stale_reason(
    m: &Op,
    tuple: &imp::Tuple,
    ops: &[Op],
    config: &CheckConfig,
) -> Option<String> {
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
