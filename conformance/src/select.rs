//! Suite selection: which traces a `conform` run replays (the named scenarios, the transition
//! cover, seeded random walks, the property suite), generated and sharded in one stable order.

use std::collections::HashSet;
use std::sync::Arc;

use leasewright_model::{Action, Config, JobState, LeaseModel, RunnerId, State, TargetKind};

use crate::coverage::Coverage;
use crate::generate::{
    cover_of, cover_steps, cover_trace, random_walks, state_paths, Generated, SplitMix64,
};
use crate::probe::{self, Path};
use crate::property::PropertyOptions;
use crate::replay::{action_key, verdict_key};
use crate::scenarios;
use crate::shard::Shard;

/// Which traces to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// Exactly one trace per (reachable state, enabled action) of the cover configuration.
    Cover,
    /// Seeded random walks.
    Random,
    /// The named scenarios of docs/protocol.md §10.
    Scenarios,
    /// Messages and operator actions in every reachable state (docs/conformance.md, classes 1–3).
    Probes,
    /// Property-based traces (proptest).
    Proptest,
    /// All of the above (proptest in shard 1 only: it is one sequential run).
    All,
}

/// Everything that decides which traces a run replays.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Which suite.
    pub suite: Suite,
    /// The model configuration of the random walks and the property suite (the cover runs on
    /// [`cover_config`] of it unless `cover_full`).
    pub config: Config,
    /// Seed of the random walks and of the property suite.
    pub seed: u64,
    /// Random-walk steps in all.
    pub steps: usize,
    /// Steps per random walk; the property suite's longest trace.
    pub walk_len: usize,
    /// How many traces the property suite generates.
    pub cases: u32,
    /// This run's shard.
    pub shard: Shard,
    /// Cover `config` itself rather than [`cover_config`] of it.
    pub cover_full: bool,
}

impl Selection {
    /// Whether `suite` is part of this selection.
    pub fn wants(&self, suite: Suite) -> bool {
        self.suite == suite || self.suite == Suite::All
    }

    /// Whether the property suite runs: `--suite proptest`, or `all` in shard 1.
    pub fn with_property(&self) -> bool {
        match self.suite {
            Suite::Proptest => true,
            Suite::All => self.shard.index == 1,
            _ => false,
        }
    }

    /// Whether the transition cover is sampled ([`sample_cover`]): in the default suite; the
    /// whole cover with `--cover-full`, and with `--shard` (the shards replay it in full).
    pub fn samples_cover(&self) -> bool {
        !self.cover_full && self.shard == Shard::ALL
    }

    /// The property suite's options.
    pub fn property_options(&self) -> PropertyOptions {
        PropertyOptions {
            seed: self.seed,
            cases: self.cases,
            max_len: self.walk_len,
            ..PropertyOptions::default()
        }
    }
}

/// One suite's traces, all of one model.
pub struct Batch {
    /// The model the traces are paths of.
    pub model: Arc<LeaseModel>,
    /// The traces.
    pub traces: Vec<Generated<LeaseModel>>,
    /// What was sampled, and with which seed, when the batch is a sample (for the summary).
    pub note: Option<String>,
    /// The cells the batch's generator found reachable (probes): what coverage is judged against.
    pub reachable: Option<Coverage>,
}

impl Batch {
    /// A batch of `traces` of `model`, neither sampled nor probed.
    pub fn new(model: Arc<LeaseModel>, traces: Vec<Generated<LeaseModel>>) -> Batch {
        Batch {
            model,
            traces,
            note: None,
            reachable: None,
        }
    }
}

/// The share (in percent) of the random-walk steps walked with two jobs (class 6), when the
/// configuration has one.
pub const TWO_JOB_SHARE: usize = 20;
/// The share (in percent) of the random-walk steps walked on each target kind other than the
/// configuration's (class 4).
pub const OTHER_TARGET_SHARE: usize = 10;
/// Cover traces sampled from the cover of each target kind other than the configuration's.
pub const OTHER_TARGET_COVER_SAMPLE: usize = 600;
/// Cover traces of the cover configuration drawn at random beyond those that exercise something
/// new (the default suite; `--cover-full` and `--shard` replay the whole cover).
pub const COVER_SAMPLE: usize = 3_000;
/// Probes drawn at random beyond those that exercise a new cell, per probed configuration.
pub const EXTRA_PROBES: usize = 600;
/// Prefixes of the two-job walks probed (every state of the first walks, in order).
pub const TWO_JOB_PROBE_STATES: usize = 240;

/// The share (in percent) of the random-walk steps walked on each shared-slot configuration
/// (issue 13).
pub const SHARED_SLOT_SHARE: usize = 10;

/// The shared-slot configurations of the default suite (issue 13), by name: one job of each
/// project on one slot (`shared-projects`), and two jobs of the project on one slot
/// (`shared-jobs`); otherwise the configuration's bounds.
pub fn shared_slot_configs(base: &Config) -> [(&'static str, Config); 2] {
    [
        (
            "shared-projects",
            Config {
                jobs: 1,
                outsider: true,
                outsider_jobs: 1,
                shared_slot: true,
                ..base.clone()
            },
        ),
        (
            "shared-jobs",
            Config {
                jobs: 2,
                outsider_jobs: 0,
                shared_slot: true,
                ..base.clone()
            },
        ),
    ]
}

/// The side-effect configuration of the default suite (issue 18 class 7): the configuration with
/// the side effects of R8 (`source fetch`, `log append`, `artifact put`/`get`, `cache put`/`get`),
/// walked and probed like a shared-slot configuration (its share of the steps is
/// [`SHARED_SLOT_SHARE`]).
pub fn side_effect_config(base: &Config) -> Config {
    Config {
        side_effects: true,
        ..base.clone()
    }
}

/// The revocation configuration of the default suite (issue 39 item 7): the configuration with
/// an operator who may revoke a runner mid-lease (`runner_revoke`): its messages and claims are
/// then refused `unknown_runner` and recorded nowhere, and its lease runs out and is swept as a
/// lost runner's. Walked and probed as the batch-claim configurations are (its share of the
/// steps is [`BATCH_SHARE`]).
pub fn revocation_config(base: &Config) -> Config {
    Config {
        revocation: true,
        ..base.clone()
    }
}

/// The share (in percent) of the random-walk steps walked on each batch-claim configuration.
pub const BATCH_SHARE: usize = 5;

/// The batch-claim configurations of the default suite (issue 29 item 4, issue 28 item 4): batch
/// claims of up to 3 jobs (K = 2 and 3), otherwise the configuration's bounds. `batch-claims`:
/// four jobs, jobs 0 and 1 on one slot, jobs 2 and 3 a slot each, so that a batch takes fewer
/// than K (two of its K earliest jobs name one slot) and walks past job 1 while job 0 holds the
/// slot, to the two jobs after it (what a batch that counts the wrong set gets wrong).
/// `batch-own-slots`: three jobs, a slot each (a batch takes two or three jobs; what the
/// `--driver-cmd` protocol of version 2, which names slot j for job j, replays).
pub fn batch_claim_configs(base: &Config) -> [(&'static str, Config); 2] {
    let batch = Config {
        batch_claim: 3,
        shared_slot: false,
        outsider_jobs: 0,
        side_effects: false,
        ..base.clone()
    };
    [
        (
            "batch-claims",
            Config {
                jobs: 4,
                slot_shared_by: 2,
                ..batch.clone()
            },
        ),
        (
            "batch-own-slots",
            Config {
                jobs: 3,
                slot_shared_by: 0,
                ..batch
            },
        ),
    ]
}

/// How many walks in which a batch claim reaches past a job waiting on a busy slot every random
/// suite replays (`random-batch-past-busy-*`, their steps taken from the main configuration's
/// share of `--steps`), and the steps of the walks they are chosen from.
pub const PAST_BUSY_WALKS: usize = 6;
const PAST_BUSY_POOL_STEPS: usize = 50_000;

/// Whether the step `action` (from `before` to `after`) is a batch claim that took a job beyond
/// the `limit` earliest queued jobs of project 0: some of those wait on a busy slot, and the rule
/// takes the K earliest *claimable* jobs (docs/protocol.md R1, "Batch claim").
pub fn batch_reaches_past_busy_slot(before: &State, action: &Action, after: &State) -> bool {
    let Action::ClaimBatch { limit, .. } = action else {
        return false;
    };
    let queued =
        |s: &State, j: usize| s.jobs[j].project == 0 && s.jobs[j].state == JobState::Queued;
    let earliest: Vec<usize> = (0..before.jobs.len())
        .filter(|&j| queued(before, j))
        .take(usize::from(*limit))
        .collect();
    (0..before.jobs.len()).any(|j| {
        queued(before, j) && after.jobs[j].state != JobState::Queued && !earliest.contains(&j)
    })
}

/// Up to [`PAST_BUSY_WALKS`] random walks of `model` (seeded by the selection) with a step that
/// [`batch_reaches_past_busy_slot`], each cut after the first such step.
fn walks_reaching_past_busy_slots(
    model: &LeaseModel,
    selection: &Selection,
) -> Vec<Generated<LeaseModel>> {
    random_walks(
        model,
        selection.seed ^ 0x9a57_b05e,
        PAST_BUSY_POOL_STEPS,
        selection.walk_len,
    )
    .into_iter()
    .filter_map(|mut w| {
        // Cut after the step that reaches past a busy slot: what the walk is kept for.
        let mut before = &w.init;
        let hit = w.steps.iter().position(|(a, after)| {
            let hit = batch_reaches_past_busy_slot(before, a, after);
            before = after;
            hit
        })?;
        w.steps.truncate(hit + 1);
        Some(w)
    })
    .take(PAST_BUSY_WALKS)
    .collect()
}

/// The failover configuration of the default suite (issue 39 item 6): the configuration with
/// the model's failover (`Action::Failover`: the database loses the server's last committed
/// transition, the epoch rises, claims wait for the earlier epoch's leases). Ids are fresh after
/// it (`reissued_ids` off): the implementation's ids are random UUIDs, which a database that
/// lost a claim does not issue again.
pub fn failover_config(base: &Config) -> Config {
    Config {
        failover: true,
        reissued_ids: false,
        ..base.clone()
    }
}

/// How many walks with a failover every random suite replays at most (`random-failover-*`, their
/// steps taken from the main configuration's share of `--steps`, at most [`FAILOVER_SHARE`]
/// percent of it), and the steps of the walks they are chosen from. The in-process driver,
/// version 5 of the driver protocol and the HTTP driver (through a server's failover test hooks)
/// replay them (`suite::LeftOut::Failover`).
pub const FAILOVER_WALKS: usize = 12;
/// The largest share (in percent) of `--steps` the failover walks take.
pub const FAILOVER_SHARE: usize = 5;
const FAILOVER_POOL_STEPS: usize = 20_000;

/// Walks of the failover configuration `model` that fail over and then claim a job in the new
/// epoch (after the wait: what the epoch's fences and the wait are for), chosen with the run's
/// seed and cut after that claim.
fn walks_with_a_failover(
    model: &LeaseModel,
    selection: &Selection,
    budget: usize,
) -> Vec<Generated<LeaseModel>> {
    let walks = random_walks(
        model,
        selection.seed ^ 0xfa11_0e4e,
        FAILOVER_POOL_STEPS,
        selection.walk_len,
    )
    .into_iter()
    .filter_map(|mut w| {
        let failover = w.steps.iter().position(|(a, _)| *a == Action::Failover)?;
        let claim = (failover + 1..w.steps.len()).find(|&i| {
            let before = &w.steps[i - 1].1;
            claims_in_new_epoch(before, &w.steps[i].0, &w.steps[i].1)
        })?;
        w.steps.truncate(claim + 1);
        Some(w)
    });
    within_budget(walks, budget, FAILOVER_WALKS)
}

/// The first of `walks`, at most `limit`, while their steps in all are at most `budget`.
fn within_budget(
    walks: impl Iterator<Item = Generated<LeaseModel>>,
    budget: usize,
    limit: usize,
) -> Vec<Generated<LeaseModel>> {
    walks
        .scan(0usize, |steps, w| {
            *steps += w.steps.len();
            (*steps <= budget).then_some(w)
        })
        .take(limit)
        .collect()
}

/// The replica-clock configuration of the default suite (issue 39 item 7): the suite's
/// configuration with replicas whose clocks are within one tick of the true one
/// (`replica_skew` 1: each server step judged at `clock + d`, `d` in -1..=1, the expiry sweep
/// acting two ticks past a lease). The in-process driver replays it, each trace in a schema of
/// its own whose recorded δ is one tick, and so does a version 4 `--driver-cmd` driver; the HTTP
/// driver leaves it out (`suite::LeftOut::ReplicaClocks`).
pub fn replica_clock_config(base: &Config) -> Config {
    Config {
        replica_skew: 1,
        ..base.clone()
    }
}

/// The share (in percent) of `--steps` walked with replica clocks.
pub const REPLICA_CLOCK_SHARE: usize = 5;

/// How many sweeps every probe suite sends where a lease of the replica-clock walks has expired
/// by less than the sweep's margin (issue 39 item 7): the model's walks sweep only where a sweep
/// acts, so a sweep that acts too early (at δ, not 2δ, past the lease) is seen only here.
pub const REPLICA_SWEEP_PROBES: usize = 12;
const REPLICA_SWEEP_POOL_STEPS: usize = 4_000;

/// Whether some leased job's current attempt in `s` has expired, by the clock serving `s`, by at
/// least one tick but less than the sweep's margin (2δ): a sweep there must take nothing.
pub fn expired_within_sweep_margin(model: &LeaseModel, s: &State) -> bool {
    let (now, margin) = now_and_sweep_margin(model, s);
    active_lease_expiries(s).any(|expiry| now > expiry && now < expiry + margin)
}

/// Whether some leased job's current attempt in `s` has expired, by the clock serving `s`, by
/// exactly the sweep's margin (2δ), its expiry known exactly (above the time origin): a sweep
/// there must take it.
pub fn expired_by_the_sweep_margin(model: &LeaseModel, s: &State) -> bool {
    let (now, margin) = now_and_sweep_margin(model, s);
    active_lease_expiries(s).any(|expiry| expiry > 0 && now == expiry + margin)
}

/// The time serving `s` and the sweep's margin of `model`, in ticks.
fn now_and_sweep_margin(model: &LeaseModel, s: &State) -> (u16, u16) {
    (
        u16::from(LeaseModel::now(s)),
        u16::from(model.sweep_margin()),
    )
}

/// The lease expiry of each leased job's current attempt in `s` that is still active.
fn active_lease_expiries(s: &State) -> impl Iterator<Item = u16> + '_ {
    s.jobs.iter().filter_map(|job| {
        let a = &s.attempts[job.current? as usize];
        (job.state.is_leased() && a.state == leasewright_model::AttemptState::Active)
            .then_some(u16::from(a.lease_expiry))
    })
}

/// Probes of the replica-clock `walks` (of `model`), on both sides of the end of the sweep's
/// margin:
/// - `probe-replica-sweep-*`: each walk cut at its first state where a lease expired within the
///   margin ([`expired_within_sweep_margin`]), then an expiry sweep (the model's verdict:
///   accepted, nothing swept);
/// - `probe-replica-sweep-end-*`: each walk cut at its first state where a lease expired by
///   exactly the margin ([`expired_by_the_sweep_margin`]), then an expiry sweep (it takes the
///   job: a sweep that acts a moment later takes nothing).
///
/// At most [`REPLICA_SWEEP_PROBES`] of each.
pub fn replica_sweep_probes(
    model: &LeaseModel,
    walks: &[Generated<LeaseModel>],
) -> Vec<Generated<LeaseModel>> {
    let sweep_where = |prefix: &str, wanted: fn(&LeaseModel, &State) -> bool| {
        probes_where(model, walks, prefix, REPLICA_SWEEP_PROBES, |walk| {
            let at = walk
                .steps
                .iter()
                .position(|(_, after)| wanted(model, after))?;
            Some((at, Action::ExpirySweep, 0))
        })
    };
    let mut probes = sweep_where("probe-replica-sweep", expired_within_sweep_margin);
    probes.extend(sweep_where(
        "probe-replica-sweep-end",
        expired_by_the_sweep_margin,
    ));
    probes
}

/// Probes of `walks`: each walk cut after the step `pick` chooses, then the action `pick` names
/// there, the model's verdict and next state recorded ([`probe::apply`]); named `{prefix}-{n}`,
/// at most `limit`, in the order `rank` gives (lowest first, walks in their order within a rank).
fn probes_where(
    model: &LeaseModel,
    walks: &[Generated<LeaseModel>],
    prefix: &str,
    limit: usize,
    pick: impl Fn(&Generated<LeaseModel>) -> Option<(usize, Action, u16)>,
) -> Vec<Generated<LeaseModel>> {
    let mut chosen: Vec<(u16, Generated<LeaseModel>)> = walks
        .iter()
        .filter_map(|walk| {
            let (at, action, rank) = pick(walk)?;
            let mut probe = walk.clone();
            probe.steps.truncate(at + 1);
            let after = probe::apply(model, &probe.steps[at].1, &action)?;
            probe.steps.push((action, after));
            Some((rank, probe))
        })
        .collect();
    chosen.sort_by_key(|(rank, _)| *rank);
    chosen
        .into_iter()
        .take(limit)
        .enumerate()
        .map(|(n, (_, mut probe))| {
            probe.name = format!("{prefix}-{n}");
            probe
        })
        .collect()
}

/// How many claims every probe suite sends on each side of the end of the wait after a failover
/// (issue 39): the model claims only a job it can take, so its walks never claim during the wait,
/// and claim at its end only by chance; a wait an implementation leaves out, shortens (its 2δ
/// dropped) or lengthens (by a moment) is seen only here. Twice this many in all.
pub const FAILOVER_WAIT_PROBES: usize = 12;

/// The failover configuration the claims at the edges of the wait are probed in: the failover
/// configuration with replica clocks one tick apart (`replica_skew` 1), so that the wait is
/// `lease_ttl + 2` ticks and a wait without its 2δ ends two ticks early.
pub fn failover_wait_config(base: &Config) -> Config {
    Config {
        replica_skew: 1,
        ..failover_config(base)
    }
}

/// The runner whose claim in `s` (of `model`) would take a job were it not for the wait after a
/// failover, if one would: the model rejects it `no_queued_job`, an implementation without the
/// wait takes the job.
pub fn claim_held_by_the_wait(model: &LeaseModel, s: &State) -> Option<RunnerId> {
    if LeaseModel::now(s) >= s.epoch_wait {
        return None;
    }
    let mut without = s.clone();
    without.epoch_wait = 0;
    (0..s.runners.len() as RunnerId).find(|&r| {
        model.claimable_job(s, r).is_none() && model.claimable_job(&without, r).is_some()
    })
}

/// The runner whose claim in `s` (of `model`) takes a job at the very end of the wait after a
/// failover (the receipt time is the wait's end), if one does: the model accepts it, an
/// implementation whose wait lasts a moment longer rejects it `no_queued_job`.
pub fn claim_at_the_end_of_the_wait(model: &LeaseModel, s: &State) -> Option<RunnerId> {
    if s.epoch == 0 || s.epoch_wait == 0 || LeaseModel::now(s) != s.epoch_wait {
        return None;
    }
    (0..s.runners.len() as RunnerId).find(|&r| model.claimable_job(s, r).is_some())
}

/// Probes of the failover `walks` (of `model`), on both sides of the end of the wait:
/// - `probe-failover-wait-*`: each walk cut at its last state where a claim waits
///   ([`claim_held_by_the_wait`]), then that claim (the model's verdict: rejected
///   `no_queued_job`, nothing changes); those nearest the wait's end first, so that a wait that
///   ends early (without its 2δ) takes a job in them;
/// - `probe-failover-wait-end-*`: each walk cut at its first state at the wait's very end where a
///   claim takes a job ([`claim_at_the_end_of_the_wait`]), then that claim (accepted).
///
/// At most [`FAILOVER_WAIT_PROBES`] of each.
pub fn failover_wait_probes(
    model: &LeaseModel,
    walks: &[Generated<LeaseModel>],
) -> Vec<Generated<LeaseModel>> {
    let mut probes = probes_where(
        model,
        walks,
        "probe-failover-wait",
        FAILOVER_WAIT_PROBES,
        |walk| {
            let (at, runner, s) = walk
                .steps
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, (_, s))| Some((i, claim_held_by_the_wait(model, s)?, s)))?;
            let left = u16::from(s.epoch_wait) - u16::from(LeaseModel::now(s));
            Some((at, Action::Claim { runner }, left))
        },
    );
    probes.extend(probes_where(
        model,
        walks,
        "probe-failover-wait-end",
        FAILOVER_WAIT_PROBES,
        |walk| {
            walk.steps.iter().enumerate().find_map(|(i, (_, s))| {
                Some((
                    i,
                    Action::Claim {
                        runner: claim_at_the_end_of_the_wait(model, s)?,
                    },
                    0,
                ))
            })
        },
    ));
    probes
}

/// Whether the step `action` (from `before` to `after`) is a claim that took a job in an epoch
/// after the first.
pub fn claims_in_new_epoch(before: &State, action: &Action, after: &State) -> bool {
    matches!(action, Action::Claim { .. } | Action::ClaimBatch { .. })
        && after.epoch > 0
        && after.attempts.len() > before.attempts.len()
}

/// Whether some step of `trace` satisfies `wanted` (of the state before it, the step and the
/// state after it).
pub fn has_step(
    trace: &Generated<LeaseModel>,
    wanted: impl Fn(&State, &Action, &State) -> bool,
) -> bool {
    let mut before = &trace.init;
    trace.steps.iter().any(|(a, after)| {
        let hit = wanted(before, a, after);
        before = after;
        hit
    })
}

/// A named configuration's model and its random walks.
type Walks = (
    &'static str,
    Arc<LeaseModel>,
    Vec<Generated<LeaseModel>>,
    usize,
);

/// The configuration of the walks the in-process driver prunes between (issue 39 item 7,
/// [`crate::drivers::prune`]): three jobs, so that one can still be queued or running when
/// others are pruned, with the side effects of R8, so that a project's cache entry can outlive
/// the attempt that stored it.
pub fn prune_config(base: &Config) -> Config {
    Config {
        jobs: 3,
        side_effects: true,
        ..base.clone()
    }
}

/// How many walks pruned between their jobs every random suite replays at most
/// (`random-prune-*`, their steps taken from the main configuration's share of `--steps`, at most
/// [`PRUNE_SHARE`] percent of it), and the steps of the walks they are chosen from. The
/// in-process driver prunes, and so do version 4 of the driver protocol and the HTTP driver on
/// servers with the prune's test hooks; elsewhere they replay as the walks they are.
pub const PRUNE_WALKS: usize = 12;
/// The largest share (in percent) of `--steps` the pruned walks take.
pub const PRUNE_SHARE: usize = 5;
const PRUNE_POOL_STEPS: usize = 60_000;

/// Walks of the prune configuration `model` that have a plan ([`crate::drivers::prune::plan`]):
/// a job finished and untouched between the audit and the prune, another finished after the
/// audit, none of them touched after the prune (each walk cut before the first step that would:
/// [`crate::drivers::prune::steps_to_keep`]). Chosen with the run's seed, named
/// `random-prune-*`.
fn walks_with_a_prune(
    model: &LeaseModel,
    selection: &Selection,
    budget: usize,
) -> Vec<Generated<LeaseModel>> {
    let mut planned: Vec<(Generated<LeaseModel>, usize)> = random_walks(
        model,
        selection.seed ^ 0x9e0e_5eed,
        PRUNE_POOL_STEPS,
        selection.walk_len,
    )
    .into_iter()
    .filter_map(|mut w| {
        w.steps.truncate(crate::drivers::prune::steps_to_keep(&w)?);
        let rank = crate::drivers::prune::rank(&crate::drivers::prune::plan(&w)?, &w);
        Some((w, rank))
    })
    .collect();
    // Those that prune the attempt that stored a project's cache entry, with a job still
    // unfinished at the prune, first (a stable sort: in the order walked among equals).
    planned.sort_by_key(|(_, rank)| std::cmp::Reverse(*rank));
    let walks = within_budget(planned.into_iter().map(|(w, _)| w), budget, PRUNE_WALKS);
    renamed(walks, crate::drivers::prune::PREFIX)
}

/// The walks the random suite of one job (`--suite random --steps 15000 --walk-len 40`) prunes
/// between their jobs with `seed`, with their model: what the tests of each driver's prune
/// replay.
pub fn random_prune_walks(seed: u64) -> Result<Option<Batch>, String> {
    prune_walks(&Selection {
        suite: Suite::Random,
        config: Config::one_job(),
        seed,
        steps: 15_000,
        walk_len: 40,
        cases: 0,
        shard: crate::shard::Shard::ALL,
        cover_full: false,
    })
}

/// The walks `selection`'s random suite prunes between their jobs (`random-prune-*`), with
/// their model; `None` when it has none.
pub fn prune_walks(selection: &Selection) -> Result<Option<Batch>, String> {
    Ok(generate(selection)?.into_iter().find_map(|mut b| {
        b.traces
            .retain(|t| crate::drivers::prune::is_prune_walk(&t.name));
        (!b.traces.is_empty()).then_some(b)
    }))
}

/// The two-job configuration of the default suite (class 6): the configuration with two jobs.
pub fn two_job_config(base: &Config) -> Config {
    Config {
        jobs: 2,
        ..base.clone()
    }
}

/// Renames the walks of one batch (`random-{seed}` is unique only within a batch).
fn renamed(mut traces: Vec<Generated<LeaseModel>>, prefix: &str) -> Vec<Generated<LeaseModel>> {
    for t in &mut traces {
        t.name = format!("{prefix}-{}", t.seed.unwrap_or(0));
    }
    traces
}

/// Every prefix of `walks` (the state after each step) as a probe path, the first `limit`.
fn walk_prefixes(walks: &[Generated<LeaseModel>], limit: usize) -> Vec<Path> {
    walks
        .iter()
        .flat_map(|w| (1..=w.steps.len()).map(|n| (w.init.clone(), w.steps[..n].to_vec())))
        .take(limit)
        .collect()
}

/// The probe batch of `paths` (of `model`).
fn probe_batch(
    model: Arc<LeaseModel>,
    paths: &[Path],
    seed: u64,
    prefix: &str,
    what: &str,
) -> Batch {
    let probes = probe::probes(&model, paths, seed, EXTRA_PROBES, prefix, "probe");
    let note = format!(
        "{prefix}: {} states of {what}, {} candidates; {} probes exercise a new cell, {} more \
         sampled with seed {seed}",
        probes.states, probes.candidates, probes.selected, probes.sampled
    );
    Batch {
        model,
        traces: probes.traces,
        note: Some(note),
        reachable: Some(probes.reachable),
    }
}

/// The configuration the transition cover runs on by default: the suite's configuration (two
/// runners, the outsider, two attempts, the fenced target) without disconnects and with one-tick
/// leases. Its cover is 65,584 traces (832,677 steps), so the default suite replays a sample of it
/// ([`sample_cover`]); the cover of the model's default configuration is far larger. The random walks and the
/// scenarios run on the full configuration, disconnects and two-tick leases included.
pub fn cover_config(base: &Config) -> Config {
    Config {
        disconnects: false,
        lease_ttl: 1,
        ..base.clone()
    }
}

/// The generated traces of `selection` (the property suite generates its own as it runs), in
/// batches of one model each, only this shard's.
pub fn generate(selection: &Selection) -> Result<Vec<Batch>, String> {
    if selection.suite == Suite::Proptest {
        return Ok(Vec::new());
    }
    let model = Arc::new(LeaseModel::new(selection.config.clone()));
    let mut batches = Vec::new();
    if selection.wants(Suite::Scenarios) {
        for (model, trace) in scenarios::all()? {
            batches.push(Batch::new(Arc::new(model), vec![trace]));
        }
    }
    let cover_model = if selection.cover_full {
        Arc::clone(&model)
    } else {
        Arc::new(LeaseModel::new(cover_config(&model.config)))
    };
    let cover_paths =
        (selection.wants(Suite::Cover) || selection.wants(Suite::Probes)).then(|| {
            state_paths(
                (*cover_model).clone(),
                Some(State::representative_keeping_outcomes),
            )
            .1
        });
    if let (true, Some(paths)) = (selection.wants(Suite::Cover), &cover_paths) {
        if selection.samples_cover() {
            let sample = sample_cover(&cover_model, paths, selection.seed, COVER_SAMPLE, "");
            batches.push(Batch {
                model: Arc::clone(&cover_model),
                note: Some(sample.note("cover", "the cover configuration", selection.seed)),
                traces: sample.traces,
                reachable: None,
            });
        } else {
            batches.push(Batch::new(
                Arc::clone(&cover_model),
                cover_of(cover_model.as_ref(), paths),
            ));
        }
        // Class 4: a seeded sample of the cover of every other target kind, compared at every
        // step (a sample's prefixes are not traces of their own).
        let other_seed = selection.seed ^ 0xC0E7;
        for kind in other_targets(model.config.target) {
            let config = Config {
                target: kind,
                ..cover_model.config.clone()
            };
            let other = Arc::new(LeaseModel::new(config));
            let (_, paths) = state_paths(
                (*other).clone(),
                Some(State::representative_keeping_outcomes),
            );
            let prefix = format!("{kind}-");
            let mut sample = sample_cover(
                &other,
                &paths,
                other_seed,
                OTHER_TARGET_COVER_SAMPLE,
                &prefix,
            );
            for t in &mut sample.traces {
                t.generator = "cover-sample";
            }
            batches.push(Batch {
                model: other,
                note: Some(sample.note(
                    &format!("cover-{kind}"),
                    &format!("the {kind} target"),
                    other_seed,
                )),
                traces: sample.traces,
                reachable: None,
            });
        }
    }
    // `--steps` is the random walks' steps in all: a share of them is walked with two jobs and
    // on each other target kind.
    let two_jobs = Arc::new(LeaseModel::new(two_job_config(&model.config)));
    let two_job_steps = if model.config.jobs == 1 {
        selection.steps * TWO_JOB_SHARE / 100
    } else {
        0
    };
    let other_target_steps = selection.steps * OTHER_TARGET_SHARE / 100;
    let shared_steps = selection.steps * SHARED_SLOT_SHARE / 100;
    let mut shared_configs: Vec<(&'static str, Config, usize)> = if model.config.shared_slot {
        Vec::new()
    } else {
        shared_slot_configs(&model.config)
            .into_iter()
            .map(|(name, config)| (name, config, shared_steps))
            .collect()
    };
    // Class 7: the side effects of R8, walked and probed as these configurations are.
    if !model.config.side_effects {
        shared_configs.push((
            "side-effects",
            side_effect_config(&model.config),
            shared_steps,
        ));
    }
    // The batch claim (K > 1), walked and probed as these configurations are.
    let batch_steps = selection.steps * BATCH_SHARE / 100;
    if model.config.batch_claim < 2 {
        for (name, config) in batch_claim_configs(&model.config) {
            shared_configs.push((name, config, batch_steps));
        }
    }
    // A runner revoked mid-lease (issue 39 item 7).
    if !model.config.revocation {
        shared_configs.push(("revocation", revocation_config(&model.config), batch_steps));
    }
    // Issue 39 item 7: in every run, batches that reach past jobs waiting on a busy slot (rare in
    // uniform walks), chosen from walks of `batch-claims`; their steps count in `--steps`.
    let past_busy = match shared_configs.iter().find(|(n, _, _)| *n == "batch-claims") {
        Some((_, config, _)) if selection.wants(Suite::Random) => {
            let m = Arc::new(LeaseModel::new(config.clone()));
            let walks = walks_reaching_past_busy_slots(m.as_ref(), selection);
            Some((m, renamed(walks, "random-batch-past-busy")))
        }
        _ => None,
    };
    // Issue 39 item 6: in every run, walks through a failover; their steps count in `--steps`.
    let walked = |walks: &Option<(Arc<LeaseModel>, Vec<Generated<LeaseModel>>)>| -> usize {
        walks
            .iter()
            .flat_map(|(_, walks)| walks)
            .map(|w| w.steps.len())
            .sum()
    };
    // What is left of `--steps` for the walks below and the main configuration's.
    let mut left = selection
        .steps
        .saturating_sub(two_job_steps)
        .saturating_sub(2 * other_target_steps)
        .saturating_sub(shared_configs.iter().map(|(_, _, n)| n).sum::<usize>())
        .saturating_sub(walked(&past_busy));
    // Issue 39 item 6: walks through a failover, at most FAILOVER_SHARE% of `--steps` and half
    // of what is left (the main configuration keeps the rest).
    let failovers = if selection.wants(Suite::Random) && !model.config.failover {
        let m = Arc::new(LeaseModel::new(failover_config(&model.config)));
        let budget = (selection.steps * FAILOVER_SHARE / 100).min(left / 2);
        let walks = walks_with_a_failover(m.as_ref(), selection, budget);
        Some((m, renamed(walks, "random-failover")))
    } else {
        None
    };
    left = left.saturating_sub(walked(&failovers));
    // Issue 39 item 7: walks with replica clocks apart within the bound, in every run.
    let replica_clocks = if selection.wants(Suite::Random) && model.config.replica_skew == 0 {
        let m = Arc::new(LeaseModel::new(replica_clock_config(&model.config)));
        let walks = random_walks(
            m.as_ref(),
            selection.seed,
            (selection.steps * REPLICA_CLOCK_SHARE / 100).min(left / 2),
            selection.walk_len,
        );
        Some((m, renamed(walks, "random-replica-clocks")))
    } else {
        None
    };
    left = left.saturating_sub(walked(&replica_clocks));
    // Issue 39 item 7: walks pruned between their jobs (the in-process driver audits, prunes and
    // audits `--since` between two of their steps), in every run.
    let prunes = if selection.wants(Suite::Random) {
        let m = Arc::new(LeaseModel::new(prune_config(&model.config)));
        let budget = (selection.steps * PRUNE_SHARE / 100).min(left / 2);
        let walks = walks_with_a_prune(m.as_ref(), selection, budget);
        Some((m, walks))
    } else {
        None
    };
    let main_steps = left.saturating_sub(walked(&prunes));
    // Issue 13: walks of each shared-slot configuration (replayed by the random suite, their
    // states probed by the probe suite).
    let shared_walks: Vec<Walks> = shared_configs
        .into_iter()
        .map(|(name, config, steps)| {
            let m = Arc::new(LeaseModel::new(config));
            let walks = renamed(
                random_walks(
                    m.as_ref(),
                    selection.seed,
                    steps.max(TWO_JOB_PROBE_STATES),
                    selection.walk_len,
                ),
                &format!("random-{name}"),
            );
            (name, m, walks, steps)
        })
        .collect();
    let two_job_walks = renamed(
        random_walks(
            two_jobs.as_ref(),
            selection.seed,
            // The probes' two-job states come from these walks even without the random suite.
            two_job_steps.max(TWO_JOB_PROBE_STATES),
            selection.walk_len,
        ),
        "random2",
    );
    // Probes the model's walks never make (issue 39): sweeps within the replica clocks' margin,
    // and claims held by the wait after a failover; each from walks of its own configuration.
    if selection.wants(Suite::Probes) {
        type Probing = fn(&LeaseModel, &[Generated<LeaseModel>]) -> Vec<Generated<LeaseModel>>;
        let kinds: [(bool, Config, u64, usize, Probing); 2] = [
            (
                model.config.replica_skew == 0,
                replica_clock_config(&model.config),
                0x5e1f_c10c,
                REPLICA_SWEEP_POOL_STEPS,
                replica_sweep_probes,
            ),
            (
                !model.config.failover,
                failover_wait_config(&model.config),
                0xfa11_0e4e,
                FAILOVER_POOL_STEPS,
                failover_wait_probes,
            ),
        ];
        for (wanted, config, salt, pool, probing) in kinds {
            if !wanted {
                continue;
            }
            let m = Arc::new(LeaseModel::new(config));
            let walks = random_walks(m.as_ref(), selection.seed ^ salt, pool, selection.walk_len);
            let probes = probing(m.as_ref(), &walks);
            if !probes.is_empty() {
                batches.push(Batch::new(m, probes));
            }
        }
    }
    if selection.wants(Suite::Probes) {
        let paths: Vec<Path> = cover_paths
            .iter()
            .flatten()
            .map(|(_, init, steps)| (init.clone(), steps.clone()))
            .collect();
        batches.push(probe_batch(
            Arc::clone(&cover_model),
            &paths,
            selection.seed,
            "probe",
            "the cover configuration",
        ));
        // Two jobs: probes after every prefix of the two-job walks, which the random suite
        // replays (and compares at every step) in full.
        batches.push(probe_batch(
            Arc::clone(&two_jobs),
            &walk_prefixes(&two_job_walks, TWO_JOB_PROBE_STATES),
            selection.seed,
            "probe2",
            "the two-job walks",
        ));
        for (name, m, walks, _) in &shared_walks {
            batches.push(probe_batch(
                Arc::clone(m),
                &walk_prefixes(walks, TWO_JOB_PROBE_STATES),
                selection.seed,
                &format!("probe-{name}"),
                &if *name == "side-effects" {
                    format!("the {name} walks (issue 18 class 7: R8)")
                } else if name.starts_with("batch") {
                    format!("the {name} walks (issue 29 item 4: batch claims)")
                } else if *name == "revocation" {
                    format!("the {name} walks (issue 39 item 7: a runner revoked mid-lease)")
                } else {
                    format!("the {name} walks (issue 13: one slot)")
                },
            ));
        }
    }
    if selection.wants(Suite::Random) {
        let traces = random_walks(
            model.as_ref(),
            selection.seed,
            main_steps,
            selection.walk_len,
        );
        batches.push(Batch::new(Arc::clone(&model), traces));
        for (m, walks) in past_busy
            .into_iter()
            .chain(failovers)
            .chain(replica_clocks)
            .chain(prunes)
        {
            if !walks.is_empty() {
                batches.push(Batch::new(m, walks));
            }
        }
        if two_job_steps > 0 {
            let walks = random_walks(
                two_jobs.as_ref(),
                selection.seed,
                two_job_steps,
                selection.walk_len,
            );
            batches.push(Batch::new(Arc::clone(&two_jobs), renamed(walks, "random2")));
        }
        for kind in other_targets(model.config.target) {
            let other = Arc::new(LeaseModel::new(Config {
                target: kind,
                ..model.config.clone()
            }));
            let traces = renamed(
                random_walks(
                    other.as_ref(),
                    selection.seed,
                    other_target_steps,
                    selection.walk_len,
                ),
                &format!("random-{kind}"),
            );
            batches.push(Batch::new(other, traces));
        }
        for (name, m, _, steps) in &shared_walks {
            // Exactly this share's steps (`--steps` is the walks' steps in all); the same seed
            // walks the same paths as the probes' longer walks of this configuration.
            let walks = random_walks(m.as_ref(), selection.seed, *steps, selection.walk_len);
            if !walks.is_empty() {
                batches.push(Batch::new(
                    Arc::clone(m),
                    renamed(walks, &format!("random-{name}")),
                ));
            }
        }
    }
    // Shard by position in the whole, stable list.
    let mut position = 0usize;
    for batch in &mut batches {
        batch.traces.retain(|_| {
            let keep = selection.shard.contains(position);
            position += 1;
            keep
        });
    }
    batches.retain(|b| !b.traces.is_empty());
    Ok(batches)
}

/// Why a driver cannot replay a failover step ([`crate::suite::LeftOut::Failover`] leaves such
/// traces out of every driver but the in-process one), or a second server's start (no suite
/// replays servers that differ in lease ttl, `Config::policy_ttl`).
pub const FAILOVER: &str =
    "a failover step or a second server's start (this driver cannot roll its implementation's \
     database back to an earlier commit)";

/// Why a driver cannot replay a step that switches between replicas' clocks: the HTTP driver runs
/// one clock and leaves such traces out ([`crate::suite::LeftOut::ReplicaClocks`]), as do
/// `--driver-cmd` drivers before version 4; the in-process driver replays them in a schema of the
/// trace's own, a version 4 driver with `open`'s δ and the `replica_clock` step.
pub const REPLICA_CLOCK: &str =
    "a replica_clock step (replica_skew > 0: the drivers replay one server clock)";

/// A recorded path of [`state_paths`]: its encoding, the initial state and the steps.
pub type CoverPath = (String, State, Vec<(Action, State)>);

/// A sample of a transition cover: the traces kept, and how they were chosen.
pub struct CoverSample {
    /// The traces kept, in the cover's order, each under its name in the whole cover.
    pub traces: Vec<Generated<LeaseModel>>,
    /// Traces in the whole cover.
    pub total: usize,
    /// Steps in the whole cover.
    pub total_steps: usize,
    /// Traces kept because their last transition exercises something no earlier trace's did.
    pub selected: usize,
    /// Traces drawn at random from the rest.
    pub sampled: usize,
}

impl CoverSample {
    /// The summary's note on this sample.
    pub fn note(&self, name: &str, what: &str, seed: u64) -> String {
        let steps: usize = self.traces.iter().map(|t| t.steps.len()).sum();
        format!(
            "{name}: {} of the {} traces ({} of {} steps) of the cover of {what}; {} exercise a \
             new cell, verdict or transition kind, {} more sampled with seed {seed}",
            self.traces.len(),
            self.total,
            steps,
            self.total_steps,
            self.selected,
            self.sampled
        )
    }
}

/// What the transition `action` (from `before` to `after`) exercises, as names: its coverage cells
/// with their verdicts (every class), its verdict, its action kind, and the action kind with its
/// verdict and the state of every job (what decides which of the implementation's statements
/// run and which of their branches).
pub fn transition_features(
    model: &LeaseModel,
    before: &State,
    action: &Action,
    after: &State,
) -> Vec<String> {
    let mut cells = Coverage::default();
    cells.record(model, before, action, after);
    let mut out = Vec::new();
    for (class, cells) in cells.classes() {
        for (cell, verdicts) in cells {
            out.extend(verdicts.keys().map(|v| format!("{class}|{cell}|{v}")));
        }
    }
    let verdict = model
        .expected(before, action)
        .map_or_else(|| "none".to_string(), |v| verdict_key(&v));
    let kind = action_key(action);
    let jobs: Vec<String> = before
        .jobs
        .iter()
        .map(|j| {
            format!(
                "{}{}{}",
                j.state.as_str(),
                if j.cancel_requested { "+cancel" } else { "" },
                if before
                    .targets
                    .get(j.slot as usize)
                    .and_then(|t| t.holder)
                    .is_some()
                {
                    "+reserved"
                } else {
                    ""
                }
            )
        })
        .collect();
    out.push(format!("verdict|{verdict}"));
    out.push(format!("action|{kind}"));
    out.push(format!("transition|{kind}|{verdict}|{}", jobs.join(",")));
    out
}

/// A sample of the transition cover of `paths` (the [`state_paths`] of `model`): every trace whose
/// last transition exercises a feature ([`transition_features`]) no earlier trace's did, in the
/// cover's stable order, then `extra` drawn at random from the rest with `seed`. Every
/// transition of the cover is the last step of exactly one of its traces, so the kept traces
/// exercise every feature the whole cover does. Traces keep their names in the whole cover
/// (`cover-{prefix}{position:06}`), so `--shard` and `--cover-full` runs name them alike.
pub fn sample_cover(
    model: &LeaseModel,
    paths: &[CoverPath],
    seed: u64,
    extra: usize,
    prefix: &str,
) -> CoverSample {
    let steps = cover_steps(model, paths);
    let total = steps.len();
    let mut total_steps = 0usize;
    let mut seen: HashSet<String> = HashSet::new();
    let mut keep = vec![false; total];
    let mut rest = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let (_, init, prefix_steps) = &paths[step.path];
        total_steps += prefix_steps.len() + 1;
        let before = prefix_steps.last().map_or(init, |(_, s)| s);
        let mut new = false;
        for feature in transition_features(model, before, &step.step.0, &step.step.1) {
            new |= seen.insert(feature);
        }
        if new {
            keep[i] = true;
        } else {
            rest.push(i);
        }
    }
    let selected = total - rest.len();
    let sampled = extra.min(rest.len());
    let mut rng = SplitMix64::new(seed);
    for _ in 0..sampled {
        keep[rest.swap_remove(rng.below(rest.len()))] = true;
    }
    let traces = steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep[*i])
        .map(|(i, step)| {
            let mut trace = cover_trace(paths, i, step);
            trace.name = format!("cover-{prefix}{i:06}");
            trace
        })
        .collect();
    CoverSample {
        traces,
        total,
        total_steps,
        selected,
        sampled,
    }
}

/// The target kinds other than `kind`, each replayed too (class 4).
fn other_targets(kind: TargetKind) -> impl Iterator<Item = TargetKind> {
    TargetKind::ALL.iter().copied().filter(move |k| *k != kind)
}

/// The batch and the trace named `name`.
pub fn find<'a>(
    batches: &'a [Batch],
    name: &str,
) -> Option<(&'a Batch, &'a Generated<LeaseModel>)> {
    batches
        .iter()
        .find_map(|b| b.traces.iter().find(|t| t.name == name).map(|t| (b, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 39 item 7: every random suite replays batches that reach past a job waiting on a
    /// busy slot (a slip there, `BatchStopsAtBusySlot`, is caught by such walks:
    /// conformance/tests/statements.rs), whatever the seed, with few steps or many.
    #[test]
    fn every_random_suite_walks_a_batch_past_a_busy_slot() {
        for (seed, steps) in [(1, 15_000), (2, 2_000), (3, 300), (4, 15_000)] {
            let selection = Selection {
                suite: Suite::Random,
                config: Config::one_job(),
                seed,
                steps,
                walk_len: 40,
                cases: 1,
                shard: Shard::ALL,
                cover_full: false,
            };
            let batches = generate(&selection).expect("a selection");
            let past_busy: Vec<_> = batches
                .iter()
                .flat_map(|b| &b.traces)
                .filter(|t| t.name.starts_with("random-batch-past-busy-"))
                .collect();
            assert_eq!(
                past_busy.len(),
                PAST_BUSY_WALKS,
                "seed {seed}, {steps} steps"
            );
            for walk in past_busy {
                assert!(
                    has_step(walk, batch_reaches_past_busy_slot),
                    "{} reaches past no busy slot",
                    walk.name
                );
            }
        }
    }

    /// Every random suite replays walks through a failover (issue 39 item 6), of the failover
    /// configuration, with fresh ids; their steps count in `--steps`.
    #[test]
    fn every_random_suite_prunes_between_jobs() {
        let selection = Selection {
            suite: Suite::Random,
            config: Config::one_job(),
            seed: 3,
            steps: 15_000,
            walk_len: 40,
            cases: 0,
            shard: Shard::ALL,
            cover_full: false,
        };
        let batches = generate(&selection).expect("generates");
        let pruned: Vec<_> = batches
            .iter()
            .flat_map(|b| b.traces.iter().map(move |t| (b, t)))
            .filter(|(_, t)| crate::drivers::prune::is_prune_walk(&t.name))
            .collect();
        assert_eq!(pruned.len(), PRUNE_WALKS);
        let mut between_jobs = 0;
        for (batch, trace) in &pruned {
            assert_eq!(batch.model.config, prune_config(&selection.config));
            let plan = crate::drivers::prune::plan(trace).expect("a plan");
            assert!(plan.audit_before < plan.prune_before);
            assert!(plan.prune_before < trace.steps.len());
            assert!(!plan.must_prune.is_empty());
            assert!(plan.must_prune.is_subset(&plan.may_prune));
            assert!(plan.may_prune.len() > plan.must_prune.len());
            // A job finished after the audit: a prune of audited jobs must keep it.
            assert!(!plan.must_keep.is_empty());
            assert!(plan.must_keep.is_subset(&plan.may_prune));
            assert!(plan.must_keep.is_disjoint(&plan.must_prune));
            between_jobs += usize::from(
                plan.may_prune.len() < usize::from(prune_config(&selection.config).jobs),
            );
        }
        // Most of them prune with a job still queued or running, which the walk goes on with;
        // some (those first) the attempt that stored a project's cache entry, which is rarer.
        assert!(
            between_jobs * 2 > PRUNE_WALKS,
            "{between_jobs} of {PRUNE_WALKS}"
        );
        let storers = pruned
            .iter()
            .filter(|(_, t)| {
                crate::drivers::prune::plan(t)
                    .expect("a plan")
                    .prunes_cache_storer
            })
            .count();
        assert!(storers >= 2, "{storers} of {PRUNE_WALKS}");
        assert!(
            crate::drivers::prune::plan(pruned[0].1)
                .expect("a plan")
                .prunes_cache_storer
        );
        let steps: usize = batches
            .iter()
            .flat_map(|b| &b.traces)
            .map(|t| t.steps.len())
            .sum();
        assert_eq!(steps, selection.steps);
    }

    #[test]
    fn every_random_suite_walks_through_a_failover() {
        let selection = Selection {
            suite: Suite::Random,
            config: Config::one_job(),
            seed: 3,
            steps: 20_000,
            walk_len: 20,
            cases: 0,
            shard: Shard::ALL,
            cover_full: false,
        };
        let batches = generate(&selection).expect("generates");
        let failovers: Vec<_> = batches
            .iter()
            .flat_map(|b| b.traces.iter().map(move |t| (b, t)))
            .filter(|(_, t)| t.name.starts_with("random-failover"))
            .collect();
        assert_eq!(failovers.len(), FAILOVER_WALKS);
        for (batch, trace) in &failovers {
            assert!(
                crate::drivers::failover::has_failover(trace),
                "{}",
                trace.name
            );
            assert!(has_step(trace, claims_in_new_epoch), "{}", trace.name);
            assert!(batch.model.config.failover && !batch.model.config.reissued_ids);
        }
        let steps: usize = batches
            .iter()
            .flat_map(|b| &b.traces)
            .map(|t| t.steps.len())
            .sum();
        assert_eq!(steps, selection.steps);
        assert!(!Config::one_job().failover && !Config::default().failover);
        // And walks with replica clocks, their share of the steps.
        let replica: Vec<_> = batches
            .iter()
            .filter(|b| b.model.config.replica_skew > 0)
            .flat_map(|b| &b.traces)
            .collect();
        assert!(replica
            .iter()
            .all(|t| t.name.starts_with("random-replica-clocks")));
        let replica_steps: usize = replica.iter().map(|t| t.steps.len()).sum();
        assert_eq!(replica_steps, selection.steps * REPLICA_CLOCK_SHARE / 100);
        let probes = generate(&Selection {
            suite: Suite::Probes,
            ..selection.clone()
        })
        .expect("generates");
        let sweeps: Vec<_> = probes
            .iter()
            .flat_map(|b| b.traces.iter().map(move |t| (b, t)))
            .filter(|(_, t)| t.name.starts_with("probe-replica-sweep-"))
            .collect();
        assert_eq!(sweeps.len(), 2 * REPLICA_SWEEP_PROBES);
        for (batch, trace) in sweeps {
            let [.., (_, before), (last, after)] = trace.steps.as_slice() else {
                panic!("{} is too short", trace.name);
            };
            assert_eq!(*last, Action::ExpirySweep);
            if trace.name.starts_with("probe-replica-sweep-end-") {
                assert!(expired_by_the_sweep_margin(&batch.model, before));
                assert_ne!(before.jobs, after.jobs, "{} sweeps nothing", trace.name);
            } else {
                assert!(expired_within_sweep_margin(&batch.model, before));
                assert_eq!(before.jobs, after.jobs, "{} sweeps a job", trace.name);
            }
        }
        // And claims on both sides of the end of the wait after a failover, with δ one tick:
        // held ones at the wait's last tick (where a wait without its 2δ has ended), and ones at
        // its very end that take a job.
        let wait = |prefix: &str| -> Vec<_> {
            probes
                .iter()
                .flat_map(|b| b.traces.iter().map(move |t| (b, t)))
                .filter(|(_, t)| {
                    t.name.starts_with(prefix) && t.name[prefix.len()..].parse::<usize>().is_ok()
                })
                .collect()
        };
        let (held, end) = (
            wait("probe-failover-wait-"),
            wait("probe-failover-wait-end-"),
        );
        assert_eq!(held.len(), FAILOVER_WAIT_PROBES);
        assert_eq!(end.len(), FAILOVER_WAIT_PROBES);
        for (batch, trace) in held.iter().chain(&end) {
            assert_eq!(batch.model.config.replica_skew, 1);
            assert!(batch.model.config.failover);
            let [.., (_, before), (last, after)] = trace.steps.as_slice() else {
                panic!("{} is too short", trace.name);
            };
            let Action::Claim { runner } = *last else {
                panic!("{} does not end with a claim", trace.name);
            };
            let is_end = trace.name.starts_with("probe-failover-wait-end-");
            if is_end {
                assert_eq!(
                    claim_at_the_end_of_the_wait(&batch.model, before),
                    Some(runner)
                );
                assert!(
                    after.attempts.len() > before.attempts.len(),
                    "{}",
                    trace.name
                );
            } else {
                assert_eq!(claim_held_by_the_wait(&batch.model, before), Some(runner));
                assert_eq!(after, before, "{}", trace.name);
            }
        }
        assert!(held.iter().all(|(_, t)| {
            let before = &t.steps[t.steps.len() - 2].1;
            LeaseModel::now(before) + 1 == before.epoch_wait
        }));
        assert!(replica.iter().any(|t| has_step(t, |_, a, _| matches!(
            a,
            Action::ReplicaClock { offset } if *offset != 0
        ))));
    }

    #[test]
    fn the_cover_sample_exercises_every_feature_of_the_whole_cover() {
        let model = LeaseModel::new(Config {
            runners: 1,
            attempts_per_job: 1,
            ..cover_config(&Config::one_job())
        });
        let (model, paths) = state_paths(model, Some(State::representative_keeping_outcomes));
        let whole = cover_of(&model, &paths);
        let features = |traces: &[Generated<LeaseModel>]| {
            let mut all = HashSet::new();
            for t in traces {
                let (action, after) = t.steps.last().expect("a cover trace has a step");
                let before = t
                    .steps
                    .len()
                    .checked_sub(2)
                    .map_or(&t.init, |i| &t.steps[i].1);
                all.extend(transition_features(&model, before, action, after));
            }
            all
        };
        let sample = sample_cover(&model, &paths, 7, 0, "");
        assert_eq!(sample.total, whole.len());
        assert!(sample.selected < sample.total && sample.sampled == 0);
        assert_eq!(features(&sample.traces), features(&whole));
        // Every kept trace is the whole cover's trace of the same name, step for step.
        for t in &sample.traces {
            let same = whole
                .iter()
                .find(|w| w.name == t.name)
                .expect("named alike");
            assert_eq!(same.steps, t.steps);
        }
        // The seeded share: the same seed draws the same traces.
        let a = sample_cover(&model, &paths, 7, 20, "");
        let b = sample_cover(&model, &paths, 7, 20, "");
        assert_eq!(a.sampled, 20);
        let names = |s: &CoverSample| s.traces.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), names(&b));
    }
}
