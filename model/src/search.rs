//! The shortest counterexample to the model's invariants: a breadth-first search of its own.
//!
//! stateright's BFS checker records a property's discovery again for every violating state it
//! processes in a block, so the path it reports is not the first (shortest) one it found. This
//! search stops at the first violating state in breadth-first order: no path to a violating
//! state is shorter than the one it returns.

use crate::model::LeaseModel;
use crate::properties;
use crate::state::{Action, State};
use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// What a search found.
pub struct Search {
    /// The path from the initial state to the first violating state, if there is one:
    /// each state with the action taken from it (`None` for the last).
    pub counterexample: Option<Vec<(State, Option<Action>)>>,
    /// Unique states visited.
    pub states: usize,
    /// The depth (actions from the initial state) of the last level searched.
    pub depth: usize,
}

fn fingerprint(s: &State) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Searches `model` breadth-first, stopping at the first state where
/// [`properties::every_invariant`] fails (only the model's `focus`, if it has one), or after
/// `max_states` unique states.
pub fn shortest_counterexample(model: &LeaseModel, max_states: usize) -> Search {
    shortest_path_to(model, max_states, |m, s| !properties::every_invariant(m, s))
}

/// Searches `model` breadth-first, stopping at the first state where `target` holds (its path
/// is `counterexample`), or after `max_states` unique states. A witness's reach
/// ([`properties::witness_condition`]) is searched this way.
pub fn shortest_path_to(
    model: &LeaseModel,
    max_states: usize,
    target: impl Fn(&LeaseModel, &State) -> bool,
) -> Search {
    use stateright::Model;
    // Every state reached, with its parent's index and the action from the parent.
    let mut states: Vec<(State, Option<(usize, Action)>)> = vec![(model.init_state(), None)];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    seen.insert(fingerprint(&states[0].0), 0);
    let mut level = vec![0usize];
    let mut depth = 0;
    let mut actions = Vec::new();
    loop {
        for &i in &level {
            if target(model, &states[i].0) {
                return Search {
                    counterexample: Some(path(&states, i)),
                    states: states.len(),
                    depth,
                };
            }
        }
        let mut next = Vec::new();
        for &i in &level {
            actions.clear();
            model.actions(&states[i].0, &mut actions);
            for action in actions.drain(..) {
                let Some(after) = model.next_state(&states[i].0, action.clone()) else {
                    continue;
                };
                if let Entry::Vacant(e) = seen.entry(fingerprint(&after)) {
                    e.insert(states.len());
                    next.push(states.len());
                    states.push((after, Some((i, action))));
                }
            }
        }
        if next.is_empty() || states.len() >= max_states {
            return Search {
                counterexample: None,
                states: states.len(),
                depth,
            };
        }
        level = next;
        depth += 1;
    }
}

fn path(states: &[(State, Option<(usize, Action)>)], last: usize) -> Vec<(State, Option<Action>)> {
    let mut out = vec![(states[last].0.clone(), None)];
    let mut at = last;
    while let Some((parent, action)) = &states[at].1 {
        out.push((states[*parent].0.clone(), Some(action.clone())));
        at = *parent;
    }
    out.reverse();
    out
}
