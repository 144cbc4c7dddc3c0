//! Symmetry reduction over the runners of project 0: they are interchangeable, so a state and the
//! same state with those runners renamed are equivalent. The representative is the least state
//! (by `Ord`) over every renaming, so it is canonical. Use it with `spawn_dfs` (`spawn_bfs` and the
//! Explorer ignore symmetry).

use crate::state::*;
use crate::types::{AttemptId, AttemptState, JobId, JobState, LeaseId, Outcome, RunnerId};
use smallvec::SmallVec;
use stateright::Representative;
use std::cmp::Ordering;

/// A renaming of the runners of project 0, part by part: what [`State::rename_runners`] builds
/// and [`State::cmp_renamed_runners`] compares lazily.
struct RunnerRenaming<'a>(&'a [RunnerId]);

impl RunnerRenaming<'_> {
    fn id(&self, r: RunnerId) -> RunnerId {
        self.0.get(r as usize).copied().unwrap_or(r)
    }

    fn job(&self, j: &Job) -> Job {
        Job {
            completed_by: j.completed_by.map(|(a, r)| (a, self.id(r))),
            ..*j
        }
    }

    fn attempt(&self, a: &Attempt) -> Attempt {
        Attempt {
            runner: self.id(a.runner),
            ..*a
        }
    }

    fn runners(&self, runners: &Runners) -> Runners {
        let mut renamed = runners.clone();
        for (old, runner) in runners.iter().enumerate() {
            renamed[self.id(old as RunnerId) as usize] = *runner;
        }
        renamed
    }

    fn in_flight(&self, in_flight: &MessageSet) -> MessageSet {
        let mut renamed = in_flight.clone();
        self.rename_in_flight(&mut renamed);
        renamed
    }

    fn rename_in_flight(&self, in_flight: &mut MessageSet) {
        in_flight.map_in_place(|m| Message {
            sender: self.id(m.sender),
            ..*m
        });
    }

    fn rename_ledger(&self, ledger: &mut Ledger) {
        if ledger.is_empty() {
            return;
        }
        ledger.map_in_place(|e| {
            map_entry(
                e,
                |m| Message {
                    sender: self.id(m.sender),
                    ..*m
                },
                |o| Observation {
                    sender: self.id(o.sender),
                    ..*o
                },
                |a| a,
            )
        });
    }
}

/// `e` with its message, record and attempt ids mapped.
fn map_entry(
    e: &LedgerEntry,
    message: impl Fn(&Message) -> Message,
    record: impl Fn(&Observation) -> Observation,
    attempt: impl Fn(AttemptId) -> AttemptId,
) -> LedgerEntry {
    LedgerEntry {
        received: message(&e.received),
        record: e.record.as_ref().map(record),
        sent_by: e.sent_by.map(attempt),
        late_or_conflicting: e.late_or_conflicting,
    }
}

impl State {
    /// This state with every runner id `r` renamed to `permutation[r]` (ids beyond the
    /// permutation, e.g. the outsider, are kept).
    pub fn rename_runners(&self, permutation: &[RunnerId]) -> State {
        let mut s = self.clone();
        s.rename_runners_in_place(permutation);
        s
    }

    /// [`State::rename_runners`] in place.
    fn rename_runners_in_place(&mut self, permutation: &[RunnerId]) {
        let p = RunnerRenaming(permutation);
        for j in self.jobs.iter_mut() {
            *j = p.job(j);
        }
        for a in self.attempts.iter_mut() {
            *a = p.attempt(a);
        }
        self.runners = p.runners(&self.runners);
        p.rename_in_flight(&mut self.in_flight);
        p.rename_ledger(&mut self.ledger);
    }

    /// Replaces this state by its least renaming under `permutations` of the runners of project
    /// 0 (the identity among them), building a renamed state only when it is the least so far.
    fn least_runner_renaming(&mut self, permutations: &[Vec<RunnerId>]) {
        let mut others = permutations.iter().filter(|p| !is_identity(p));
        if permutations.len() == 2 {
            // One other renaming (two symmetric runners, the default): compare, rename in place.
            if let Some(p) = others.next() {
                if self.cmp_renamed_runners(p, self) == Ordering::Less {
                    self.rename_runners_in_place(p);
                }
            }
            return;
        }
        let mut best: Option<State> = None;
        for p in others {
            let so_far = best.as_ref().unwrap_or(self);
            if self.cmp_renamed_runners(p, so_far) == Ordering::Less {
                best = Some(self.rename_runners(p));
            }
        }
        if let Some(best) = best {
            *self = best;
        }
    }

    /// `self.rename_runners(permutation).cmp(other)`, without building the renamed state unless
    /// the comparison gets as far as the messages (it usually ends at the first attempt).
    pub fn cmp_renamed_runners(&self, permutation: &[RunnerId], other: &State) -> Ordering {
        let p = RunnerRenaming(permutation);
        let jobs = self.jobs.iter().map(|j| p.job(j));
        let attempts = self.attempts.iter().map(|a| p.attempt(a));
        self.clock
            .cmp(&other.clock)
            .then_with(|| jobs.cmp(other.jobs.iter().copied()))
            .then_with(|| attempts.cmp(other.attempts.iter().copied()))
            .then_with(|| p.runners(&self.runners).cmp(&other.runners))
            .then_with(|| p.in_flight(&self.in_flight).cmp(&other.in_flight))
            .then_with(|| self.targets.cmp(&other.targets))
            .then_with(|| {
                let mut ledger = self.ledger.clone();
                p.rename_ledger(&mut ledger);
                ledger.cmp(&other.ledger)
            })
            .then_with(|| self.cache.cmp(&other.cache))
    }
}

/// Every permutation of `0..n`, in lexicographic order.
fn permutations(n: u8) -> Vec<Vec<RunnerId>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for pos in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(pos, n - 1);
            out.push(p);
        }
    }
    out.sort();
    out
}

fn swap_outcome(o: Outcome) -> Outcome {
    match o {
        Outcome::Passed => Outcome::Failed,
        Outcome::Failed => Outcome::Passed,
        Outcome::Cancelled => Outcome::Cancelled,
    }
}

fn swap_job_state(s: JobState) -> JobState {
    match s {
        JobState::Passed => JobState::Failed,
        JobState::Failed => JobState::Passed,
        other => other,
    }
}

fn swap_attempt_state(s: AttemptState) -> AttemptState {
    match s {
        AttemptState::Passed => AttemptState::Failed,
        AttemptState::Failed => AttemptState::Passed,
        other => other,
    }
}

impl State {
    /// This state with `passed` and `failed` exchanged everywhere they concern `job`: its state
    /// and committed outcome, its attempts' states and executions, and the results in flight that
    /// name it. The protocol treats the two outcomes alike, so this is a symmetry of the model.
    pub fn swap_outcomes(&mut self, job: JobId) {
        let s = self;
        let j = &mut s.jobs[job as usize];
        j.state = swap_job_state(j.state);
        j.committed = j.committed.map(swap_job_state);
        for a in s.attempts.iter_mut().filter(|a| a.job == job) {
            a.state = swap_attempt_state(a.state);
            if let Execution::Finished(o) = a.execution {
                a.execution = Execution::Finished(swap_outcome(o));
            }
        }
        let message = |m: &Message| match m.kind {
            MessageKind::Result(o) if m.job == job => Message {
                kind: MessageKind::Result(swap_outcome(o)),
                ..*m
            },
            _ => *m,
        };
        if s.in_flight
            .iter()
            .any(|m| m.job == job && matches!(m.kind, MessageKind::Result(_)))
        {
            s.in_flight.map_in_place(message);
        }
        if !s.ledger.is_empty() {
            let record = |o: &Observation| match o.kind {
                MessageKind::Result(outcome) if o.job == job => Observation {
                    kind: MessageKind::Result(swap_outcome(outcome)),
                    result: o.result.map(|(r, d)| (swap_outcome(r), d)),
                    ..*o
                },
                _ => *o,
            };
            s.ledger
                .map_in_place(|e| map_entry(e, message, record, |a| a));
        }
    }

    /// Outcomes named canonically, job by job: the first attempt of a job (in ledger order) that
    /// finished with `passed` or `failed` finished with `passed`. A job's `passed`/`failed`
    /// anywhere (its state, its attempts, its results in flight) comes from such an execution, so
    /// a job with none has nothing to exchange.
    pub fn canonicalize_outcomes(&mut self) {
        let s = self;
        for job in 0..s.jobs.len() as JobId {
            let first = s.attempts.iter().find_map(|a| match a.execution {
                Execution::Finished(o @ (Outcome::Passed | Outcome::Failed)) if a.job == job => {
                    Some(o)
                }
                _ => None,
            });
            if first == Some(Outcome::Failed) {
                s.swap_outcomes(job);
            }
        }
    }
}

impl State {
    /// This state with the attempt ledger in job order (each job's attempts keeping their claim
    /// order) and every attempt id and lease id renamed to match. Ids are compared only for
    /// equality, and only each job's own order of attempts means anything (invariant 2), so
    /// ledgers that differ only in how two jobs' claims interleaved are one state.
    pub fn canonicalize_attempts(&mut self) {
        if self.attempts.windows(2).all(|w| w[0].job <= w[1].job) {
            return;
        }
        // After a failover the claim order is kept: with reissued ids an attempt's id is how
        // many attempts the server knew before it (`State::attempt_name`), which the order
        // decides. (No reduction is sound; with one job the order is the job order already.)
        if self.attempts.iter().any(|a| a.lost) {
            return;
        }
        let mut order: SmallVec<[usize; 8]> = (0..self.attempts.len()).collect();
        order.sort_by_key(|&a| self.attempts[a].job);
        let mut new_id: SmallVec<[AttemptId; 8]> = smallvec::smallvec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = new as AttemptId;
        }
        let id = |a: AttemptId| new_id.get(a as usize).copied().unwrap_or(a);
        // Lease ids are `attempt + 1`; the forged lease id `0` names no attempt.
        let lease = |l: LeaseId| match l.checked_sub(1) {
            Some(a) if (a as usize) < new_id.len() => id(a) + 1,
            _ => l,
        };
        let s = self;
        s.attempts = order
            .iter()
            .map(|&old| Attempt {
                lease: lease(s.attempts[old].lease),
                ..s.attempts[old]
            })
            .collect();
        for j in s.jobs.iter_mut() {
            j.current = j.current.map(id);
            j.completed_by = j.completed_by.map(|(a, r)| (id(a), r));
        }
        for r in s.runners.iter_mut() {
            r.holding = r.holding.map(id);
            r.batch = rename_bits(r.batch, &id);
        }
        for t in s.targets.iter_mut() {
            t.attempts_applied = rename_bits(t.attempts_applied, &id);
        }
        for entry in s.cache.iter_mut().flatten() {
            entry.stored_by = id(entry.stored_by);
        }
        let message = |m: &Message| Message {
            attempt: id(m.attempt),
            lease: lease(m.lease),
            ..*m
        };
        s.in_flight.map_in_place(message);
        if !s.ledger.is_empty() {
            let record = |o: &Observation| Observation {
                attempt: o.attempt.map(id),
                named_attempt: id(o.named_attempt),
                ..*o
            };
            s.ledger.map_in_place(|e| map_entry(e, message, record, id));
        }
    }
}

impl State {
    /// This state with every job id `j` renamed to `permutation[j]`: jobs, the job named by
    /// every attempt, message and slot reservation, and (when every job has its own slot, slot
    /// `j` for job `j`) the slots with them.
    pub fn rename_jobs(&self, permutation: &[JobId]) -> State {
        let mut s = self.clone();
        let own_slots = self
            .jobs
            .iter()
            .enumerate()
            .all(|(j, job)| job.slot as usize == j)
            && self.targets.len() == self.jobs.len();
        let rename = |j: JobId| permutation.get(j as usize).copied().unwrap_or(j);
        for (old, &new) in permutation.iter().enumerate() {
            s.jobs[new as usize] = self.jobs[old];
            if own_slots {
                s.jobs[new as usize].slot = new;
                s.targets[new as usize] = self.targets[old];
            }
        }
        for t in s.targets.iter_mut() {
            t.holder = t.holder.map(rename);
            t.deployed = rename_bits(t.deployed, &rename);
        }
        for a in s.attempts.iter_mut() {
            a.job = rename(a.job);
        }
        let message = |m: &Message| Message {
            job: rename(m.job),
            ..*m
        };
        s.in_flight.map_in_place(message);
        if !s.ledger.is_empty() {
            let record = |o: &Observation| Observation {
                job: rename(o.job),
                ..*o
            };
            s.ledger
                .map_in_place(|e| map_entry(e, message, record, |a| a));
        }
        s
    }

    /// Whether the place of `job` among the jobs matters: a claim takes the lowest-numbered
    /// queued job, so the order of the jobs that can still be claimed matters. A terminal job
    /// never changes again, and one without attempts left is never claimed again.
    pub fn claim_order_matters(&self, job: JobId) -> bool {
        let j = &self.jobs[job as usize];
        !j.state.is_terminal() && j.attempts_left > 0
    }

    /// Whether the job renaming `permutation` is a symmetry of this state. Jobs differ only in
    /// their ids and in claim order, so any renaming that keeps the order of the jobs whose
    /// order matters ([`State::claim_order_matters`]) is a symmetry here and in every later
    /// state (a job whose order stopped mattering never matters again).
    fn keeps_claim_order(&self, permutation: &[JobId]) -> bool {
        let mut last: Option<JobId> = None;
        for j in 0..self.jobs.len() as JobId {
            if !self.claim_order_matters(j) {
                continue;
            }
            let renamed = permutation[j as usize];
            if last.is_some_and(|l| renamed < l) {
                return false;
            }
            last = Some(renamed);
        }
        true
    }
}

impl Representative for State {
    /// The least state (by `Ord`) over every symmetry: job renamings that keep claim order (with
    /// the ledger then put in job order), outcome exchanges per job, and runner renamings.
    fn representative(&self) -> Self {
        self.canonical(true)
    }
}

impl State {
    /// [`Representative::representative`] without the passed/failed exchange: the reduction for
    /// designs that may treat the two outcomes differently (a flawed variant, or an
    /// implementation under test in the conformance cover). Pass it to stateright's
    /// `symmetry_fn`.
    pub fn representative_keeping_outcomes(&self) -> State {
        self.canonical(false)
    }

    fn canonical(&self, exchange_outcomes: bool) -> State {
        // A state that keeps the server's state before its last transition (for a failover
        // still to come) is its own representative: no reduction, which is sound (the
        // symmetric states are then explored apart) and keeps the snapshot's attempts the
        // prefix of the state's.
        if self.before.is_some() {
            return self.clone();
        }
        let symmetric = self.runners.iter().filter(|r| r.project == 0).count() as u8;
        let runner_permutations = cached_permutations(symmetric);
        let open = (0..self.jobs.len() as JobId)
            .filter(|&j| self.claim_order_matters(j))
            .count();
        let job_permutations = cached_permutations(self.jobs.len() as u8);
        // With every job open, only the identity (the first permutation) keeps claim order.
        let candidates = if open == self.jobs.len() {
            1
        } else {
            job_permutations.len()
        };
        // Each job renaming that keeps claim order, with the ledger in job order, the outcomes
        // named canonically and the least runner renaming; the least of them. The identity comes
        // first (permutations are in lexicographic order) and always keeps claim order.
        let canonicalize = |c: &mut State| {
            c.canonicalize_attempts();
            if exchange_outcomes {
                c.canonicalize_outcomes();
            }
            c.least_runner_renaming(&runner_permutations);
        };
        let mut least = self.clone();
        canonicalize(&mut least);
        for jobs in job_permutations
            .iter()
            .take(candidates)
            .filter(|p| !is_identity(p) && self.keeps_claim_order(p))
        {
            let mut candidate = self.rename_jobs(jobs);
            canonicalize(&mut candidate);
            if candidate < least {
                least = candidate;
            }
        }
        least
    }
}

/// The bit set `bits` of small ids with every id `i` renamed to `rename(i)`.
fn rename_bits(bits: u8, rename: &impl Fn(u8) -> u8) -> u8 {
    if bits == 0 {
        return 0;
    }
    (0..8u8)
        .filter(|&i| bits & (1 << i) != 0)
        .fold(0, |acc, i| {
            acc | 1u8.checked_shl(rename(i) as u32).unwrap_or(0)
        })
}

fn is_identity(permutation: &[u8]) -> bool {
    permutation
        .iter()
        .enumerate()
        .all(|(i, &p)| p as usize == i)
}

/// [`permutations`] of `0..n`, computed once per `n` (up to 5 symmetric runners; more are
/// computed each time).
fn cached_permutations(n: u8) -> std::borrow::Cow<'static, [Vec<u8>]> {
    static CACHE: std::sync::OnceLock<Vec<Vec<Vec<u8>>>> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| (0..=5).map(permutations).collect());
    match cache.get(n as usize) {
        Some(all) => std::borrow::Cow::Borrowed(all.as_slice()),
        None => std::borrow::Cow::Owned(permutations(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_of_three_runners_are_the_six_orders() {
        let all = permutations(3);
        assert_eq!(all.len(), 6);
        assert_eq!(all[0], vec![0, 1, 2]);
        assert_eq!(all[5], vec![2, 1, 0]);
    }
}
