//! The property suite (proptest): generated paths of the model agree with the implementation,
//! and, against a mutant, the divergence proptest reports is shrunk to a minimal trace that the
//! saved file reproduces.

use std::sync::Arc;

use leasewright_conformance::drivers::pg::PgDriver;
use leasewright_conformance::property::{self, PropertyOptions};
use leasewright_impl::database::TestDatabase;
use leasewright_model::{Config, LeaseModel};

async fn pool() -> (TestDatabase, sqlx::PgPool) {
    let db = TestDatabase::create().await.expect("a test database");
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    (db, pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_paths_agree_with_the_model() {
    let (_db, pool) = pool().await;
    let driver = Arc::new(PgDriver::new(pool).await.expect("migrations"));
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let options = PropertyOptions {
        seed: 11,
        cases: 40,
        ..PropertyOptions::default()
    };
    let outcome = property::run(driver, model, options, |_| {}).await;
    if let Some(failure) = &outcome.failure {
        panic!("{}", failure.divergence.render());
    }
    assert_eq!(outcome.aborted, None);
    assert_eq!(outcome.cases, 40);
    assert_eq!(outcome.junit.len(), 40);
    assert!(outcome.tally.steps >= 40, "{:?}", outcome.tally);
    assert!(outcome.junit.iter().all(|c| c.failure.is_none()));
    assert_eq!(outcome.junit[0].name, "proptest-11-0000");
}

#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use leasewright_conformance::driver::Driver;
    use leasewright_conformance::drivers::pg::conflicting_echo;
    use leasewright_conformance::generate::Generated;
    use leasewright_conformance::minimize::{self, rebuild};
    use leasewright_conformance::replay::{replay, Divergence};
    use leasewright_conformance::traces;
    use leasewright_impl::mutants::Mutant;
    use leasewright_model::{Action, State};
    use stateright::Model;

    async fn diverges(
        driver: &PgDriver,
        model: &LeaseModel,
        trace: &Generated<LeaseModel>,
    ) -> Option<Divergence> {
        let mut session = driver.open(model, &trace.name).await.expect("a namespace");
        replay(model, &mut session, trace).await.err()
    }

    /// `steps` without step `i`: the rest if it is still a path of the model, else the rest without
    /// every later step that is no longer enabled.
    fn without(
        model: &LeaseModel,
        init: &State,
        steps: &[(Action, State)],
        i: usize,
    ) -> Vec<(Action, State)> {
        let actions: Vec<Action> = steps
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (a, _))| a.clone())
            .collect();
        if let Some(path) = rebuild(model, init, &actions) {
            return path;
        }
        let mut state = init.clone();
        let mut path = Vec::new();
        for action in actions {
            if let Some((_, next)) = model
                .next_steps(&state)
                .into_iter()
                .find(|(a, _)| *a == action)
            {
                path.push((action, next.clone()));
                state = next;
            }
        }
        path
    }

    /// Proptest finds `mutant`, shrinks the divergence to a trace from which no step can be
    /// removed (alone if what is left is a path of the model, else with the later steps it
    /// enabled) without losing the divergence, and the saved file reproduces it. Returns the
    /// minimal trace's length.
    async fn shrinks_to_a_minimal_trace(mutant: Mutant) -> (usize, String) {
        let (_db, pool) = pool().await;
        let driver = Arc::new(
            PgDriver::new(pool)
                .await
                .expect("migrations")
                .with_mutant(mutant),
        );
        let model = Arc::new(LeaseModel::new(Config::one_job()));
        let options = PropertyOptions {
            seed: 1,
            ..PropertyOptions::default()
        };
        let outcome = property::run(Arc::clone(&driver), Arc::clone(&model), options, |_| {}).await;
        let failure = outcome
            .failure
            .unwrap_or_else(|| panic!("{mutant:?}: proptest found no divergence"));
        let minimal = &failure.minimal;
        eprintln!(
            "{mutant:?}: shrunk from {} to {} steps in {} replays\n{}",
            failure.original.steps.len(),
            minimal.steps.len(),
            failure.shrink_replays,
            failure.divergence.render()
        );
        assert!(minimal.name.ends_with("-min"), "{}", minimal.name);
        assert!(minimal.steps.len() < failure.original.steps.len());
        // It ends at its divergent step.
        assert_eq!(failure.divergence.step, minimal.steps.len());
        // A path of the model: the model rebuilds exactly its states.
        let actions: Vec<Action> = minimal.steps.iter().map(|(a, _)| a.clone()).collect();
        assert_eq!(
            rebuild(&model, &minimal.init, &actions).as_ref(),
            Some(&minimal.steps)
        );
        // Minimal: removing any one step (with the later steps it enabled, if the rest is not a
        // path without them) leaves a trace that agrees.
        for i in 0..actions.len() {
            let steps = without(&model, &minimal.init, &minimal.steps, i);
            if steps.is_empty() {
                continue;
            }
            let candidate = Generated {
                name: format!("{}-without-{i}", minimal.name),
                steps,
                ..minimal.clone()
            };
            if let Some(d) = diverges(&driver, &model, &candidate).await {
                panic!(
                    "{mutant:?}: step {} of the shrunk trace can be removed:\n{}",
                    i + 1,
                    d.render()
                );
            }
        }
        // The saved file reproduces it: what `conform --replay FILE` reads and replays.
        let (read_model, read) =
            traces::from_itf(&traces::to_itf(&model, minimal)).expect("reads back");
        let again = diverges(&driver, &read_model, &read)
            .await
            .expect("the saved trace diverges");
        assert_eq!(again.step, failure.divergence.step);
        assert_eq!(again.differences, failure.divergence.differences);
        // No longer than what our own ddmin makes of the same generated trace.
        let (ddmin, _) = minimize::shrink(&model, driver.as_ref(), &failure.original).await;
        eprintln!(
            "{mutant:?}: ddmin shrinks the same trace to {} steps",
            ddmin.steps.len()
        );
        (minimal.steps.len(), minimal.name.clone())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_conflicting_result_that_overwrites_shrinks_to_a_minimal_trace() {
        // The shortest there is: a claim, two different results sent, both delivered; or, where
        // the trace's results are echoed by a conflicting result through the batch route
        // (`pg::conflicting_echo`, by the trace's name), a claim and one result sent and delivered.
        let (steps, name) = shrinks_to_a_minimal_trace(Mutant::ConflictOverwrites).await;
        let shortest = if conflicting_echo(&name) { 3 } else { 5 };
        assert_eq!(steps, shortest, "{name}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_duplicate_not_acknowledged_shrinks_to_a_minimal_trace() {
        // Minimal as above, not necessarily the shortest: shrinking only removes steps.
        shrinks_to_a_minimal_trace(Mutant::DuplicateNotAcknowledged).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn expiry_that_requeues_shrinks_to_a_minimal_trace() {
        // The shortest there is: a claim, the lease's ticks, the sweep.
        let lease_ttl = usize::from(Config::one_job().lease_ttl);
        assert_eq!(
            shrinks_to_a_minimal_trace(Mutant::ExpiryRequeues).await.0,
            lease_ttl + 2
        );
    }
}
