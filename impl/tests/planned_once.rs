//! The hot path calls no SQL function at run time. PostgreSQL inlines a SQL-language function
//! into the statement that calls it when it can; one it cannot inline (its body reads a table, or
//! is more volatile than the function is declared, or an argument read more than once is
//! costly) is called row by row, and its body is parsed and planned again in every statement
//! that calls it; an IMMUTABLE one whose arguments are all constants is run, body planned, while
//! the calling statement is planned (every custom plan). The ledger's encoding
//! (impl/sql/functions/ledger_encoding.sql) and the epoch (epoch.sql) are called by every claim
//! and result: a claim, a heartbeat, a result and a batch result are made here with function
//! tracking on, and no SQL-language function may show a call (PostgreSQL counts a function it
//! inlined as none: docs/impl.md, "No SQL function is called at run time on the hot path"), and
//! the chain's trigger function (PL/pgSQL) is not called for the records those statements chain
//! themselves.

use std::sync::Arc;
use std::time::Duration;

use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn the_claim_heartbeat_and_results_call_no_sql_function() {
    let db = TestDatabase::create().await.expect("a test database");
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    // Counted for the connections made from now on (the store's).
    sqlx::raw_sql(&format!(
        "ALTER DATABASE {} SET track_functions = 'all'",
        db.name()
    ))
    .execute(&mut conn)
    .await
    .expect("track functions");
    // One connection, so that one positive control (the PL/pgSQL `claim`, always counted) proves
    // that the counts of every statement below reached the statistics.
    let store = db
        .store(
            Arc::new(SystemClock),
            StoreConfig {
                max_connections: 1,
                ..StoreConfig::default()
            },
        )
        .await
        .expect("a store");
    let project = store.create_project("inlined").await.expect("project");
    let (runner, _token) = store
        .create_runner(project, "runner")
        .await
        .expect("runner");
    for i in 0..4 {
        store
            .submit_job(
                project,
                NewJob::new(format!("rev{i}"), "sha256:src", "make"),
            )
            .await
            .expect("job");
    }
    let Verdict::Accepted(lease) = store.claim(runner, None).await.expect("claim") else {
        panic!("a queued job is claimed");
    };
    let heartbeat = store
        .heartbeat(&lease.tuple, None)
        .await
        .expect("heartbeat");
    assert!(heartbeat.is_accepted(), "{heartbeat:?}");
    let result = store
        .report_result(&lease.tuple, Outcome::Passed, "digest", None)
        .await
        .expect("result");
    assert!(result.is_accepted(), "{result:?}");
    let Verdict::Accepted(leases) = store.claim_batch(runner, 3, None).await.expect("claims")
    else {
        panic!("three queued jobs are claimed");
    };
    assert_eq!(leases.len(), 3);
    let items: Vec<ResultReport> = leases
        .iter()
        .map(|lease| ResultReport {
            tuple: lease.tuple,
            outcome: Outcome::Failed,
            result_digest: "digest".into(),
            runner_time: None,
        })
        .collect();
    let verdicts = store.report_results(&items).await.expect("results");
    assert!(verdicts.iter().all(|v| v.is_accepted()), "{verdicts:?}");
    // A backend sends its counts when it exits.
    store.close().await;

    let mut calls = Vec::new();
    for _ in 0..100 {
        calls = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT s.funcname::text, l.lanname::text, s.calls
             FROM pg_stat_user_functions AS s
             JOIN pg_proc AS p ON p.oid = s.funcid
             JOIN pg_language AS l ON l.oid = p.prolang
             ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .expect("function statistics");
        if calls.iter().any(|(name, _, n)| name == "claim" && *n >= 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        calls.iter().any(|(name, _, n)| name == "claim" && *n >= 2),
        "the two claims reached the statistics: {calls:?}"
    );
    // The records these statements write are chained by the statements themselves (the claim's
    // attempts, the heartbeat's and the results' observations): the chain's trigger function
    // is not called for them (its WHEN, impl/sql/functions/ledger_chain.sql).
    // The positive control: the four submissions went through the job's chain trigger, so
    // trigger functions are counted.
    assert!(
        calls
            .iter()
            .any(|(name, _, n)| name == "ledger_chain_job" && *n == 4),
        "the four submissions were chained by their trigger: {calls:?}"
    );
    let chained_by_trigger: Vec<_> = calls
        .iter()
        .filter(|(name, _, n)| name == "ledger_chain_record" && *n > 0)
        .collect();
    assert!(
        chained_by_trigger.is_empty(),
        "the hot path's records went through the chain's trigger function: {chained_by_trigger:?}"
    );
    let called: Vec<_> = calls.iter().filter(|(_, l, _)| l == "sql").collect();
    assert!(
        called.is_empty(),
        "SQL functions called at run time, not inlined (each one planned again in every \
         statement that calls it): {called:?}"
    );
}
