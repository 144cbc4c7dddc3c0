//! What an operator expects of `leasewright op` (issue 30): `op jobs` filtered by state and
//! paginated, `op job --wait --timeout`, one JSON document per command.

use leasewright_impl::database::TestDatabase;
use leasewright_server::app::{self, Server, ServerConfig};
use leasewright_server::client::{OperatorClient, RunnerClient};
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::SubmitJobRequest;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

const OPERATOR: &str = "operator-secret";

async fn start_server() -> (TestDatabase, Server) {
    start_server_on(false).await
}

/// A server on a fresh database; `manual_clock`: on the test clock (`POST /v1/test/clock`).
async fn start_server_on(manual_clock: bool) -> (TestDatabase, Server) {
    let db = TestDatabase::create().await.expect("test database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        operator_token: Some(OPERATOR.into()),
        sweep_interval: None,
        manual_clock,
        ..ServerConfig::default()
    };
    let server = app::start(db.url(), Duration::from_secs(30), listener, config)
        .await
        .expect("server");
    (db, server)
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

/// `op ARGS` against `url`: (exit code, stdout, stderr).
fn op(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["op", "--server", url])
        .args(args)
        .env("LEASEWRIGHT_OPERATOR_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .output()
        .expect("runs leasewright op");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The whole of `stdout` as one JSON document (two documents, or none, fail).
fn one_document(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout}"))
}

fn ids(page: &Value) -> Vec<String> {
    page["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("jobs in {page}"))
        .iter()
        .map(|j| j["job"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_lists_jobs_by_state_page_by_page_and_prints_one_document_per_command() {
    let (_db, server) = start_server().await;
    let url = server.url();
    let operator = OperatorClient::new(&url, OPERATOR).unwrap();
    let project = operator.create_project("p").await.unwrap();
    let token = operator.create_runner(project, "r").await.unwrap().token;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(
            operator
                .submit(project, &submit_request())
                .await
                .unwrap()
                .job
                .to_string(),
        );
    }
    // The first job runs to `passed`; the other two stay queued.
    let runner = RunnerClient::new(&url, &token, Duration::from_secs(30)).unwrap();
    let lease = runner.claim(1).await.unwrap().remove(0);
    assert_eq!(lease.job.to_string(), jobs[0]);
    runner
        .result(&lease.tuple(None), "passed", "d")
        .await
        .unwrap();
    let project = project.to_string();

    let (code, out, err) = op(&url, &["jobs", &project]);
    assert_eq!(code, 0, "{err}");
    let all = one_document(&out);
    assert_eq!(ids(&all), jobs);
    assert!(all.get("next").is_none(), "{all}");

    // Pages of two: the cursor of the first page gives the rest.
    let (code, out, err) = op(&url, &["jobs", &project, "--limit", "2"]);
    assert_eq!(code, 0, "{err}");
    let first = one_document(&out);
    assert_eq!(ids(&first), jobs[..2]);
    let next = first["next"].as_i64().expect("a next cursor").to_string();
    let (code, out, err) = op(&url, &["jobs", &project, "--limit", "2", "--after", &next]);
    assert_eq!(code, 0, "{err}");
    let second = one_document(&out);
    assert_eq!(ids(&second), jobs[2..]);
    assert!(second.get("next").is_none(), "{second}");

    // By state.
    let (_, out, _) = op(&url, &["jobs", &project, "--state", "queued"]);
    assert_eq!(ids(&one_document(&out)), jobs[1..]);
    let (_, out, _) = op(&url, &["jobs", &project, "--state", "passed"]);
    assert_eq!(ids(&one_document(&out)), jobs[..1]);
    let (_, out, _) = op(&url, &["jobs", &project, "--state", "uncertain"]);
    assert_eq!(ids(&one_document(&out)), Vec::<String>::new());
    let (code, _, err) = op(&url, &["jobs", &project, "--state", "sideways"]);
    assert_eq!(code, 2, "{err}");

    // The ledger: one document with both the attempts and the observations.
    let (code, out, err) = op(&url, &["ledger", &project, &jobs[0]]);
    assert_eq!(code, 0, "{err}");
    let ledger = one_document(&out);
    assert_eq!(ledger["attempts"].as_array().unwrap().len(), 1, "{ledger}");
    assert!(
        ledger["observations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["kind"] == "result"),
        "{ledger}"
    );

    // --wait --timeout: a job that settles is printed with exit 0; one that does not within the
    // timeout is printed as it stands, with exit 1 and a line saying so.
    let (code, out, err) = op(
        &url,
        &["job", &project, &jobs[0], "--wait", "--timeout", "5"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(one_document(&out)["state"], "passed");
    let (code, out, err) = op(
        &url,
        &["job", &project, &jobs[1], "--wait", "--timeout", "1"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(one_document(&out)["state"], "queued");
    assert!(err.contains("still queued after 1 s"), "{err}");
    // --timeout without --wait is bad usage.
    let (code, _, err) = op(&url, &["job", &project, &jobs[1], "--timeout", "1"]);
    assert_eq!(code, 2, "{err}");
    server.stop().await.unwrap();
}

/// `op runners` lists a project's runners page by page, `op runner revoke` revokes one (its token
/// is refused from then on), each printing one JSON document; another project's revoke does not
/// find the runner (exit 2, `unknown_runner`), and `op runner PROJECT NAME` still creates one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_lists_runners_and_revokes_one_whose_token_is_then_refused() {
    let (_db, server) = start_server().await;
    let url = server.url();
    let operator = OperatorClient::new(&url, OPERATOR).unwrap();
    let project = operator.create_project("p").await.unwrap();
    let other = operator.create_project("other").await.unwrap();
    let first = operator.create_runner(project, "first").await.unwrap();
    let (code, token, stderr) = op(&url, &["runner", &project.to_string(), "second"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(token.trim().starts_with("lw_"), "{token}");
    operator.submit(project, &submit_request()).await.unwrap();
    let runner = RunnerClient::new(&url, &first.token, Duration::from_secs(10)).unwrap();
    runner.claim(1).await.unwrap();

    let (code, stdout, stderr) = op(&url, &["runners", &project.to_string(), "--limit", "1"]);
    assert_eq!(code, 0, "{stderr}");
    let page = one_document(&stdout);
    assert_eq!(page["runners"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["runners"][0]["runner"], first.runner.to_string());
    assert_eq!(page["runners"][0]["name"], "first");
    assert!(page["runners"][0].get("revoked_at").is_none(), "{page}");
    let next = page["next"].as_i64().expect("a next page").to_string();
    let (code, stdout, _) = op(
        &url,
        &[
            "runners",
            &project.to_string(),
            "--limit",
            "1",
            "--after",
            &next,
        ],
    );
    assert_eq!(code, 0);
    let rest = one_document(&stdout);
    assert_eq!(rest["runners"][0]["name"], "second", "{rest}");
    assert!(rest.get("next").is_none(), "{rest}");

    // Another project's revoke finds no such runner and revokes nothing.
    let (code, stdout, stderr) = op(
        &url,
        &[
            "runner",
            "revoke",
            &other.to_string(),
            &first.runner.to_string(),
        ],
    );
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(stderr.contains("unknown_runner"), "{stderr}");
    assert!(runner.claim(1).await.is_ok(), "still authenticated");

    let (code, stdout, stderr) = op(
        &url,
        &[
            "runner",
            "revoke",
            &project.to_string(),
            &first.runner.to_string(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let revoked = one_document(&stdout);
    assert_eq!(revoked["runner"], first.runner.to_string());
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let refused = runner
        .claim(1)
        .await
        .expect_err("a revoked token is refused");
    assert!(refused.to_string().contains("401"), "{refused}");

    let (code, stdout, _) = op(&url, &["runners", &project.to_string()]);
    assert_eq!(code, 0);
    let all = one_document(&stdout);
    assert_eq!(
        all["runners"][0]["revoked_at"], revoked["revoked_at"],
        "{all}"
    );
    assert!(all["runners"][1].get("revoked_at").is_none(), "{all}");
    // Misuse is a usage error.
    let (code, _, _) = op(&url, &["runner", "revoke", &project.to_string()]);
    assert_eq!(code, 2);
    let (code, _, _) = op(&url, &["runners", &project.to_string(), "--limit", "0"]);
    assert_eq!(code, 2);
}

/// `op submit --git` on a directory that is not a git repository says what git said (issue 38
/// item 5), before any request is sent (no server listens at this URL).
#[test]
fn submit_git_outside_a_repository_shows_gits_own_message() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().to_str().unwrap();
    let (code, out, err) = op(
        "http://127.0.0.1:9",
        &[
            "submit",
            "00000000-0000-0000-0000-000000000001",
            "--git",
            "HEAD",
            "--repo",
            repo,
            "--command",
            "true",
        ],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("git says: fatal: not a git repository"),
        "{err}"
    );
}

/// `op` reaches what the operator routes offer (issue 38 item 5): an earlier attempt's log, log
/// chunks and artifact (`--attempt`), the reconciliations, a cache entry and a target slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_reads_an_earlier_attempt_the_reconciliations_the_cache_and_a_target() {
    let (db, server) = start_server_on(true).await;
    let url = server.url();
    let operator = OperatorClient::new(&url, OPERATOR).unwrap();
    let project = operator.create_project("reads").await.unwrap();
    let token = operator.create_runner(project, "r").await.unwrap().token;
    let slot = format!("web-{project}");
    let request = SubmitJobRequest {
        target: Some(slot.clone()),
        target_kind: Some("fenced".into()),
        ..submit_request()
    };
    let job = operator.submit(project, &request).await.unwrap().job;
    let runner = RunnerClient::new(&url, &token, Duration::from_secs(30)).unwrap();

    // The first attempt logs, stores an artifact and a cache entry, then its runner goes silent:
    // the lease runs out, the sweep makes the job uncertain, the operator retries it.
    let first = runner.claim(1).await.unwrap().remove(0);
    let tuple = first.tuple(None);
    runner
        .log_append(&tuple, 0, b"first attempt\n")
        .await
        .unwrap();
    runner
        .artifact_put(&tuple, "out.txt", b"one")
        .await
        .unwrap();
    runner.cache_put(&tuple, "deps", b"cached").await.unwrap();
    operator.advance_clock(40_000).await.unwrap();
    operator.sweep().await.unwrap();
    assert_eq!(operator.job(project, job).await.unwrap().state, "uncertain");
    operator
        .reconcile(project, job, "stopped", "retry")
        .await
        .unwrap();
    let second = runner.claim(1).await.unwrap().remove(0);
    let tuple = second.tuple(None);
    runner
        .log_append(&tuple, 0, b"second attempt\n")
        .await
        .unwrap();
    runner
        .artifact_put(&tuple, "out.txt", b"two")
        .await
        .unwrap();
    // The second attempt deploys to its fenced slot (through the implementation's demo target,
    // what the server's deploy route calls).
    use leasewright_impl::TargetAdapter as _;
    let store = db
        .store(
            std::sync::Arc::new(leasewright_impl::SystemClock),
            leasewright_impl::StoreConfig::default(),
        )
        .await
        .unwrap();
    store
        .demo_target(leasewright_impl::TargetKind::Fenced, &slot)
        .await
        .unwrap()
        .mutate(&leasewright_impl::TargetMutation {
            job: leasewright_impl::JobId(job),
            attempt: leasewright_impl::AttemptId(second.attempt),
            slot_token: second.slot_token,
            deployment_id: job.to_string(),
        })
        .await
        .unwrap();

    let (p, j, a) = (
        project.to_string(),
        job.to_string(),
        first.attempt.to_string(),
    );
    let ran = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| {
            let (code, out, err) = op(&url, args);
            assert_eq!(code, 0, "op {args:?}: {err}");
            out
        };
        (
            run(&["logs", &p, &j]),
            run(&["logs", &p, &j, "--attempt", &a]),
            run(&["artifact", &p, &j, "out.txt", "--attempt", &a]),
            run(&["artifact", &p, &j, "out.txt"]),
            one_document(&run(&["log-chunks", &p, &j, "--attempt", &a])),
            one_document(&run(&["reconciliations", &p, &j])),
            one_document(&run(&["cache", &p, "deps"])),
            one_document(&run(&["target", &slot])),
        )
    })
    .await
    .unwrap();
    let (log_now, log_first, artifact_first, artifact_now, chunks, reconciliations, cache, target) =
        ran;
    assert_eq!(log_now, "second attempt\n");
    assert_eq!(log_first, "first attempt\n");
    assert_eq!(artifact_first, "one");
    assert_eq!(artifact_now, "two");
    assert_eq!(chunks.as_array().map(Vec::len), Some(1), "{chunks}");
    assert_eq!(chunks[0]["seq"], 0, "{chunks}");
    let reconciliations = reconciliations.as_array().expect("a list").clone();
    assert_eq!(reconciliations.len(), 1, "{reconciliations:?}");
    assert_eq!(reconciliations[0]["finding"], "stopped");
    assert_eq!(reconciliations[0]["decision"], "retry");
    assert_eq!(cache["key"], "deps", "{cache}");
    assert_eq!(target["slot"], serde_json::json!(second.target), "{target}");
    assert_eq!(target["kind"], "fenced", "{target}");
    assert_eq!(target["highest_slot_token"], second.slot_token, "{target}");
    server.stop().await.unwrap();
}
