//! `statement_counts`: every named statement is listed, and executing a rule counts exactly the
//! statements it sends. The counters are process-global, so this binary holds this one test only
//! and every assertion is on the difference of two snapshots.

use std::collections::BTreeMap;
use std::sync::Arc;

use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;

fn snapshot() -> BTreeMap<&'static str, u64> {
    statement_counts().into_iter().collect()
}

fn delta(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> BTreeMap<&'static str, u64> {
    after
        .iter()
        .map(|(name, count)| (*name, count - before[name]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_counts_its_statements_and_nothing_else() {
    let listed: Vec<&str> = statement_counts().iter().map(|(name, _)| *name).collect();
    assert_eq!(
        listed.len(),
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql"))
            .expect("impl/sql")
            .filter(|e| e
                .as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sql")))
            .count(),
        "every statement file is listed, executed or not"
    );

    let db = TestDatabase::create().await.expect("a test database");
    let store = db
        .store(
            Arc::new(ManualClock::at_fixed_start()),
            StoreConfig::default(),
        )
        .await
        .expect("a store");
    let project = store.create_project("counted").await.expect("project");
    let (runner, _token) = store
        .create_runner(project, "runner")
        .await
        .expect("runner");
    store
        .submit_job(project, NewJob::new("abc123", "sha256:src", "make"))
        .await
        .expect("job");

    let before = snapshot();
    let verdict = store.claim(runner, None).await.expect("claim");
    assert!(verdict.is_accepted(), "{verdict:?}");
    let claimed = delta(&before, &snapshot());

    // The accept path is one statement.
    assert_eq!(claimed["claim"], 1, "{claimed:?}");
    for statement in [
        "runner_select_project",
        "job_pick_earliest_queued_with_free_target",
        "target_reserve_if_free",
        "job_start_if_queued",
        "attempt_insert_on_claim",
    ] {
        assert_eq!(claimed[statement], 0, "{statement}: {claimed:?}");
    }
    // Statements of other rules were not sent by the claim.
    for statement in [
        "attempt_heartbeat_if_current",
        "attempt_commit_result_if_current",
        "job_make_uncertain_if_lease_expired",
        "cache_entry_get",
        "reconciliation_record",
    ] {
        assert_eq!(claimed[statement], 0, "{statement}: {claimed:?}");
    }
    // Nothing in this process ever read a cache entry: listed, at 0.
    assert_eq!(snapshot()["cache_entry_get"], 0);

    // A claim with nothing queued sends the statement (it matches no row), then picks job by
    // job in a transaction of its own (which finds nothing either); each is counted.
    let before = snapshot();
    let verdict = store.claim(runner, None).await.expect("claim");
    assert!(!verdict.is_accepted(), "{verdict:?}");
    let empty = delta(&before, &snapshot());
    assert_eq!(empty["claim"], 1);
    assert_eq!(empty["runner_select_project"], 1);
    assert_eq!(empty["job_pick_earliest_queued_with_free_target"], 1);
    assert_eq!(empty["attempt_insert_on_claim"], 0);
}
