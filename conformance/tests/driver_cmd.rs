//! The language-neutral driver protocol against a foreign implementation: the in-memory Python
//! control plane of examples/python (written from docs/protocol.md, sharing no code with impl/)
//! agrees with the model on the named scenarios, seeded random walks and the property suite; its
//! seeded bug (one wrong reason precedence) is caught by the property suite and shrunk; and a
//! command that does not speak the protocol is refused at setup.
//!
//! Needs `python3` (standard library only).

use std::sync::Arc;

use leasewright_conformance::driver::Driver;
use leasewright_conformance::driver_cmd::{python_example, CmdDriver, SetupError};
use leasewright_conformance::generate::random_walks;
use leasewright_conformance::property::{self, PropertyOptions};
use leasewright_conformance::replay::replay;
use leasewright_conformance::suite::{self, RunOptions};
use leasewright_conformance::{scenarios, traces};
use leasewright_model::{Config, LeaseModel, Reason, Verdict};

fn example() -> String {
    python_example()
}

/// The example with its seeded bug switched on.
fn buggy_example() -> String {
    format!(
        "LEASEWRIGHT_EXAMPLE_BUG=expired-before-not-current {}",
        example()
    )
}

async fn connect(command: &str) -> Arc<CmdDriver> {
    Arc::new(
        CmdDriver::connect(command)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_agrees_on_the_scenarios_and_random_walks() {
    let driver = connect(&example()).await;
    assert_eq!(driver.name(), "driver-cmd (python-example)");
    let mut steps = 0;
    for (model, trace) in scenarios::all().expect("the scenarios") {
        let mut session = driver.open(&model, &trace.name).await.expect("open");
        match replay(&model, &mut session, &trace).await {
            Ok(tally) => steps += tally.steps,
            Err(divergence) => panic!("{}", divergence.render()),
        }
    }
    assert!(steps >= 40, "{steps} scenario steps");
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let walks = random_walks(model.as_ref(), 1, 3_000, 40);
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let outcome = suite::run(driver, Arc::clone(&model), walks, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    assert_eq!(outcome.tally.steps, 3_000);
    // The walks reached the rules that matter, not only claims.
    for key in [
        "rejected:not_current",
        "rejected:lease_expired",
        "uncertain",
    ] {
        assert!(
            outcome.tally.verdicts.contains_key(key),
            "{key} never seen: {:?}",
            outcome.tally.verdicts
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_agrees_on_the_property_suite() {
    let driver = connect(&example()).await;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let outcome = property::run(driver, model, PropertyOptions::default(), |_| {}).await;
    if let Some(failure) = &outcome.failure {
        panic!("{}", failure.divergence.render());
    }
    assert_eq!(outcome.aborted, None);
    assert_eq!(outcome.cases, 256);
}

/// The seeded bug answers a late report of a reconciled attempt `lease_expired` instead of
/// `not_current`: the property suite finds it, proptest shrinks it, and the minimal trace, saved
/// and read back, diverges the same way on the buggy example and agrees on the correct one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeded_bug_is_caught_and_shrunk() {
    let driver = connect(&buggy_example()).await;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let outcome = property::run(
        Arc::clone(&driver),
        Arc::clone(&model),
        PropertyOptions::default(),
        |_| {},
    )
    .await;
    let failure = outcome
        .failure
        .expect("the property suite misses the seeded bug");
    eprintln!(
        "shrunk from {} to {} steps in {} replays\n{}",
        failure.original.steps.len(),
        failure.minimal.steps.len(),
        failure.shrink_replays,
        failure.divergence.render()
    );
    let d = &failure.divergence;
    assert_eq!(d.kind, "verdict");
    assert_eq!(
        d.differences,
        vec![format!(
            "verdict: expected {} ({}), observed {} ({})",
            Verdict::Rejected,
            Reason::NotCurrent,
            Verdict::Rejected,
            Reason::LeaseExpired
        )]
    );
    assert!(failure.minimal.steps.len() < failure.original.steps.len());
    assert_eq!(d.step, failure.minimal.steps.len());
    // The shortest way there: claim, the lease's two ticks, the sweep, a reconciliation
    // ending the attempt, and the late report; the runner must also have sent it (a result or a
    // rejoin after a disconnect) before it stopped.
    assert!(failure.minimal.steps.len() <= 9, "{}", d.render());
    let text = traces::to_itf(&model, &failure.minimal);
    let (read_model, read) = traces::from_itf(&text).expect("the saved trace reads back");
    let mut session = driver.open(&read_model, &read.name).await.expect("open");
    let again = replay(&read_model, &mut session, &read)
        .await
        .expect_err("the saved trace diverges again");
    assert_eq!(again.differences, d.differences);
    let correct = connect(&example()).await;
    let mut session = correct.open(&read_model, &read.name).await.expect("open");
    if let Err(divergence) = replay(&read_model, &mut session, &read).await {
        panic!("the correct example diverges: {}", divergence.render());
    }
}

#[tokio::test]
async fn a_command_that_does_not_speak_the_protocol_is_refused_at_setup() {
    let missing = CmdDriver::connect("/nonexistent/leasewright-driver").await;
    assert!(
        matches!(missing, Err(SetupError::Handshake { .. })),
        "{:?}",
        missing.err()
    );
    // Reads the hello and closes its output without answering.
    let silent = CmdDriver::connect("exec >/dev/null; cat").await;
    let error = silent.err().expect("it answers nothing").to_string();
    assert!(error.contains("closed its output"), "{error}");
    let other_version = CmdDriver::connect(
        r#"read line; echo '{"type":"hello_ok","protocol":"leasewright-driver","version":2,"implementation":"x","in_reply_to":1}'"#,
    )
    .await;
    assert!(
        matches!(other_version, Err(SetupError::Version { theirs: 2, .. })),
        "{:?}",
        other_version.err()
    );
}
