//! The commands as a careless user would run them (issue 15, docs/reliability.md "Hardening"):
//! `serve` and the environment's database, tokens kept off the command line, the operator
//! command's artifact names and broken pipes. Real `leasewright` processes.

use leasewright_impl::database::TestDatabase;
use leasewright_server::app::{self, Server, ServerConfig};
use leasewright_server::client::OperatorClient;
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::SubmitJobRequest;
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OPERATOR: &str = "operator-secret";

/// A child process killed (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn leasewright() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasewright"));
    command
        .env_remove("LEASEWRIGHT_OPERATOR_TOKEN")
        .env_remove("LEASEWRIGHT_RUNNER_TOKEN")
        .stdin(Stdio::null());
    command
}

async fn start_server() -> (TestDatabase, Server) {
    let db = TestDatabase::create().await.expect("test database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        operator_token: Some(OPERATOR.into()),
        sweep_interval: None,
        ..ServerConfig::default()
    };
    let server = app::start(db.url(), Duration::from_secs(30), listener, config)
        .await
        .expect("server");
    (db, server)
}

/// `serve`'s stderr lines until it says where it listens: (those lines, the URL).
fn wait_listening(serve: &mut Child) -> (Vec<String>, String) {
    let stderr = serve.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("serve never said where it listens: {said:?}"));
        if let Some(url) = line.split("listening on ").nth(1) {
            return (said, url.trim().to_owned());
        }
        said.push(line);
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the process did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Finding 6: with `DATABASE_URL` set, `serve` started a throwaway cluster anyway and removed
/// every job at exit. Now it serves that database, and what it stored is there after it exits.
#[test]
fn serve_uses_the_database_of_database_url_and_keeps_its_data() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create()).unwrap();
    let mut serve = leasewright();
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--operator-token",
            OPERATOR,
        ])
        .env("DATABASE_URL", db.url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut serve = Proc(serve.spawn().unwrap());
    let (said, url) = wait_listening(&mut serve.0);
    assert!(
        !said.iter().any(|l| l.contains("throwaway")),
        "serve started a throwaway cluster with DATABASE_URL set: {said:?}"
    );
    let project = runtime
        .block_on(async {
            let operator = OperatorClient::new(&url, OPERATOR).unwrap();
            operator.create_project("kept").await
        })
        .unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(serve.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut serve.0, Duration::from_secs(60)).success());
    let stored: Option<String> = runtime.block_on(async {
        let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
        sqlx::query_scalar("SELECT name FROM projects WHERE id = $1")
            .bind(project)
            .fetch_optional(&pool)
            .await
            .unwrap()
    });
    assert_eq!(stored.as_deref(), Some("kept"));
}

fn submit_request() -> SubmitJobRequest {
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: b"echo hi\n".to_vec(),
    }])
    .unwrap();
    use base64::Engine as _;
    SubmitJobRequest {
        command: "sh run.sh".into(),
        source_revision: "rev-1".into(),
        source_archive_base64: base64::engine::general_purpose::STANDARD.encode(&snapshot.archive),
        artifacts: vec![],
        target: None,
        target_kind: None,
    }
}

/// Finding 7: `runner --token` and `op --operator-token` put the tokens in every local user's
/// `ps`. Now both come from a file or an environment variable, and without one the command
/// exits 2 saying where to put it.
#[test]
fn tokens_come_from_a_file_or_the_environment_and_stay_off_the_command_line() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_db, server) = runtime.block_on(start_server());
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();

    // op: the operator token from a file, then from the environment.
    let token_file = dir.path().join("operator-token");
    std::fs::write(&token_file, format!("{OPERATOR}\n")).unwrap();
    // Readable by its owner only: a token file others may read is refused (exit_codes.rs).
    let owner_only = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
    std::fs::set_permissions(&token_file, owner_only).unwrap();
    let from_file = leasewright()
        .args(["op", "--server", &url, "--operator-token-file"])
        .arg(&token_file)
        .args(["project", "from-file"])
        .output()
        .unwrap();
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    let project: uuid::Uuid = String::from_utf8(from_file.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let from_env = leasewright()
        .args(["op", "--server", &url, "runner"])
        .arg(project.to_string())
        .arg("r")
        .env("LEASEWRIGHT_OPERATOR_TOKEN", OPERATOR)
        .output()
        .unwrap();
    assert!(
        from_env.status.success(),
        "{}",
        String::from_utf8_lossy(&from_env.stderr)
    );
    let runner_token = String::from_utf8(from_env.stdout)
        .unwrap()
        .trim()
        .to_owned();
    assert!(runner_token.starts_with("lw_"), "{runner_token}");

    // Without a token: exit 2, and the message says where to put it.
    let none = leasewright()
        .args(["op", "--server", &url, "project", "nothing"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("LEASEWRIGHT_OPERATOR_TOKEN"));

    // runner: the token from the environment; it runs a job, and its command line holds no token.
    let operator = OperatorClient::new(&url, OPERATOR).unwrap();
    let job = runtime
        .block_on(operator.submit(project, &submit_request()))
        .unwrap()
        .job;
    let mut runner = leasewright();
    runner
        .args(["runner", "--server", &url, "--max-jobs", "1"])
        .args(["--poll-interval-ms", "100", "--workdir"])
        .arg(dir.path().join("work"))
        .env("LEASEWRIGHT_RUNNER_TOKEN", &runner_token)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut runner = Proc(runner.spawn().unwrap());
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", runner.0.id())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&runner_token[3..]),
        "the runner's command line holds its token"
    );
    assert!(wait_exit(&mut runner.0, Duration::from_secs(60)).success());
    let state = runtime.block_on(operator.job(project, job)).unwrap().state;
    assert_eq!(state, "passed");
    let no_token = leasewright()
        .args(["runner", "--server", &url, "--max-jobs", "1"])
        .output()
        .unwrap();
    assert_eq!(no_token.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("LEASEWRIGHT_RUNNER_TOKEN"));
}

/// Finding 8: `serve --lease-ttl 1e30` panicked at start and `1e13` made every claim panic. Now
/// the ttl must be 1 s to 1 day: exit 2 with a message, before anything starts.
#[test]
fn a_lease_ttl_outside_one_second_to_one_day_is_refused_with_exit_2() {
    for ttl in ["1e30", "1e13", "86401", "0.5", "0", "-1", "NaN", "inf"] {
        let output = leasewright()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .arg(format!("--lease-ttl={ttl}"))
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "--lease-ttl {ttl}: {stderr}");
        assert!(
            stderr.contains("--lease-ttl must be between"),
            "{ttl}: {stderr}"
        );
    }
}

/// Finding 8: `op ledger | head` panicked on the broken pipe. Now it ends quietly, status 0.
#[test]
fn op_output_into_a_closed_pipe_ends_quietly() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_db, server) = runtime.block_on(start_server());
    let url = server.url();
    let operator = OperatorClient::new(&url, OPERATOR).unwrap();
    let project = runtime.block_on(operator.create_project("p")).unwrap();
    let job = runtime
        .block_on(operator.submit(project, &submit_request()))
        .unwrap()
        .job;
    // A pipe whose reader is already gone.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = leasewright()
        .args([
            "op",
            "--server",
            &url,
            "--operator-token",
            OPERATOR,
            "ledger",
        ])
        .arg(project.to_string())
        .arg(job.to_string())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

/// Finding 9: three real `serve` processes on one database, each sweeping on its own, every
/// request of a runner or the operator sent to any of them, one killed with SIGKILL and started
/// again every second, with every other fault on: the history is checked against the model and
/// must be clean (0 lost results, 0 stale acceptances, 0 double claims).
#[test]
fn stress_over_three_serve_replicas_killed_and_restarted_keeps_a_clean_history() {
    let output = leasewright()
        .args([
            "stress",
            "--http",
            "--replicas",
            "3",
            "--runners",
            "16",
            "--ops",
            "2000",
            "--seed",
            "7",
            "--faults",
            "all",
            "--fault-interval",
            "1",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("stress runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("a JSON summary ({e}); stderr:\n{stderr}"));
    let report = &summary["report"];
    assert_eq!(
        output.status.code(),
        Some(0),
        "violations: {}\nstderr:\n{stderr}",
        report["violations"]
    );
    assert!(report["operations"].as_u64().unwrap() >= 2000, "{summary}");
    for zero in ["lost_results", "stale_acceptances", "double_claims"] {
        assert_eq!(report[zero], 0, "{zero}: {summary}");
    }
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0));
    // The faults happened: replicas killed and restarted, requests duplicated.
    let faults = &summary["faults"];
    assert!(
        faults["server_restarts"].as_u64().unwrap() >= 3,
        "{summary}"
    );
    assert!(
        faults["proxy_duplicates"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert!(
        summary["faults_on"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "kill-replica"),
        "{summary}"
    );
}
