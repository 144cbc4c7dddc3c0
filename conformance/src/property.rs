//! Property-based traces (proptest): random paths of the model, each replayed against a driver in
//! a fresh namespace; the first divergent one is shrunk by proptest to a minimal trace.
//!
//! The model is the reference state machine. A generated value is a path of the model: from the
//! initial state, at each step one of the actions the model offers (`next_steps`) is chosen, so
//! every step is enabled and the model gives every expected verdict. The property is "the
//! implementation agrees with the model at every step" ([`replay`]).
//!
//! Shrinking is proptest's runner driving [`PathTree`], a `ValueTree` over model paths (what
//! `proptest-state-machine` does for its reference state machines, with the model as a value
//! rather than a type: that crate's `ReferenceStateMachine` has no `self`, so the model's
//! configuration would have to live in a global). After each failing replay the tree
//!
//! 1. cuts the trace after the divergent step (the replay says which step it was);
//! 2. proposes removing one step, from the last towards the first, keeping only candidates that
//!    are still paths of the model (every remaining action enabled where it is taken; the states
//!    are recomputed by the model, so expected verdicts stay the model's); when removing a step
//!    alone breaks the path, removing it together with every later step it disabled;
//! 3. keeps a candidate that still diverges and goes on from there; passes repeat until one full
//!    pass removes nothing.
//!
//! The result is minimal in the sense the tests check: no single step can be removed so that what
//! is left is a path of the model that still diverges.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasewright_model::{Action, LeaseModel, State};
use proptest::strategy::{NewTree, Strategy, ValueTree};
use proptest::test_runner::{
    Config as RunnerConfig, RngAlgorithm, RngSeed, TestCaseError, TestError, TestRunner,
};
use stateright::Model;

use crate::driver::Driver;
use crate::generate::{walk_by, Generated, SplitMix64};
use crate::junit;
use crate::minimize::rebuild;
use crate::replay::{replay_fresh, Divergence, Tally};

/// The generator's name, in trace names (`proptest-<seed>-<case>`), ITF files and reports.
pub const GENERATOR: &str = "proptest";

/// How to run the property suite.
#[derive(Clone, Debug)]
pub struct PropertyOptions {
    /// Seeds proptest's random number generator: the same seed generates the same cases.
    pub seed: u64,
    /// Cases (traces) to generate and replay, unless one diverges first.
    pub cases: u32,
    /// The longest trace generated; each case's length is drawn from 1 to this.
    pub max_len: usize,
    /// Replays the shrinker may spend on the divergent trace.
    pub max_shrink_iters: u32,
}

impl Default for PropertyOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            cases: 256,
            max_len: 40,
            max_shrink_iters: 4096,
        }
    }
}

/// The first divergent case, and what shrinking made of it.
#[derive(Clone, Debug)]
pub struct PropertyFailure {
    /// The case as generated.
    pub original: Generated<LeaseModel>,
    /// Its divergence.
    pub original_divergence: Divergence,
    /// The minimal trace proptest's shrinking found (named `<case>-min`).
    pub minimal: Generated<LeaseModel>,
    /// The minimal trace's divergence (replayed once more after shrinking, so it reproduces).
    pub divergence: Divergence,
    /// Replays spent shrinking.
    pub shrink_replays: u64,
}

/// What a run of the property suite found.
#[derive(Debug, Default)]
pub struct PropertyOutcome {
    /// Generated cases replayed (the divergent one included; shrink candidates not).
    pub cases: u64,
    /// What the agreeing cases exercised.
    pub tally: Tally,
    /// One JUnit case per generated case.
    pub junit: Vec<junit::Case>,
    /// The first divergence, shrunk.
    pub failure: Option<PropertyFailure>,
    /// Proptest gave up for a reason that is not a divergence (it should not happen).
    pub aborted: Option<String>,
    /// Wall time, shrinking included.
    pub elapsed: Duration,
}

/// The strategy: paths of `model` from its initial state, of 1 to `max_len` steps.
#[derive(Clone, Debug)]
pub struct Paths {
    model: Arc<LeaseModel>,
    seed: u64,
    max_len: usize,
    next_case: Arc<AtomicU64>,
    diverged_at: Arc<AtomicUsize>,
}

impl Paths {
    /// Paths of `model` of at most `max_len` steps, named after `seed` and their case number.
    /// `diverged_at` is where the property tells the shrinker at which step (1-based) the last
    /// failing replay diverged.
    pub fn new(
        model: Arc<LeaseModel>,
        seed: u64,
        max_len: usize,
        diverged_at: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            model,
            seed,
            max_len: max_len.max(1),
            next_case: Arc::new(AtomicU64::new(0)),
            diverged_at,
        }
    }
}

impl Strategy for Paths {
    type Tree = PathTree;
    type Value = Generated<LeaseModel>;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        // Every choice of the walk comes from proptest's seeded generator, through one u64.
        let walk_seed = proptest::num::u64::ANY.new_tree(runner)?.current();
        let mut rng = SplitMix64::new(walk_seed);
        let len = 1 + rng.below(self.max_len);
        let init = self.model.init_state();
        let steps = walk_by(self.model.as_ref(), &init, len, |n| rng.below(n));
        let case = self.next_case.fetch_add(1, Ordering::Relaxed);
        Ok(PathTree {
            model: Arc::clone(&self.model),
            name: format!("{GENERATOR}-{}-{case:04}", self.seed),
            seed: self.seed,
            init,
            failing: steps.clone(),
            current: steps,
            shrinking: false,
            cursor: 0,
            removed_in_pass: false,
            diverged_at: Arc::clone(&self.diverged_at),
        })
    }
}

/// One generated path and its shrinking (see the module's documentation).
#[derive(Clone, Debug)]
pub struct PathTree {
    model: Arc<LeaseModel>,
    name: String,
    seed: u64,
    init: State,
    /// The shortest trace known to diverge (before shrinking: the generated one).
    failing: Vec<(Action, State)>,
    /// The value under test: `failing`, or a candidate shorter than it.
    current: Vec<(Action, State)>,
    shrinking: bool,
    /// Positions below `cursor` are still to be tried in this pass.
    cursor: usize,
    removed_in_pass: bool,
    diverged_at: Arc<AtomicUsize>,
}

impl PathTree {
    /// Moves `current` to the next candidate of the pass; `false` (and `current = failing`) when
    /// a whole pass removed nothing.
    fn next_candidate(&mut self) -> bool {
        loop {
            if self.cursor == 0 {
                if !self.removed_in_pass || self.failing.len() < 2 {
                    self.current = self.failing.clone();
                    return false;
                }
                self.removed_in_pass = false;
                self.cursor = self.failing.len();
            }
            self.cursor -= 1;
            let i = self.cursor;
            let without: Vec<Action> = self
                .failing
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (a, _))| a.clone())
                .collect();
            let candidate = rebuild(&self.model, &self.init, &without)
                .unwrap_or_else(|| self.without_cascade(i));
            if !candidate.is_empty() && candidate.len() < self.failing.len() {
                self.current = candidate;
                return true;
            }
        }
    }

    /// `failing` without step `i` and without every later step that is no longer enabled.
    fn without_cascade(&self, i: usize) -> Vec<(Action, State)> {
        let mut state = if i == 0 {
            self.init.clone()
        } else {
            self.failing[i - 1].1.clone()
        };
        let mut steps: Vec<(Action, State)> = self.failing[..i].to_vec();
        for (action, _) in &self.failing[i + 1..] {
            if let Some((_, next)) = self
                .model
                .next_steps(&state)
                .into_iter()
                .find(|(a, _)| a == action)
            {
                steps.push((action.clone(), next.clone()));
                state = next;
            }
        }
        steps
    }

    /// The divergent step the property reported for `current`, if it is short of the end.
    fn cut_after_divergence(&mut self) {
        let at = self.diverged_at.load(Ordering::Relaxed);
        if at > 0 && at < self.failing.len() {
            self.failing.truncate(at);
        }
    }
}

impl ValueTree for PathTree {
    type Value = Generated<LeaseModel>;

    fn current(&self) -> Generated<LeaseModel> {
        Generated {
            name: if self.shrinking {
                format!("{}-min", self.name)
            } else {
                self.name.clone()
            },
            generator: GENERATOR,
            seed: Some(self.seed),
            init: self.init.clone(),
            steps: self.current.clone(),
        }
    }

    /// Called after `current` failed: keep it, cut it after its divergent step, propose the next
    /// removal.
    fn simplify(&mut self) -> bool {
        if self.shrinking {
            self.removed_in_pass = true;
        } else {
            self.shrinking = true;
            self.removed_in_pass = false;
            self.cursor = usize::MAX;
        }
        self.failing = self.current.clone();
        self.cut_after_divergence();
        self.cursor = self.cursor.min(self.failing.len());
        self.next_candidate()
    }

    /// Called after `current` passed: back to the last failing trace, propose the next removal.
    fn complicate(&mut self) -> bool {
        self.next_candidate()
    }
}

/// Runs the property suite: `options.cases` generated paths of `model`, each replayed on `driver`
/// in a fresh namespace, until one diverges; that one is shrunk by proptest and replayed once
/// more. `progress` is called after each generated case with the number done.
///
/// Proptest's runner is synchronous: it runs on a blocking thread and waits for each replay on
/// the current tokio runtime.
pub async fn run<D>(
    driver: Arc<D>,
    model: Arc<LeaseModel>,
    options: PropertyOptions,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> PropertyOutcome
where
    D: Driver + 'static,
{
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        run_blocking(&handle, driver.as_ref(), &model, &options, progress)
    })
    .await
    .expect("the property suite panicked")
}

/// What the property closure records while proptest runs it.
#[derive(Default)]
struct Record {
    cases: u64,
    tally: Tally,
    junit: Vec<junit::Case>,
    first: Option<(Generated<LeaseModel>, Divergence)>,
    shrink_replays: u64,
}

fn run_blocking<D: Driver>(
    handle: &tokio::runtime::Handle,
    driver: &D,
    model: &Arc<LeaseModel>,
    options: &PropertyOptions,
    progress: impl Fn(u64),
) -> PropertyOutcome {
    let started = Instant::now();
    let diverged_at = Arc::new(AtomicUsize::new(0));
    let strategy = Paths::new(
        Arc::clone(model),
        options.seed,
        options.max_len,
        Arc::clone(&diverged_at),
    );
    let config = RunnerConfig {
        cases: options.cases,
        max_shrink_iters: options.max_shrink_iters,
        max_shrink_time: 0,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(options.seed),
        verbose: 0,
        ..RunnerConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let record = Mutex::new(Record::default());
    let replay_one = |trace: &Generated<LeaseModel>| -> Result<Tally, Divergence> {
        handle.block_on(replay_fresh(driver, model, trace))
    };
    let result = runner.run(&strategy, |trace| {
        let t0 = Instant::now();
        let result = replay_one(&trace);
        let mut record = record.lock().unwrap_or_else(PoisonError::into_inner);
        let shrinking = record.first.is_some();
        if shrinking {
            record.shrink_replays += 1;
        } else {
            record.cases += 1;
            progress(record.cases);
            record.junit.push(junit::Case {
                name: trace.name.clone(),
                suite: GENERATOR.to_string(),
                seconds: t0.elapsed().as_secs_f64(),
                failure: result.as_ref().err().map(Divergence::render),
            });
        }
        match result {
            Ok(tally) => {
                if !shrinking {
                    record.tally.absorb(&tally);
                }
                Ok(())
            }
            Err(divergence) => {
                diverged_at.store(divergence.step, Ordering::Relaxed);
                let reason = divergence.render();
                if !shrinking {
                    record.first = Some((trace, divergence));
                }
                Err(TestCaseError::fail(reason))
            }
        }
    });
    let record = record.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut outcome = PropertyOutcome {
        cases: record.cases,
        tally: record.tally,
        junit: record.junit,
        ..PropertyOutcome::default()
    };
    match result {
        Ok(()) => {}
        Err(TestError::Fail(_, minimal)) => {
            let (original, original_divergence) = record
                .first
                .expect("a failure was recorded before proptest reported it");
            // The minimal trace once more, on its own: its report is what the replay command
            // reproduces.
            match replay_one(&minimal) {
                Err(divergence) => {
                    outcome.failure = Some(PropertyFailure {
                        original,
                        original_divergence,
                        minimal,
                        divergence,
                        shrink_replays: record.shrink_replays,
                    });
                }
                Ok(_) => {
                    // A driver that does not repeat itself: report the divergence as found.
                    outcome.failure = Some(PropertyFailure {
                        minimal: original.clone(),
                        divergence: original_divergence.clone(),
                        original,
                        original_divergence,
                        shrink_replays: record.shrink_replays,
                    });
                }
            }
        }
        Err(TestError::Abort(reason)) => outcome.aborted = Some(reason.to_string()),
    }
    outcome.elapsed = started.elapsed();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasewright_model::Config;

    fn tree(model: &Arc<LeaseModel>, seed: u64, len: usize) -> PathTree {
        let mut runner = TestRunner::new(RunnerConfig {
            rng_seed: RngSeed::Fixed(seed),
            failure_persistence: None,
            ..RunnerConfig::default()
        });
        let strategy = Paths::new(Arc::clone(model), seed, len, Arc::default());
        strategy.new_tree(&mut runner).expect("a tree")
    }

    fn actions(trace: &Generated<LeaseModel>) -> Vec<Action> {
        trace.steps.iter().map(|(a, _)| a.clone()).collect()
    }

    #[test]
    fn the_same_seed_generates_the_same_paths_of_the_model() {
        let model = Arc::new(LeaseModel::new(Config::one_job()));
        let a = tree(&model, 7, 30).current();
        let b = tree(&model, 7, 30).current();
        assert_eq!(actions(&a), actions(&b));
        assert!(!a.steps.is_empty() && a.steps.len() <= 30);
        // A path of the model: the model rebuilds exactly these states.
        let rebuilt = rebuild(&model, &a.init, &actions(&a)).expect("a path of the model");
        assert_eq!(rebuilt, a.steps);
        assert_eq!(a.name, "proptest-7-0000");
    }

    #[test]
    fn every_candidate_is_a_shorter_path_of_the_model() {
        let model = Arc::new(LeaseModel::new(Config::one_job()));
        let mut tree = (0..)
            .map(|seed| tree(&model, seed, 40))
            .find(|t| t.current().steps.len() >= 5)
            .expect("some seed generates five steps");
        let generated = tree.current().steps.len();
        // Pretend every candidate passes: the tree proposes each removal once, then gives up
        // and holds the trace that last failed.
        let mut proposed = 0;
        let mut more = tree.simplify();
        while more {
            proposed += 1;
            let candidate = tree.current();
            assert!(candidate.steps.len() < generated);
            assert!(candidate.name.ends_with("-min"));
            assert_eq!(
                rebuild(&model, &candidate.init, &actions(&candidate)).as_ref(),
                Some(&candidate.steps),
                "a candidate is a path of the model"
            );
            more = tree.complicate();
        }
        assert!(proposed >= 1 && proposed <= generated);
        assert_eq!(tree.current().steps.len(), generated);
    }

    #[test]
    fn a_failing_candidate_is_kept_and_cut_after_its_divergent_step() {
        let model = Arc::new(LeaseModel::new(Config::one_job()));
        let diverged_at = Arc::new(AtomicUsize::new(0));
        let mut runner = TestRunner::new(RunnerConfig {
            rng_seed: RngSeed::Fixed(5),
            failure_persistence: None,
            ..RunnerConfig::default()
        });
        let mut tree = Paths::new(Arc::clone(&model), 5, 40, Arc::clone(&diverged_at))
            .new_tree(&mut runner)
            .expect("a tree");
        let generated = tree.current().steps.len();
        assert!(generated >= 3, "seed 5 generates {generated} steps");
        // The generated trace diverges at its second step: the tree cuts the rest.
        diverged_at.store(2, Ordering::Relaxed);
        assert!(tree.simplify());
        assert!(tree.current().steps.len() < 2);
        // Every candidate passes: the two-step prefix is what is left.
        while tree.complicate() {}
        assert_eq!(tree.current().steps, tree.failing);
        assert_eq!(tree.current().steps.len(), 2);
    }
}
