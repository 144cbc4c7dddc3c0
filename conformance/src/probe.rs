//! Probes: the messages and operator actions a well-behaved runner or operator never sends, sent on
//! purpose in reachable states, with the model's verdict (docs/conformance.md, classes 1–3).
//!
//! For every state of a set of model paths (the transition cover's recorded paths, or prefixes of
//! random walks), the candidates are: every runner message kind (`heartbeat`, `result` of every
//! outcome, `rejoin`) from every runner (the outsider included), naming every attempt of the
//! ledger under every job, with the attempt's own lease id and fence, a forged one, or another
//! attempt's (so that superseded and stale tuples fail two §6.1 checks at once); a result of the
//! same outcome with another digest; a runner, job or attempt no one created; the target
//! mutation of every attempt with every slot token issued (and every other job fence); and every
//! operator action (`cancel`,
//! `reconcile` with every finding and decision, by the job's project and by another project's
//! operator) on every job. The model's `replay` action delivers any message as any runner, and
//! its operator actions take any finding, so every candidate is a model step and the model gives
//! its verdict.
//!
//! The candidates are classified by [`Coverage`]; a probe trace (the path to the state, then the
//! candidate) is kept for every candidate that exercises a cell no earlier one did, in the paths'
//! stable order, and `extra` more are drawn at random from the rest with the given seed.

use leasewright_model::{
    Action, Decision, Expected, Finding, Forge, LeaseModel, Message, MessageKind, Outcome, Reason,
    SideEffect, State, FORGED_FENCE, FORGED_LEASE,
};
use stateright::Model;

use crate::coverage::{server_kinds, Coverage};
use crate::generate::{Generated, SplitMix64};

/// A model path from the initial state: the state it ends in is the last step's.
pub type Path = (State, Vec<(Action, State)>);

/// The probes of a set of paths.
pub struct Probes {
    /// The probe traces.
    pub traces: Vec<Generated<LeaseModel>>,
    /// States probed.
    pub states: usize,
    /// Candidate probes considered.
    pub candidates: usize,
    /// Traces kept because they exercise a new cell.
    pub selected: usize,
    /// Traces drawn at random from the rest.
    pub sampled: usize,
    /// Every cell some candidate exercises: the reachable part of each class's product.
    pub reachable: Coverage,
}

/// Every probe candidate in `s`.
pub fn candidates(model: &LeaseModel, s: &State) -> Vec<Action> {
    let mut out = Vec::new();
    let senders = s.runners.len() as u8;
    for (a, attempt) in s.attempts.iter().enumerate() {
        let a = a as u8;
        let mut tuples = vec![
            (attempt.lease, attempt.fence),
            (FORGED_LEASE, attempt.fence),
            (attempt.lease, FORGED_FENCE),
            (FORGED_LEASE, FORGED_FENCE),
        ];
        for other in s.attempts.iter().filter(|o| o.lease != attempt.lease) {
            tuples.push((other.lease, attempt.fence));
            tuples.push((attempt.lease, other.fence));
            tuples.push((other.lease, other.fence));
        }
        // With side effects (R8), one of each side-effect kind too.
        let mut kinds = server_kinds();
        if model.config.side_effects {
            kinds.extend(SideEffect::EACH_KIND.map(MessageKind::SideEffect));
        }
        for sender in 0..senders {
            for (k, &kind) in kinds.iter().enumerate() {
                for &(lease, fence) in &tuples {
                    for job in 0..s.jobs.len() as u8 {
                        let message = Message {
                            kind,
                            sender,
                            job,
                            attempt: a,
                            lease,
                            fence,
                            // Any runner time: it decides nothing, and must be recorded as sent.
                            runner_time: ((usize::from(sender) + k + usize::from(a)) % 3) as u8,
                            digest: 0,
                            token: 0,
                        };
                        out.push(Action::Replay {
                            runner: sender,
                            message,
                            forge: Forge::AsIs,
                        });
                    }
                }
            }
        }
        // "Same outcome, other digest" (§6.1 check 9): the attempt's own runner reports each
        // outcome again under its own tuple with another digest.
        for &outcome in Outcome::ALL {
            out.push(Action::Replay {
                runner: attempt.runner,
                message: Message {
                    kind: MessageKind::Result(outcome),
                    sender: attempt.runner,
                    job: attempt.job,
                    attempt: a,
                    lease: attempt.lease,
                    fence: attempt.fence,
                    runner_time: 0,
                    digest: 1,
                    token: 0,
                },
                forge: Forge::AsIs,
            });
        }
        // R8: every side effect of the bounded domains under the attempt's own tuple (a log
        // append of a stored sequence number with other content, a get of nothing stored).
        if model.config.side_effects {
            for effect in SideEffect::ALL {
                out.push(Action::Replay {
                    runner: attempt.runner,
                    message: Message {
                        kind: MessageKind::SideEffect(effect),
                        sender: attempt.runner,
                        job: attempt.job,
                        attempt: a,
                        lease: attempt.lease,
                        fence: attempt.fence,
                        runner_time: 0,
                        digest: 0,
                        token: 0,
                    },
                    forge: Forge::AsIs,
                });
            }
        }
        // The target mutation of the attempt carrying every slot token issued (another
        // attempt's: a stale or a later holder's, of its slot or of another), and carrying
        // every other job fence with its own token (the target must not look at fences, §8.3).
        let mut tokens: Vec<u8> = s.attempts.iter().map(|o| o.token).collect();
        tokens.sort_unstable();
        tokens.dedup();
        let mut carried: Vec<(u8, u8)> = tokens.into_iter().map(|t| (attempt.fence, t)).collect();
        for other in s.attempts.iter().filter(|o| o.fence != attempt.fence) {
            carried.push((other.fence, attempt.token));
        }
        carried.sort_unstable();
        carried.dedup();
        for (fence, token) in carried {
            let message = Message {
                kind: MessageKind::TargetMutation,
                sender: attempt.runner,
                job: attempt.job,
                attempt: a,
                lease: attempt.lease,
                fence,
                runner_time: 0,
                digest: 0,
                token,
            };
            out.push(Action::Replay {
                runner: attempt.runner,
                message,
                forge: Forge::AsIs,
            });
        }
        // Identities no one created (§6.1 checks 1, 2 and 4): the attempt's tuple from an
        // unknown runner, naming an unknown job, naming an unknown attempt of its job.
        let own = Message {
            kind: MessageKind::Heartbeat,
            sender: attempt.runner,
            job: attempt.job,
            attempt: a,
            lease: attempt.lease,
            fence: attempt.fence,
            runner_time: 0,
            digest: 0,
            token: 0,
        };
        for kind in [MessageKind::Heartbeat, MessageKind::Result(Outcome::Passed)] {
            for message in [
                Message {
                    kind,
                    sender: senders,
                    ..own
                },
                Message {
                    kind,
                    job: s.jobs.len() as u8,
                    ..own
                },
                Message {
                    kind,
                    attempt: s.attempts.len() as u8,
                    ..own
                },
            ] {
                out.push(Action::Replay {
                    runner: message.sender,
                    message,
                    forge: Forge::AsIs,
                });
            }
        }
    }
    // A claim by every runner, executing or not (a buggy runner claims while it holds a job).
    for runner in 0..senders {
        out.push(Action::Claim { runner });
        for limit in 2..=model.config.batch_claim {
            out.push(Action::ClaimBatch { runner, limit });
        }
    }
    for job in 0..s.jobs.len() as u8 {
        out.push(Action::Cancel { job });
        if model.outsider().is_some() {
            out.push(Action::OutsiderCancel { job });
        }
        for &finding in Finding::ALL {
            for &decision in Decision::ALL {
                out.push(Action::Reconcile {
                    job,
                    finding,
                    decision,
                });
                if model.outsider().is_some() {
                    out.push(Action::OutsiderReconcile {
                        job,
                        finding,
                        decision,
                    });
                }
            }
        }
    }
    out
}

/// The state after the probe `action` in `s`: the model's next state, or `s` itself for a claim
/// the model rejects (`no_queued_job` changes nothing).
pub fn apply(model: &LeaseModel, s: &State, action: &Action) -> Option<State> {
    model.next_state(s, action.clone()).or_else(|| {
        (matches!(action, Action::Claim { .. } | Action::ClaimBatch { .. })
            && model.expected(s, action) == Some(Expected::rejected(Reason::NoQueuedJob)))
        .then(|| s.clone())
    })
}

/// Whether `action` can be sent in `s` as a probe: an operator action, or a message whose
/// sender, job, attempt and lease id exist there (a driver maps only identities it has seen).
pub fn applicable(s: &State, action: &Action) -> bool {
    match action {
        Action::Replay {
            runner, message, ..
        } => {
            // One past the last runner, job or attempt is an identity no one created (the
            // drivers send an id they never created for it).
            (*runner as usize) <= s.runners.len()
                && (message.job as usize) <= s.jobs.len()
                && (message.attempt as usize) <= s.attempts.len()
                && (message.lease == FORGED_LEASE
                    || s.attempts.iter().any(|a| a.lease == message.lease))
        }
        Action::Claim { runner } | Action::ClaimBatch { runner, .. } => {
            (*runner as usize) < s.runners.len()
        }
        Action::Cancel { job }
        | Action::OutsiderCancel { job }
        | Action::Reconcile { job, .. }
        | Action::OutsiderReconcile { job, .. } => (*job as usize) < s.jobs.len(),
        _ => false,
    }
}

/// The probes of `paths` (all of `model`): see the module documentation. Traces are named
/// `{prefix}-000000`, ... and carry `generator`.
pub fn probes(
    model: &LeaseModel,
    paths: &[Path],
    seed: u64,
    extra: usize,
    prefix: &str,
    generator: &'static str,
) -> Probes {
    let mut seen = Coverage::default();
    let mut reachable = Coverage::default();
    let mut kept: Vec<(usize, Action)> = Vec::new();
    let mut rest: Vec<(usize, Action)> = Vec::new();
    let mut count = 0usize;
    for (p, (init, steps)) in paths.iter().enumerate() {
        let state = steps.last().map_or(init, |(_, s)| s);
        for action in candidates(model, state) {
            count += 1;
            let Some(after) = apply(model, state, &action) else {
                continue;
            };
            let mut cells = Coverage::default();
            cells.record(model, state, &action, &after);
            reachable.absorb(&cells);
            if new_cells(&seen, &cells) {
                seen.absorb(&cells);
                kept.push((p, action));
            } else {
                rest.push((p, action));
            }
        }
    }
    let selected = kept.len();
    let mut rng = SplitMix64::new(seed);
    let sampled = extra.min(rest.len());
    for _ in 0..sampled {
        let pick = rng.below(rest.len());
        kept.push(rest.swap_remove(pick));
    }
    let traces = kept
        .into_iter()
        .enumerate()
        .map(|(i, (p, action))| {
            let (init, steps) = &paths[p];
            let state = steps.last().map_or(init, |(_, s)| s);
            let after = apply(model, state, &action).expect("a probe kept is a model step");
            let mut steps = steps.clone();
            steps.push((action, after));
            Generated {
                name: format!("{prefix}-{i:06}"),
                generator,
                seed: Some(seed),
                init: init.clone(),
                steps,
            }
        })
        .collect();
    Probes {
        traces,
        states: paths.len(),
        candidates: count,
        selected,
        sampled,
        reachable,
    }
}

fn new_cells(seen: &Coverage, cells: &Coverage) -> bool {
    seen.classes()
        .into_iter()
        .zip(cells.classes())
        .any(|((_, seen), (_, cells))| {
            cells.iter().any(|(cell, verdicts)| {
                seen.get(cell)
                    .is_none_or(|v| verdicts.keys().any(|k| !v.contains_key(k)))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::random_walks;
    use leasewright_model::Config;

    #[test]
    fn the_kept_probes_exercise_every_cell_some_candidate_reaches() {
        let model = LeaseModel::new(Config {
            jobs: 2,
            ..Config::one_job()
        });
        let walks = random_walks(&model, 3, 120, 40);
        let paths: Vec<Path> = walks
            .iter()
            .flat_map(|w| (1..=w.steps.len()).map(|n| (w.init.clone(), w.steps[..n].to_vec())))
            .collect();
        let probes = probes(&model, &paths, 3, 0, "probe", "probe");
        let mut replayed = Coverage::default();
        for trace in &probes.traces {
            let (action, after) = trace.steps.last().unwrap();
            let before = trace
                .steps
                .len()
                .checked_sub(2)
                .map_or(&trace.init, |i| &trace.steps[i].1);
            replayed.record(&model, before, action, after);
        }
        for ((class, reached), (_, hit)) in probes
            .reachable
            .classes()
            .into_iter()
            .zip(replayed.classes())
        {
            for (cell, verdicts) in reached {
                for verdict in verdicts.keys() {
                    assert!(
                        hit.get(cell).is_some_and(|v| v.contains_key(verdict)),
                        "{class}: {cell} ({verdict}) is reachable but no probe kept exercises it"
                    );
                }
            }
        }
        // Two checks failing at once, on a superseded attempt, are among them.
        assert!(probes
            .reachable
            .failing_pairs
            .contains_key("runner_mismatch+not_current"));
        assert!(probes
            .reachable
            .failing_pairs
            .contains_key("unknown_attempt+lease_mismatch"));
        assert!(probes.selected > 0 && probes.sampled == 0);
    }
}
