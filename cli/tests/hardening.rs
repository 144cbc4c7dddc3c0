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

/// `serve` on `database_url` (in `DATABASE_URL`), any free port, with `extra` flags; its
/// stderr piped.
fn spawn_serve(database_url: &str, extra: &[&str]) -> Proc {
    let mut serve = leasewright();
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--operator-token",
            OPERATOR,
        ])
        .args(extra)
        .env("DATABASE_URL", database_url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Proc(serve.spawn().unwrap())
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
    let mut serve = spawn_serve(db.url(), &[]);
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

/// `serve`'s stderr, line by line, on a channel (read on a thread of its own, so the pipe never
/// fills).
fn stderr_lines(serve: &mut Child) -> std::sync::mpsc::Receiver<String> {
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
    rx
}

/// The first line `lines` gives that contains `wanted` (the lines before it are dropped).
fn wait_line(lines: &std::sync::mpsc::Receiver<String>, wanted: &str) -> String {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("serve never printed a line with {wanted:?}"));
        if line.contains(wanted) {
            return line;
        }
    }
}

fn send_sigterm(child: &Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
}

/// Issue 36, item 7: the flaky `serve_uses_the_database_of_database_url_and_keeps_its_data`.
/// Its cause: `serve` installed its SIGTERM handler only after it printed where it listens, so
/// a SIGTERM sent at once (the test sends it after one request, which a loaded machine can
/// answer before the main task runs again) killed the process with the signal's default
/// action: no clean exit. Now the handler is installed before anything else is done; a SIGTERM
/// while the server is still starting (here: when it has logged its database, before it
/// migrates and listens) ends it with exit 0.
#[test]
fn serve_exits_0_on_a_sigterm_that_comes_before_it_is_ready() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create()).unwrap();
    let mut serve = spawn_serve(db.url(), &[]);
    let lines = stderr_lines(&mut serve.0);
    // The log line of the database it connected to: the server is not listening yet.
    wait_line(&lines, "address=");
    send_sigterm(&serve.0);
    let status = wait_exit(&mut serve.0, Duration::from_secs(120));
    assert!(status.success(), "serve after an early SIGTERM: {status:?}");
}

/// Issue 36, item 7: on SIGTERM `serve` takes no more work, closes its idle keep-alive
/// connections at once (never waits for them), answers a request still running after
/// `--shutdown-grace-ms` `503 shutting_down`, and exits 0. Every other timeout is 10 minutes
/// here, so only the shutdown's own bound can end the stalled request or the idle connection.
#[test]
fn serve_answers_what_is_in_flight_within_its_grace_and_exits_0() {
    use std::io::{Read as _, Write as _};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create()).unwrap();
    let mut serve = spawn_serve(
        db.url(),
        &[
            "--shutdown-grace-ms",
            "300",
            "--header-read-timeout-ms",
            "600000",
            "--body-read-timeout-ms",
            "600000",
            "--request-timeout-ms",
            "600000",
        ],
    );
    let lines = stderr_lines(&mut serve.0);
    let line = wait_line(&lines, "listening on ");
    let url = line
        .split("listening on ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    let connect = || {
        let stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        stream
    };
    let read_until_closed = |mut stream: std::net::TcpStream| {
        let mut received = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => return String::from_utf8_lossy(&received).into_owned(),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return String::from_utf8_lossy(&received).into_owned()
                }
                Err(e) => panic!("the server never closed the connection: {e}"),
            }
        }
    };
    // An idle kept-alive connection: one answered request, then nothing.
    let mut idle = connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: leasewright\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !answer.ends_with(b"}") {
        let n = idle.read(&mut buffer).unwrap();
        assert!(n > 0, "the kept-alive request got no answer");
        answer.extend_from_slice(&buffer[..n]);
    }
    // A request in flight: an operator's project creation whose body stops half-way.
    let mut stalled = connect();
    stalled
        .write_all(
            format!(
                "POST /v1/projects HTTP/1.1\r\nHost: leasewright\r\nAuthorization: Bearer \
                 {OPERATOR}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n\
                 {{\"name\": "
            )
            .as_bytes(),
        )
        .unwrap();
    // It is in flight once the server counts it (a bounded poll of /metrics).
    let in_flight = || {
        let mut metrics = connect();
        metrics
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: leasewright\r\nConnection: close\r\n\r\n")
            .unwrap();
        let text = read_until_closed(metrics);
        text.lines()
            .find_map(|l| l.strip_prefix("leasewright_requests_in_flight "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut polls = 0;
    while in_flight() < 1.0 {
        polls += 1;
        assert!(polls < 6000, "the stalled request never reached the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    send_sigterm(&serve.0);
    let stalled_answer = read_until_closed(stalled);
    assert!(
        stalled_answer.starts_with("HTTP/1.1 503") && stalled_answer.contains("shutting_down"),
        "the request in flight at the shutdown: {stalled_answer:?}"
    );
    assert_eq!(
        read_until_closed(idle),
        "",
        "the idle connection got an answer"
    );
    let status = wait_exit(&mut serve.0, Duration::from_secs(120));
    assert!(status.success(), "serve after SIGTERM: {status:?}");
    wait_line(&lines, "leasewright: stopped");
}

/// Issue 36, item 5: `--max-clock-skew-ms` had no upper bound, and the database keeps the
/// largest any server recorded: one server started with 10^12 ms stopped the sweep of every
/// server for good. Now `serve` refuses anything past one minute with exit 2 and a message,
/// before it touches a database, and `migrate --set-max-clock-skew-ms` takes the same range.
#[test]
fn the_max_clock_skew_is_bounded_like_the_lease_ttl() {
    for value in ["0", "60001", "1000000000000"] {
        let output = leasewright()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--max-clock-skew-ms",
                value,
            ])
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains("--max-clock-skew-ms must be between 1 and 60000 milliseconds"),
            "{value}: {stderr}"
        );
    }
    let output = leasewright()
        .args(["migrate", "--set-max-clock-skew-ms", "60001"])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
}

/// Issue 36, item 5: a database URL whose password holds an unencoded `/` or `?` printed the
/// password's first characters (as a port, a host or a parameter). Every command that takes a
/// URL now says what is wrong without quoting any of it.
#[test]
fn a_malformed_database_url_never_shows_its_password() {
    for url in [
        "postgres://leasewright:s3cr/et9@127.0.0.1:5432/app",
        "postgres://leasewright:s3cr?et9@127.0.0.1:5432/app",
        "postgres://leasewright:s3cr?a=et9@127.0.0.1:5432/app",
        "postgres://leasewright:s3cr#et9@127.0.0.1:5432/app",
    ] {
        for command in [
            &["serve", "--listen", "127.0.0.1:0"][..],
            &["migrate"][..],
            &["audit"][..],
        ] {
            let output = leasewright()
                .args(command)
                .env("DATABASE_URL", url)
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(output.status.code(), Some(2), "{command:?} {url}: {said}");
            for piece in ["s3cr", "et9"] {
                assert!(!said.contains(piece), "{command:?} {url}: {said}");
            }
        }
    }
}

/// Issue 36, item 5: `migrate` into a schema holding another application's types, enums,
/// domains or functions failed halfway and left `_sqlx_migrations` (and with a function,
/// tables) behind. Now any object it did not create is refused before anything is written.
#[test]
fn migrate_refuses_a_schema_holding_types_domains_functions_or_sequences_before_writing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create()).unwrap();
    let objects = [
        ("enum", "CREATE TYPE {s}.mood AS ENUM ('ok', 'not ok')"),
        (
            "domain",
            "CREATE DOMAIN {s}.positive AS integer CHECK (VALUE > 0)",
        ),
        ("type", "CREATE TYPE {s}.pair AS (a integer, b integer)"),
        (
            "range type",
            "CREATE TYPE {s}.span AS RANGE (subtype = integer)",
        ),
        (
            "function",
            "CREATE FUNCTION {s}.claim(uuid, bigint, timestamptz, timestamptz) RETURNS integer \
             LANGUAGE sql AS 'SELECT 1'",
        ),
        ("sequence", "CREATE SEQUENCE {s}.counter"),
        ("view", "CREATE VIEW {s}.answer AS SELECT 42 AS value"),
    ];
    let catalog = |schema: String| {
        runtime.block_on(async {
            let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
            let count: i64 = sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n \
                         ON n.oid = c.relnamespace WHERE n.nspname = $1) \
                      + (SELECT count(*) FROM pg_type t JOIN pg_namespace n \
                         ON n.oid = t.typnamespace WHERE n.nspname = $1) \
                      + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n \
                         ON n.oid = p.pronamespace WHERE n.nspname = $1)",
            )
            .bind(schema)
            .fetch_one(&pool)
            .await
            .unwrap();
            pool.close().await;
            count
        })
    };
    for (i, (kind, create)) in objects.iter().enumerate() {
        let schema = format!("other_{i}");
        runtime.block_on(async {
            let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&pool)
                .await
                .unwrap();
            sqlx::query(&create.replace("{s}", &schema))
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        });
        let before = catalog(schema.clone());
        let output = leasewright()
            .args(["migrate", "--schema", &schema])
            .env("DATABASE_URL", db.url())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{kind}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "the schema {schema} holds objects leasewright did not create"
            )) && stderr.contains(kind),
            "{kind}: {stderr}"
        );
        assert_eq!(
            catalog(schema.clone()),
            before,
            "{kind}: something was written"
        );
    }
}

/// Issue 36, item 8: docs/http.md's flag lists of `serve` and `runner` are exactly the flags of
/// their `--help`, in the same order (a flag added without its line in the docs fails here).
#[test]
fn the_documented_flags_of_serve_and_runner_are_their_help() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/http.md")).unwrap();
    for command in ["serve", "runner"] {
        let help = leasewright().args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        let from_help: Vec<&str> = help
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("--"))
            .filter_map(|l| l.split([' ', ',', '=']).next())
            .filter(|f| *f != "help")
            .collect();
        let start = docs
            .find(&format!("\nleasewright {command} "))
            .unwrap_or_else(|| panic!("docs/http.md has no `leasewright {command}` block"));
        let block = &docs[start..start + docs[start..].find("```").unwrap()];
        let mut from_docs: Vec<&str> = Vec::new();
        for piece in block.split("--").skip(1) {
            let flag = piece
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap();
            if !from_docs.contains(&flag) {
                from_docs.push(flag);
            }
        }
        assert_eq!(
            from_docs, from_help,
            "docs/http.md's `leasewright {command}` block"
        );
    }
}
