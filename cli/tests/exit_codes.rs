//! One exit-code contract for every subcommand: 0 success, 1 a protocol violation or a
//! divergence, 2 bad arguments or a setup failure; arguments are checked before any database is
//! started, a refused database connection is reported at once with its address (never its
//! password), and every `--json` document carries `schema_version`.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

fn leasewright(args: &[&str]) -> (i32, String, String, Duration) {
    let started = Instant::now();
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .expect("runs leasewright");
    (
        status.code().expect("an exit code"),
        String::from_utf8(stdout).expect("utf-8"),
        String::from_utf8(stderr).expect("utf-8"),
        started.elapsed(),
    )
}

/// Nothing listens here: connections are refused at once.
const REFUSED_DB: &str = "postgres://postgres:s3cret@127.0.0.1:1/postgres";

#[test]
fn bad_arguments_are_exit_2_for_every_subcommand() {
    for args in [
        &["check", "--target", "sideways"][..],
        &["conform", "--suite", "everything"],
        &["conform", "--parallel", "0"],
        &["bench", "claims", "--concurrency", "many"],
        &["serve", "--listen", "not-an-address"],
        &["serve", "--lease-ttl", "0", "--database-url", REFUSED_DB],
        &["runner", "--server", "http://127.0.0.1:9"],
        &["op", "project", "p"],
        &["stress", "--runners", "0"],
        &["stress", "--schema", "Robert'); DROP"],
        &["bench", "claims", "--schema", "Robert'); DROP"],
        &["no-such-command"],
    ] {
        let (code, _, err, _) = leasewright(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?} says nothing");
    }
}

#[test]
fn arguments_are_checked_before_any_database_is_started() {
    for args in [
        &["conform", "--replay", "/nonexistent/trace.itf.json"][..],
        &["bench", "claims", "--duration", "0"],
        &["bench", "sustained", "--interval", "0"],
    ] {
        let (code, _, err, _) = leasewright(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            !err.contains("throwaway"),
            "{args:?} started a cluster: {err}"
        );
    }
}

#[test]
fn a_refused_database_is_exit_2_at_once_with_its_address_and_without_its_password() {
    for args in [
        &[
            "conform",
            "--suite",
            "scenarios",
            "--database-url",
            REFUSED_DB,
        ][..],
        &["serve", "--database-url", REFUSED_DB],
        &["stress", "--ops", "10", "--database-url", REFUSED_DB],
    ] {
        let (code, _, err, took) = leasewright(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("s3cret"),
            "{args:?} printed the password: {err}"
        );
        // A pool would retry for its 30 s acquire timeout.
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
    }
}

/// `serve` on a standby: exit 2 at once, naming the host and what it is (issue 26). Needs the
/// PostgreSQL server binaries (a primary and a streaming standby of its own).
#[test]
fn serve_on_a_standby_exits_2_naming_it() {
    use leasewright_impl::database::{Cluster, HarnessError};
    let primary = match Cluster::start_private() {
        Ok(cluster) => cluster,
        Err(HarnessError::NoBinaries) => {
            eprintln!("SKIPPED: no PostgreSQL server binaries for a standby");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let standby = primary.start_standby().expect("a streaming standby");
    let url = standby.url("postgres");
    let (code, _, err, _) =
        leasewright(&["serve", "--listen", "127.0.0.1:0", "--database-url", &url]);
    assert_eq!(code, 2, "{err}");
    let address = format!("127.0.0.1:{}", standby.port());
    assert!(
        err.contains(&address) && err.contains("standby") && err.contains("pg_is_in_recovery()"),
        "{err}"
    );
    // Listing the primary after the standby, `migrate --status` finds the primary.
    let both = format!(
        "postgres://postgres@{address},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port()
    );
    let (code, out, err, _) = leasewright(&["migrate", "--status", "--database-url", &both]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn secrets_come_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["op", "--server", "http://127.0.0.1:9", "project", "p"])
        .env("LEASEWRIGHT_OPERATOR_TOKEN", "t")
        .output()
        .expect("runs leasewright");
    let err = String::from_utf8_lossy(&out.stderr);
    // Past argument parsing: it tried the server.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
    let help = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["runner", "--help"])
        .env("LEASEWRIGHT_RUNNER_TOKEN", "do-not-show")
        .output()
        .expect("runs leasewright");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("LEASEWRIGHT_RUNNER_TOKEN"), "{help}");
    assert!(!help.contains("do-not-show"), "{help}");
    // conform --http: the operator token from the environment (past the token check, it tried
    // the server); without it, the error names the variable.
    for (token, expected) in [
        (Some("t"), "127.0.0.1:9"),
        (None, "LEASEWRIGHT_OPERATOR_TOKEN"),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasewright"));
        command
            .args([
                "conform",
                "--http",
                "http://127.0.0.1:9",
                "--suite",
                "scenarios",
            ])
            .env_remove("LEASEWRIGHT_OPERATOR_TOKEN");
        if let Some(token) = token {
            command.env("LEASEWRIGHT_OPERATOR_TOKEN", token);
        }
        let out = command.output().expect("runs leasewright");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expected), "{err}");
    }
}

/// `--database-url` defaults to $DATABASE_URL (clap's `env`), which keeps the password off the
/// command line: every subcommand that takes a database reads it, none shows it in `--help`,
/// and the commands that reach no database of ours (`conform --export`, `--http`,
/// `--driver-cmd`) ignore it but still refuse an explicit `--database-url`.
#[test]
fn the_database_url_comes_from_the_environment_and_stays_hidden() {
    let run = |args: &[&str], url: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
            .args(args)
            .env("DATABASE_URL", url)
            .output()
            .expect("runs leasewright");
        (
            out.status.code().expect("an exit code"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for args in [
        &["serve"][..],
        &["stress", "--ops", "10"],
        &["conform", "--suite", "scenarios"],
        &["audit"],
        &["migrate"],
        &["bench", "claims", "--duration", "1"],
    ] {
        let (code, _, err) = run(args, REFUSED_DB);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
            "{args:?} did not use DATABASE_URL: {err}"
        );
        assert!(
            !err.contains("s3cret"),
            "{args:?} printed the password: {err}"
        );
        let mut help_args = args[..1].to_vec();
        if args[0] == "bench" {
            help_args.push("claims");
        }
        help_args.push("--help");
        let (_, help, _) = run(&help_args, REFUSED_DB);
        assert!(help.contains("DATABASE_URL"), "{help_args:?}: {help}");
        assert!(
            !help.contains("s3cret"),
            "{help_args:?} shows the URL: {help}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("corpus");
    let export = export.to_str().unwrap();
    let (code, _, err) = run(
        &["conform", "--suite", "scenarios", "--export", export],
        REFUSED_DB,
    );
    assert_eq!(code, 0, "DATABASE_URL is not --database-url: {err}");
    let (code, _, err) = run(
        &[
            "conform",
            "--suite",
            "scenarios",
            "--export",
            export,
            "--database-url",
            REFUSED_DB,
        ],
        REFUSED_DB,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--database-url cannot be used with --export"),
        "{err}"
    );
}

#[test]
fn an_unreachable_server_is_exit_2() {
    let (code, _, err, _) = leasewright(&[
        "op",
        "--server",
        "http://127.0.0.1:9",
        "--operator-token",
        "t",
        "project",
        "p",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
}

#[test]
fn check_writes_junit_and_its_json_has_a_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().to_str().unwrap();
    let junit = dir.path().join("check.xml");
    let (code, out, err, _) = leasewright(&[
        "check",
        "--jobs",
        "1",
        "--ttl",
        "2",
        "--disconnects",
        "--json",
        "--traces",
        traces,
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["schema_version"], 1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let properties = doc["properties"].as_array().unwrap().len();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit that parses");
    assert_eq!(
        report.name.as_ref().map(|n| n.as_str()),
        Some("leasewright check")
    );
    assert_eq!((report.tests, report.failures), (properties, 0), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");

    // A flawed variant: exit 1, and its violated property is a failure with the counterexample.
    let (code, _, err, _) = leasewright(&[
        "check",
        "--variant",
        "requeue-on-expiry",
        "--traces",
        traces,
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("type=\"violation\""), "{xml}");
    assert!(xml.contains("ITF trace: "), "{xml}");
    assert!(xml.contains("classname=\"check.always\""), "{xml}");
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit that parses");
    assert!(report.failures >= 1, "{xml}");
}

/// Issue 30: `check --threads 0`, `runner --max-jobs 0`, `conform --steps 0` and other counts
/// where zero makes no sense were accepted silently. Each is bad usage now: exit 2 naming the
/// flag.
#[test]
fn zero_where_zero_makes_no_sense_is_exit_2() {
    let job = "00000000-0000-0000-0000-000000000001";
    for args in [
        &["check", "--threads", "0"][..],
        &["check", "--jobs", "0"],
        &["check", "--runners", "0"],
        &["check", "--attempts", "0"],
        &["check", "--ttl", "0"],
        &["conform", "--steps", "0"],
        &["conform", "--walk-len", "0"],
        &["conform", "--suite", "proptest", "--cases", "0"],
        &[
            "runner",
            "--server",
            "http://127.0.0.1:9",
            "--max-jobs",
            "0",
        ],
        &[
            "runner",
            "--server",
            "http://127.0.0.1:9",
            "--capacity",
            "0",
        ],
        &[
            "runner",
            "--server",
            "http://127.0.0.1:9",
            "--poll-interval-ms",
            "0",
        ],
        &["serve", "--max-connections", "0"],
        &["serve", "--sweep-interval-ms", "0"],
        &["serve", "--request-timeout-ms", "0"],
        &["serve", "--database-connections", "0"],
        &["op", "jobs", job, "--limit", "0"],
        &["op", "job", job, job, "--wait", "--timeout", "0"],
    ] {
        let flag = args[args.len() - 2];
        let (code, _, err, _) = leasewright(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(flag) && err.contains("'0'"),
            "{args:?} does not name {flag}: {err}"
        );
        assert!(
            !err.contains("throwaway"),
            "{args:?} started a cluster: {err}"
        );
    }
}

/// A token file with `mode`, holding a token.
fn token_file(dir: &std::path::Path, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(format!("token-{mode:o}"));
    std::fs::write(&path, "t\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Issue 30: token files that everyone could read (0644, 0666) were read without a word; ssh
/// refuses such keys. Now `--token-file` and `--operator-token-file` refuse a file group or others
/// may access (any of 0o077), with exit 2 and the command that fixes it; 0600 and 0400 pass.
#[test]
fn token_files_others_may_read_are_refused_with_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [0o644, 0o666, 0o640, 0o604, 0o660, 0o700 | 0o010] {
        let file = token_file(dir.path(), mode);
        let file = file.to_str().unwrap();
        for args in [
            &[
                "op",
                "--server",
                "http://127.0.0.1:9",
                "--operator-token-file",
                file,
                "project",
                "p",
            ][..],
            &[
                "runner",
                "--server",
                "http://127.0.0.1:9",
                "--token-file",
                file,
            ],
            &[
                "serve",
                "--operator-token-file",
                file,
                "--database-url",
                REFUSED_DB,
            ],
        ] {
            let (code, _, err, _) = leasewright(args);
            assert_eq!(code, 2, "{mode:o} {args:?}: {err}");
            assert!(
                err.contains(&format!("chmod 600 {file}")) && err.contains("group or others"),
                "{mode:o} {args:?}: {err}"
            );
        }
    }
    for mode in [0o600, 0o400] {
        let file = token_file(dir.path(), mode);
        let file = file.to_str().unwrap();
        // Past the token: op tried the server, runner checked its URL, serve the database.
        for (args, next) in [
            (
                &[
                    "op",
                    "--server",
                    "http://127.0.0.1:9",
                    "--operator-token-file",
                    file,
                    "project",
                    "p",
                ][..],
                "connection refused",
            ),
            (
                &["runner", "--server", "not-a-url", "--token-file", file],
                "invalid server URL",
            ),
            (
                &[
                    "serve",
                    "--operator-token-file",
                    file,
                    "--database-url",
                    REFUSED_DB,
                ],
                "cannot connect to PostgreSQL",
            ),
        ] {
            let (code, _, err, _) = leasewright(args);
            assert_eq!(code, 2, "{mode:o} {args:?}: {err}");
            assert!(!err.contains("chmod"), "{mode:o} {args:?}: {err}");
            assert!(err.contains(next), "{mode:o} {args:?}: {err}");
        }
    }
}

/// Issue 30: `op` and `runner` hid the cause of network errors (`--server not-a-url` answered
/// "builder error"). Now an invalid URL says so (exit 2, before any request), and a refused
/// connection or a failed TLS handshake is named with the URL.
#[test]
fn server_urls_and_network_errors_name_their_cause() {
    let op = |server: &str| {
        let (code, _, err, _) = leasewright(&[
            "op",
            "--server",
            server,
            "--operator-token",
            "t",
            "project",
            "p",
        ]);
        (code, err)
    };
    for bad in [
        "not-a-url",
        "ftp://127.0.0.1:9",
        "http://",
        "127.0.0.1:8080",
    ] {
        let (code, err) = op(bad);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains("invalid server URL"), "{bad}: {err}");
        assert!(!err.contains("builder error"), "{bad}: {err}");
        let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
            .args(["runner", "--server", bad])
            .env("LEASEWRIGHT_RUNNER_TOKEN", "t")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "runner {bad}: {err}");
        assert!(err.contains("invalid server URL"), "runner {bad}: {err}");
    }
    let (code, err) = op("http://127.0.0.1:9");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("connection refused") && err.contains("http://127.0.0.1:9/"),
        "{err}"
    );
    // https to a server that speaks plain HTTP: the TLS handshake fails, and says so.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            use std::io::Write as _;
            if let Ok(mut stream) = stream {
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
            }
        }
    });
    let (code, err) = op(&format!("https://127.0.0.1:{port}"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("TLS"), "{err}");
}
