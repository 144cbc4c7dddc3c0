//! Coverage of the blind classes (docs/conformance.md, "Coverage by class"): what the replayed
//! traces exercised, step by step, classified from the model's state before each step.
//!
//! - `messages`: every runner message kind × the named job's state × the named attempt's state,
//!   with the verdicts the model gave there;
//! - `failing_pairs`: every pair of §6.1 checks 3–13 that one message failed at once, with the
//!   reason the model gave (the precedence decides);
//! - `operator`: every operator action (own project and another project's operator) × finding ×
//!   decision × job state, with its verdict;
//! - `targets`: the target kinds replayed, with the target's verdicts;
//! - `two_jobs`: claim order and a runner moving between jobs.
//!
//! The classification only names what a step exercised; every verdict is still the model's.

use std::collections::{BTreeMap, BTreeSet};

use leasewright_model::{
    Action, AttemptState, Decision, Finding, JobState, LeaseModel, Message, MessageKind, Outcome,
    Reason, SideEffect, State,
};
use serde::Serialize;

use crate::replay::verdict_key;

/// One class's cells: each cell hit, with the verdicts seen there and how often.
pub type Cells = BTreeMap<String, BTreeMap<String, u64>>;

/// What a set of traces exercised, by class.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Coverage {
    /// Message kind × job state × attempt state → verdicts.
    pub messages: Cells,
    /// `check+check` → verdicts.
    pub failing_pairs: Cells,
    /// Operator action × finding × decision × job state → verdicts.
    pub operator: Cells,
    /// Target kind → the target's verdicts (and `replayed` for every step on that kind).
    pub targets: Cells,
    /// Two-job situations → verdicts.
    pub two_jobs: Cells,
    /// Shared-slot situations (issue 13: several jobs, of either project, on one slot) →
    /// verdicts.
    pub shared_slots: Cells,
}

impl Coverage {
    /// Adds another coverage into this one.
    pub fn absorb(&mut self, other: &Coverage) {
        for (mine, theirs) in self.classes_mut().into_iter().zip(other.classes()) {
            for (cell, verdicts) in theirs.1 {
                let entry = mine.entry(cell.clone()).or_default();
                for (v, n) in verdicts {
                    *entry.entry(v.clone()).or_default() += n;
                }
            }
        }
    }

    /// The classes, by name.
    pub fn classes(&self) -> [(&'static str, &Cells); 6] {
        [
            ("messages", &self.messages),
            ("failing_pairs", &self.failing_pairs),
            ("operator", &self.operator),
            ("targets", &self.targets),
            ("two_jobs", &self.two_jobs),
            ("shared_slots", &self.shared_slots),
        ]
    }

    fn classes_mut(&mut self) -> [&mut Cells; 6] {
        [
            &mut self.messages,
            &mut self.failing_pairs,
            &mut self.operator,
            &mut self.targets,
            &mut self.two_jobs,
            &mut self.shared_slots,
        ]
    }

    /// Records what `action`, taken in `before` (leading to `after`), exercised.
    pub fn record(&mut self, model: &LeaseModel, before: &State, action: &Action, after: &State) {
        let verdict = model.expected(before, action).map(|v| verdict_key(&v));
        let hit = |cells: &mut Cells, cell: String, v: &str| {
            *cells
                .entry(cell)
                .or_default()
                .entry(v.to_string())
                .or_default() += 1;
        };
        let target = model.config.target.as_str();
        hit(&mut self.targets, target.to_string(), "replayed");
        if let Some(message) = delivered(before, action) {
            let v = verdict.as_deref().unwrap_or("none");
            if message.kind == MessageKind::TargetMutation {
                hit(&mut self.targets, target.to_string(), v);
            } else {
                hit(&mut self.messages, message_cell(before, &message), v);
                if message.digest != 0 {
                    // "Same outcome, other digest" (§6.1 check 9), as a cell of its own.
                    let cell =
                        message_cell(before, &message).replacen(" |", " (other digest) |", 1);
                    hit(&mut self.messages, cell, v);
                }
                let failing = failing_checks(before, &message);
                for (i, a) in failing.iter().enumerate() {
                    for b in &failing[i + 1..] {
                        hit(&mut self.failing_pairs, format!("{a}+{b}"), v);
                    }
                }
            }
            if before.jobs.len() > 1 {
                if let Some(cell) = moved_on(before, &message) {
                    hit(&mut self.two_jobs, cell, v);
                }
            }
        }
        if model.config.shared_slot {
            if let Some(cell) = shared_slot_cell(model, before, action) {
                let v = verdict.as_deref().unwrap_or("none");
                hit(&mut self.shared_slots, cell, v);
            }
        }
        if let Some(cell) = operator_cell(before, action) {
            hit(
                &mut self.operator,
                cell,
                verdict.as_deref().unwrap_or("none"),
            );
        }
        if let (Action::Claim { runner }, true) = (action, before.jobs.len() > 1) {
            let v = verdict.as_deref().unwrap_or("none");
            let taken = after
                .attempts
                .get(before.attempts.len())
                .map(|a| a.job.to_string())
                .unwrap_or_else(|| "none".into());
            let others: Vec<String> = before
                .jobs
                .iter()
                .map(|j| j.state.as_str().to_string())
                .collect();
            hit(
                &mut self.two_jobs,
                format!("claim with jobs [{}] takes job {taken}", others.join(", ")),
                v,
            );
            let held = before
                .runners
                .get(*runner as usize)
                .and_then(|r| r.holding)
                .map(|a| before.attempts[a as usize].job);
            if let Some(old) = held {
                hit(
                    &mut self.two_jobs,
                    format!("a runner that held job {old} claims again, takes job {taken}"),
                    v,
                );
            }
        }
    }
}

/// The shared-slot situation (issue 13) `action` exercises in `before`, if any.
fn shared_slot_cell(model: &LeaseModel, before: &State, action: &Action) -> Option<String> {
    match action {
        Action::Claim { runner } => {
            let project = before.runners.get(*runner as usize)?.project;
            if model.claimable_job(before, *runner).is_some() {
                return None;
            }
            // A queued job of the claimer's project whose slot another job holds.
            before.jobs.iter().find_map(|j| {
                let holder = before.targets.get(j.slot as usize)?.holder?;
                (j.project == project && j.state == JobState::Queued && j.attempts_left > 0).then(
                    || {
                        let h = &before.jobs[holder as usize];
                        format!(
                            "claim blocked: the slot is held by {} job ({})",
                            if h.project == project {
                                "a same-project"
                            } else {
                                "another project's"
                            },
                            h.state
                        )
                    },
                )
            })
        }
        _ => {
            let m = delivered(before, action)?;
            if m.kind != MessageKind::TargetMutation {
                return None;
            }
            let slot = before
                .targets
                .get(before.jobs.get(m.job as usize)?.slot as usize)?;
            let last_job = before
                .attempts
                .iter()
                .find(|a| a.token == slot.last_applied && slot.last_applied != 0)
                .map(|a| a.job);
            Some(match last_job {
                None => "mutation of a slot nothing was applied to".to_string(),
                Some(j) if j == m.job => format!(
                    "mutation after the same job's, token {} (highest {})",
                    if m.token < slot.highest_token {
                        "below"
                    } else {
                        "at or above"
                    },
                    slot.highest_token
                ),
                Some(j) => format!(
                    "mutation after another {} job's, token {}, job fence {} theirs",
                    if before.jobs[j as usize].project == before.jobs[m.job as usize].project {
                        "same-project"
                    } else {
                        "project's"
                    },
                    if m.token < slot.highest_token {
                        "below the highest"
                    } else {
                        "at or above the highest"
                    },
                    match before
                        .attempts
                        .iter()
                        .find(|a| a.token == slot.last_applied)
                        .map(|a| a.fence.cmp(&m.fence))
                    {
                        Some(std::cmp::Ordering::Greater) => "below",
                        Some(std::cmp::Ordering::Equal) => "equal to",
                        _ => "above",
                    }
                ),
            })
        }
    }
}

/// The runner message `action` delivers in `before`, if it delivers one.
pub fn delivered(before: &State, action: &Action) -> Option<Message> {
    match action {
        Action::Deliver { message } => Some(*message),
        Action::Replay {
            runner,
            message,
            forge,
        } => Some(LeaseModel::replayed(before, message, *runner, *forge)),
        Action::Heartbeat {
            runner,
            runner_time,
            attempt,
        } => LeaseModel::message_of(
            before,
            *runner,
            *attempt,
            MessageKind::Heartbeat,
            *runner_time,
        ),
        Action::SideEffect { runner, effect } => {
            LeaseModel::message(before, *runner, MessageKind::SideEffect(*effect), 0)
        }
        _ => None,
    }
}

/// The message kind's name in the coverage (`result:passed`, ...).
pub fn kind_name(kind: MessageKind) -> String {
    match kind {
        MessageKind::Result(o) => format!("result:{o}"),
        other => other.name().replace(' ', "_"),
    }
}

/// Every message kind a runner sends to the server.
pub fn server_kinds() -> Vec<MessageKind> {
    let mut kinds = vec![MessageKind::Heartbeat];
    kinds.extend(Outcome::ALL.iter().map(|o| MessageKind::Result(*o)));
    kinds.push(MessageKind::Rejoin);
    kinds
}

fn message_cell(before: &State, m: &Message) -> String {
    let job = before
        .jobs
        .get(m.job as usize)
        .map_or("unknown", |j| j.state.as_str());
    let attempt = before
        .attempts
        .get(m.attempt as usize)
        .map_or("unknown", |a| a.state.as_str());
    message_cell_name(&kind_name(m.kind), job, attempt)
}

fn message_cell_name(kind: &str, job: &str, attempt: &str) -> String {
    format!("{kind} | job {job} | attempt {attempt}")
}

/// The §6.1 checks (3–13) that `m` fails in `s`, each judged on its own, in precedence order.
/// Checks 1 and 2 (an unknown runner or job) are not generated: the drivers map every identity
/// they are given.
pub fn failing_checks(s: &State, m: &Message) -> Vec<Reason> {
    let mut failing = Vec::new();
    let (Some(runner), Some(job), Some(attempt)) = (
        s.runners.get(m.sender as usize),
        s.jobs.get(m.job as usize),
        s.attempts.get(m.attempt as usize),
    ) else {
        return failing;
    };
    if runner.project != job.project {
        failing.push(Reason::WrongProject);
    }
    if attempt.job != m.job {
        failing.push(Reason::UnknownAttempt);
    }
    if attempt.runner != m.sender {
        failing.push(Reason::RunnerMismatch);
    }
    if attempt.lease != m.lease {
        failing.push(Reason::LeaseMismatch);
    }
    if attempt.fence != m.fence {
        failing.push(Reason::FenceMismatch);
    }
    if job.current != Some(m.attempt) {
        failing.push(Reason::NotCurrent);
    }
    if let (MessageKind::Result(outcome), Some(committed)) = (m.kind, attempt.state.outcome()) {
        // Not identical: another outcome, or the same with another digest (an adopted outcome
        // has no digest).
        if outcome != committed || attempt.digest.is_some_and(|d| d != m.digest) {
            failing.push(Reason::ConflictingResult);
        }
    }
    if job.state.is_terminal() {
        failing.push(Reason::JobFinished);
    }
    if attempt.state == AttemptState::Uncertain || s.clock >= attempt.lease_expiry {
        failing.push(Reason::LeaseExpired);
    }
    let allowed_while_cancelling = matches!(
        m.kind,
        MessageKind::Heartbeat | MessageKind::Rejoin | MessageKind::Result(Outcome::Cancelled)
    );
    if job.state == JobState::Cancelling && !allowed_while_cancelling {
        failing.push(Reason::CancelRequested);
    }
    if m.kind == MessageKind::Result(Outcome::Cancelled) && job.state == JobState::Running {
        failing.push(Reason::CancelNotRequested);
    }
    failing
}

/// The §6.1 checks a pair is drawn from, in precedence order: checks 3–13 (the reasons from
/// `wrong_project` to `cancel_not_requested`, declared in that order).
pub fn checks() -> &'static [Reason] {
    let all = Reason::ALL;
    let from = all
        .iter()
        .position(|r| *r == Reason::WrongProject)
        .expect("a reason");
    let to = all
        .iter()
        .position(|r| *r == Reason::CancelNotRequested)
        .expect("a reason");
    &all[from..=to]
}

fn operator_cell(before: &State, action: &Action) -> Option<String> {
    let state = |job: u8| {
        before
            .jobs
            .get(job as usize)
            .map_or("unknown", |j| j.state.as_str())
    };
    Some(match action {
        Action::Cancel { job } => operator_cell_name("cancel", None, state(*job)),
        Action::OutsiderCancel { job } => {
            operator_cell_name("cancel (other project)", None, state(*job))
        }
        Action::Reconcile {
            job,
            finding,
            decision,
        } => operator_cell_name("reconcile", Some((*finding, *decision)), state(*job)),
        Action::OutsiderReconcile {
            job,
            finding,
            decision,
        } => operator_cell_name(
            "reconcile (other project)",
            Some((*finding, *decision)),
            state(*job),
        ),
        _ => return None,
    })
}

fn operator_cell_name(action: &str, choice: Option<(Finding, Decision)>, job: &str) -> String {
    match choice {
        Some((finding, decision)) => format!("{action} | {finding} | {decision} | job {job}"),
        None => format!("{action} | job {job}"),
    }
}

/// A message naming a job other than the one its sender now holds (the runner moved on).
fn moved_on(before: &State, m: &Message) -> Option<String> {
    let holding = before.runners.get(m.sender as usize)?.holding?;
    let now = before.attempts.get(holding as usize)?.job;
    (now != m.job).then(|| {
        format!(
            "{} naming job {} from a runner now on job {now}",
            kind_name(m.kind),
            m.job
        )
    })
}

/// Every cell of the full products, by class: what "never exercised" is judged against.
pub fn products() -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let mut messages = BTreeSet::new();
    // The side effects of R8 (issue 18 class 7), one cell per message kind whatever its payload.
    let side_effects = SideEffect::EACH_KIND.map(MessageKind::SideEffect);
    for kind in server_kinds().into_iter().chain(side_effects) {
        for job in JobState::ALL {
            for attempt in AttemptState::ALL {
                messages.insert(message_cell_name(
                    &kind_name(kind),
                    job.as_str(),
                    attempt.as_str(),
                ));
            }
        }
    }
    out.insert("messages", messages);
    let mut pairs = BTreeSet::new();
    let checks = checks();
    for (i, a) in checks.iter().enumerate() {
        for b in &checks[i + 1..] {
            pairs.insert(format!("{a}+{b}"));
        }
    }
    out.insert("failing_pairs", pairs);
    let mut operator = BTreeSet::new();
    for job in JobState::ALL {
        for action in ["cancel", "cancel (other project)"] {
            operator.insert(operator_cell_name(action, None, job.as_str()));
        }
        for action in ["reconcile", "reconcile (other project)"] {
            for finding in Finding::ALL {
                for decision in Decision::ALL {
                    operator.insert(operator_cell_name(
                        action,
                        Some((*finding, *decision)),
                        job.as_str(),
                    ));
                }
            }
        }
    }
    out.insert("operator", operator);
    out.insert(
        "targets",
        leasewright_model::TargetKind::ALL
            .iter()
            .map(|k| k.as_str().to_string())
            .collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasewright_model::Config;
    use stateright::Model;

    #[test]
    fn the_checks_are_3_to_13() {
        assert_eq!(checks().len(), 11);
        assert_eq!(checks()[0], Reason::WrongProject);
    }

    #[test]
    fn a_superseded_tuple_from_another_runner_fails_each_check_it_breaks() {
        let model = LeaseModel::new(Config::one_job());
        let mut s = model.init_state();
        s = model.next_state(&s, Action::Claim { runner: 0 }).unwrap();
        let old = LeaseModel::message(&s, 0, MessageKind::Heartbeat, 0).unwrap();
        s = model.next_state(&s, Action::Tick).unwrap();
        s = model.next_state(&s, Action::Tick).unwrap();
        s = model.next_state(&s, Action::ExpirySweep).unwrap();
        let m = Message { sender: 1, ..old };
        assert_eq!(
            failing_checks(&s, &m),
            vec![Reason::RunnerMismatch, Reason::LeaseExpired],
            "an uncertain attempt named by another runner"
        );
        let mut coverage = Coverage::default();
        let replay = Action::Replay {
            runner: 1,
            message: old,
            forge: leasewright_model::Forge::AsIs,
        };
        let after = model.next_state(&s, replay.clone()).unwrap();
        coverage.record(&model, &s, &replay, &after);
        assert_eq!(
            coverage.failing_pairs["runner_mismatch+lease_expired"]["rejected:runner_mismatch"],
            1
        );
        assert!(coverage
            .messages
            .contains_key("heartbeat | job uncertain | attempt uncertain"));
    }
}
