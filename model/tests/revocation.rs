//! Revocation (`Config::revocation`, docs/model.md "Revocation"): an operator revokes a runner
//! mid-lease; from then on its messages and claims are refused `unknown_runner` and recorded
//! nowhere, and its lease runs out and is swept as a lost runner's.

use leasewright_model::*;
use stateright::{Checker, Model};

/// One job, two runners (and the outsider), two attempts, two-tick leases, disconnects, and an
/// operator who may revoke a runner mid-lease (the conformance suite's `revocation`
/// configuration).
fn revocation() -> Config {
    Config {
        revocation: true,
        ..Config::one_job()
    }
}

/// Runs `actions` from `from`, asserting that each one is enabled; returns the last state.
fn walk(model: &LeaseModel, from: State, actions: &[Action]) -> State {
    let mut s = from;
    for action in actions {
        let mut enabled = Vec::new();
        model.actions(&s, &mut enabled);
        assert!(
            enabled.contains(action),
            "{action:?} is not enabled in {s:?}"
        );
        s = model.next_state(&s, action.clone()).expect("a successor");
    }
    s
}

#[test]
fn a_revoked_runner_is_refused_unknown_runner_recorded_nowhere_and_its_lease_is_swept() {
    let model = LeaseModel::new(revocation());
    let unknown = Expected::rejected(Reason::UnknownRunner);
    let passed = Action::Result {
        runner: 0,
        outcome: Outcome::Passed,
        runner_time: 0,
        digest: 0,
        attempt: None,
    };
    let heartbeat = Action::Heartbeat {
        runner: 0,
        runner_time: 0,
        attempt: None,
    };
    let claimed = walk(&model, model.init_state(), &[Action::Claim { runner: 0 }]);
    // Before the revocation the runner's heartbeat is accepted.
    assert_eq!(
        model.expected(&claimed, &heartbeat),
        Some(Expected::ACCEPTED)
    );
    let s = walk(
        &model,
        claimed,
        &[passed, Action::RunnerRevoke { runner: 0 }],
    );
    // Revocation changes no job, attempt or lease.
    assert_eq!(s.jobs[0].state, JobState::Running);
    assert_eq!(s.attempts[0].state, AttemptState::Active);
    // Its result sent before the revocation, delivered after it: refused, recorded nowhere, and
    // the job stays as it was.
    let result = *s
        .in_flight
        .iter()
        .find(|m| matches!(m.kind, MessageKind::Result(_)))
        .expect("the result is in flight");
    assert_eq!(model.delivery_verdict(&s, &result), unknown);
    assert_eq!(model.record(&s, &result), None);
    let delivered = walk(&model, s.clone(), &[Action::Deliver { message: result }]);
    assert_eq!(delivered.jobs[0].state, JobState::Running);
    // Its heartbeat is refused too: nothing renews the lease.
    assert_eq!(model.expected(&s, &heartbeat), Some(unknown));
    // The other runner is still known.
    let other = Message {
        sender: 1,
        ..result
    };
    assert_eq!(
        model.delivery_verdict(&s, &other),
        Expected::rejected(Reason::RunnerMismatch)
    );
    // The lease runs out and the sweep makes the job uncertain, as a lost runner's.
    let swept = walk(
        &model,
        delivered,
        &[Action::Tick, Action::Tick, Action::ExpirySweep],
    );
    assert_eq!(swept.jobs[0].state, JobState::Uncertain);
    // A revoked runner claims nothing: its claim is refused and changes nothing.
    // (The runner had finished: the truthful finding is what it observed.)
    let retried = walk(
        &model,
        swept,
        &[Action::Reconcile {
            job: 0,
            finding: Finding::ObservedPassed,
            decision: Decision::Retry,
        }],
    );
    let claim = Action::Claim { runner: 0 };
    assert_eq!(model.expected(&retried, &claim), Some(unknown));
    assert_eq!(walk(&model, retried.clone(), &[claim]), retried);
    assert_eq!(
        model.expected(&retried, &Action::Claim { runner: 1 }),
        Some(Expected::ACCEPTED)
    );
}

#[test]
fn the_protocol_satisfies_every_property_with_revocation() {
    let config = revocation();
    let checker = LeaseModel::for_checking(config.clone())
        .checker()
        .symmetry()
        .threads(2)
        .spawn_dfs()
        .join();
    if let Some(path) = checker.discovery(properties::EVERY_INVARIANT) {
        let model = LeaseModel::new(config);
        panic!(
            "{:?}\n{}",
            properties::violated(&model, path.last_state()),
            describe::steps(&model, &path.into_vec()).join("\n")
        );
    }
    // Revocation is reached, and with it more states than without.
    let without = LeaseModel::for_checking(Config::one_job())
        .checker()
        .symmetry()
        .threads(2)
        .spawn_dfs()
        .join();
    assert!(checker.unique_state_count() > without.unique_state_count());
}
