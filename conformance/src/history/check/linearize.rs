//! `not_linearizable`: the job's operations put in one real-time order in which every answer
//! and effect is the model's (Wing & Gong with memoization).

use super::*;

/// The outcome of one job's search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Linearized {
    Yes,
    /// Refuted, with the job's operations and the longest linearizable prefix.
    No(String),
    /// The search budget ran out.
    Undecided,
}

pub(super) const FAR_PAST: DateTime<Utc> = DateTime::<Utc>::MIN_UTC;
pub(super) const FAR_FUTURE: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;
/// The attempt index of an attempt the job does not have.
pub(super) const NO_ATTEMPT: u8 = 250;

/// The job's identities renumbered for a one-job model.
pub(super) struct Mapping {
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

pub(super) fn model_finding(f: imp::Finding) -> model::Finding {
    match f {
        imp::Finding::Stopped => model::Finding::Stopped,
        imp::Finding::StillRunning => model::Finding::StillRunning,
        imp::Finding::ObservedPassed => model::Finding::ObservedPassed,
        imp::Finding::ObservedFailed => model::Finding::ObservedFailed,
    }
}

pub(super) fn model_decision(d: imp::Decision) -> model::Decision {
    match d {
        imp::Decision::Retry => model::Decision::Retry,
        imp::Decision::Abort => model::Decision::Abort,
        imp::Decision::Adopt => model::Decision::Adopt,
    }
}

pub(super) fn model_outcome(o: imp::Outcome) -> model::Outcome {
    match o {
        imp::Outcome::Passed => model::Outcome::Passed,
        imp::Outcome::Failed => model::Outcome::Failed,
        imp::Outcome::Cancelled => model::Outcome::Cancelled,
    }
}

/// One op of the job, as a model action.
pub(super) struct JobOp<'a> {
    op: &'a Op,
    action: model::Action,
    /// The answer is known: the op must be placed.
    required: bool,
}

/// A search node's state: the one-job model state (time-free) and every attempt's lease expiry
/// as an interval `[lo, hi]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Node {
    model: model::State,
    expiry: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

pub(super) struct Search<'a> {
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
pub(super) enum Case {
    Valid,
    Expired,
}

/// Linearize one job's ops against the model, ending in the ledger's state.
pub fn linearize(ops: &[Op], jl: &JobLedger, config: &CheckConfig) -> Linearized {
    let Some(mapping) = Mapping::new(ops, jl) else {
        return Linearized::Undecided;
    };
    let runners = mapping.runners.len().max(1) as u8;
    let lease_model = model::LeaseModel::new(model::Config::one_recorded_job(runners));
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

pub(super) fn normalize(s: &mut model::State) {
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

pub(super) fn is_set(done: &[u64], i: usize) -> bool {
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
