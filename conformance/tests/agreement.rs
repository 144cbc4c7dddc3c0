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
