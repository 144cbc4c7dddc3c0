//! `leasewright audit` on a hot standby (issue 36 item 6): docs/audit.md says a standby will do,
//! and the epoch the watermark names is read in a way a standby answers. Needs the PostgreSQL
//! server binaries (a primary and a streaming standby of the test's own).

use leasewright_audit::{self as audit, AuditOptions};
use leasewright_impl::database::{with_search_path, Cluster, HarnessError, TestDatabase};
use leasewright_impl::*;
use sqlx::Connection as _;
use std::sync::Arc;

async fn jobs_on(url: &str) -> Option<i64> {
    let mut conn = sqlx::PgConnection::connect(url).await.ok()?;
    sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&mut conn)
        .await
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_audits_as_its_primary_and_prints_the_same_watermark() {
    let primary = match tokio::task::spawn_blocking(Cluster::start_private)
        .await
        .unwrap()
    {
        Ok(cluster) => cluster,
        Err(HarnessError::NoBinaries) => {
            eprintln!("SKIPPED: no PostgreSQL server binaries for a standby");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let db = TestDatabase::create_on(Some(&primary.url("postgres")))
        .await
        .expect("a database on the primary");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .expect("a store");
    let project = store.create_project("replicated").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    for command in ["a", "b"] {
        store
            .submit_job(project, NewJob::new("rev", "digest", command))
            .await
            .unwrap();
    }
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    store
        .report_result(&lease.tuple, Outcome::Passed, "d", None)
        .await
        .unwrap();
    store.close().await;
    let standby = {
        let primary = primary.clone();
        tokio::task::spawn_blocking(move || primary.start_standby())
            .await
            .unwrap()
            .expect("a streaming standby")
    };
    let standby_url = with_search_path(&standby.url(db.name()), DEFAULT_SCHEMA);
    // The standby has replayed the ledger: a bounded poll of its state.
    let mut replayed = false;
    for _ in 0..600 {
        if jobs_on(&standby_url).await == Some(2) {
            replayed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(replayed, "the standby never showed the primary's two jobs");
    let options = AuditOptions {
        batch: 2,
        ..AuditOptions::default()
    };
    let (on_primary, _) = audit::audit(db.url(), &options, |_| {})
        .await
        .expect("the audit runs on the primary");
    let (on_standby, _) = audit::audit(&standby_url, &options, |_| {})
        .await
        .expect("the audit runs on the standby");
    assert!(on_standby.is_clean(), "{:#?}", on_standby.violations);
    assert_eq!(on_standby.watermark_unsettled, None);
    assert_eq!(
        on_standby.since, on_primary.since,
        "one ledger, one watermark"
    );
    // The primary's watermark verifies on the standby.
    let Ok(audit::chain::Since::Token(w)) = on_primary.since.clone().unwrap().parse() else {
        panic!("a token");
    };
    let since = AuditOptions {
        since: Some(w.position),
        since_token: Some(w),
        since_witness: on_primary.witness.clone(),
        ..options
    };
    let (again, _) = audit::audit(&standby_url, &since, |_| {})
        .await
        .expect("the audit runs on the standby with --since");
    assert!(again.is_clean(), "{:#?}", again.violations);
}
