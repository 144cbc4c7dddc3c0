//! Suite selection: which traces a `conform` run replays (the named scenarios, the transition
//! cover, seeded random walks, the property suite), generated and sharded in one stable order.

use std::sync::Arc;

use leasewright_model::{Config, LeaseModel};

use crate::generate::{random_walks, transition_cover, Generated};
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
            batches.push(Batch {
                model: Arc::new(model),
                traces: vec![trace],
            });
        }
    }
    if selection.wants(Suite::Cover) {
        let cover_model = if selection.cover_full {
            Arc::clone(&model)
        } else {
            Arc::new(LeaseModel::new(cover_config(&model.config)))
        };
        let traces = transition_cover((*cover_model).clone(), true);
        batches.push(Batch {
            model: cover_model,
            traces,
        });
    }
    if selection.wants(Suite::Random) {
        let traces = random_walks(
            model.as_ref(),
            selection.seed,
            selection.steps,
            selection.walk_len,
        );
        batches.push(Batch {
            model: Arc::clone(&model),
            traces,
        });
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

/// The batch and the trace named `name`.
pub fn find<'a>(
    batches: &'a [Batch],
    name: &str,
) -> Option<(&'a Batch, &'a Generated<LeaseModel>)> {
    batches
        .iter()
        .find_map(|b| b.traces.iter().find(|t| t.name == name).map(|t| (b, t)))
}
