//! Trace generators over any stateright [`Model`].
//!
//! - [`transition_cover`]: exactly one trace per (reachable state, enabled action), built from a
//!   `PathRecorder` visitor (one path per unique state) plus `next_steps` on each recorded state.
//! - [`random_walks`]: seeded walks over `next_steps`, reproducible from the printed seed. This is
//!   deliberately not `spawn_simulation`, whose RNG is not stable across stateright versions.

use std::hash::Hash;

use stateright::{Checker, Model, PathRecorder};

/// One generated trace: the actions taken from the model's first initial state, with the state each
/// action leads to.
#[derive(Clone, Debug)]
pub struct Generated<M: Model> {
    /// Human-readable identity, unique within a suite (for example `cover-000123`).
    pub name: String,
    /// `cover`, `random` or `scenario`.
    pub generator: &'static str,
    /// The seed that reproduces a random walk.
    pub seed: Option<u64>,
    /// The initial state.
    pub init: M::State,
    /// Each action and the state after it.
    pub steps: Vec<(M::Action, M::State)>,
}

/// A small, stable, seedable generator (splitmix64). Its output for a seed never changes, so a seed
/// printed by one run reproduces the same walk in any later run.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniformly chosen index below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        // Lemire's multiply-shift: unbiased enough for n far below 2^32, and stable.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// Exactly one trace per (reachable state, enabled action) of `model`: for every unique state the
/// checker visits (one recorded path per state, deduplicated up to the model's symmetry), one trace
/// per enabled action from it. Traces are sorted (shortest first, then by their action indices) so
/// that the list and `--shard I/N` are the same in every run.
pub fn transition_cover<M>(model: M, symmetry: Option<Representative<M>>) -> Vec<Generated<M>>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Hash + Eq + Send + Sync,
    M::Action: Clone + Hash + Eq + Send + Sync,
{
    let (model, paths) = state_paths(model, symmetry);
    cover_of(&model, &paths)
}

/// The transition cover of `paths` ([`state_paths`] of `model`): one trace per recorded state and
/// action enabled there.
#[allow(clippy::type_complexity)]
pub fn cover_of<M>(
    model: &M,
    paths: &[(String, M::State, Vec<(M::Action, M::State)>)],
) -> Vec<Generated<M>>
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    cover_steps(model, paths)
        .into_iter()
        .enumerate()
        .map(|(i, step)| cover_trace(paths, i, step))
        .collect()
}

/// One transition of a cover: the recorded path it extends, and the action taken at its end with
/// the state it leads to.
#[derive(Clone, Debug)]
pub struct CoverStep<M: Model> {
    /// The index of the path in [`state_paths`]' list.
    pub path: usize,
    /// The action, and the state after it.
    pub step: (M::Action, M::State),
}

/// Every transition of the cover of `paths`, in the cover's stable order (shortest trace first,
/// then by the path's encoding and the action's index): position `i` is the trace
/// `cover-{i:06}`. Nothing is cloned but the last step, so a sample of the cover costs only the
/// traces it keeps ([`cover_trace`]).
#[allow(clippy::type_complexity)]
pub fn cover_steps<M>(
    model: &M,
    paths: &[(String, M::State, Vec<(M::Action, M::State)>)],
) -> Vec<CoverStep<M>>
where
    M: Model,
    M::State: Clone,
{
    let mut keyed: Vec<(usize, &str, usize, CoverStep<M>)> = Vec::new();
    for (p, (encoded, init, prefix)) in paths.iter().enumerate() {
        let last = prefix.last().map_or(init, |(_, s)| s);
        for (index, step) in model.next_steps(last).into_iter().enumerate() {
            keyed.push((
                prefix.len() + 1,
                encoded,
                index,
                CoverStep { path: p, step },
            ));
        }
    }
    // The order of the encodings followed by `/index`, as the trace names were always sorted.
    keyed.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| a.2.to_string().cmp(&b.2.to_string()))
    });
    keyed.into_iter().map(|(_, _, _, step)| step).collect()
}

/// The cover trace `cover-{position:06}` of `step` (of [`cover_steps`] of `paths`).
#[allow(clippy::type_complexity)]
pub fn cover_trace<M>(
    paths: &[(String, M::State, Vec<(M::Action, M::State)>)],
    position: usize,
    step: CoverStep<M>,
) -> Generated<M>
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    let (_, init, prefix) = &paths[step.path];
    let mut steps = Vec::with_capacity(prefix.len() + 1);
    steps.extend(prefix.iter().cloned());
    steps.push(step.step);
    Generated {
        name: format!("cover-{position:06}"),
        generator: "cover",
        seed: None,
        init: init.clone(),
        steps,
    }
}

/// A symmetry reduction: the representative of a state. For the leasewright model,
/// `State::representative_keeping_outcomes` (runner and job renamings, no passed/failed exchange:
/// an implementation under test may treat the two outcomes differently).
pub type Representative<M> = fn(&<M as Model>::State) -> <M as Model>::State;

/// One recorded path per unique state the checker visits (up to `symmetry`, if any): its stable
/// encoding, the initial state and the steps to the state, sorted shortest first, then by
/// encoding. Returns the model back.
#[allow(clippy::type_complexity)]
pub fn state_paths<M>(
    model: M,
    symmetry: Option<Representative<M>>,
) -> (M, Vec<(String, M::State, Vec<(M::Action, M::State)>)>)
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Hash + Eq + Send + Sync,
    M::Action: Clone + Hash + Eq + Send + Sync,
{
    let (recorder, accessor) = PathRecorder::new_with_accessor();
    let checker = model.checker().visitor(recorder);
    let checker = match symmetry {
        Some(representative) => checker.symmetry_fn(representative).spawn_dfs().join(),
        None => checker.spawn_dfs().join(),
    };
    let model = checker.model().clone();
    let mut paths = Vec::new();
    for path in accessor() {
        let encoded = path.encode(&model);
        let vec = path.into_vec();
        let init = vec[0].0.clone();
        let mut prefix: Vec<(M::Action, M::State)> = Vec::with_capacity(vec.len());
        for window in vec.windows(2) {
            let action = window[0]
                .1
                .clone()
                .expect("every state but the last has an action");
            prefix.push((action, window[1].0.clone()));
        }
        paths.push((encoded, init, prefix));
    }
    paths.sort_by(|a, b| (a.2.len(), &a.0).cmp(&(b.2.len(), &b.0)));
    (model, paths)
}

/// Seeded random walks of at most `walk_len` steps each, until `total_steps` steps are generated.
/// Walk `k` uses the seed `seed + k`, so any single walk can be regenerated on its own. A walk ends
/// early when nothing is enabled.
pub fn random_walks<M>(
    model: &M,
    seed: u64,
    total_steps: usize,
    walk_len: usize,
) -> Vec<Generated<M>>
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    let mut walks = Vec::new();
    let mut generated = 0usize;
    let mut k = 0u64;
    while generated < total_steps {
        let walk_seed = seed.wrapping_add(k);
        let walk = random_walk(model, walk_seed, walk_len.min(total_steps - generated));
        k += 1;
        if walk.steps.is_empty() {
            break;
        }
        generated += walk.steps.len();
        walks.push(walk);
    }
    walks
}

/// One seeded random walk of at most `len` steps.
pub fn random_walk<M>(model: &M, seed: u64, len: usize) -> Generated<M>
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    let mut rng = SplitMix64::new(seed);
    let inits = model.init_states();
    let init = inits[rng.below(inits.len())].clone();
    let walk = walk_by(model, &init, len, |n| rng.below(n));
    Generated {
        name: format!("random-{seed}"),
        generator: "random",
        seed: Some(seed),
        init,
        steps: walk,
    }
}

/// A walk from `init` where `choose(n)` picks one of the `n` enabled steps. Used by the seeded
/// walker and by the property-based generator, whose choices proptest shrinks.
pub fn walk_by<M>(
    model: &M,
    init: &M::State,
    len: usize,
    mut choose: impl FnMut(usize) -> usize,
) -> Vec<(M::Action, M::State)>
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    let mut state = init.clone();
    let mut steps = Vec::with_capacity(len);
    for _ in 0..len {
        let mut next = model.next_steps(&state);
        if next.is_empty() {
            break;
        }
        let pick = choose(next.len()) % next.len();
        let (action, after) = next.swap_remove(pick);
        state = after.clone();
        steps.push((action, after));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn splitmix64_gives_the_same_sequence_for_the_same_seed() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(42);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::new(42);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        // The published first output of splitmix64 for seed 0, so the sequence is pinned.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SplitMix64::new(7);
        for n in 1..50 {
            assert!(r.below(n) < n);
        }
    }
}
