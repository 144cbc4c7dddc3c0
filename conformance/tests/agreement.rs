//! The model and the PostgreSQL implementation agree, step by step.

use std::sync::Arc;

use leasewright_conformance::driver::Driver;
use leasewright_conformance::drivers::pg::PgDriver;
use leasewright_conformance::generate::random_walks;
use leasewright_conformance::replay::replay;
use leasewright_conformance::scenarios;
use leasewright_conformance::suite::{self, RunOptions};
use leasewright_impl::database::TestDatabase;
use leasewright_model::{Config, LeaseModel};

async fn driver() -> (TestDatabase, Arc<PgDriver>) {
    let db = TestDatabase::create().await.expect("a test database");
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    (db, Arc::new(PgDriver::new(pool).await.expect("migrations")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_named_scenarios_agree_with_the_model() {
    let (_db, driver) = driver().await;
    for (model, trace) in scenarios::all().expect("scenarios") {
        let mut session = driver.open(&model, &trace.name).await.expect("a namespace");
        if let Err(divergence) = replay(&model, &mut session, &trace).await {
            panic!("{}", divergence.render());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_walks_agree_with_the_model() {
    let (_db, driver) = driver().await;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let traces = random_walks(model.as_ref(), 1, 600, 30);
    let outcome = suite::run(
        driver,
        model,
        traces,
        &RunOptions {
            parallel: 4,
            stop_at_first: false,
        },
        |_| {},
    )
    .await;
    if let Some(first) = outcome.divergences.first() {
        panic!(
            "{} divergences; the first:\n{}",
            outcome.divergences.len(),
            first.render()
        );
    }
    assert!(
        outcome.tally.steps >= 600,
        "steps replayed: {}",
        outcome.tally.steps
    );
}

/// Batch claims (K = 2, 3) agree with the model: seeded random walks of the default suite's two
/// batch configurations, and the trace where a batch walks past a job waiting on a busy slot to
/// the two jobs after it (runner 0 claims job 0 of slot 0; runner 1's batch of two then takes
/// jobs 2 and 3, not job 1): the bug class of issue 28 item 4 (a batch counting the wrong set
/// when it picks past jobs waiting on busy slots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_claims_agree_with_the_model() {
    use leasewright_conformance::generate::Generated;
    use leasewright_conformance::select::batch_claim_configs;
    use leasewright_model::Action;
    use stateright::Model;
    let (_db, driver) = driver().await;
    let mut batch = leasewright_conformance::replay::BatchClaims::default();
    for (name, config) in batch_claim_configs(&Config::one_job()) {
        let model = Arc::new(LeaseModel::new(config));
        let mut traces = random_walks(model.as_ref(), 7, 400, 30);
        if name == "batch-claims" {
            let init = model.init_state();
            let mut steps = Vec::new();
            let mut s = init.clone();
            for action in [
                Action::Claim { runner: 0 },
                Action::ClaimBatch {
                    runner: 1,
                    limit: 2,
                },
            ] {
                s = model.next_state(&s, action.clone()).expect("enabled");
                steps.push((action, s.clone()));
            }
            let taken: Vec<u8> = s.attempts[1..].iter().map(|a| a.job).collect();
            assert_eq!(taken, vec![2, 3], "the model walks past job 1");
            traces.push(Generated {
                name: "batch-walks-past-a-busy-slot".into(),
                generator: "scenario",
                seed: None,
                init,
                steps,
            });
        }
        let outcome = suite::run(
            Arc::clone(&driver),
            model,
            traces,
            &RunOptions {
                parallel: 4,
                stop_at_first: false,
            },
            |_| {},
        )
        .await;
        if let Some(first) = outcome.divergences.first() {
            panic!(
                "{name}: {} divergences; the first:\n{}",
                outcome.divergences.len(),
                first.render()
            );
        }
        let b = outcome.tally.batch_claims;
        batch.replayed += b.replayed;
        batch.k_above_1 += b.k_above_1;
        batch.took_several += b.took_several;
        batch.fewer_than_k += b.fewer_than_k;
        batch.walked_past_busy_slot += b.walked_past_busy_slot;
    }
    assert!(
        batch.k_above_1 > 0
            && batch.took_several > 0
            && batch.fewer_than_k > 0
            && batch.walked_past_busy_slot > 0,
        "{}",
        batch.describe()
    );
}

/// Result batches carrying items for several jobs (issue 28): two-job random walks send, beside
/// each result, another job's earlier result in the same batch, and the implementation answers and
/// records every item as the model does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_batches_with_items_for_several_jobs_agree_with_the_model() {
    let (_db, driver) = driver().await;
    let model = Arc::new(LeaseModel::new(Config {
        jobs: 2,
        ..Config::one_job()
    }));
    let traces = random_walks(model.as_ref(), 11, 300, 40);
    let outcome = suite::run(
        driver,
        model,
        traces,
        &RunOptions {
            parallel: 4,
            stop_at_first: false,
        },
        |_| {},
    )
    .await;
    if let Some(first) = outcome.divergences.first() {
        panic!(
            "{} divergences; the first:\n{}",
            outcome.divergences.len(),
            first.render()
        );
    }
    let b = outcome.tally.batch_results;
    assert!(b.sent > 0 && b.several_jobs > 0, "{}", b.describe());
}

/// Issue 39 item 6: walks through the model's failover agree with PostgreSQL when its database
/// really loses what the failover loses (a schema of the trace's own, restored from the snapshot
/// taken before the lost transition; the epoch advanced as after a restore). Every walk claims a
/// job in the new epoch, after the wait, with the new epoch's fence; each trace's schemas are
/// gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_replayed_agree_with_the_model_and_leave_no_schema() {
    use leasewright_conformance::drivers::failover::has_failover;
    use leasewright_conformance::select::{claims_in_new_epoch, failover_config, has_step};
    let (db, driver) = driver().await;
    let model = Arc::new(LeaseModel::new(failover_config(&Config::one_job())));
    let traces: Vec<_> = random_walks(model.as_ref(), 5, 40_000, 30)
        .into_iter()
        .filter(|w| has_failover(w) && has_step(w, claims_in_new_epoch))
        .take(6)
        .collect();
    assert_eq!(traces.len(), 6, "walks through a failover");
    let outcome = suite::run(
        Arc::clone(&driver),
        model,
        traces,
        &RunOptions {
            parallel: 2,
            stop_at_first: false,
        },
        |_| {},
    )
    .await;
    if let Some(first) = outcome.divergences.first() {
        panic!("{}", first.render());
    }
    assert!(outcome.tally.actions.get("failover").copied().unwrap_or(0) >= 6);
    drop(driver);
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'lw\\_failover\\_%'",
    )
    .fetch_one(&pool)
    .await
    .expect("counts schemas");
    assert_eq!(left, 0, "the failover traces' schemas are dropped");
}
