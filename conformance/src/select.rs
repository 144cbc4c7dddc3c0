//! Suite selection: which traces a `conform` run replays (the named scenarios, the transition
//! cover, seeded random walks, the property suite), generated and sharded in one stable order.

use std::sync::Arc;

use leasewright_model::{Config, LeaseModel, State, TargetKind};

use crate::coverage::Coverage;
use crate::generate::{
    cover_of, random_walks, state_paths, transition_cover, Generated, SplitMix64,
};
use crate::probe::{self, Path};
use crate::property::PropertyOptions;
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

/// A named configuration's model and its random walks.
type Walks = (&'static str, Arc<LeaseModel>, Vec<Generated<LeaseModel>>);

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
/// leases. Its cover is 16,752 traces (208,046 steps), which replays in minutes; the cover of the
/// model's default configuration is 110,489 traces (1.9 million steps). The random walks and the
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
        let traces = cover_of(cover_model.as_ref(), paths);
        batches.push(Batch::new(Arc::clone(&cover_model), traces));
        // Class 4: a seeded sample of the cover of every other target kind, compared at every
        // step (a sample's prefixes are not traces of their own).
        for kind in other_targets(model.config.target) {
            let config = Config {
                target: kind,
                ..cover_model.config.clone()
            };
            let other = Arc::new(LeaseModel::new(config));
            let mut all = transition_cover(
                (*other).clone(),
                Some(State::representative_keeping_outcomes),
            );
            let total = all.len();
            let mut rng = SplitMix64::new(selection.seed ^ 0xC0E7);
            let mut traces = Vec::new();
            while traces.len() < OTHER_TARGET_COVER_SAMPLE.min(total) {
                let mut t = all.swap_remove(rng.below(all.len()));
                t.name = format!("cover-{kind}-{}", t.name.trim_start_matches("cover-"));
                t.generator = "cover-sample";
                traces.push(t);
            }
            traces.sort_by(|a, b| a.name.cmp(&b.name));
            batches.push(Batch {
                model: other,
                note: Some(format!(
                    "cover-{kind}: {} of the {total} cover traces of the {kind} target, sampled \
                     with seed {}",
                    traces.len(),
                    selection.seed ^ 0xC0E7
                )),
                traces,
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
    let mut shared_configs = if model.config.shared_slot {
        Vec::new()
    } else {
        shared_slot_configs(&model.config).to_vec()
    };
    // Class 7: the side effects of R8, walked and probed as these configurations are.
    if !model.config.side_effects {
        shared_configs.push(("side-effects", side_effect_config(&model.config)));
    }
    let shared_steps = selection.steps * SHARED_SLOT_SHARE / 100;
    let main_steps = selection.steps
        - two_job_steps
        - 2 * other_target_steps
        - shared_configs.len() * shared_steps;
    // Issue 13: walks of each shared-slot configuration (replayed by the random suite, their
    // states probed by the probe suite).
    let shared_walks: Vec<Walks> = shared_configs
        .into_iter()
        .map(|(name, config)| {
            let m = Arc::new(LeaseModel::new(config));
            let walks = renamed(
                random_walks(
                    m.as_ref(),
                    selection.seed,
                    shared_steps.max(TWO_JOB_PROBE_STATES),
                    selection.walk_len,
                ),
                &format!("random-{name}"),
            );
            (name, m, walks)
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
        for (name, m, walks) in &shared_walks {
            batches.push(probe_batch(
                Arc::clone(m),
                &walk_prefixes(walks, TWO_JOB_PROBE_STATES),
                selection.seed,
                &format!("probe-{name}"),
                &if *name == "side-effects" {
                    format!("the {name} walks (issue 18 class 7: R8)")
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
        for (name, m, _) in &shared_walks {
            // Exactly this share's steps (`--steps` is the walks' steps in all); the same seed
            // walks the same paths as the probes' longer walks of this configuration.
            let walks = random_walks(m.as_ref(), selection.seed, shared_steps, selection.walk_len);
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
