//! Pruning between jobs, replayed (issue 39 item 7): a `random-prune-*` walk runs in a schema of
//! its own (a prune and the audit watermark are the schema's), and between two of its steps the
//! in-process driver does what an operator does (docs/audit.md, "Retention"):
//! - before step [`Plan::audit_before`], a full `leasewright audit` of the trace's ledger (it must
//!   be clean), and the watermark it printed recorded as `prune --audited-through` records it;
//! - before step [`Plan::prune_before`], a prune of every finished job (audited ones only), then
//!   `leasewright audit --since` that watermark with its witness (it must be clean: a job pruned
//!   with a record above the watermark is its `watermark_mismatch`).
//!
//! What the model says of it, without the implementation's tables: a job the model has finished
//! before the audit, and that no step touches between the audit and the prune, has every record
//! at or below the watermark and must be pruned ([`Plan::must_prune`]); only a job the model has
//! finished by the prune may be ([`Plan::may_prune`]). No step after the prune touches a job the
//! model has finished by then, so no later message names a pruned job; the jobs still queued or
//! running go on, compared at every step as before, and the pruned ones' rows (and their
//! attempts' logs and artifacts) are compared on neither side from then on
//! ([`crate::driver::blank_pruned`]). A project's cache entry outlives the attempt that stored
//! it: it is still compared, storer and all.

use std::collections::BTreeSet;

use leasewright_model::{Action, LeaseModel, MessageKind, State};

use crate::generate::Generated;

/// The name prefix of the walks the in-process driver prunes between.
pub const PREFIX: &str = "random-prune";

/// Whether the trace named `name` is a walk the in-process driver prunes between.
pub fn is_prune_walk(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// When a walk is audited and pruned, and what the model says the prune must and may delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The 0-based step before which the ledger is audited and the watermark recorded.
    pub audit_before: usize,
    /// The 0-based step before which the finished jobs are pruned (after `audit_before`).
    pub prune_before: usize,
    /// The jobs the prune must delete: finished before the audit, untouched since.
    pub must_prune: BTreeSet<u8>,
    /// The jobs it may delete: finished before the prune.
    pub may_prune: BTreeSet<u8>,
    /// The jobs it must keep although they are finished: finished after the audit, so their
    /// finishing record is past the watermark (only `--unaudited` would delete them).
    pub must_keep: BTreeSet<u8>,
    /// Whether a project's cache entry was stored by an attempt of a job the prune must delete
    /// (the entry outlives it: its read after the prune still names that attempt).
    pub prunes_cache_storer: bool,
}

/// What differs between `plan` (the model's) and a prune before the step from `before` that
/// deleted `pruned` and reported `kept` finished jobs kept as unaudited: a deleted job the model
/// has not finished, a job it must have deleted, a job that finished after the audit (deleted as
/// if unaudited), and a count of kept jobs that is not the model's finished jobs it did not
/// delete.
pub fn judge(plan: &Plan, before: &State, pruned: &BTreeSet<u8>, kept: u64) -> Vec<String> {
    let mut differences = Vec::new();
    for j in pruned.difference(&plan.may_prune) {
        let state = before.jobs.get(usize::from(*j)).map(|job| job.state);
        differences.push(format!(
            "the prune deleted job {j}, which the model has {state:?}, not finished"
        ));
    }
    for j in plan.must_keep.intersection(pruned) {
        differences.push(format!(
            "the prune deleted job {j}, which the model finished after the audit: its \
             finishing record is past the audit watermark (only an unaudited prune deletes it)"
        ));
    }
    for j in plan.must_prune.difference(pruned) {
        differences.push(format!(
            "the prune kept job {j}: the model finished it before the audit and no step \
             touched it since, so its every record is at or below the audit watermark"
        ));
    }
    let finished_kept = plan.may_prune.difference(pruned).count() as u64;
    if kept != finished_kept {
        differences.push(format!(
            "the prune reports {kept} finished job(s) kept as unaudited; the model has \
             {finished_kept} finished and not pruned"
        ));
    }
    differences
}

/// The jobs whose server-side records the step from `before` to `after` may have touched, more
/// rather than fewer: every job whose state or attempts changed, the job a delivered message or an
/// operator's step names, the job a runner's heartbeat or side effect names, and every job of
/// whose attempts a revoked or rejoining runner holds one.
pub fn touched(before: &State, action: &Action, after: &State) -> BTreeSet<u8> {
    let mut jobs = BTreeSet::new();
    for (j, (b, a)) in before.jobs.iter().zip(after.jobs.iter()).enumerate() {
        if b != a {
            jobs.insert(j as u8);
        }
    }
    // An attempt's lease expiry is counted from its state's now, which a tick moves: compare
    // what a record would say instead.
    let key =
        |a: &leasewright_model::Attempt| (a.job, a.runner, a.lease, a.fence, a.state, a.digest);
    for (i, a) in after.attempts.iter().enumerate() {
        if before.attempts.get(i).map(key) != Some(key(a)) {
            jobs.insert(a.job);
        }
    }
    let named = match action {
        Action::Deliver { message } | Action::Replay { message, .. } => Some(message.job),
        Action::Cancel { job }
        | Action::Reconcile { job, .. }
        | Action::OutsiderCancel { job }
        | Action::OutsiderReconcile { job, .. } => Some(*job),
        _ => None,
    };
    jobs.extend(named);
    // A runner's heartbeat or side effect names the job of the attempt it holds (or names).
    let sent = match action {
        Action::Heartbeat {
            runner, attempt, ..
        } => LeaseModel::message_of(before, *runner, *attempt, MessageKind::Heartbeat, 0),
        Action::SideEffect { runner, effect } => {
            LeaseModel::message(before, *runner, MessageKind::SideEffect(*effect), 0)
        }
        _ => None,
    };
    jobs.extend(sent.map(|m| m.job));
    // A revoked or rejoining runner: every job of whose attempts it holds one.
    let runner = match action {
        Action::RunnerRevoke { runner } | Action::Rejoin { runner, .. } => Some(*runner),
        _ => None,
    };
    if let Some(r) = runner {
        jobs.extend(
            before
                .attempts
                .iter()
                .filter(|a| a.runner == r)
                .map(|a| a.job),
        );
    }
    jobs
}

/// The jobs the model has finished in `s`.
fn finished(s: &State) -> BTreeSet<u8> {
    (0u8..)
        .zip(s.jobs.iter())
        .filter(|(_, j)| j.state.is_terminal())
        .map(|(i, _)| i)
        .collect()
}

/// The plan of a walk worth pruning, if it has one: an audit and a prune such that the prune
/// must delete a job, may delete one the model finished after the audit (its records lie on both
/// sides of the watermark: only its last record says it is not audited), and no later step
/// touches a job finished by then. Among those, the first that prunes the attempt that stored a
/// project's cache entry with a job still unfinished at the prune (the walk goes on between
/// jobs), or else the best of them by those two.
pub fn plan(trace: &Generated<LeaseModel>) -> Option<Plan> {
    plans(trace)
        .filter(|(_, end)| *end == trace.steps.len())
        .map(|(p, _)| p)
        .max_by_key(|p| {
            (
                rank(p, trace),
                std::cmp::Reverse((p.audit_before, p.prune_before)),
            )
        })
}

/// How many of `trace`'s steps to keep so that it has a plan, the best one the walk allows: its
/// steps up to the first after the prune that touches a job finished by then. The walks the suite
/// prunes between are cut so ([`crate::select`]).
pub fn steps_to_keep(trace: &Generated<LeaseModel>) -> Option<usize> {
    plans(trace)
        .max_by_key(|(p, end)| (rank(p, trace), end - p.prune_before))
        .map(|(_, end)| end)
}

/// How much of the prune a plan exercises: 2 if it prunes a cache entry's storer, plus 1 if a
/// job is still unfinished at the prune.
pub fn rank(p: &Plan, trace: &Generated<LeaseModel>) -> usize {
    let jobs = trace.init.jobs.len();
    2 * usize::from(p.prunes_cache_storer) + usize::from(p.may_prune.len() < jobs)
}

/// Every audit and prune of `trace` that the prune must delete a job in and may delete one
/// finished after the audit, each with the steps up to the first after the prune that touches a
/// job finished by then (at least one step after the prune).
fn plans(trace: &Generated<LeaseModel>) -> impl Iterator<Item = (Plan, usize)> + '_ {
    let mut states = Vec::with_capacity(trace.steps.len() + 1);
    states.push(&trace.init);
    states.extend(trace.steps.iter().map(|(_, s)| s));
    let touched: Vec<BTreeSet<u8>> = trace
        .steps
        .iter()
        .enumerate()
        .map(|(k, (action, after))| touched(states[k], action, after))
        .collect();
    let n = trace.steps.len();
    (1..n)
        .flat_map(move |a| (a + 1..n).map(move |p| (a, p)))
        .filter_map(move |(audit_before, prune_before)| {
            let at_audit = finished(states[audit_before]);
            let may_prune = finished(states[prune_before]);
            let end = (prune_before..n)
                .find(|&k| !touched[k].is_disjoint(&may_prune))
                .unwrap_or(n);
            if end == prune_before {
                return None;
            }
            let must_prune: BTreeSet<u8> = at_audit
                .iter()
                .copied()
                .filter(|j| {
                    !touched[audit_before..prune_before]
                        .iter()
                        .any(|t| t.contains(j))
                })
                .collect();
            let must_keep: BTreeSet<u8> = may_prune.difference(&at_audit).copied().collect();
            if must_prune.is_empty() || must_keep.is_empty() {
                return None;
            }
            let s = states[prune_before];
            let prunes_cache_storer = s.cache.iter().flatten().any(|entry| {
                s.attempts
                    .get(usize::from(entry.stored_by))
                    .is_some_and(|a| must_prune.contains(&a.job))
            });
            Some((
                Plan {
                    audit_before,
                    prune_before,
                    must_prune,
                    may_prune,
                    must_keep,
                    prunes_cache_storer,
                },
                end,
            ))
        })
}
