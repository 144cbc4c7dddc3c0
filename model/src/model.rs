//! The server's rules (docs/protocol.md §6–8) and the stateright [`Model`].
//!
//! Every verdict is computed in one place: [`LeaseModel::expected`] (and the `*_verdict` functions it
//! calls). `next_state` applies the effect of a verdict; it never decides one itself.

use crate::properties;
use crate::state::*;
use crate::types::*;
use stateright::{Model, Property};

/// The fenced-lease protocol (or one flawed variant of it) as a stateright model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseModel {
    /// The bounds and choices of this model.
    pub config: Config,
    /// Offer only actions that can change the state: leave out deliveries, replays, heartbeats
    /// and cancels that the server would not accept (they change nothing, so every state stays reachable;
    /// the properties check the verdict of every message that could be delivered in every
    /// state anyway). Halves the transitions an exhaustive check computes; conformance keeps
    /// every action, because its traces are about those verdicts.
    pub skip_no_ops: bool,
    /// Check the `always` properties as one ([`properties::EVERY_INVARIANT`]): the checker pays a
    /// fixed cost per property and state. The checker stops at the first violation anyway, and
    /// [`properties::violated`] names the invariants that fail there.
    pub one_invariant: bool,
}

impl LeaseModel {
    /// A model of `config` that offers every enabled action.
    pub fn new(config: Config) -> Self {
        LeaseModel {
            config,
            skip_no_ops: false,
            one_invariant: false,
        }
    }

    /// A model of `config` for exhaustive checking: it leaves out the actions that change
    /// nothing (see [`LeaseModel::skip_no_ops`]) and checks the invariants as one property (see
    /// [`LeaseModel::one_invariant`]).
    pub fn for_checking(config: Config) -> Self {
        LeaseModel {
            config,
            skip_no_ops: true,
            one_invariant: true,
        }
    }

    /// The runner id of the outsider (project 1), if the configuration has one.
    pub fn outsider(&self) -> Option<RunnerId> {
        self.config.outsider.then_some(self.config.runners)
    }

    /// The initial state: every job `queued`, every runner connected and idle, nothing in flight.
    pub fn init_state(&self) -> State {
        let c = &self.config;
        let job = Job {
            project: 0,
            state: JobState::Queued,
            fence: 0,
            current: None,
            attempts_left: c.attempts_per_job,
            cancel_requested: false,
            target_reserved: false,
            committed: None,
            completed_by: None,
        };
        let mut runners: Runners = (0..c.runners)
            .map(|_| Runner {
                project: 0,
                connected: true,
                holding: None,
            })
            .collect();
        if c.outsider {
            runners.push(Runner {
                project: 1,
                connected: true,
                holding: None,
            });
        }
        State {
            clock: 0,
            jobs: Jobs::from_elem(job, c.jobs as usize),
            attempts: Attempts::new(),
            runners,
            in_flight: Default::default(),
            targets: Targets::from_elem(Target::default(), c.jobs as usize),
        }
    }

    // ----- the server's verdicts ---------------------------------------------------------------

    /// The verdict the server (R1–R7) or the target (R9) gives to `action` in `state`, or `None`
    /// for steps that get no verdict (runner-local steps, sends, `tick`). Pure: `state` is not
    /// changed. This is the function the conformance suite compares the implementation with.
    pub fn expected(&self, state: &State, action: &Action) -> Option<Expected> {
        match action {
            Action::Deliver { message } => Some(self.delivery_verdict(state, message)),
            Action::Replay {
                runner,
                message,
                forge,
            } => Some(self.delivery_verdict(state, &Self::replayed(message, *runner, *forge))),
            Action::Heartbeat {
                runner,
                runner_time,
            } => Self::message(state, *runner, MessageKind::Heartbeat, *runner_time)
                .map(|m| self.delivery_verdict(state, &m)),
            Action::Claim { runner } => Some(match state.runners.get(*runner as usize) {
                None => Expected::rejected(Reason::UnknownRunner),
                Some(_) if self.claimable_job(state, *runner).is_some() => Expected::ACCEPTED,
                Some(_) => Expected::rejected(Reason::NoQueuedJob),
            }),
            Action::ExpirySweep => Some(if self.expired_leases(state).next().is_some() {
                Expected::UNCERTAIN
            } else {
                Expected::ACCEPTED
            }),
            Action::Cancel { job } => Some(self.cancel_verdict(state, 0, *job)),
            Action::Reconcile {
                job,
                finding,
                decision,
            } => Some(self.reconcile_verdict(state, 0, *job, *finding, *decision)),
            Action::OutsiderCancel { job } => Some(self.cancel_verdict(state, 1, *job)),
            Action::OutsiderReconcile {
                job,
                finding,
                decision,
            } => Some(self.reconcile_verdict(state, 1, *job, *finding, *decision)),
            _ => None,
        }
    }

    /// The verdict of delivering `m`: the target's rule for a target mutation, the server's §6.1
    /// checks for everything else.
    pub fn delivery_verdict(&self, s: &State, m: &Message) -> Expected {
        match m.kind {
            MessageKind::TargetMutation => self.target_verdict(s, m),
            _ => self.server_verdict(s, m),
        }
    }

    /// R9: the target's own rule (§8).
    fn target_verdict(&self, s: &State, m: &Message) -> Expected {
        let Some(slot) = s.targets.get(m.job as usize) else {
            return Expected::rejected(Reason::UnknownJob);
        };
        match self.config.target {
            TargetKind::Fenced if m.fence < slot.highest_fence => {
                Expected::rejected(Reason::StaleFence)
            }
            TargetKind::Idempotent if slot.applied > 0 => Expected::ACKNOWLEDGED,
            _ => Expected::ACCEPTED,
        }
    }

    /// The flawed completion checks of two variants: `Some(verdict)` when the variant decides.
    fn flawed_completion(&self, s: &State, m: &Message) -> Option<Expected> {
        let MessageKind::Result(_) = m.kind else {
            return None;
        };
        let job = s.jobs.get(m.job as usize)?;
        let current = s.attempts.get(job.current? as usize)?;
        let accepted = job.state.is_leased()
            && match self.config.variant {
                Variant::CompletionChecksRunnerOnly => current.runner == m.sender,
                Variant::CompletionChecksFenceOnly => m.fence == job.fence,
                _ => return None,
            };
        accepted.then_some(Expected::ACCEPTED)
    }

    /// §6.1 checks 1–5: who is speaking and which attempt they name. `Ok(attempt)` when the
    /// observation is attributable to the named attempt.
    fn identify(&self, s: &State, m: &Message) -> Result<AttemptId, Reason> {
        let runner = s
            .runners
            .get(m.sender as usize)
            .ok_or(Reason::UnknownRunner)?;
        let job = s.jobs.get(m.job as usize).ok_or(Reason::UnknownJob)?;
        if job.project != runner.project {
            return Err(Reason::WrongProject);
        }
        let attempt = s
            .attempts
            .get(m.attempt as usize)
            .filter(|a| a.job == m.job)
            .ok_or(Reason::UnknownAttempt)?;
        if attempt.runner != m.sender {
            return Err(Reason::RunnerMismatch);
        }
        Ok(m.attempt)
    }

    /// §6.1 for `heartbeat`, `result` and `rejoin`, in precedence order.
    fn server_verdict(&self, s: &State, m: &Message) -> Expected {
        if let Some(flawed) = self.flawed_completion(s, m) {
            return flawed;
        }
        let a = match self.identify(s, m) {
            Ok(a) => a,
            Err(reason) => return Expected::rejected(reason),
        };
        let job = &s.jobs[m.job as usize];
        let attempt = &s.attempts[a as usize];
        if m.lease != attempt.lease {
            return Expected::rejected(Reason::LeaseMismatch);
        }
        if m.fence != attempt.fence {
            return Expected::rejected(Reason::FenceMismatch);
        }
        if job.current != Some(a) {
            return Expected::rejected(Reason::NotCurrent);
        }
        if let (MessageKind::Result(outcome), Some(committed)) = (m.kind, attempt.state.outcome()) {
            return if outcome == committed {
                Expected::ACKNOWLEDGED
            } else if self.config.variant == Variant::ConflictOverwrites {
                Expected::ACCEPTED
            } else {
                Expected::rejected(Reason::ConflictingResult)
            };
        }
        if job.state.is_terminal() {
            return Expected::rejected(Reason::JobFinished);
        }
        let skip_time_check = self.config.variant == Variant::HeartbeatExtendsExpired
            && m.kind == MessageKind::Heartbeat;
        if attempt.state == AttemptState::Uncertain
            || (!skip_time_check && s.clock >= attempt.lease_expiry)
        {
            return Expected::rejected(Reason::LeaseExpired);
        }
        let allowed_while_cancelling = matches!(
            m.kind,
            MessageKind::Heartbeat | MessageKind::Rejoin | MessageKind::Result(Outcome::Cancelled)
        );
        if job.state == JobState::Cancelling && !allowed_while_cancelling {
            return Expected::rejected(Reason::CancelRequested);
        }
        if m.kind == MessageKind::Result(Outcome::Cancelled) && job.state == JobState::Running {
            return Expected::rejected(Reason::CancelNotRequested);
        }
        Expected::ACCEPTED
    }

    /// §6.3 `cancel`, by an operator of `project`.
    pub fn cancel_verdict(&self, s: &State, project: ProjectId, job: JobId) -> Expected {
        let Some(j) = s.jobs.get(job as usize) else {
            return Expected::rejected(Reason::UnknownJob);
        };
        if j.project != project {
            return Expected::rejected(Reason::WrongProject);
        }
        match j.state {
            st if st.is_terminal() => Expected::rejected(Reason::JobFinished),
            JobState::Uncertain => Expected::rejected(Reason::ReconcileRequired),
            JobState::Cancelling => Expected::ACKNOWLEDGED,
            _ => Expected::ACCEPTED,
        }
    }

    /// §6.3 `reconcile`, by an operator of `project`.
    pub fn reconcile_verdict(
        &self,
        s: &State,
        project: ProjectId,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Expected {
        let Some(j) = s.jobs.get(job as usize) else {
            return Expected::rejected(Reason::UnknownJob);
        };
        if j.project != project {
            return Expected::rejected(Reason::WrongProject);
        }
        if j.state != JobState::Uncertain {
            return Expected::rejected(Reason::NotUncertain);
        }
        if finding == Finding::StillRunning {
            return Expected::rejected(Reason::ExecutionNotStopped);
        }
        if decision == Decision::Adopt && finding == Finding::Stopped {
            return Expected::rejected(Reason::NothingToAdopt);
        }
        if decision == Decision::Retry && j.cancel_requested {
            return Expected::rejected(Reason::CancelRequested);
        }
        Expected::ACCEPTED
    }

    /// R1: the job a claim by `runner` takes, if any: the lowest-numbered `queued` job of the
    /// runner's project whose target is free (and which the model's bounds allow another attempt).
    pub fn claimable_job(&self, s: &State, runner: RunnerId) -> Option<JobId> {
        let r = s.runners.get(runner as usize)?;
        s.jobs
            .iter()
            .position(|j| {
                j.project == r.project
                    && j.state == JobState::Queued
                    && !j.target_reserved
                    && j.attempts_left > 0
            })
            .map(|j| j as JobId)
    }

    /// Jobs whose current attempt holds an expired but unswept lease.
    fn expired_leases<'a>(&self, s: &'a State) -> impl Iterator<Item = (JobId, AttemptId)> + 'a {
        s.jobs.iter().enumerate().filter_map(move |(j, job)| {
            let a = job.current?;
            let attempt = &s.attempts[a as usize];
            (job.state.is_leased()
                && attempt.state == AttemptState::Active
                && s.clock >= attempt.lease_expiry)
                .then_some((j as JobId, a))
        })
    }

    // ----- physical truth ----------------------------------------------------------------------

    /// The attempt `runner` is executing, if it is executing one.
    pub fn executing(&self, s: &State, runner: RunnerId) -> Option<AttemptId> {
        let a = s.runners.get(runner as usize)?.holding?;
        (s.attempts[a as usize].execution == Execution::Executing).then_some(a)
    }

    /// The truthful finding about `attempt`: what its runner really did.
    pub fn truthful_finding(&self, s: &State, attempt: AttemptId) -> Finding {
        match s.attempts[attempt as usize].execution {
            Execution::Executing => Finding::StillRunning,
            Execution::Stopped | Execution::Finished(Outcome::Cancelled) => Finding::Stopped,
            Execution::Finished(Outcome::Passed) => Finding::ObservedPassed,
            Execution::Finished(Outcome::Failed) => Finding::ObservedFailed,
        }
    }

    /// The message of `kind` that `runner` sends about the attempt it holds (with runner time
    /// `skew`; target mutations carry none), if it holds one.
    pub fn message(s: &State, runner: RunnerId, kind: MessageKind, skew: u8) -> Option<Message> {
        let a = s.runners.get(runner as usize)?.holding?;
        let attempt = &s.attempts[a as usize];
        Some(Message {
            kind,
            sender: runner,
            job: attempt.job,
            attempt: a,
            lease: attempt.lease,
            fence: attempt.fence,
            runner_time: if kind == MessageKind::TargetMutation {
                0
            } else {
                skew
            },
        })
    }

    /// Every message the server or the target could receive next: the messages in flight and
    /// the heartbeat each connected, executing runner could send now. The properties check the
    /// verdict of each of them in every state.
    pub fn deliverable<'a>(&'a self, s: &'a State) -> impl Iterator<Item = Message> + 'a {
        let heartbeats = (0..self.config.runners).filter_map(move |runner| {
            let connected = s.runners.get(runner as usize)?.connected;
            self.executing(s, runner)?;
            connected
                .then(|| Self::message(s, runner, MessageKind::Heartbeat, 0))
                .flatten()
        });
        s.in_flight.iter().copied().chain(heartbeats)
    }

    /// The copy of `m` that `runner` sends in a [`Action::Replay`]: delivered at once, never put in
    /// flight.
    pub fn replayed(m: &Message, runner: RunnerId, forge: Forge) -> Message {
        let mut copy = Message {
            sender: runner,
            ..*m
        };
        match forge {
            Forge::AsIs => {}
            Forge::WrongLease => copy.lease = FORGED_LEASE,
            Forge::WrongFence => copy.fence = FORGED_FENCE,
        }
        copy
    }

    // ----- effects -----------------------------------------------------------------------------

    /// The observation the server (or the target) records when `m` is delivered in `s` (§7
    /// notes): attributed to the named attempt when checks 1–5 pass, unattributed otherwise.
    /// Target mutations are recorded by the target, unattributed. The model does not keep
    /// observations in its state (that would multiply the state space by every delivery); the
    /// properties check the observation of every message that could be delivered in every state.
    pub fn observation(&self, s: &State, m: &Message) -> Observation {
        let verdict = self.delivery_verdict(s, m);
        let attempt = match m.kind {
            MessageKind::TargetMutation => None,
            _ => self.identify(s, m).ok(),
        };
        Observation {
            attempt,
            sender: m.sender,
            kind: m.kind,
            job: m.job,
            named_attempt: m.attempt,
            verdict: verdict.verdict,
            reason: verdict.reason,
        }
    }

    fn deliver(&self, s: &mut State, m: &Message) {
        let verdict = self.delivery_verdict(s, m);
        if m.kind == MessageKind::TargetMutation {
            if verdict.verdict == Verdict::Accepted {
                let slot = &mut s.targets[m.job as usize];
                // A fenced target's rule does not depend on how often it applied: count to 1.
                let cap = if self.config.target == TargetKind::Fenced {
                    1
                } else {
                    2
                };
                slot.applied = (slot.applied + 1).min(cap);
                slot.last_fence = m.fence;
                slot.highest_fence = slot.highest_fence.max(m.fence);
            }
            return;
        }
        if verdict.verdict != Verdict::Accepted {
            return;
        }
        match m.kind {
            MessageKind::Heartbeat => {
                let now = s.clock;
                s.attempts[m.attempt as usize].lease_expiry = now + self.config.lease_ttl;
            }
            MessageKind::Result(outcome) => {
                let job = &mut s.jobs[m.job as usize];
                // The protocol completes the named attempt (it is the current one); the flawed
                // completion variants complete whatever attempt is current.
                let Some(a) = job.current else { return };
                job.state = outcome.job_state();
                job.target_reserved = false;
                job.completed_by = Some((m.attempt, m.sender));
                job.committed.get_or_insert(job.state);
                s.attempts[a as usize].state = outcome.attempt_state();
            }
            MessageKind::Rejoin | MessageKind::TargetMutation => {}
        }
    }

    fn claim(&self, s: &mut State, runner: RunnerId, job: JobId) {
        let a = s.attempts.len() as AttemptId;
        let j = &mut s.jobs[job as usize];
        j.fence += 1;
        j.attempts_left = j.attempts_left.saturating_sub(1);
        j.current = Some(a);
        j.state = JobState::Running;
        j.target_reserved = true;
        s.attempts.push(Attempt {
            job,
            runner,
            lease: a + 1,
            fence: j.fence,
            lease_expiry: s.clock + self.config.lease_ttl,
            state: AttemptState::Active,
            execution: Execution::Executing,
            expired: false,
        });
        let r = &mut s.runners[runner as usize];
        r.holding = Some(a);
    }

    fn sweep(&self, s: &mut State) {
        let expired: Vec<_> = self.expired_leases(s).collect();
        for (j, a) in expired {
            let job = &mut s.jobs[j as usize];
            let attempt = &mut s.attempts[a as usize];
            match self.config.variant {
                Variant::RequeueOnExpiry => {
                    job.state = JobState::Queued;
                    job.current = None;
                    job.target_reserved = false;
                    attempt.state = AttemptState::Uncertain;
                }
                Variant::AutoRetryUnfenced => {
                    job.state = JobState::Queued;
                    job.current = None;
                    job.target_reserved = false;
                    attempt.state = AttemptState::Stopped;
                }
                _ => {
                    job.state = JobState::Uncertain;
                    attempt.state = AttemptState::Uncertain;
                }
            }
        }
    }

    fn reconcile(&self, s: &mut State, job: JobId, finding: Finding, decision: Decision) {
        let j = &mut s.jobs[job as usize];
        let Some(a) = j.current else { return };
        let attempt = &mut s.attempts[a as usize];
        j.target_reserved = false;
        match decision {
            Decision::Retry => {
                attempt.state = AttemptState::Stopped;
                j.current = None;
                j.state = JobState::Queued;
            }
            Decision::Abort => {
                attempt.state = AttemptState::Stopped;
                j.current = None;
                j.state = if j.cancel_requested {
                    JobState::Cancelled
                } else {
                    JobState::Aborted
                };
                j.committed.get_or_insert(j.state);
            }
            Decision::Adopt => {
                let outcome = if finding == Finding::ObservedPassed {
                    Outcome::Passed
                } else {
                    Outcome::Failed
                };
                attempt.state = outcome.attempt_state();
                j.state = outcome.job_state();
                j.committed.get_or_insert(j.state);
            }
        }
    }
}

impl LeaseModel {
    /// A message the network may as well lose: its sender has moved on to another claim (so it
    /// will never send it again), and its verdict can never change and changes nothing. That is
    /// a result, heartbeat or rejoin naming an attempt that is no longer its job's current
    /// attempt (`not_current` from then on: a current attempt is never current again) or of a
    /// terminal job (`acknowledged` or rejected, and a terminal job never changes); and a target
    /// mutation the target refuses or acknowledges for good (a fenced target's stale fence: its
    /// highest fence only grows; an idempotent target's repeat). Once a message is forgotten in
    /// a state it is forgotten in every later one. Only for the protocol: a flawed variant may
    /// accept such a message later.
    fn forgotten(&self, s: &State, m: &Message) -> bool {
        if self.config.variant != Variant::None {
            return false;
        }
        let held = s.runners.get(m.sender as usize).and_then(|r| r.holding) == Some(m.attempt);
        let (Some(job), Some(slot)) = (s.jobs.get(m.job as usize), s.targets.get(m.job as usize))
        else {
            return false;
        };
        !held
            && match m.kind {
                MessageKind::TargetMutation => match self.config.target {
                    TargetKind::Fenced => m.fence < slot.highest_fence,
                    TargetKind::Idempotent => slot.applied > 0,
                    TargetKind::Unfenced => false,
                },
                _ => job.state.is_terminal() || job.current != Some(m.attempt),
            }
    }

    fn all_actions(&self, s: &State, actions: &mut Vec<Action>) {
        let c = &self.config;
        let skews = 0..=c.max_skew;
        for runner in 0..c.runners {
            let r = &s.runners[runner as usize];
            match self.executing(s, runner) {
                Some(a) => {
                    if r.connected {
                        for skew in skews.clone() {
                            actions.push(Action::Heartbeat {
                                runner,
                                runner_time: skew,
                            });
                        }
                        // A runner reports `cancelled` only once it can have learned of the
                        // cancellation (the job is `cancelling`; answers are not modelled).
                        let cancelling = s.jobs[s.attempts[a as usize].job as usize].state
                            == JobState::Cancelling;
                        let outcomes: &[Outcome] = if cancelling {
                            Outcome::ALL
                        } else {
                            &[Outcome::Passed, Outcome::Failed]
                        };
                        for &outcome in outcomes {
                            let already = |t| {
                                Self::message(s, runner, MessageKind::Result(outcome), t)
                                    .is_some_and(|m| s.in_flight.contains(&m))
                            };
                            for skew in skews.clone().filter(|&t| !already(t)) {
                                actions.push(Action::Result {
                                    runner,
                                    outcome,
                                    runner_time: skew,
                                });
                            }
                        }
                    }
                    let mutation = Self::message(s, runner, MessageKind::TargetMutation, 0);
                    if mutation.is_some_and(|m| !s.in_flight.contains(&m)) {
                        actions.push(Action::TargetMutation { runner });
                    }
                    actions.push(Action::StopExecuting { runner });
                }
                None => {
                    if r.connected && self.claimable_job(s, runner).is_some() {
                        actions.push(Action::Claim { runner });
                    }
                    // A second, conflicting result after the runner reported its outcome.
                    if let Some(a) = r.holding.filter(|_| r.connected) {
                        if let Execution::Finished(first @ (Outcome::Passed | Outcome::Failed)) =
                            s.attempts[a as usize].execution
                        {
                            let outcome = if first == Outcome::Passed {
                                Outcome::Failed
                            } else {
                                Outcome::Passed
                            };
                            let already = |t| {
                                Self::message(s, runner, MessageKind::Result(outcome), t)
                                    .is_some_and(|m| s.in_flight.contains(&m))
                            };
                            for skew in skews.clone().filter(|&t| !already(t)) {
                                actions.push(Action::Result {
                                    runner,
                                    outcome,
                                    runner_time: skew,
                                });
                            }
                        }
                    }
                }
            }
            if c.disconnects && r.connected && self.executing(s, runner).is_some() {
                actions.push(Action::Disconnect { runner });
            }
            if !r.connected {
                for skew in skews.clone() {
                    actions.push(Action::Rejoin {
                        runner,
                        runner_time: skew,
                    });
                }
            }
        }
        let runner_messages = s
            .in_flight
            .iter()
            .filter(|m| m.kind != MessageKind::TargetMutation);
        if let Some(outsider) = self.outsider() {
            // The outsider replays results: the messages whose acceptance would change a job.
            let results = runner_messages
                .clone()
                .filter(|m| matches!(m.kind, MessageKind::Result(_)));
            for m in results.filter(|m| m.sender != outsider) {
                actions.push(Action::Replay {
                    runner: outsider,
                    message: *m,
                    forge: Forge::AsIs,
                });
            }
        }
        if c.forgery {
            // A runner re-sends one of its messages in flight, or the heartbeat it could send
            // now, with a forged lease id or fence.
            let messages: Vec<Message> = self
                .deliverable(s)
                .filter(|m| m.kind != MessageKind::TargetMutation && m.sender < c.runners)
                .collect();
            for m in messages {
                for forge in [Forge::WrongLease, Forge::WrongFence] {
                    actions.push(Action::Replay {
                        runner: m.sender,
                        message: m,
                        forge,
                    });
                }
            }
        }
        for m in &s.in_flight {
            actions.push(Action::Deliver { message: *m });
        }
        // Time passes only while it can expire a lease: while some `active` attempt's lease
        // is still valid.
        if s.attempts
            .iter()
            .any(|a| a.state == AttemptState::Active && s.clock < a.lease_expiry)
        {
            actions.push(Action::Tick);
        }
        if self.expired_leases(s).next().is_some() {
            actions.push(Action::ExpirySweep);
        }
        for (j, job) in s.jobs.iter().enumerate() {
            let j = j as JobId;
            // The outsider's operator tries what project 0's operator may do (`wrong_project`).
            let outsider = self.outsider().is_some();
            if matches!(job.state, JobState::Queued | JobState::Running) {
                actions.push(Action::Cancel { job: j });
                if outsider {
                    actions.push(Action::OutsiderCancel { job: j });
                }
            }
            if job.state == JobState::Uncertain {
                let Some(a) = job.current else { continue };
                let finding = self.truthful_finding(s, a);
                if outsider {
                    actions.push(Action::OutsiderReconcile {
                        job: j,
                        finding,
                        decision: Decision::Abort,
                    });
                }
                let retry_left = job.attempts_left > 0;
                for decision in [Decision::Retry, Decision::Abort, Decision::Adopt] {
                    let offered = decision != Decision::Retry || retry_left;
                    if offered
                        && self.reconcile_verdict(s, 0, j, finding, decision) == Expected::ACCEPTED
                    {
                        actions.push(Action::Reconcile {
                            job: j,
                            finding,
                            decision,
                        });
                    }
                }
            }
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init_state()]
    }

    /// Only enabled actions, in a fixed order: runner steps by runner, replays, deliveries,
    /// server-internal steps, operator steps by job.
    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.all_actions(s, actions);
        if self.skip_no_ops {
            actions.retain(|a| match a {
                Action::Deliver { .. }
                | Action::Replay { .. }
                | Action::Heartbeat { .. }
                | Action::Cancel { .. }
                | Action::OutsiderCancel { .. }
                | Action::OutsiderReconcile { .. } => self
                    .expected(s, a)
                    .is_some_and(|e| e.verdict == Verdict::Accepted),
                _ => true,
            });
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let send = |s: &mut State, runner, kind, skew| -> Option<()> {
            let m = Self::message(s, runner, kind, skew)?;
            s.in_flight.insert(m);
            Some(())
        };
        match action {
            Action::Claim { runner } => {
                let job = self.claimable_job(&s, runner)?;
                self.claim(&mut s, runner, job);
            }
            // A heartbeat is a request the server answers at receipt: its verdict depends only on
            // the server's time then, so a heartbeat delayed in the network is one sent later,
            // and the model has no heartbeats in flight.
            Action::Heartbeat {
                runner,
                runner_time: skew,
            } => {
                let m = Self::message(&s, runner, MessageKind::Heartbeat, skew)?;
                self.deliver(&mut s, &m);
            }
            Action::Result {
                runner,
                outcome,
                runner_time: skew,
            } => {
                let a = s.runners.get(runner as usize)?.holding?;
                let attempt = &mut s.attempts[a as usize];
                if attempt.execution == Execution::Executing {
                    attempt.execution = Execution::Finished(outcome);
                }
                send(&mut s, runner, MessageKind::Result(outcome), skew)?;
            }
            Action::TargetMutation { runner } => {
                send(&mut s, runner, MessageKind::TargetMutation, 0)?;
            }
            Action::StopExecuting { runner } => {
                let a = self.executing(&s, runner)?;
                s.attempts[a as usize].execution = Execution::Stopped;
            }
            Action::Disconnect { runner } => s.runners.get_mut(runner as usize)?.connected = false,
            Action::Rejoin {
                runner,
                runner_time: skew,
            } => {
                s.runners.get_mut(runner as usize)?.connected = true;
                let _ = send(&mut s, runner, MessageKind::Rejoin, skew);
            }
            Action::Replay {
                runner,
                message,
                forge,
            } => {
                self.deliver(&mut s, &Self::replayed(&message, runner, forge));
            }
            Action::Deliver { message } => self.deliver(&mut s, &message),
            Action::Tick => {
                s.clock += 1;
                let now = s.clock;
                for a in s.attempts.iter_mut() {
                    if a.state == AttemptState::Active && now >= a.lease_expiry {
                        a.expired = true;
                    }
                }
            }
            Action::ExpirySweep => self.sweep(&mut s),
            // Every job is project 0's: the outsider's operator is always refused.
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. } => {
                debug_assert_ne!(self.expected(&s, &action), Some(Expected::ACCEPTED));
            }
            Action::Cancel { job } => {
                if self.cancel_verdict(&s, 0, job) != Expected::ACCEPTED {
                    return Some(s);
                }
                let j = &mut s.jobs[job as usize];
                if j.state == JobState::Queued {
                    j.state = JobState::Cancelled;
                    j.committed.get_or_insert(JobState::Cancelled);
                } else {
                    j.state = JobState::Cancelling;
                    j.cancel_requested = true;
                }
            }
            Action::Reconcile {
                job,
                finding,
                decision,
            } => {
                if self.reconcile_verdict(&s, 0, job, finding, decision) == Expected::ACCEPTED {
                    self.reconcile(&mut s, job, finding, decision);
                }
            }
        }
        // The lease expiry of an attempt that is no longer `active` decides nothing (checks 8–10
        // answer first, or the attempt is `uncertain`): forget it, so that states that differ only
        // there are one state.
        for a in s.attempts.iter_mut() {
            if a.state != AttemptState::Active {
                a.lease_expiry = 0;
            }
        }
        // A message that could no longer matter in the last state (`forgotten`) is lost: it was
        // in flight there, so the properties checked its final verdict there.
        for m in last.in_flight.iter().filter(|m| self.forgotten(last, m)) {
            s.in_flight.remove(m);
        }
        // Only the time left on each active lease decides anything (check 11, the sweep, `tick`):
        // move the time origin to `now`, so that states that differ only by when they happened
        // are one state. Time itself is unbounded: `tick` is offered while some lease is valid.
        let now = s.clock;
        for a in s.attempts.iter_mut() {
            a.lease_expiry = a.lease_expiry.saturating_sub(now);
        }
        s.clock = 0;
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        if self.one_invariant {
            properties::combined(self.config.target)
        } else {
            properties::all(self.config.target)
        }
    }

    fn format_action(&self, action: &Action) -> String {
        crate::describe::action(action)
    }
}
