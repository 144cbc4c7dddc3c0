//! Shrinking a divergent trace to a minimal one: cut it after the divergent step, then drop chunks
//! of steps (halves, quarters, ... single steps) as long as what is left is still a path of the
//! model and still diverges. Every candidate is re-derived through the model, so the expected
//! verdicts of the shrunk trace are the model's own.

use leasewright_model::{Action, LeaseModel, State};
use stateright::Model;

use crate::driver::Driver;
use crate::generate::Generated;
use crate::replay::{replay, Divergence};

/// Re-derives the states of `actions` from `init` through the model. `None` if some action is not
/// enabled where it is taken (a probe, [`crate::probe::applicable`], is taken wherever it
/// applies). A claim the model rejects (`no_queued_job`) is kept as a step that
/// leaves the state unchanged, as the scenarios use it.
pub fn rebuild(
    model: &LeaseModel,
    init: &State,
    actions: &[Action],
) -> Option<Vec<(Action, State)>> {
    let mut state = init.clone();
    let mut steps = Vec::with_capacity(actions.len());
    for action in actions {
        let next = model
            .next_steps(&state)
            .into_iter()
            .find(|(a, _)| a == action)
            .map(|(_, s)| s);
        let next = match next {
            Some(next) => next,
            // A probe: a claim, message or operator action sent where no well-behaved runner or
            // operator would (crate::probe; the scenarios' rejected claims too); the model's
            // verdict decides.
            None if crate::probe::applicable(&state, action) => {
                crate::probe::apply(model, &state, action)?
            }
            None => return None,
        };
        steps.push((action.clone(), next.clone()));
        state = next;
    }
    Some(steps)
}

async fn diverges<D: Driver>(
    model: &LeaseModel,
    driver: &D,
    trace: &Generated<LeaseModel>,
) -> Option<Divergence> {
    match driver.open_trace(model, trace).await {
        Ok(mut session) => replay(model, &mut session, trace).await.err(),
        Err(_) => None,
    }
}

/// The smallest trace this search finds that still diverges, and its divergence. If `trace` does
/// not diverge (a flaky driver), it is returned unchanged with `None`.
pub async fn shrink<D: Driver>(
    model: &LeaseModel,
    driver: &D,
    trace: &Generated<LeaseModel>,
) -> (Generated<LeaseModel>, Option<Divergence>) {
    let Some(mut divergence) = diverges(model, driver, trace).await else {
        return (trace.clone(), None);
    };
    let mut best = trace.clone();
    best.steps.truncate(divergence.step);
    best.name = format!("{}-min", trace.name);
    let mut size = best.steps.len() / 2;
    while size >= 1 {
        let mut start = 0;
        let mut shrunk = false;
        while start < best.steps.len() {
            let actions: Vec<Action> = best
                .steps
                .iter()
                .enumerate()
                .filter(|(i, _)| *i < start || *i >= start + size)
                .map(|(_, (a, _))| a.clone())
                .collect();
            if let Some(steps) = rebuild(model, &best.init, &actions) {
                let candidate = Generated {
                    steps,
                    ..best.clone()
                };
                if let Some(found) = diverges(model, driver, &candidate).await {
                    best = candidate;
                    best.steps.truncate(found.step);
                    divergence = found;
                    shrunk = true;
                    continue;
                }
            }
            start += size;
        }
        if !shrunk {
            size /= 2;
        }
    }
    divergence.trace = best.name.clone();
    (best, Some(divergence))
}
