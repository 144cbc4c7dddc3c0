//! The batch claim (docs/protocol.md R1 and the note "Batch claim"): R1 applied to the runner's
//! queue as a set. Of the K earliest-submitted `queued` jobs of the runner's project whose slot
//! is free, it takes the earliest job of each slot, each as R1 says; fewer than K when two of
//! those name one slot; rejected `no_queued_job` only when it takes none.
//!
//! The selection ([`LeaseModel::batch_claimable_jobs`]) and its effect ([`LeaseModel::claim_batch`])
//! are the model's server; the properties at the end compare every batch any runner could ask for
//! in a state with the rule's text, computed here independently of the selection.

use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;
use smallvec::SmallVec;

/// The jobs one batch claim takes, in submission order.
pub type Batch = SmallVec<[JobId; 4]>;

/// `always`: no batch claim takes two jobs of one slot.
pub const BATCH_ONE_JOB_PER_SLOT: &str = "a batch claim takes at most one job per slot";
/// `always`: every job a batch claim takes is one of the K earliest claimable jobs, and no
/// claimable job of its slot was submitted before it.
pub const BATCH_EARLIEST_OF_EACH_SLOT: &str =
    "a batch claim takes the earliest claimable job of each slot";
/// `always`: each of the K earliest claimable jobs is taken, or its slot is (by an earlier job).
pub const BATCH_SKIPS_NOTHING_CLAIMABLE: &str =
    "a batch claim skips no claimable job of the K earliest";

impl LeaseModel {
    /// The jobs a batch claim of up to `limit` jobs by `runner` takes in `s`, in submission
    /// order (empty: rejected `no_queued_job`, or `unknown_runner` for a runner that does not
    /// exist or was revoked). A flawed variant may choose otherwise.
    pub fn batch_claimable_jobs(&self, s: &State, runner: RunnerId, limit: u8) -> Batch {
        let variant = self.config.variant;
        let Some(r) = s.runners.get(runner as usize).filter(|r| !r.revoked) else {
            return Batch::new();
        };
        // After a failover no job is claimed until every lease of the earlier epoch has expired.
        if s.epoch_wait > 0 && variant != Variant::FailoverWithoutWait {
            return Batch::new();
        }
        let free = |j: &Job| self.slot_free(s, r.project, j.slot);
        // The K earliest queued jobs of the runner's project whose slot is free (a flawed
        // design: the K earliest queued jobs, then those of them whose slot is free).
        let window: Batch = s
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| {
                j.project == r.project && j.state == JobState::Queued && j.attempts_left > 0
            })
            .filter(|(_, j)| variant == Variant::BatchStopsAtBusySlot || free(j))
            .take(limit as usize)
            .filter(|(_, j)| free(j))
            .map(|(i, _)| i as JobId)
            .collect();
        let slot = |j: JobId| s.jobs[j as usize].slot;
        match variant {
            Variant::BatchTwoPerSlot => window,
            Variant::BatchSkipsEarliest => window
                .iter()
                .copied()
                .filter(|&j| !window.iter().any(|&k| k > j && slot(k) == slot(j)))
                .collect(),
            _ => window
                .iter()
                .copied()
                .filter(|&j| !window.iter().any(|&k| k < j && slot(k) == slot(j)))
                .collect(),
        }
    }

    /// The verdict of a batch claim (§6.2): `unknown_runner`, accepted when it takes some job,
    /// `no_queued_job` when it takes none.
    pub fn batch_claim_verdict(&self, s: &State, runner: RunnerId, limit: u8) -> Expected {
        if s.runners.get(runner as usize).is_none_or(|r| r.revoked) {
            Expected::rejected(Reason::UnknownRunner)
        } else if self.batch_claimable_jobs(s, runner, limit).is_empty() {
            Expected::rejected(Reason::NoQueuedJob)
        } else {
            Expected::ACCEPTED
        }
    }

    /// The effect of an accepted batch claim: each job taken as R1 says, in submission order (so
    /// the attempts are in that order), each under its own lease, fence and slot token. The
    /// runner holds the earliest ([`Runner::holding`]) and the others ([`Runner::batch`]), and
    /// executes, heartbeats and reports each like the lease of a claim of one job. (The flawed
    /// `batch-one-slot-token` issues the earliest job's slot token to every job of the batch
    /// and advances only that slot's counter.) `None` when it takes nothing.
    pub(crate) fn claim_batch(&self, s: &mut State, runner: RunnerId, limit: u8) -> Option<()> {
        let jobs = self.batch_claimable_jobs(s, runner, limit);
        let first = s.attempts.len() as AttemptId;
        jobs.first()?;
        let mut batch = 0;
        for &job in &jobs {
            let slot = s.jobs[job as usize].slot as usize;
            let counter = s.targets[slot].tokens;
            self.claim(s, runner, job);
            let a = s.attempts.len() as AttemptId - 1;
            if a != first {
                batch |= crate::model::bit(a);
                if self.config.variant == Variant::BatchOneSlotToken {
                    s.attempts[a as usize].token = s.attempts[first as usize].token;
                    s.targets[slot].tokens = counter;
                }
            }
        }
        let r = &mut s.runners[runner as usize];
        r.holding = Some(first);
        r.batch = batch;
        Some(())
    }

    /// The batch claims offered to `runner` in `s`: every limit `2..=Config::batch_claim` that
    /// takes some job.
    pub(crate) fn batch_claim_actions(&self, s: &State, runner: RunnerId, out: &mut Vec<Action>) {
        for limit in 2..=self.config.batch_claim {
            if !self.batch_claimable_jobs(s, runner, limit).is_empty() {
                out.push(Action::ClaimBatch { runner, limit });
            }
        }
    }
}

// ----- properties ------------------------------------------------------------------------------

/// The rule's ground truth, independent of [`LeaseModel::batch_claimable_jobs`]: the jobs of
/// `runner`'s project that a claim may take in `s` (queued, attempts left, slot reserved by no
/// job of any project, no wait after a failover), in submission order.
fn claimable(s: &State, runner: RunnerId) -> Batch {
    let Some(r) = s.runners.get(runner as usize) else {
        return Batch::new();
    };
    if s.epoch_wait > 0 {
        return Batch::new();
    }
    (0..s.jobs.len() as JobId)
        .filter(|&j| {
            let job = &s.jobs[j as usize];
            job.project == r.project
                && job.state == JobState::Queued
                && job.attempts_left > 0
                && s.targets[job.slot as usize].holder.is_none()
        })
        .collect()
}

/// Every batch claim a runner could ask for in `s`: (claimable jobs, K, the jobs it takes).
fn batches<'a>(m: &'a LeaseModel, s: &'a State) -> impl Iterator<Item = (Batch, u8, Batch)> + 'a {
    let runners = s.runners.len() as RunnerId;
    (0..runners).flat_map(move |runner| {
        let claimable = claimable(s, runner);
        (2..=m.config.batch_claim).map(move |limit| {
            (
                claimable.clone(),
                limit,
                m.batch_claimable_jobs(s, runner, limit),
            )
        })
    })
}

/// [`BATCH_ONE_JOB_PER_SLOT`].
pub(crate) fn one_job_per_slot(m: &LeaseModel, s: &State) -> bool {
    let slot = |j: JobId| s.jobs[j as usize].slot;
    batches(m, s).all(|(_, _, taken)| {
        taken
            .iter()
            .enumerate()
            .all(|(i, &j)| taken[..i].iter().all(|&k| slot(k) != slot(j)))
    })
}

/// [`BATCH_EARLIEST_OF_EACH_SLOT`].
pub(crate) fn earliest_of_each_slot(m: &LeaseModel, s: &State) -> bool {
    let slot = |j: JobId| s.jobs[j as usize].slot;
    batches(m, s).all(|(claimable, limit, taken)| {
        let window = &claimable[..claimable.len().min(limit as usize)];
        taken.iter().all(|&j| {
            window.contains(&j) && !claimable.iter().any(|&i| i < j && slot(i) == slot(j))
        })
    })
}

/// [`BATCH_SKIPS_NOTHING_CLAIMABLE`]. (A claimable job after the K earliest may be left although
/// its slot is free and the batch took fewer than K: the rule counts the K earliest, then takes
/// one per slot.)
pub(crate) fn skips_nothing_claimable(m: &LeaseModel, s: &State) -> bool {
    let slot = |j: JobId| s.jobs[j as usize].slot;
    batches(m, s).all(|(claimable, limit, taken)| {
        let window = &claimable[..claimable.len().min(limit as usize)];
        window
            .iter()
            .all(|&j| taken.contains(&j) || taken.iter().any(|&k| k < j && slot(k) == slot(j)))
    })
}

/// `sometimes`: some batch claim takes fewer than K jobs while more than one is claimable (two
/// of the K earliest name one slot).
pub const SOMETIMES_BATCH_FEWER: &str =
    "a batch claim takes fewer than K because two jobs share a slot";
/// `sometimes`: some batch claim walks past a queued job of its project waiting on a busy slot
/// and takes a later one.
pub const SOMETIMES_BATCH_WALKS_PAST: &str =
    "a batch claim walks past a job waiting on a busy slot";

/// [`SOMETIMES_BATCH_FEWER`].
pub(crate) fn takes_fewer(m: &LeaseModel, s: &State) -> bool {
    batches(m, s).any(|(claimable, limit, taken)| {
        claimable.len() >= limit as usize && taken.len() < limit as usize && !taken.is_empty()
    })
}

/// [`SOMETIMES_BATCH_WALKS_PAST`].
pub(crate) fn walks_past(m: &LeaseModel, s: &State) -> bool {
    let runners = s.runners.len() as RunnerId;
    (0..runners).any(|runner| {
        let project = s.runners[runner as usize].project;
        (2..=m.config.batch_claim).any(|limit| {
            let taken = m.batch_claimable_jobs(s, runner, limit);
            taken.iter().any(|&j| {
                s.jobs[..j as usize].iter().any(|w| {
                    w.project == project
                        && w.state == JobState::Queued
                        && w.attempts_left > 0
                        && s.targets[w.slot as usize].holder.is_some()
                })
            })
        })
    })
}

/// Witness of [`BATCH_ONE_JOB_PER_SLOT`], [`BATCH_EARLIEST_OF_EACH_SLOT`] and
/// [`SOMETIMES_BATCH_FEWER`]: with batch claims, two jobs a runner could claim name one slot.
pub(crate) fn two_claimable_on_one_slot(m: &LeaseModel, s: &State) -> bool {
    let slot = |j: JobId| s.jobs[j as usize].slot;
    m.config.batch_claim >= 2
        && (0..s.runners.len() as RunnerId).any(|runner| {
            let claimable = claimable(s, runner);
            claimable
                .iter()
                .enumerate()
                .any(|(i, &j)| claimable[..i].iter().any(|&k| slot(k) == slot(j)))
        })
}

/// Witness of [`BATCH_SKIPS_NOTHING_CLAIMABLE`]: with batch claims, the K earliest claimable
/// jobs of a runner's project are not all among its K earliest queued ones (jobs waiting on busy
/// slots push a claimable job past the first K queued: what a batch that does not walk past
/// them would leave).
pub(crate) fn claimable_past_busy_slot(m: &LeaseModel, s: &State) -> bool {
    m.config.batch_claim >= 2
        && (0..s.runners.len() as RunnerId).any(|runner| {
            let project = s.runners[runner as usize].project;
            let claimable = claimable(s, runner);
            let queued: Batch = (0..s.jobs.len() as JobId)
                .filter(|&j| {
                    let job = &s.jobs[j as usize];
                    job.project == project && job.state == JobState::Queued && job.attempts_left > 0
                })
                .collect();
            (2..=m.config.batch_claim).any(|limit| {
                let first_queued = &queued[..queued.len().min(limit as usize)];
                claimable
                    .iter()
                    .take(limit as usize)
                    .any(|j| !first_queued.contains(j))
            })
        })
}

/// Witness of [`SOMETIMES_BATCH_WALKS_PAST`]: with batch claims, a queued job of a runner's
/// project waits on a slot another job holds while a later job of that project is claimable.
pub(crate) fn claimable_after_busy_slot(m: &LeaseModel, s: &State) -> bool {
    m.config.batch_claim >= 2
        && (0..s.runners.len() as RunnerId).any(|runner| {
            let project = s.runners[runner as usize].project;
            claimable(s, runner).iter().any(|&j| {
                s.jobs[..j as usize].iter().any(|w| {
                    w.project == project
                        && w.state == JobState::Queued
                        && w.attempts_left > 0
                        && s.targets[w.slot as usize].holder.is_some()
                })
            })
        })
}
