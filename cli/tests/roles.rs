//! Least privilege (docs/roles.md): the owner migrates, a data-only role serves, a read-only role
//! audits, each with exactly the grants docs/roles.md gives (the test runs that file's SQL).

use leasewright_impl::database::TestDatabase;
use leasewright_server::app::{self, ServerConfig};
use leasewright_server::client::{OperatorClient, RunnerClient};
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::SubmitJobRequest;
use sqlx::Executor as _;
use std::process::Command;
use std::time::Duration;

const OPERATOR: &str = "operator-secret";

/// `url` connecting as `role` with `password` (the URL's own user and password replaced).
fn as_role(url: &str, role: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let host_and_rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    format!("{scheme}://{role}:{password}@{host_and_rest}")
}

/// The three SQL blocks of docs/roles.md (owner, server, auditor) with this test's names.
fn role_sql(database: &str, prefix: &str) -> Vec<String> {
    let doc = include_str!("../../docs/roles.md");
    let blocks: Vec<String> = doc
        .split("```sql\n")
        .skip(1)
        .map(|block| {
            block
                .split("```")
                .next()
                .unwrap()
                .replace("leasewright_owner", &format!("{prefix}_owner"))
                .replace("leasewright_server", &format!("{prefix}_server"))
                .replace("leasewright_audit", &format!("{prefix}_audit"))
                .replace("DATABASE ci", &format!("DATABASE {database}"))
        })
        .collect();
    assert_eq!(blocks.len(), 3, "docs/roles.md has three SQL blocks");
    blocks
}

/// Drops the test's roles when it ends (after its database, declared after this, is dropped).
struct Roles {
    admin_url: Option<String>,
    names: Vec<String>,
}

impl Drop for Roles {
    fn drop(&mut self) {
        let Some(url) = self.admin_url.clone() else {
            return; // the throwaway cluster goes with the process
        };
        let names = self.names.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                use sqlx::Connection as _;
                if let Ok(mut admin) = sqlx::PgConnection::connect(&url).await {
                    for name in names {
                        let _ = admin
                            .execute(format!("DROP ROLE IF EXISTS {name}").as_str())
                            .await;
                    }
                }
            });
        })
        .join();
    }
}

fn leasewright(args: &[&str], url: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("runs leasewright");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn submit_request() -> SubmitJobRequest {
    use base64::Engine as _;
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: b"echo hi\n".to_vec(),
    }])
    .unwrap();
    SubmitJobRequest {
        command: "sh run.sh".into(),
        source_revision: "rev-1".into(),
        source_archive_base64: base64::engine::general_purpose::STANDARD.encode(&snapshot.archive),
        artifacts: vec![],
        target: None,
        target_kind: None,
    }
}

/// A control plane on `url` (as whatever role the URL names) runs a job from submission to
/// `passed`: every table, the sequences and the claim function, as that role.
async fn serve_a_job(
    url: &str,
    schema: &str,
    migrate: bool,
    project_name: &str,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        operator_token: Some(OPERATOR.into()),
        sweep_interval: None,
        schema: schema.into(),
        migrate,
        ..ServerConfig::default()
    };
    let server = app::start(url, Duration::from_secs(30), listener, config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let operator = OperatorClient::new(&server.url(), OPERATOR).unwrap();
    let project = operator.create_project(project_name).await.unwrap();
    let token = operator.create_runner(project, "r").await.unwrap().token;
    let job = operator
        .submit(project, &submit_request())
        .await
        .unwrap()
        .job;
    let runner = RunnerClient::new(&server.url(), &token, Duration::from_secs(30)).unwrap();
    let leases = runner.claim(1).await.unwrap();
    assert_eq!(leases.len(), 1, "a lease");
    let tuple = leases[0].tuple(None);
    runner.heartbeat(&tuple).await.unwrap();
    runner.log_append(&tuple, 0, b"hi\n").await.unwrap();
    runner.result(&tuple, "passed", "d").await.unwrap();
    operator.sweep().await.unwrap();
    assert_eq!(operator.job(project, job).await.unwrap().state, "passed");
    server.stop().await.unwrap();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_job_with_only_its_grants() {
    let mut roles = Roles {
        admin_url: std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()),
        names: Vec::new(),
    };
    let db = TestDatabase::create().await.expect("a test database");
    let prefix = db.name().to_owned();
    roles.names = ["owner", "server", "audit"]
        .iter()
        .map(|r| format!("{prefix}_{r}"))
        .collect();
    let blocks = role_sql(db.name(), &prefix);
    let admin = sqlx::PgPool::connect(db.url()).await.unwrap();
    let owner = as_role(db.url(), &format!("{prefix}_owner"), "owner-secret");
    let server = as_role(db.url(), &format!("{prefix}_server"), "server-secret");
    let auditor = as_role(db.url(), &format!("{prefix}_audit"), "audit-secret");

    // The owner makes the schema its own; migrate as the owner.
    admin.execute(blocks[0].as_str()).await.unwrap();
    let (code, out, err) = leasewright(&["migrate"], &owner);
    assert_eq!(code, 0, "migrate as the owner: {out}{err}");
    admin.execute(blocks[1].as_str()).await.unwrap();
    admin.execute(blocks[2].as_str()).await.unwrap();

    // The data-only role: the status, and a migrate with nothing to apply, need no CREATE.
    let (code, out, err) = leasewright(&["migrate", "--status"], &server);
    assert_eq!(
        code, 0,
        "migrate --status as the data-only role: {out}{err}"
    );
    assert!(!out.contains("pending"), "{out}");
    let (code, out, err) = leasewright(&["migrate", "--json"], &server);
    assert_eq!(
        code, 0,
        "migrate (up to date) as the data-only role: {out}{err}"
    );
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["applied_now"], serde_json::json!([]), "{doc}");
    // It may not write the schema: the grants are data-only.
    let server_pool = sqlx::PgPool::connect(&server).await.unwrap();
    let ddl = server_pool.execute("CREATE TABLE sneaky (x int)").await;
    assert!(ddl.is_err(), "the data-only role created a table");
    server_pool.close().await;

    // The control plane as the data-only role: by default (nothing to apply: no DDL) and with
    // --no-migrate.
    serve_a_job(&server, "leasewright", true, "migrating")
        .await
        .expect("serve as the data-only role");
    serve_a_job(&server, "leasewright", false, "no-migrate")
        .await
        .expect("serve --no-migrate as the data-only role");

    // audit as the read-only role: both jobs, clean.
    let (code, out, err) = leasewright(&["audit", "--json"], &auditor);
    assert_eq!(code, 0, "audit as the read-only role: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["jobs"], 2, "{report}");
    let (code, out, err) = leasewright(&["migrate", "--status"], &auditor);
    assert_eq!(
        code, 0,
        "migrate --status as the read-only role: {out}{err}"
    );

    // --no-migrate on a schema that lacks migrations: refused, saying what to run.
    let refused = serve_a_job(&server, "fresh", false, "x").await.unwrap_err();
    assert!(
        refused.contains("leasewright migrate --schema"),
        "{refused}"
    );

    // Errors that name their cause (issue 38 item 5), each cause said once. The data-only role
    // serving (and so migrating) a schema that does not exist: it may not create it.
    let refused = serve_a_job(&server, "missing", true, "x")
        .await
        .unwrap_err();
    assert!(
        refused.contains(
            "the schema missing does not exist, and this database role may not create it"
        ) && refused.contains("leasewright migrate --schema missing")
            && refused.matches("permission denied").count() == 1,
        "{refused}"
    );
    // prune as the read-only role: a missing privilege, not an unavailable database.
    let (code, out, err) = leasewright(&["prune", "--older-than", "1s", "--unaudited"], &auditor);
    assert_eq!(code, 2, "prune as the read-only role: {out}{err}");
    assert!(
        err.contains("the database role lacks a privilege this needs")
            && err.contains("docs/roles.md")
            && !err.contains("database unavailable")
            && err.matches("permission denied").count() == 1,
        "{err}"
    );
    admin.close().await;
    drop(db);
}
