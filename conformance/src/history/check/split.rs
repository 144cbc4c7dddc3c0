//! The history split per job: lost claims attached to the attempts they created, failed sweeps
//! merged into one optional op per uncertain attempt.

use super::*;

/// The history split per job. An attempt in the ledger that no accepted claim answered is
/// attached to a claim of the same runner whose answer was lost (a synthetic op with the ledger's
/// lease is added to the job); sweeps that failed are added to every job that was ever uncertain.
pub(super) fn split(
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
pub(super) fn failed_sweeps_for(job: JobId, ops: &[Op], jl: &JobLedger, failed: &[&Op]) -> Vec<Op> {
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
