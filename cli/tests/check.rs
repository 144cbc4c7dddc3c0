//! `leasewright check` as a user runs it: exit codes, the JSON report, the saved trace.

use serde_json::Value;
use std::process::Command;

fn check(args: &[&str], traces: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("check")
        .args(args)
        .arg("--traces")
        .arg(traces)
        .output()
        .expect("runs leasewright");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).expect("utf-8"),
    )
}

#[test]
fn one_job_with_disconnects_holds_and_reports_every_property() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check(
        &["--jobs", "1", "--ttl", "2", "--disconnects", "--json"],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["complete"], true);
    assert_eq!(doc["unique_states"], 13_679);
    let properties = doc["properties"].as_array().unwrap();
    // 25 invariants (24 and 25, about the side effects of R8, hold with none); 10 cases and 18
    // rejection reasons reached.
    assert_eq!(properties.len(), 53);
    for p in properties {
        let expected = if p["kind"] == "always" {
            "holds"
        } else {
            "reached"
        };
        assert_eq!(p["verdict"], expected, "{p}");
    }
}

#[test]
fn a_flawed_variant_exits_1_with_its_shortest_counterexample_saved() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check(&["--variant", "requeue-on-expiry", "--json"], dir.path());
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(
        doc["property"],
        "an expired job is uncertain until a reconciliation decides"
    );
    let counterexamples = doc["counterexamples"].as_array().unwrap();
    assert_eq!(counterexamples.len(), 1, "one path, printed once");
    let c = &counterexamples[0];
    assert_eq!(c["property"], doc["property"]);
    // The other invariant that fails at its end is named with it.
    assert_eq!(
        c["also"],
        serde_json::json!(["at most one current attempt per job"])
    );
    // Claim, tick, sweep: the initial state and three steps, nothing the violation does not need.
    let steps = c["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "{steps:?}");
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(c["trace"].as_str().unwrap()).unwrap())
            .unwrap();
    let states = trace["states"].as_array().unwrap();
    assert_eq!(states.len(), steps.len());
}

#[test]
fn the_variants_are_listed_one_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check(&["--list-variants"], dir.path());
    assert_eq!(code, 0);
    let names: Vec<&str> = out.lines().collect();
    assert!(names.len() >= 19, "{names:?}");
    assert!(names.contains(&"slot-compares-job-fences"));
    assert!(!names.contains(&"none"));
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = check(&["--variant", "no-such-variant"], dir.path());
    assert_eq!(code, 2);
    let (code, _) = check(&["--target", "sideways"], dir.path());
    assert_eq!(code, 2);
    let (code, _) = check(&["--profile", "nightly"], dir.path());
    assert_eq!(code, 2);
    let (code, _) = check(&["--no-outsider", "--outsider-jobs", "1"], dir.path());
    assert_eq!(code, 2);
}
