//! `leasewright runner-suite` (docs/runner-suite.md): its exit codes, `leasewright runner`
//! holding the duties of a few scenarios, and the Python example's seeded bug caught. CI runs the
//! whole suite against both runners (.ci/run); these are the contract's checks.

use serde_json::Value;
use std::process::Command;

/// The exit code, the `--json` document (when the run printed one) and stderr.
fn suite(args: &[&str], env: &[(&str, &str)]) -> (i32, Option<Value>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("runner-suite")
        .args(args)
        .envs(env.iter().copied())
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("runs leasewright");
    (
        output.status.code().expect("an exit code"),
        serde_json::from_slice(&output.stdout).ok(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// (scenario, duty, status) of every verdict.
fn verdicts(doc: &Value) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    doc["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .flat_map(|s| {
            let name = text(&s["name"]);
            s["verdicts"]
                .as_array()
                .expect("verdicts")
                .iter()
                .map(move |v| (name.clone(), text(&v["duty"]), text(&v["status"])))
        })
        .collect()
}

#[test]
fn an_unknown_scenario_and_a_command_that_runs_no_runner_are_exit_2() {
    let (code, _, stderr) = suite(&["--scenario", "no-such-scenario"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no scenario \"no-such-scenario\""),
        "{stderr}"
    );
    // A runner that claims and reports but never runs the command judges nothing: exit 2, not 0.
    let idle = "python3 examples/python-runner/runner.py";
    let (code, _, stderr) = suite(
        &["--scenario", "hang", "--runner-cmd", idle],
        &[("RUNNER_BUG", "never-run")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("never ran a job's command"), "{stderr}");
    let (code, _, stderr) = suite(&["--scenario", "hang", "--runner-cmd", "true"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("never called the control plane"),
        "{stderr}"
    );
}

#[test]
fn leasewright_runner_stops_on_a_revoked_token_and_on_sigterm_and_exits_without_a_live_command() {
    let (code, doc, stderr) = suite(
        &[
            "--scenario",
            "revoked-token",
            "--scenario",
            "sigterm",
            "--json",
        ],
        &[],
    );
    let doc = doc.unwrap_or_else(|| panic!("no JSON document: {stderr}"));
    assert_eq!(doc["schema_version"], 1);
    let verdicts = verdicts(&doc);
    assert_eq!(code, 0, "{verdicts:?}");
    assert!(
        verdicts.iter().all(|(_, _, status)| status == "held"),
        "{verdicts:?}"
    );
    for duty in [
        "unauthorized-stops-at-once",
        "shutdown-stops-commands-first",
    ] {
        assert!(
            verdicts.iter().any(|(_, d, _)| d == duty),
            "{duty}: {verdicts:?}"
        );
    }
}

#[test]
fn the_python_runners_seeded_bug_ignoring_a_401_is_caught_and_named() {
    let python = ["--runner-cmd", "python3 examples/python-runner/runner.py"];
    let args = [&python[..], &["--scenario", "revoked-token", "--json"]].concat();
    let (code, doc, stderr) = suite(&args, &[]);
    let doc = doc.unwrap_or_else(|| panic!("no JSON document: {stderr}"));
    assert_eq!(code, 0, "{:?}", verdicts(&doc));
    let (code, doc, stderr) = suite(&args, &[("RUNNER_BUG", "ignore-401")]);
    let doc = doc.unwrap_or_else(|| panic!("no JSON document: {stderr}"));
    assert_eq!(code, 1, "{:?}", verdicts(&doc));
    let violated: Vec<_> = verdicts(&doc)
        .into_iter()
        .filter(|(_, _, status)| status == "violated")
        .collect();
    assert!(
        !violated.is_empty()
            && violated
                .iter()
                .all(|(s, d, _)| s == "revoked-token" && d == "unauthorized-stops-at-once"),
        "{violated:?}"
    );
}
