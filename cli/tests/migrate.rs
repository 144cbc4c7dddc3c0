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

/// The schema's shape, one line per column, constraint, index, trigger, function and relation,
/// sorted: two schemas with equal lines were made alike.
async fn catalog(url: &str) -> Vec<String> {
    let pool = sqlx::PgPool::connect(&leasewright_impl::database::with_search_path(
        url,
        "leasewright",
    ))
    .await
    .unwrap();
    let lines = sqlx::query_scalar(
        "SELECT 'column ' || table_name || '.' || column_name || ' ' || ordinal_position || ' ' \
             || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') \
         FROM information_schema.columns WHERE table_schema = 'leasewright' \
         UNION ALL SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' \
             || pg_get_constraintdef(oid) \
         FROM pg_constraint WHERE connamespace = 'leasewright'::regnamespace \
         UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'leasewright' \
         UNION ALL SELECT 'trigger ' || pg_get_triggerdef(t.oid) \
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
         WHERE c.relnamespace = 'leasewright'::regnamespace AND NOT t.tgisinternal \
         UNION ALL SELECT 'function ' || pg_get_functiondef(p.oid) \
         FROM pg_proc p WHERE p.pronamespace = 'leasewright'::regnamespace \
         UNION ALL SELECT 'relation ' || relname || ' ' || relkind::text || ' ' \
             || coalesce(array_to_string(reloptions, ','), '') \
         FROM pg_class WHERE relnamespace = 'leasewright'::regnamespace \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    lines
}

/// Upgrades keep working (issue 38 item 3): a schema migrated by the 17 migrations as they were
/// before their functions moved to impl/sql/functions (cli/tests/fixtures/impl-migrations-0017,
/// with the checksums they recorded), holding jobs, a claim and their chains, upgrades in place:
/// `migrate` applies the function files and nothing else, the schema is then exactly a fresh
/// one's (tables, constraints, indexes, triggers, functions), a job submitted before the upgrade
/// is claimed after it with its chain continued, and the audit finds every chain whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_migrated_before_the_functions_moved_upgrades_in_place() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/impl-migrations-0017");
    let old = sqlx::migrate::Migrator::new(fixtures.as_path())
        .await
        .expect("the migrations as they were");
    assert_eq!(old.iter().count(), 17);
    // Each file is what a schema recorded then: an edited migration's historical checksum, or
    // the file as it still is.
    for migration in old.iter() {
        let now = schema::MIGRATOR
            .iter()
            .find(|m| m.version == migration.version)
            .expect("the same versions");
        let recorded: String = migration
            .checksum
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        match schema::EDITED_MIGRATIONS
            .iter()
            .find(|(v, _)| *v == migration.version)
        {
            Some((_, historical)) => assert_eq!(recorded, *historical, "{}", migration.version),
            None => assert_eq!(migration.checksum, now.checksum, "{}", migration.version),
        }
    }

    let db = TestDatabase::create().await.expect("a test database");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(schema::connect_options(db.url(), "leasewright").unwrap())
        .await
        .unwrap();
    schema::create_schema(&pool, "leasewright").await.unwrap();
    old.run(&pool).await.expect("the old migrations apply");
    let mut server = sqlx::migrate::Migrator {
        migrations: leasewright_server::app::SERVER_MIGRATOR.migrations.clone(),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    server.set_ignore_missing(true);
    server
        .run(&pool)
        .await
        .expect("the server's migrations apply");
    // A project, a runner and two jobs, written by the statements the server sends, and one
    // claim by the old schema's own `claim` function.
    let start = chrono::Utc::now();
    let (project, runner) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    sqlx::query(include_str!("../../impl/sql/project_insert.sql"))
        .bind(project)
        .bind("p")
        .bind(start)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(include_str!("../../impl/sql/runner_insert.sql"))
        .bind(runner)
        .bind(project)
        .bind("r")
        .bind([0u8; 32].as_slice())
        .bind(start)
        .execute(&pool)
        .await
        .unwrap();
    let jobs = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
    for (i, job) in jobs.iter().enumerate() {
        sqlx::query(include_str!("../../impl/sql/job_insert.sql"))
            .bind(job)
            .bind(project)
            .bind(start + chrono::Duration::milliseconds(i as i64))
            .bind("rev")
            .bind(format!("sha256:{}", "0".repeat(64)))
            .bind("true")
            .bind(format!("slot-{i}"))
            .bind("unfenced")
            .execute(&pool)
            .await
            .unwrap();
    }
    let claimed: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT job_id FROM claim($1, 1, $2, $2 + interval '30 seconds')")
            .bind(runner)
            .bind(start)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        claimed,
        vec![jobs[0]],
        "the old claim takes the earliest job"
    );
    pool.close().await;

    // The server refuses to start on it without migrating (its functions are not recorded).
    let refused =
        Store::connect_migrated(db.url(), Arc::new(SystemClock), StoreConfig::default()).await;
    assert!(
        matches!(&refused, Err(Error::Schema(m)) if m.contains("functions")),
        "{:?}",
        refused.err()
    );

    let (code, upgraded, err) = migrate(db.url(), &[]);
    assert_eq!(code, 0, "{err}");
    // Only the migrations released after the fixture's 0017 run, then the function files.
    let mut expected: Vec<i64> = schema::MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| *v > 17)
        .collect();
    expected.push(schema::FUNCTIONS_VERSION);
    assert_eq!(
        versions(&upgraded, "applied_now"),
        expected,
        "only the later migrations and the function files are applied: {upgraded}"
    );
    assert!(upgraded["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["applied"] == true));

    let fresh = TestDatabase::create().await.expect("a test database");
    let (code, _, err) = migrate(fresh.url(), &[]);
    assert_eq!(code, 0, "{err}");
    let (upgraded, fresh) = (catalog(db.url()).await, catalog(fresh.url()).await);
    assert!(upgraded.len() > 100, "{upgraded:?}");
    let differences: Vec<_> = upgraded
        .iter()
        .filter(|l| !fresh.contains(l))
        .map(|l| format!("upgraded only: {l}"))
        .chain(
            fresh
                .iter()
                .filter(|l| !upgraded.contains(l))
                .map(|l| format!("fresh only: {l}")),
        )
        .collect();
    assert!(differences.is_empty(), "{differences:#?}");

    // The job submitted before the upgrade is claimed after it: the second record of its chain
    // (its submission, then this claim).
    let store = Store::connect_migrated(db.url(), Arc::new(SystemClock), StoreConfig::default())
        .await
        .expect("the upgraded schema is current");
    let lease = match store.claim(RunnerId(runner), None).await.unwrap() {
        Verdict::Accepted(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.tuple.job, JobId(jobs[1]));
    let seq: Option<i32> = sqlx::query_scalar("SELECT chain_seq FROM attempts WHERE id = $1")
        .bind(lease.tuple.attempt.0)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(seq, Some(2), "the claim continues the job's chain");
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("audit")
        .env("DATABASE_URL", db.url())
        .output()
        .expect("runs leasewright");
    assert!(
        out.status.success(),
        "the audit finds every chain whole: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Function files changed since the schema applied them (here: the recorded checksum is not
    // theirs): a server that does not migrate refuses the schema, `migrate` applies them again.
    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = $1")
        .bind(schema::FUNCTIONS_VERSION)
        .execute(store.pool())
        .await
        .unwrap();
    store.pool().close().await;
    let refused =
        Store::connect_migrated(db.url(), Arc::new(SystemClock), StoreConfig::default()).await;
    assert!(
        matches!(&refused, Err(Error::Schema(m)) if m.contains("functions")),
        "{:?}",
        refused.err()
    );
    let (code, again, err) = migrate(db.url(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        versions(&again, "applied_now"),
        vec![schema::FUNCTIONS_VERSION]
    );
}
