//! `leasewright audit` as a user runs it: exit codes (0 clean, 1 a violation, 2 setup), the
//! numbered report, the JSON document and the JUnit file.

use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;

fn audit(url: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasewright"));
    command.arg("audit").args(args).env_remove("DATABASE_URL");
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    let out = command.output().expect("runs leasewright");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_exits_0_clean_1_on_a_violation_and_2_on_setup() {
    let (code, _, err) = audit(None, &[]);
    assert_eq!(code, 2, "no database: {err}");
    assert!(err.contains("DATABASE_URL"), "{err}");

    // A database without the implementation's schema: setup, not a violation.
    let empty = TestDatabase::create().await.expect("a test database");
    let (code, _, err) = audit(Some(empty.url()), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no audit ledger"), "{err}");

    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .unwrap();
    let project = store.create_project("p").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let job = store
        .submit_job(project, NewJob::new("rev", "d", "c"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    store.heartbeat(&lease.tuple, None).await.unwrap();
    store
        .report_result(&lease.tuple, Outcome::Passed, "d", None)
        .await
        .unwrap();
    store.close().await;

    let (code, out, err) = audit(Some(db.url()), &["--project", "p"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("every record is one the model allows"),
        "{out}"
    );
    let (code, _, err) = audit(Some(db.url()), &["--project", "nobody"]);
    assert_eq!(code, 2, "{err}");

    sqlx::query("UPDATE jobs SET state = 'failed', outcome = 'failed' WHERE id = $1")
        .bind(job.0)
        .execute(&sqlx::PgPool::connect(db.url()).await.unwrap())
        .await
        .unwrap();
    sqlx::query("UPDATE attempts SET state = 'failed', outcome = 'failed' WHERE job_id = $1")
        .bind(job.0)
        .execute(&sqlx::PgPool::connect(db.url()).await.unwrap())
        .await
        .unwrap();
    let (code, out, _) = audit(Some(db.url()), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("VIOLATION 1 [replaced_outcome]"), "{out}");
    assert!(out.contains("   1. job "), "numbered steps: {out}");

    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("audit.xml");
    let junit_arg = junit.to_str().unwrap();
    let (code, out, _) = audit(Some(db.url()), &["--json", "--junit", junit_arg]);
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["violations"][0]["kind"], "replaced_outcome");
    assert_eq!(doc["jobs"], 1);
    let watermark = doc["watermark"].as_i64().expect("a watermark");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit that parses");
    // One failing case for the violation, one passing case for the rest of the ledger.
    assert_eq!((report.tests, report.failures), (2, 1), "{xml}");
    let failed = &report.test_suites[0].test_cases[0];
    assert!(
        failed.name.as_str().starts_with("replaced_outcome "),
        "{xml}"
    );

    // Resumed from its watermark with nothing new: nothing to audit, clean.
    let since = watermark.to_string();
    let (code, out, _) = audit(Some(db.url()), &["--since", &since, "--json"]);
    assert_eq!(code, 0, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (doc["jobs"].as_i64(), doc["watermark"].as_i64()),
        (Some(0), Some(watermark))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_cannot_be_judged_exits_1_and_the_summary_counts_its_records() {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .unwrap();
    let project = store.create_project("p").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let job = store
        .submit_job(project, NewJob::new("rev", "d", "c"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    store.heartbeat(&lease.tuple, None).await.unwrap();
    store.close().await;
    let (code, out, _) = audit(Some(db.url()), &[]);
    assert_eq!(code, 0, "{out}");

    // An attempt as if claimed before the ledger existed (so before its chain, migration 0015,
    // too): its 2 records cannot be judged.
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    for statement in [
        "UPDATE attempts SET claim_lease_expiry = NULL, chain_seq = NULL, chain_hash = NULL \
         WHERE job_id = $1",
        "UPDATE observations SET chain_seq = NULL, chain_hash = NULL WHERE named_job_id = $1",
        "UPDATE jobs SET chain_seq = NULL, chain_head = NULL WHERE id = $1",
    ] {
        sqlx::query(statement)
            .bind(job.0)
            .execute(&pool)
            .await
            .unwrap();
    }
    let (code, out, _) = audit(Some(db.url()), &[]);
    assert_eq!(code, 1, "never clean: {out}");
    assert!(
        out.contains(&format!("not audited: job {}", job.0)),
        "{out}"
    );
    assert!(
        out.contains("2 records of 1 jobs could not be judged"),
        "{out}"
    );
    let (code, out, _) = audit(Some(db.url()), &["--json"]);
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["unjudged_records"], 2, "{out}");
    assert_eq!(doc["violations"].as_array().map(Vec::len), Some(0));
}

/// The witness as the operator keeps it (issue 37): `--witness FILE` written by a run, read back
/// with `--since` its token (clean: exit 0), an edit of a row since named (exit 1, and the file
/// replaced), a missing file refused (exit 2); `prune --audited-through` takes the token and
/// refuses a number no audit printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_witness_file_is_written_read_back_and_names_an_edit_and_the_prune_takes_the_token() {
    let db = TestDatabase::create().await.expect("a test database");
    let store = db
        .store(
            Arc::new(ManualClock::at_fixed_start()),
            StoreConfig::default(),
        )
        .await
        .unwrap();
    let project = store.create_project("p").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    let job = store
        .submit_job(project, NewJob::new("rev", "d", "c"))
        .await
        .unwrap();
    let Verdict::Accepted(lease) = store.claim(runner, None).await.unwrap() else {
        panic!("a claim");
    };
    store
        .report_result(&lease.tuple, Outcome::Passed, "d", None)
        .await
        .unwrap();
    store.close().await;
    let dir = std::env::temp_dir().join(format!("lw-witness-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let witness = dir.join("audit.witness");
    let witness = witness.to_str().unwrap();
    let (code, out, err) = audit(Some(db.url()), &["--json", "--witness", witness]);
    assert_eq!(code, 0, "{out}{err}");
    let token = serde_json::from_str::<Value>(&out).unwrap()["since"]
        .as_str()
        .unwrap()
        .to_string();
    let written = std::fs::read(witness).expect("the witness is written");
    let (code, out, err) = audit(Some(db.url()), &["--since", &token, "--witness", witness]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("rows were not compared"), "{err}");
    let missing = dir.join("none");
    let (code, _, err) = audit(
        Some(db.url()),
        &["--since", &token, "--witness", missing.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = audit(Some(db.url()), &["--since", &token]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not the state held in rows"), "{err}");

    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(db.url())
        .await
        .unwrap();
    sqlx::query("UPDATE attempts SET lease_expiry = lease_expiry + interval '1 day'")
        .execute(&mut conn)
        .await
        .unwrap();
    let (code, out, err) = audit(Some(db.url()), &["--since", &token, "--witness", witness]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("[watermark_mismatch]") && out.contains(&job.0.to_string()),
        "{out}"
    );
    assert_ne!(
        std::fs::read(witness).unwrap(),
        written,
        "replaced by the run's"
    );

    let prune = |through: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
            .args(["prune", "--older-than", "30d", "--audited-through", through])
            .env("DATABASE_URL", db.url())
            .output()
            .expect("runs leasewright");
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = prune(&token);
    assert_eq!(code, 0, "{err}");
    let (code, err) = prune("9223372036854775807");
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
