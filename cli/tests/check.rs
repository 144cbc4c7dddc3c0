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
    // 3,791 since every runner stops at the end of its own lease (issue 39; 4,199 before).
    assert_eq!(doc["unique_states"], 3_791);
    let properties = doc["properties"].as_array().unwrap();
    // 30 invariants, 29 `sometimes` (11 cases, 18 rejection reasons) and 15 witnesses. What
    // this configuration does not put at stake is `vacuous-here`, with the witness it did not
    // reach, never "holds": the idempotent target's invariant (the target is fenced), the
    // stored ledger's (ledger off), the side effects' (off) and the batch claim's (no batch
    // claims).
    assert_eq!(properties.len(), 74);
    let vacuous = [
        (
            "an idempotent target applies each deployment at most once",
            "a job deploying to an idempotent target is claimed a second time",
        ),
        (
            "the ledger records every received message against its attempt",
            "the ledger holds a record",
        ),
        (
            "the ledger keeps late reports and conflicts with their own attempt",
            "the ledger holds a record",
        ),
        (
            "no record of another project's runner is attributed to this project's attempt",
            "the ledger holds a record of another project's runner",
        ),
        (
            "a side effect is served or stored only for the current attempt holding a valid lease",
            "a runner holding a lease sends side effects",
        ),
        (
            "a cache get serves only its own project's entry, an artifact get only its attempt's own",
            "a runner holding a lease sends side effects",
        ),
        (
            "a batch claim takes at most one job per slot",
            "a batch claim finds two claimable jobs on one slot",
        ),
        (
            "a batch claim takes the earliest claimable job of each slot",
            "a batch claim finds two claimable jobs on one slot",
        ),
        (
            "a batch claim skips no claimable job of the K earliest",
            "a batch claim's K earliest claimable jobs reach past its K earliest queued",
        ),
    ];
    // The witness of a `sometimes` this configuration does not have (batch claims).
    let also_unreached =
        ["a batch claim finds a job waiting on a busy slot before a claimable one"];
    for p in properties {
        let name = p["property"].as_str().unwrap();
        let unreached = vacuous
            .iter()
            .map(|(_, witness)| witness)
            .chain(&also_unreached)
            .any(|witness| name == format!("witness: {witness}"));
        let expected = match vacuous.iter().find(|(v, _)| *v == name) {
            Some((_, witness)) => {
                assert!(p["reason"].as_str().unwrap().ends_with(witness), "{p}");
                "vacuous-here"
            }
            None if p["kind"] == "always" => "holds",
            None if p["kind"] == "witness" && unreached => "unreached",
            None => "reached",
        };
        assert_eq!(p["verdict"], expected, "{p}");
    }
}

#[test]
fn what_a_configuration_cannot_test_is_vacuous_in_text_json_and_junit() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("check.xml");
    let args = [
        "--jobs",
        "1",
        "--attempts",
        "1",
        "--target",
        "unfenced",
        "--junit",
        junit.to_str().unwrap(),
    ];
    let (code, text) = check(&args, dir.path());
    assert_eq!(code, 0, "{text}");
    // No fenced target and no retry: invariant 7 cannot fire here, so it is not "holds".
    let seven = "a fenced target never applies a stale slot token";
    let line = text
        .lines()
        .find(|l| l.contains(seven))
        .expect("invariant 7 is reported");
    assert!(line.contains("vacuous-here"), "{line}");
    let not_fenced = "not reached here: witness: a fenced target's slot is reserved a second time";
    assert!(line.contains(not_fenced), "{line}");
    assert!(!text
        .lines()
        .any(|l| l.contains("holds") && l.contains(seven)));
    let fences = "the fences of a job strictly increase";
    let line = text.lines().find(|l| l.contains(fences)).unwrap();
    assert!(
        line.contains("vacuous-here") && line.contains("a job is claimed a second time"),
        "{line}"
    );

    let (code, out) = check(&[&args[..6], &["--json"]].concat(), dir.path());
    assert_eq!(code, 0, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let seven_json = doc["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["property"] == seven)
        .unwrap();
    assert_eq!(seven_json["verdict"], "vacuous-here");
    assert_eq!(seven_json["reason"], not_fenced);

    let report =
        quick_junit::Report::deserialize_from_str(&std::fs::read_to_string(&junit).unwrap())
            .expect("the JUnit report parses");
    let case = report
        .test_suites
        .iter()
        .flat_map(|s| &s.test_cases)
        .find(|c| c.name.as_str() == seven)
        .expect("invariant 7 is a case");
    let quick_junit::TestCaseStatus::Skipped { message, .. } = &case.status else {
        panic!(
            "a vacuous property is skipped, not passed: {:?}",
            case.status
        );
    };
    assert_eq!(message.as_ref().map(|m| m.as_str()), Some(not_fenced));
    assert_eq!(report.failures, 0);
}

#[test]
fn a_flawed_variant_exits_1_with_its_shortest_counterexample_saved() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check(&["--variant", "requeue-on-expiry", "--json"], dir.path());
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], false);
    // Caught by its harm: the requeued job runs twice at once.
    assert_eq!(
        doc["property"],
        "no two attempts of one job execute at the same time"
    );
    let counterexamples = doc["counterexamples"].as_array().unwrap();
    assert_eq!(counterexamples.len(), 1, "one path, printed once");
    let c = &counterexamples[0];
    assert_eq!(c["property"], doc["property"]);
    // The other invariant that fails at its end is named with it.
    assert_eq!(
        c["also"],
        serde_json::json!([
            "at most one current attempt per job",
            "one attempt at a time holds a slot"
        ])
    );
    // Claim, tick, sweep, claim by the other runner: the initial state and four steps, nothing
    // the violation does not need.
    let steps = c["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 5, "{steps:?}");
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(c["trace"].as_str().unwrap()).unwrap())
            .unwrap();
    let states = trace["states"].as_array().unwrap();
    assert_eq!(states.len(), steps.len());
}

/// The summary line gives the margins of the configuration it checked (issue 39): the variant
/// that sweeps δ past a lease says so, the protocol says 2δ for both.
#[test]
fn the_summary_gives_the_sweep_margin_of_the_checked_design() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check(&["--variant", "sweep-without-skew-margin"], dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("(sweep 1 and epoch wait 2 past a lease)"),
        "{out}"
    );
    let (code, out) = check(&["--variant", "sweep-at-lease-expiry"], dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("(sweep 0 and epoch wait 2 past a lease)"),
        "{out}"
    );
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
