//! `leasewright migrate` and `--schema`: the tables and sqlx's `_sqlx_migrations` live in their
//! own schema (default `leasewright`, never `public`), migrate is idempotent and says what it
//! applied, and two schemas of one database are two independent installations.

use leasewright_impl::database::TestDatabase;
use leasewright_impl::*;
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;

fn migrate(url: &str, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("migrate")
        .arg("--json")
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("runs leasewright");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().expect("an exit code"), doc, stderr)
}

async fn tables(url: &str, schema: &str) -> Vec<String> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let tables = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 \
         ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    tables
}

fn versions(doc: &Value, key: &str) -> Vec<i64> {
    doc[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {doc}"))
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_every_migration_once_into_its_schema_never_public() {
    let db = TestDatabase::create().await.expect("a test database");
    let (code, status, err) = migrate(db.url(), &["--status"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(status["schema"], "leasewright");
    let all: Vec<i64> = status["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["applied"], false, "{m}");
            m["version"].as_i64().unwrap()
        })
        .collect();
    assert!(all.contains(&1) && all.contains(&1001), "{all:?}");

    let (code, first, err) = migrate(db.url(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(versions(&first, "applied_now"), all);
    assert_eq!(first["schema_version"], 1);
    // Idempotent: the second run applies nothing and every migration is applied.
    let (code, second, err) = migrate(db.url(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(versions(&second, "applied_now"), Vec::<i64>::new());
    assert!(second["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["applied"] == true));

    // The default schema is ours, not public: every table, the server's and sqlx's too.
    let ours = tables(db.url(), "leasewright").await;
    for table in [
        "jobs",
        "attempts",
        "observations",
        "server_job_specs",
        "_sqlx_migrations",
    ] {
        assert!(ours.iter().any(|t| t == table), "{table} in {ours:?}");
    }
    assert_eq!(tables(db.url(), "public").await, Vec::<String>::new());

    // Another schema of the same database starts empty.
    let (code, other, err) = migrate(db.url(), &["--schema", "tenant_b"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(versions(&other, "applied_now"), all);
    // A schema name that would need quoting is bad arguments.
    let (code, _, err) = migrate(db.url(), &["--schema", "Robert'); DROP"]);
    assert_eq!(code, 2, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schemas_of_one_database_are_independent() {
    let db = TestDatabase::create().await.expect("a test database");
    let clock = ManualClock::at_fixed_start();
    let store = |schema: &str| {
        let clock = clock.clone();
        let url = db.url().to_owned();
        let schema = schema.to_owned();
        async move {
            Store::connect(
                &url,
                Arc::new(clock),
                StoreConfig {
                    schema,
                    ..StoreConfig::default()
                },
            )
            .await
            .unwrap()
        }
    };
    let a = store("tenant_a").await;
    let b = store("tenant_b").await;
    // The same project name in both: no conflict, each sees only its own.
    let pa = a.create_project("p").await.unwrap();
    let pb = b.create_project("p").await.unwrap();
    assert_ne!(pa, pb);
    let count = |s: Store| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM projects")
            .fetch_one(s.pool())
            .await
            .unwrap()
    };
    assert_eq!(count(a.clone()).await, 1);
    assert_eq!(count(b.clone()).await, 1);
    let (runner, _) = a.create_runner(pa, "r").await.unwrap();
    assert_eq!(
        b.claim_batch(runner, 1, None).await.unwrap(),
        Verdict::Rejected(Reason::UnknownRunner),
        "a runner of schema a is unknown in schema b"
    );
}

/// `stress --schema NAME`: the fresh database keeps its tables in that schema, in-process and
/// over HTTP (where the control plane it starts is given the schema too), and none in the
/// default one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_keeps_its_tables_in_the_schema_it_is_given() {
    let db = TestDatabase::create().await.expect("a test database");
    for (schema, over_http) in [("stress_here", false), ("stress_http", true)] {
        let mut args = vec![
            "stress",
            "--runners",
            "4",
            "--ops",
            "200",
            "--schema",
            schema,
            "--keep-database",
        ];
        if over_http {
            args.push("--http");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
            .args(&args)
            .env("DATABASE_URL", db.url())
            .output()
            .expect("runs leasewright");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        let kept = err
            .split("database `")
            .nth(1)
            .and_then(|rest| rest.split('`').next())
            .expect("the kept database's name");
        let url = db
            .url()
            .replace(&format!("/{}", db.name()), &format!("/{kept}"));
        let ours = tables(&url, schema).await;
        assert!(ours.iter().any(|t| t == "jobs"), "{args:?}: {ours:?}");
        assert!(tables(&url, "leasewright").await.is_empty(), "{args:?}");
        let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
        sqlx::query(&format!("DROP DATABASE {kept} WITH (FORCE)"))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

/// `bench --schema NAME`: each fresh benchmark database keeps the implementation's tables in
/// that schema. The check runs inside the benchmark, on its store's own connections, through the
/// experiments' `LEASEWRIGHT_BENCH_SETUP_SQL` (run once after the migrations): a division by
/// zero, and so a failed benchmark, unless the connection's schema is NAME and holds `jobs`.
#[test]
fn bench_keeps_its_tables_in_the_schema_it_is_given() {
    let check = "SELECT 1 / (current_schema() = 'bench_here')::int; \
                 SELECT 1 / count(*)::int FROM information_schema.tables \
                 WHERE table_schema = 'bench_here' AND table_name = 'jobs'";
    let bench = |schema: &str| {
        Command::new(env!("CARGO_BIN_EXE_leasewright"))
            .args(["bench", "writes", "--operations", "5", "--batch", "2"])
            .args(["--schema", schema])
            .env("LEASEWRIGHT_BENCH_SETUP_SQL", check)
            .output()
            .expect("runs leasewright")
    };
    let out = bench("bench_here");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // The same check fails in the default schema: it tells the two apart.
    let out = bench(DEFAULT_SCHEMA);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("division by zero"), "{err}");
}

/// `migrate --advance-epoch` (docs/protocol.md §12): the operator's step after a restore that kept
/// the WAL timeline raises the epoch above every one the database has seen, each run once more;
/// the next claim then waits and issues tokens in the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_advance_epoch_raises_the_epoch_the_next_claims_tokens_carry() {
    let db = TestDatabase::create().await.expect("a test database");
    let (code, doc, err) = migrate(db.url(), &["--advance-epoch"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (&doc["epoch"]["before"], &doc["epoch"]["after"]),
        (&0.into(), &1.into())
    );
    let (code, doc, err) = migrate(db.url(), &["--advance-epoch"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (&doc["epoch"]["before"], &doc["epoch"]["after"]),
        (&1.into(), &2.into())
    );
    let (code, _, err) = migrate(db.url(), &["--advance-epoch", "--status"]);
    assert_eq!(
        code, 2,
        "--status applies nothing, so it cannot advance the epoch: {err}"
    );

    let clock = ManualClock::at_fixed_start();
    let store = db
        .store(Arc::new(clock.clone()), StoreConfig::default())
        .await
        .expect("a store");
    let project = store.create_project("p").await.unwrap();
    let (runner, _) = store.create_runner(project, "r").await.unwrap();
    store
        .submit_job(project, NewJob::new("rev", "digest", "true"))
        .await
        .unwrap();
    assert_eq!(
        store.claim(runner, None).await.unwrap(),
        Verdict::Rejected(Reason::NoQueuedJob),
        "the new epoch's wait"
    );
    clock.advance(chrono::Duration::seconds(30));
    match store.claim(runner, None).await.unwrap() {
        Verdict::Accepted(lease) => {
            assert_eq!(lease.tuple.fence, (2 << 32) + 1);
            assert_eq!(lease.slot_token, (2 << 32) + 1);
        }
        other => panic!("{other:?}"),
    }
}

/// Every relation in `schema` (catalog, whatever the privileges).
async fn relations(url: &str, schema: &str) -> Vec<String> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let names = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'S') ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    names
}

/// Issue 30: `migrate --schema information_schema` installed every table there, and migrating
/// into a schema holding another application's tables failed leaving `_sqlx_migrations` behind.
/// Now both are refused with exit 2 and a message, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_refuses_system_schemas_and_other_applications_schemas_before_writing() {
    let db = TestDatabase::create().await.expect("a test database");
    let sqlx_tables = || async {
        let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_class WHERE relname = '_sqlx_migrations'")
                .fetch_one(&pool)
                .await
                .unwrap();
        pool.close().await;
        n
    };
    for system in [
        "information_schema",
        "pg_catalog",
        "pg_toast",
        "pg_temp_1",
        "pg_anything",
    ] {
        let (code, _, err) = migrate(db.url(), &["--schema", system]);
        assert_eq!(code, 2, "{system}: {err}");
        assert!(err.contains("system schema"), "{system}: {err}");
    }
    assert_eq!(sqlx_tables().await, 0);

    // Another application's schema: its tables without any sqlx history, and one with a sqlx
    // history that is not ours; and public holding another application's table.
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    for sql in [
        "CREATE SCHEMA billing",
        "CREATE TABLE billing.accounts (id int PRIMARY KEY)",
        "CREATE TABLE billing.invoices (id int PRIMARY KEY)",
        "CREATE SCHEMA shop",
        "CREATE TABLE shop._sqlx_migrations (version bigint PRIMARY KEY, description text NOT NULL, \
         installed_on timestamptz NOT NULL DEFAULT now(), success boolean NOT NULL, \
         checksum bytea NOT NULL, execution_time bigint NOT NULL)",
        "INSERT INTO shop._sqlx_migrations VALUES (1, 'users', now(), true, '\\x00', 1)",
        "CREATE TABLE shop.users (id int PRIMARY KEY)",
        "CREATE TABLE public.legacy (id int)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    pool.close().await;
    for (schema, theirs) in [
        ("billing", vec!["accounts", "invoices"]),
        ("shop", vec!["_sqlx_migrations", "users"]),
        ("public", vec!["legacy"]),
    ] {
        let (code, _, err) = migrate(db.url(), &["--schema", schema]);
        assert_eq!(code, 2, "{schema}: {err}");
        assert!(
            err.contains(&format!(
                "the schema {schema} holds objects leasewright did not create"
            )),
            "{schema}: {err}"
        );
        assert!(err.contains(theirs[theirs.len() - 1]), "{schema}: {err}");
        let left: Vec<String> = relations(db.url(), schema)
            .await
            .into_iter()
            .filter(|r| !r.ends_with("_pkey"))
            .collect();
        assert_eq!(left, theirs, "{schema}: something was written");
    }
    // Only the one table the shop application made itself.
    assert_eq!(sqlx_tables().await, 1);
    // And a server refuses such a schema too, before writing.
    let store = Store::connect(
        db.url(),
        Arc::new(ManualClock::at_fixed_start()),
        StoreConfig {
            schema: "billing".into(),
            ..StoreConfig::default()
        },
    )
    .await;
    let error = store.expect_err("a server on another application's schema");
    assert!(error.to_string().contains("did not create"), "{error}");
    assert_eq!(sqlx_tables().await, 1);
    // A schema of ours that exists and is empty (made by a DBA for the owner) is fine.
    let (code, _, err) = migrate(db.url(), &["--schema", "tenant_c"]);
    assert_eq!(code, 0, "{err}");
}
