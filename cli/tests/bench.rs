//! `leasewright bench`: bad options are refused with exit code 2 before any database is touched.

use std::process::Command;

fn bench(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("bench")
        .args(args)
        // An address nothing listens on: if an option were accepted, the run would fail to
        // connect (also exit 2) instead of starting a cluster.
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres")
        .output()
        .expect("run leasewright");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_options_exit_2_with_the_reason() {
    let (code, stderr) = bench(&["writes", "--operations", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--operations and --batch must be positive"),
        "{stderr}"
    );

    let (code, stderr) = bench(&["lifecycle", "--http", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--http takes at least 1 replica"),
        "{stderr}"
    );

    let (code, stderr) = bench(&["lifecycle", "--rounds", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--rounds must be positive"), "{stderr}");
}

#[test]
fn an_unreachable_server_exits_2() {
    let (code, stderr) = bench(&["writes", "--operations", "10"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot connect to PostgreSQL"), "{stderr}");
}
