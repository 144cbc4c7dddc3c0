//! The properties the model checks: docs/protocol.md §11 as `always`, and `sometimes` properties
//! that show each interesting case is reached (so no `always` holds only because nothing happened).

use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;
use stateright::{Model, Property};

/// Invariant 1: at most one current attempt per job.
pub const AT_MOST_ONE_CURRENT_ATTEMPT: &str = "at most one current attempt per job";
/// Invariant 2: the fences of a job's attempts strictly increase in claim order.
pub const FENCES_INCREASE: &str = "the fences of a job strictly increase";
/// Invariant 3: no result from a non-current attempt completes a job.
pub const NO_STALE_COMPLETION: &str = "no result from a non-current attempt completes a job";
/// Invariant 4: a committed outcome never changes.
pub const OUTCOME_NEVER_CHANGES: &str = "a committed outcome never changes";
/// Invariant 5: a heartbeat never extends an expired lease.
pub const NO_HEARTBEAT_AFTER_EXPIRY: &str = "a heartbeat never extends an expired lease";
/// Invariant 6: no two attempts of one job execute at the same time.
pub const ONE_EXECUTION_PER_JOB: &str = "no two attempts of one job execute at the same time";
/// Invariant 7: a fenced target never applies a stale fence.
pub const FENCED_TARGET_MONOTONIC: &str = "a fenced target never applies a stale fence";
/// Invariant 8: an idempotent target applies each deployment at most once.
pub const IDEMPOTENT_TARGET_ONCE: &str =
    "an idempotent target applies each deployment at most once";
/// Invariant 9: an expired job is `uncertain`, never `queued`, until a reconciliation decides.
pub const EXPIRED_IS_UNCERTAIN: &str = "an expired job is uncertain until a reconciliation decides";
/// Invariant 10: every received report is recorded against the attempt that sent it.
pub const REPORTS_ATTRIBUTED: &str = "every received report is recorded against its attempt";
/// Invariant 11: verdicts never depend on runner clock values.
pub const RUNNER_TIME_IRRELEVANT: &str = "verdicts never depend on runner time";
/// Invariant 12: a runner never changes a job of another project.
pub const NO_CROSS_PROJECT_CHANGE: &str = "a runner never changes a job of another project";
/// Invariant 13: when only time can pass, every job is terminal, uncertain, or leased and waiting
/// for its lease to expire.
pub const QUIESCENCE_RESOLVED: &str = "quiescence leaves every job terminal or uncertain";

/// A result of a superseded attempt was rejected `not_current`.
pub const SOMETIMES_STALE_COMPLETION_REJECTED: &str = "a stale completion is rejected";
/// An identical repeat of a committed result was acknowledged.
pub const SOMETIMES_DUPLICATE_ACKNOWLEDGED: &str = "a duplicate result is acknowledged";
/// A conflicting result was recorded.
pub const SOMETIMES_CONFLICT_RECORDED: &str = "a conflicting result is recorded";
/// Some job became `uncertain`.
pub const SOMETIMES_UNCERTAIN: &str = "a job becomes uncertain";
/// A job got a second attempt with a larger fence.
pub const SOMETIMES_RETRY: &str = "a retry gets a larger fence";
/// A result of an expired attempt was kept as a late observation of that attempt.
pub const SOMETIMES_LATE_REPORT: &str = "a late report is recorded";
/// A heartbeat after expiry was rejected `lease_expired`.
pub const SOMETIMES_HEARTBEAT_REJECTED: &str = "a heartbeat after expiry is rejected";
/// A cancellation completed with the runner's `cancelled` result.
pub const SOMETIMES_CANCELLED: &str = "a cancellation completes";
/// The fenced target refused a stale fence (fenced targets only).
pub const SOMETIMES_STALE_FENCE: &str = "the fenced target refuses a stale fence";
/// The idempotent target acknowledged a repeated deployment (idempotent targets only).
pub const SOMETIMES_REPEAT_ACKNOWLEDGED: &str = "the idempotent target acknowledges a repeat";
/// The unfenced target applied a second mutation (unfenced targets only): it cannot refuse one.
pub const SOMETIMES_APPLIED_TWICE: &str = "the unfenced target applies a mutation twice";

/// Every property for a target of kind `target`, `always` first, in a fixed order. The last
/// `sometimes` property exercises the target's own rule, so it depends on the kind.
pub fn all(target: TargetKind) -> Vec<Property<LeaseModel>> {
    let mut properties: Vec<Property<LeaseModel>> = INVARIANTS
        .iter()
        .map(|&(name, condition)| Property::always(name, condition))
        .collect();
    properties.extend(sometimes(target));
    properties
}

/// The name of [`every_invariant`] as one property.
pub const EVERY_INVARIANT: &str = "every invariant holds";

/// Every `always` property as one (for exhaustive checking: the checker's cost per state grows
/// with the number of properties), then the `sometimes` properties. When it is violated,
/// [`violated`] names the invariants that fail in the last state of the counterexample.
pub fn combined(target: TargetKind) -> Vec<Property<LeaseModel>> {
    let mut properties = vec![Property::always(EVERY_INVARIANT, every_invariant)];
    properties.extend(sometimes(target));
    properties
}

/// Every invariant holds in `s`.
pub fn every_invariant(m: &LeaseModel, s: &State) -> bool {
    INVARIANTS.iter().all(|(_, holds)| holds(m, s))
}

/// The names of the invariants that fail in `s`, in their fixed order.
pub fn violated(m: &LeaseModel, s: &State) -> Vec<&'static str> {
    INVARIANTS
        .iter()
        .filter(|(_, holds)| !holds(m, s))
        .map(|&(name, _)| name)
        .collect()
}

type Condition = fn(&LeaseModel, &State) -> bool;

/// The `always` properties (docs/protocol.md §11), in a fixed order.
const INVARIANTS: &[(&str, Condition)] = &[
    (AT_MOST_ONE_CURRENT_ATTEMPT, at_most_one_current_attempt),
    (FENCES_INCREASE, fences_increase),
    (NO_STALE_COMPLETION, no_stale_completion),
    (OUTCOME_NEVER_CHANGES, outcome_never_changes),
    (NO_HEARTBEAT_AFTER_EXPIRY, no_heartbeat_after_expiry),
    (ONE_EXECUTION_PER_JOB, one_execution_per_job),
    (FENCED_TARGET_MONOTONIC, fenced_target_monotonic),
    (IDEMPOTENT_TARGET_ONCE, idempotent_target_once),
    (EXPIRED_IS_UNCERTAIN, expired_is_uncertain),
    (REPORTS_ATTRIBUTED, reports_attributed),
    (RUNNER_TIME_IRRELEVANT, runner_time_irrelevant),
    (NO_CROSS_PROJECT_CHANGE, no_cross_project_change),
    (QUIESCENCE_RESOLVED, quiescence_resolved),
];

/// The `sometimes` properties. The last one exercises the target's own rule, so it depends on
/// the kind.
fn sometimes(target: TargetKind) -> Vec<Property<LeaseModel>> {
    let mut properties = vec![
        Property::sometimes(SOMETIMES_STALE_COMPLETION_REJECTED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::NotCurrent)
            })
        }),
        Property::sometimes(SOMETIMES_DUPLICATE_ACKNOWLEDGED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.verdict == Verdict::Acknowledged
            })
        }),
        Property::sometimes(SOMETIMES_CONFLICT_RECORDED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::ConflictingResult) && o.attempt.is_some()
            })
        }),
        Property::sometimes(SOMETIMES_UNCERTAIN, |_, s: &State| {
            s.jobs.iter().any(|j| j.state == JobState::Uncertain)
        }),
        Property::sometimes(SOMETIMES_RETRY, |_, s: &State| {
            s.attempts
                .iter()
                .any(|a| a.fence > 1 && a.state == AttemptState::Active)
        }),
        Property::sometimes(SOMETIMES_LATE_REPORT, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::LeaseExpired) && o.attempt.is_some()
            })
        }),
        Property::sometimes(SOMETIMES_HEARTBEAT_REJECTED, |m, s: &State| {
            observed(m, s, is_kind(MessageKind::Heartbeat), |o| {
                o.reason == Some(Reason::LeaseExpired)
            })
        }),
        Property::sometimes(SOMETIMES_CANCELLED, |_, s: &State| {
            s.jobs
                .iter()
                .any(|j| j.state == JobState::Cancelled && j.completed_by.is_some())
        }),
    ];
    properties.push(match target {
        TargetKind::Fenced => Property::sometimes(SOMETIMES_STALE_FENCE, |m, s: &State| {
            observed(m, s, is_kind(MessageKind::TargetMutation), |o| {
                o.reason == Some(Reason::StaleFence)
            })
        }),
        TargetKind::Idempotent => {
            Property::sometimes(SOMETIMES_REPEAT_ACKNOWLEDGED, |m, s: &State| {
                observed(m, s, is_kind(MessageKind::TargetMutation), |o| {
                    o.verdict == Verdict::Acknowledged
                })
            })
        }
        TargetKind::Unfenced => Property::sometimes(SOMETIMES_APPLIED_TWICE, |_, s: &State| {
            s.targets.iter().any(|t| t.applied > 1)
        }),
    });
    properties
}

/// Some deliverable message (in flight, or a heartbeat a runner can send now) that `message`
/// selects, received now, would be recorded as `f` describes. Its delivery is enabled, so reaching
/// such a state means the next step can record it. (`message` only saves computing the
/// observations of messages `f` would refuse anyway: every state pays for these properties.)
fn observed(
    m: &LeaseModel,
    s: &State,
    message: impl Fn(&Message) -> bool,
    f: impl Fn(&Observation) -> bool,
) -> bool {
    m.deliverable(s)
        .filter(|msg| message(msg))
        .any(|msg| f(&m.observation(s, &msg)))
}

fn is_result_message(m: &Message) -> bool {
    matches!(m.kind, MessageKind::Result(_))
}

fn is_kind(kind: MessageKind) -> impl Fn(&Message) -> bool {
    move |m| m.kind == kind
}

/// Acting as current: holding the lease (`active`) or having lost it (`uncertain`). At most one
/// such attempt per job, and it is the job's current attempt.
fn at_most_one_current_attempt(_: &LeaseModel, s: &State) -> bool {
    s.jobs.iter().enumerate().all(|(j, job)| {
        s.attempts.iter().enumerate().all(|(a, attempt)| {
            attempt.job as usize != j
                || !matches!(
                    attempt.state,
                    AttemptState::Active | AttemptState::Uncertain
                )
                || job.current == Some(a as AttemptId)
        })
    })
}

fn fences_increase(_: &LeaseModel, s: &State) -> bool {
    (0..s.jobs.len()).all(|j| {
        let mut fences = s
            .attempts
            .iter()
            .filter(|a| a.job as usize == j)
            .map(|a| a.fence);
        let mut last = fences.next();
        fences.all(|f| {
            let increases = last.is_some_and(|l| l < f);
            last = Some(f);
            increases
        })
    })
}

/// The attempt named by the result that completed a job is the job's current attempt, and it
/// holds the job's outcome.
fn no_stale_completion(_: &LeaseModel, s: &State) -> bool {
    s.jobs.iter().all(|job| match job.completed_by {
        None => true,
        Some((a, _)) => {
            job.current == Some(a)
                && s.attempts[a as usize]
                    .state
                    .outcome()
                    .map(Outcome::job_state)
                    == Some(job.state)
        }
    })
}

fn outcome_never_changes(_: &LeaseModel, s: &State) -> bool {
    s.jobs
        .iter()
        .all(|job| job.committed.is_none_or(|c| c == job.state))
}

/// Once a lease has expired (a `tick` reached its expiry while it was `active`), it is never valid
/// again.
fn no_heartbeat_after_expiry(_: &LeaseModel, s: &State) -> bool {
    s.attempts
        .iter()
        .all(|a| !a.expired || a.state != AttemptState::Active || s.clock >= a.lease_expiry)
}

fn one_execution_per_job(_: &LeaseModel, s: &State) -> bool {
    (0..s.jobs.len()).all(|j| {
        s.attempts
            .iter()
            .filter(|a| a.job as usize == j && a.execution == Execution::Executing)
            .count()
            <= 1
    })
}

fn fenced_target_monotonic(m: &LeaseModel, s: &State) -> bool {
    m.config.target != TargetKind::Fenced
        || s.targets.iter().all(|t| t.last_fence == t.highest_fence)
}

fn idempotent_target_once(m: &LeaseModel, s: &State) -> bool {
    m.config.target != TargetKind::Idempotent || s.targets.iter().all(|t| t.applied <= 1)
}

/// A `queued` job has no attempt that may still be executing without a reconciliation having
/// decided about it: every earlier attempt is `stopped` (or holds an outcome).
fn expired_is_uncertain(_: &LeaseModel, s: &State) -> bool {
    s.jobs.iter().enumerate().all(|(j, job)| {
        job.state != JobState::Queued
            || s.attempts
                .iter()
                .filter(|a| a.job as usize == j)
                .all(|a| a.state == AttemptState::Stopped || a.state.outcome().is_some())
    })
}

/// The observation of every message that could be delivered is attributed exactly when checks
/// 1–5 pass: to the attempt it names, which belongs to the named job and was claimed by the sender
/// of the same project. (Every delivery records one observation: `deliver` and `observation` are
/// one rule.)
fn reports_attributed(m: &LeaseModel, s: &State) -> bool {
    m.deliverable(s)
        .filter(|msg| msg.kind != MessageKind::TargetMutation)
        .all(|msg| {
            let o = m.observation(s, &msg);
            let claimed = s.attempts.get(msg.attempt as usize).is_some_and(|a| {
                a.job == msg.job
                    && a.runner == msg.sender
                    && s.runners.get(msg.sender as usize).map(|r| r.project)
                        == s.jobs.get(msg.job as usize).map(|j| j.project)
            });
            o.attempt == claimed.then_some(msg.attempt)
        })
}

/// Recompute the verdict of every in-flight message with other runner times: it is the same.
fn runner_time_irrelevant(m: &LeaseModel, s: &State) -> bool {
    m.deliverable(s).all(|msg| {
        let verdict = m.delivery_verdict(s, &msg);
        [0, msg.runner_time.wrapping_add(7), u8::MAX]
            .iter()
            .all(|&t| {
                m.delivery_verdict(
                    s,
                    &Message {
                        runner_time: t,
                        ..msg
                    },
                ) == verdict
            })
    })
}

/// No accepted result came from a runner of another project, and no message in flight from one
/// would be accepted now.
fn no_cross_project_change(m: &LeaseModel, s: &State) -> bool {
    let project = |r: RunnerId| s.runners.get(r as usize).map(|r| r.project);
    let completions = s.jobs.iter().all(|job| {
        job.completed_by
            .is_none_or(|(_, sender)| project(sender) == Some(job.project))
    });
    completions
        && m.deliverable(s).all(|msg| {
            let sender = s.runners.get(msg.sender as usize).map(|r| r.project);
            let owner = s.jobs.get(msg.job as usize).map(|j| j.project);
            sender == owner || m.delivery_verdict(s, &msg).verdict == Verdict::Rejected
        })
}

/// Quiescent: no step but `tick` changes the state. Then no job is `queued` (in a quiescent state
/// an expired lease would be swept, so a leased job is one whose lease has not expired yet and
/// which the passing of time makes `uncertain`).
fn quiescence_resolved(m: &LeaseModel, s: &State) -> bool {
    if s.jobs.iter().all(|j| j.state != JobState::Queued) {
        return true;
    }
    // Cheap exits: an executing runner can stop, a disconnected one can rejoin, an idle one can
    // claim; each of these changes the state.
    let c = &m.config;
    if (0..c.runners).any(|r| {
        m.executing(s, r).is_some()
            || !s.runners[r as usize].connected
            || m.claimable_job(s, r).is_some()
    }) {
        return true;
    }
    let quiescent = m
        .next_steps(s)
        .into_iter()
        .all(|(action, next)| action == Action::Tick || next == *s);
    !quiescent
}
