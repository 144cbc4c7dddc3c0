//! The named scenarios of docs/protocol.md §10 as model traces.
//!
//! A scenario is never written as raw states: it is either a script of picks among the model's
//! enabled actions, or the shortest model path to a step with a given property. Either way it is a
//! real trace of the model, so the model decides every expected verdict.

use std::collections::{HashSet, VecDeque};

use leasewright_model::{
    Action, AttemptState, Config, Expected, Forge, JobState, LeaseModel, Message, MessageKind,
    Outcome, Reason, State, TargetKind,
};
use stateright::Model;

use crate::generate::Generated;

/// The scenarios, each with the configuration it runs in.
pub fn all() -> Result<Vec<(LeaseModel, Generated<LeaseModel>)>, String> {
    Ok(vec![
        stale_completion()?,
        ownership_tuple(Outcome::Passed)?,
        fenced_target()?,
        unfenced_target_stays_reserved()?,
        reconnect()?,
        slot_reserved_across_projects()?,
        slot_stale_token_refused()?,
        slot_later_job_accepted()?,
        slot_stale_token_after_pass()?,
        slot_stale_token_after_abort()?,
        slot_outsider_stale_token_refused()?,
    ])
}

/// The names of the scenarios, in the order [`all`] returns them.
pub const NAMES: [&str; 11] = [
    "scenario-stale-completion",
    "scenario-ownership-tuple",
    "scenario-fenced-target",
    "scenario-unfenced-target-stays-reserved",
    "scenario-reconnect",
    "scenario-slot-reserved-across-projects",
    "scenario-slot-stale-token-refused",
    "scenario-slot-later-job-accepted",
    "scenario-slot-stale-token-after-pass",
    "scenario-slot-stale-token-after-abort",
    "scenario-slot-outsider-stale-token-refused",
];

/// The small configuration of the shared-slot scenarios (issue 13): one runner per project, one
/// tick leases, no disconnects or forgeries, every job on slot 0.
fn one_slot(jobs: u8, outsider_jobs: u8, target: TargetKind) -> Config {
    Config {
        jobs,
        runners: 1,
        lease_ttl: 1,
        disconnects: false,
        forgery: false,
        outsider: outsider_jobs > 0,
        outsider_jobs,
        shared_slot: true,
        target,
        ..Config::one_job()
    }
}

/// Issue 13, observation 1 (two deployments at once): while project 0's job on the slot is
/// `uncertain` (its slot reserved), the other project's job naming the same slot cannot be
/// claimed: `no_queued_job`. (The model offers only claims that succeed, so the refused claim is
/// appended as a step that leaves the state unchanged, with the model's verdict.)
pub fn slot_reserved_across_projects() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let (model, mut trace) = shortest(
        NAMES[5],
        one_slot(1, 1, TargetKind::Unfenced),
        8,
        |_, _, after, _| {
            after.jobs[0].state == JobState::Uncertain
                && after.reserved(0)
                && after.targets[0].applied > 0
        },
    )?;
    let last = trace
        .steps
        .last()
        .map_or(trace.init.clone(), |(_, s)| s.clone());
    let outsider = model.outsider().ok_or("an outsider")?;
    let claim = Action::Claim { runner: outsider };
    if model.expected(&last, &claim) != Some(Expected::rejected(Reason::NoQueuedJob)) {
        return Err(format!(
            "{}: the model would let the outsider claim",
            NAMES[5]
        ));
    }
    trace.steps.push((claim, last));
    Ok((model, trace))
}

/// Issue 13, observation 2 (stale overwrite at a fenced slot): project 0's job reached fence 2,
/// its fence-2 attempt's mutation is still in flight when the job is ended; the other project's
/// job (fence 1) is claimed on the slot and deploys; the late fence-2 mutation carries the older
/// slot token and is refused `stale_fence`.
pub fn slot_stale_token_refused() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    shortest(
        NAMES[6],
        one_slot(1, 1, TargetKind::Fenced),
        16,
        |before, action, _, verdict| {
            matches!(action, Action::Deliver { message }
            if message.kind == MessageKind::TargetMutation
                && message.job == 0
                && message.fence >= 2
                && before.attempts.iter().any(|a| {
                    a.job == 1 && a.token == before.targets[0].highest_token
                }))
                && verdict == Some(Expected::rejected(Reason::StaleFence))
        },
    )
}

/// Issue 13, observation 3 (blocked release): job 0 reached fence 2 and deployed to the fenced
/// slot, then passed; job 1, of the same project, deploys with its own fence 1 and a later slot
/// token: accepted.
pub fn slot_later_job_accepted() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    shortest(
        NAMES[7],
        one_slot(2, 0, TargetKind::Fenced),
        16,
        |before, action, _, verdict| {
            matches!(action, Action::Deliver { message }
            if message.kind == MessageKind::TargetMutation
                && message.job == 1
                && message.fence == 1
                && before.jobs[0].state == JobState::Passed
                && before.attempts.iter().any(|a| {
                    a.job == 0 && a.fence >= 2
                        && a.token == before.targets[0].highest_token
                }))
                && verdict == Some(Expected::ACCEPTED)
        },
    )
}

/// Whether `action` delivers a target mutation of job `job` that the model refuses
/// `stale_fence` because the slot's highest token was issued to another job: a token compared
/// across jobs (§8.4, invariant 7), the case a target that keeps its highest token per job, not
/// per slot, gets wrong. The random walks rarely reach it: it takes a mutation held in flight
/// past its job's release of the slot, the next job's claim, its mutation sent and delivered,
/// and only then the held one, among the dozens of other enabled steps of every state.
fn stale_across_jobs(before: &State, action: &Action, verdict: Option<Expected>, job: u8) -> bool {
    matches!(action, Action::Deliver { message }
    if message.kind == MessageKind::TargetMutation
        && message.job == job
        && before.attempts.iter().any(|a| {
            a.job != job && a.token == before.targets[0].highest_token
        }))
        && verdict == Some(Expected::rejected(Reason::StaleFence))
}

/// A stale token across two jobs of one project: job 0's first mutation is still in flight when
/// job 0 passes; job 1 is claimed on the slot and deploys; job 0's late mutation carries the older
/// slot token and is refused `stale_fence`.
pub fn slot_stale_token_after_pass() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    stale_token_after(NAMES[8], JobState::Passed)
}

/// The same after an abort: job 0's lease ran out with its mutation in flight, the operator
/// aborted it (releasing the slot), job 1 deployed, and job 0's late mutation is refused.
pub fn slot_stale_token_after_abort() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    stale_token_after(NAMES[9], JobState::Aborted)
}

/// Job 0's late mutation refused after job 1 (same project, same slot) deployed, job 0 `ended`.
fn stale_token_after(
    name: &'static str,
    ended: JobState,
) -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    shortest(
        name,
        one_slot(2, 0, TargetKind::Fenced),
        16,
        |before, action, _, verdict| {
            stale_across_jobs(before, action, verdict, 0) && before.jobs[0].state == ended
        },
    )
}

/// The other direction across projects: the outsider's job deployed before project 0's job
/// took the slot; its late mutation is refused once project 0's job has deployed.
pub fn slot_outsider_stale_token_refused() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    shortest(
        NAMES[10],
        one_slot(1, 1, TargetKind::Fenced),
        16,
        |before, action, _, verdict| stale_across_jobs(before, action, verdict, 1),
    )
}

/// A script of picks: each `take` chooses the first enabled action that matches.
struct Script {
    model: LeaseModel,
    init: State,
    state: State,
    steps: Vec<(Action, State)>,
    name: &'static str,
}

impl Script {
    fn new(name: &'static str, config: Config) -> Self {
        let model = LeaseModel::new(config);
        let init = model.init_states().remove(0);
        Self {
            state: init.clone(),
            init,
            model,
            steps: Vec::new(),
            name,
        }
    }

    /// Takes the first enabled action for which `pick` holds; `expect` (if given) must be the
    /// model's verdict for it.
    fn take(
        &mut self,
        what: &str,
        expect: Option<Expected>,
        pick: impl Fn(&Action, &State) -> bool,
    ) -> Result<&mut Self, String> {
        let (action, after) = self
            .model
            .next_steps(&self.state)
            .into_iter()
            .find(|(a, _)| pick(a, &self.state))
            .ok_or_else(|| format!("{}: no enabled step `{what}`", self.name))?;
        let verdict = self.model.expected(&self.state, &action);
        if let Some(expect) = expect {
            if verdict != Some(expect) {
                return Err(format!(
                    "{}: step `{what}` gets {verdict:?} from the model, the scenario says {expect}",
                    self.name
                ));
            }
        }
        self.steps.push((action, after.clone()));
        self.state = after;
        Ok(self)
    }

    /// Delivers the in-flight message that the last step put in flight.
    fn deliver_last_sent(&mut self, what: &str, expect: Expected) -> Result<&mut Self, String> {
        let before = if self.steps.len() >= 2 {
            &self.steps[self.steps.len() - 2].1
        } else {
            &self.init
        };
        let sent: Vec<_> = self
            .state
            .in_flight
            .difference(&before.in_flight)
            .copied()
            .collect();
        let [message] = sent.as_slice() else {
            return Err(format!(
                "{}: `{what}` needs exactly one new message in flight",
                self.name
            ));
        };
        let message = *message;
        self.take(
            what,
            Some(expect),
            move |a, _| matches!(a, Action::Deliver { message: m } if *m == message),
        )
    }

    fn done(&self) -> (LeaseModel, Generated<LeaseModel>) {
        (
            self.model.clone(),
            Generated {
                name: self.name.to_string(),
                generator: "scenario",
                seed: None,
                init: self.init.clone(),
                steps: self.steps.clone(),
            },
        )
    }
}

/// The shortest model path whose last step satisfies `goal(before, action, after, verdict)`.
fn shortest(
    name: &'static str,
    config: Config,
    max_depth: usize,
    goal: impl Fn(&State, &Action, &State, Option<Expected>) -> bool,
) -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let model = LeaseModel::new(config);
    let init = model.init_states().remove(0);
    let mut seen: HashSet<State> = HashSet::from([init.clone()]);
    let mut queue: VecDeque<(State, Vec<(Action, State)>)> =
        VecDeque::from([(init.clone(), vec![])]);
    while let Some((state, path)) = queue.pop_front() {
        if path.len() >= max_depth {
            continue;
        }
        for (action, after) in model.next_steps(&state) {
            let verdict = model.expected(&state, &action);
            let mut next_path = path.clone();
            next_path.push((action.clone(), after.clone()));
            if goal(&state, &action, &after, verdict) {
                let generated = Generated {
                    name: name.to_string(),
                    generator: "scenario",
                    seed: None,
                    init,
                    steps: next_path,
                };
                return Ok((model, generated));
            }
            if seen.insert(after.clone()) {
                queue.push_back((after, next_path));
            }
        }
    }
    Err(format!("{name}: not reachable within {max_depth} steps"))
}

/// §10.1: an old attempt's late `passed` is rejected `not_current` and recorded against it, while
/// the retry's attempt stays current and active.
pub fn stale_completion() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let config = Config {
        outsider: false,
        ..Config::one_job()
    };
    let model = LeaseModel::new(config.clone());
    shortest(
        NAMES[0],
        config,
        16,
        move |before, action, after, verdict| {
            let Action::Deliver { message } = action else {
                return false;
            };
            let late = message.kind == MessageKind::Result(Outcome::Passed)
                && verdict == Some(Expected::rejected(Reason::NotCurrent));
            let job = &after.jobs[message.job as usize];
            let retry_current = job.current.is_some_and(|a| {
                a != message.attempt && after.attempts[a as usize].state == AttemptState::Active
            });
            let kept = model.observation(before, message).attempt == Some(message.attempt);
            late && retry_current && job.state == JobState::Running && kept
        },
    )
}

/// §10.2: (A, wrong lease, 1) → `lease_mismatch`; (A, L, 999) → `fence_mismatch`; (A, L, 1) →
/// accepted, for a heartbeat and then for the result.
pub fn ownership_tuple(outcome: Outcome) -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let config = Config {
        forgery: true,
        outsider: false,
        jobs: 1,
        ..Config::one_job()
    };
    let mut s = Script::new(NAMES[1], config);
    s.take("runner 0 claims", Some(Expected::ACCEPTED), |a, _| {
        matches!(a, Action::Claim { runner: 0 })
    })?;
    // The heartbeat is a request the server answers at once: the forged copies first, then the
    // exact one.
    let heartbeat = LeaseModel::message(&s.state, 0, MessageKind::Heartbeat, 0)
        .ok_or("runner 0 holds an attempt")?;
    forged(&mut s, "heartbeat", heartbeat)?;
    s.take(
        "runner 0 sends the exact heartbeat",
        Some(Expected::ACCEPTED),
        |a, _| {
            matches!(
                a,
                Action::Heartbeat {
                    runner: 0,
                    runner_time: 0,
                    attempt: None,
                }
            )
        },
    )?;
    // The result stays in flight: sent, forged copies, then the exact one arrives.
    s.take("runner 0 sends a result", None, move |a, _| {
        matches!(a, Action::Result { runner: 0, outcome: o, runner_time: 0, digest: 0, attempt: None } if *o == outcome)
    })?;
    let result = *s
        .state
        .in_flight
        .iter()
        .find(|m| m.kind == MessageKind::Result(outcome) && m.sender == 0)
        .ok_or("the result is in flight")?;
    forged(&mut s, "result", result)?;
    s.take(
        "the exact result arrives",
        Some(Expected::ACCEPTED),
        move |a, _| matches!(a, Action::Deliver { message } if *message == result),
    )?;
    Ok(s.done())
}

/// Runner 0 sends `original` with a forged lease id, then with a forged fence: both rejected.
fn forged(s: &mut Script, kind: &str, original: Message) -> Result<(), String> {
    for (forge, reason) in [
        (Forge::WrongLease, Reason::LeaseMismatch),
        (Forge::WrongFence, Reason::FenceMismatch),
    ] {
        s.take(
            &format!("runner 0 sends its {kind} with a forged tuple ({forge:?})"),
            Some(Expected::rejected(reason)),
            move |a, _| {
                matches!(a, Action::Replay { runner: 0, message, forge: f }
                    if *message == original && *f == forge)
            },
        )?;
    }
    Ok(())
}

/// §10.3, fenced: a runner whose execution was superseded still reaches the target with its old
/// fence after the newer attempt's mutation: the target refuses it (`stale_fence`).
pub fn fenced_target() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let config = Config {
        outsider: false,
        jobs: 1,
        target: TargetKind::Fenced,
        ..Config::one_job()
    };
    shortest(NAMES[2], config, 18, |_, action, _, verdict| {
        matches!(action, Action::Deliver { message } if message.kind == MessageKind::TargetMutation)
            && verdict == Some(Expected::rejected(Reason::StaleFence))
    })
}

/// §10.3, unfenced: while the job is `uncertain` its target stays reserved and no claim can start
/// a second deployment: a claim is rejected `no_queued_job` until a reconciliation. (The model
/// offers only claims that succeed, so the rejected claims are appended as steps that leave the
/// state unchanged, with the verdict the model's server gives them.)
pub fn unfenced_target_stays_reserved() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let config = Config {
        outsider: false,
        jobs: 1,
        target: TargetKind::Unfenced,
        ..Config::one_job()
    };
    let (model, mut trace) = shortest(NAMES[3], config, 14, |_, _, after, _| {
        after.jobs[0].state == JobState::Uncertain
            && after.reserved(0)
            && after.targets[0].applied > 0
    })?;
    let last = trace
        .steps
        .last()
        .map(|(_, s)| s.clone())
        .unwrap_or_else(|| trace.init.clone());
    for runner in 0..model.config.runners {
        let claim = Action::Claim { runner };
        if model.expected(&last, &claim) != Some(Expected::rejected(Reason::NoQueuedJob)) {
            return Err(format!(
                "{}: the model would let runner {runner} claim",
                NAMES[3]
            ));
        }
        trace.steps.push((claim, last.clone()));
    }
    Ok((model, trace))
}

/// §10.4: a runner disconnects with its target mutation in flight, its lease expires (the
/// runner, cut off, stops executing at the end of its lease by its own reckoning: §2's duty),
/// it reconnects with its original tuple: `rejoin` is rejected `lease_expired`, and no second
/// attempt has started. (A runner that stopped by its duty reports no outcome in the model; a
/// late result is rejected and kept in `scenario-stale-completion` and the walks.)
pub fn reconnect() -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let config = Config {
        outsider: false,
        jobs: 1,
        ..Config::one_job()
    };
    let ttl = config.lease_ttl;
    let mut s = Script::new(NAMES[4], config);
    s.take("runner 0 claims", Some(Expected::ACCEPTED), |a, _| {
        matches!(a, Action::Claim { runner: 0 })
    })?
    .take("runner 0 starts its target mutation", None, |a, _| {
        matches!(
            a,
            Action::TargetMutation {
                runner: 0,
                attempt: None
            }
        )
    })?
    .take("runner 0 loses contact", None, |a, _| {
        matches!(a, Action::Disconnect { runner: 0 })
    })?;
    for _ in 0..ttl {
        s.take("time passes", None, |a, _| matches!(a, Action::Tick))?;
    }
    s.take(
        "the lease expiry sweep runs",
        Some(Expected::UNCERTAIN),
        |a, _| matches!(a, Action::ExpirySweep),
    )?
    .take(
        "runner 0 reconnects and rejoins with its original tuple",
        None,
        |a, _| {
            matches!(
                a,
                Action::Rejoin {
                    runner: 0,
                    runner_time: 0
                }
            )
        },
    )?
    .deliver_last_sent(
        "the rejoin arrives",
        Expected::rejected(Reason::LeaseExpired),
    )?;
    if s.state.attempts.len() != 1 {
        return Err("reconnect: a second attempt started".into());
    }
    Ok(s.done())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_scenario_is_a_trace_of_the_model() {
        let scenarios = super::all().expect("every scenario is reachable in the model");
        assert_eq!(scenarios.len(), super::NAMES.len());
        for ((_, trace), name) in scenarios.iter().zip(super::NAMES) {
            assert_eq!(trace.name, name);
            assert!(!trace.steps.is_empty());
        }
    }
}
