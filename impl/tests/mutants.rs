//! Feature `mutants`: every mutant removes exactly one rule, and at least one scenario check of
//! tests/common/checks.rs fails against it (while all pass against the real store, see
//! tests/protocol.rs). Run: `cargo test -p leasewright-impl --features mutants --test mutants`.

mod common;

use common::{checks, Fail, World};
use leasewright_impl::mutants::Mutant;

/// The checks expected to catch each mutant (docs/impl.md, "Rules, statements and tests").
fn killers(mutant: Mutant) -> &'static [&'static str] {
    match mutant {
        Mutant::NoFencePredicateOnCompletion => &["ownership_tuple", "tuple_precedence"],
        Mutant::NoLeasePredicate => &["ownership_tuple"],
        Mutant::HeartbeatIgnoresExpiry => &["heartbeat_after_expiry", "runner_clock_skew"],
        Mutant::ExpiryRequeues => &["expiry_makes_uncertain", "stale_completion", "reconnect"],
        Mutant::ConflictOverwrites => &["conflicting_result"],
        Mutant::DuplicateNotAcknowledged => &["duplicate_result", "standing_precedence"],
        Mutant::NoProjectCheck => &["cross_project", "cancel_table", "cross_project_reconcile"],
        Mutant::RunnerClockDecidesExpiry => &["runner_clock_skew"],
        Mutant::LateReportDropped => &["stale_completion", "retry_after_reconciliation"],
        // Killed by `leasewright conform` (docs/conformance.md, "Coverage by class").
        _ => &[],
    }
}

/// Run every named check against a store with `mutant`; each must fail.
async fn each_killer_fails(mutant: Mutant) {
    for name in killers(mutant) {
        let check = checks::ALL
            .iter()
            .find(|(check, _)| check == name)
            .map(|(_, check)| *check)
            .expect("a known check");
        let world = World::with_store(move |store| store.with_mutant(mutant), 10).await;
        match check(world).await {
            Err(Fail(why)) => eprintln!("{mutant:?} is caught by {name}: {why}"),
            Ok(()) => panic!("{mutant:?} survives the check {name}"),
        }
    }
}

#[tokio::test]
async fn completion_without_the_fence_predicate_is_caught() {
    each_killer_fails(Mutant::NoFencePredicateOnCompletion).await;
}

#[tokio::test]
async fn messages_without_the_lease_id_predicate_are_caught() {
    each_killer_fails(Mutant::NoLeasePredicate).await;
}

#[tokio::test]
async fn a_heartbeat_that_ignores_expiry_is_caught() {
    each_killer_fails(Mutant::HeartbeatIgnoresExpiry).await;
}

#[tokio::test]
async fn expiry_that_requeues_instead_of_making_work_uncertain_is_caught() {
    each_killer_fails(Mutant::ExpiryRequeues).await;
}

#[tokio::test]
async fn a_conflicting_result_that_overwrites_the_outcome_is_caught() {
    each_killer_fails(Mutant::ConflictOverwrites).await;
}

#[tokio::test]
async fn a_duplicate_result_that_is_not_acknowledged_is_caught() {
    each_killer_fails(Mutant::DuplicateNotAcknowledged).await;
}

#[tokio::test]
async fn a_missing_project_check_is_caught() {
    each_killer_fails(Mutant::NoProjectCheck).await;
}

#[tokio::test]
async fn the_runner_clock_deciding_expiry_is_caught() {
    each_killer_fails(Mutant::RunnerClockDecidesExpiry).await;
}

#[tokio::test]
async fn a_late_report_that_is_dropped_instead_of_recorded_is_caught() {
    each_killer_fails(Mutant::LateReportDropped).await;
}

#[test]
fn every_mutant_has_a_test_above() {
    // The nine tests above cover the mutants the implementation's own checks kill; a new one
    // must get a killer and a test (the others are `conform`'s, docs/conformance.md).
    assert_eq!(
        Mutant::ALL
            .iter()
            .filter(|m| m.killed_by_impl_tests())
            .count(),
        9
    );
    for mutant in Mutant::ALL.into_iter().filter(|m| m.killed_by_impl_tests()) {
        assert!(
            !killers(mutant).is_empty(),
            "{mutant:?} has no killing check"
        );
    }
}
