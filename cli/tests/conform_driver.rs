//! `leasewright conform --driver-cmd` and `--export` as a user runs them: the Python example of
//! examples/python passes; its seeded bug is exit 1 with a shrunk, saved trace whose replay
//! command reproduces it; a command that is not a driver is exit 2; the exported corpus has its
//! manifest. Needs `python3`.

use std::path::Path;
use std::process::Command;

use leasewright_conformance::drivers::cmd::{python_example, shell_quote};
use serde_json::Value;

fn example() -> String {
    python_example()
}

fn conform(args: &[&str], traces: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .arg("conform")
        .args(args)
        .arg("--traces")
        .arg(traces)
        .output()
        .expect("runs leasewright");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

#[test]
fn the_python_example_passes_the_scenarios() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = conform(
        &["--driver-cmd", &example(), "--suite", "scenarios", "--json"],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    // Version 3 of the driver protocol replays every scenario, the shared-slot ones included.
    assert_eq!(doc["left_out"], serde_json::json!({}), "{doc}");
    assert_eq!(doc["left_out_unskipped"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["driver"], "driver-cmd (python-example)", "{doc}");
    assert_eq!(doc["divergences"], 0);
    assert_eq!(doc["traces"], 11);
    assert!(!err.contains("left out"), "{err}");
    // A version 2 driver leaves the shared-slot scenarios out, and the summary says why.
    let (code, out, err) = conform(
        &[
            "--driver-cmd",
            &format!("LEASEWRIGHT_EXAMPLE_VERSION=2 {}", example()),
            "--suite",
            "scenarios",
            "--json",
            "--skip",
            "shared-slots",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["left_out"]["shared-slots"], 6, "{doc}");
    assert_eq!(doc["traces"], 5);
    assert!(
        err.contains(
            "left out 6 traces: 6 with a shared target slot (--skip shared-slots); the \
             in-process driver replays them"
        ),
        "{err}"
    );
}

/// The example's seeded bug `token-across-jobs` (a fenced target comparing a slot token with the
/// highest token of the mutation's own job, not of its slot) is caught by the shared-slot
/// traces, and only by them: with the class skipped the same suite passes.
#[test]
fn a_token_compared_per_job_is_caught_only_by_the_shared_slot_traces() {
    let dir = tempfile::tempdir().unwrap();
    let buggy = format!("LEASEWRIGHT_EXAMPLE_BUG=token-across-jobs {}", example());
    let (code, out, err) = conform(
        &["--driver-cmd", &buggy, "--suite", "scenarios", "--json"],
        dir.path(),
    );
    assert_eq!(code, 1, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    // Several traces catch it, not one: the four scenarios of a stale token across jobs (after a
    // reconciliation, after a pass, after an abort, and the outsider's job's), each divergent.
    assert!(doc["divergences"].as_u64().unwrap() >= 3, "{doc}");
    assert!(
        doc["first_divergence"]
            .as_str()
            .unwrap()
            .contains("expected rejected (stale_fence), observed accepted"),
        "{doc}"
    );
    let (code, out, err) = conform(
        &[
            "--driver-cmd",
            &buggy,
            "--suite",
            "scenarios",
            "--json",
            "--skip",
            "shared-slots",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["left_out"]["shared-slots"], 6, "{doc}");
    assert_eq!(doc["divergences"], 0, "{doc}");
}

/// A driver that leaves out a class of traces the suite asked for fails the run with exit 3 and
/// names the class, unless the user names it with `--skip` (docs/ci.md).
#[test]
fn a_driver_that_leaves_out_a_class_not_skipped_is_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let old = format!("LEASEWRIGHT_EXAMPLE_VERSION=2 {}", example());
    let (code, out, err) = conform(
        &["--driver-cmd", &old, "--suite", "scenarios", "--json"],
        dir.path(),
    );
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains(
            "error: incomplete: this driver left out traces the suite asked for: shared-slots (6 \
             traces)"
        ) && err.contains("--skip shared-slots"),
        "{err}"
    );
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["divergences"], 0, "{doc}");
    assert_eq!(
        doc["left_out_unskipped"],
        serde_json::json!(["shared-slots"]),
        "{doc}"
    );
    // Skipping another class does not excuse this one.
    let (code, _, err) = conform(
        &[
            "--driver-cmd",
            &old,
            "--suite",
            "scenarios",
            "--skip",
            "side-effects",
        ],
        dir.path(),
    );
    assert_eq!(code, 3, "{err}");
}

#[test]
fn the_seeded_bug_is_exit_1_with_a_replayable_shrunk_trace() {
    let dir = tempfile::tempdir().unwrap();
    let buggy = format!(
        "LEASEWRIGHT_EXAMPLE_BUG=expired-before-not-current {}",
        example()
    );
    let (code, out, err) = conform(
        &[
            "--driver-cmd",
            &buggy,
            "--suite",
            "random",
            "--steps",
            "2000",
        ],
        dir.path(),
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("expected rejected (not_current), observed rejected (lease_expired)"),
        "{err}"
    );
    assert!(err.contains("shrunk from"), "{err}");
    let saved = err
        .lines()
        .find_map(|l| l.strip_prefix("saved trace: "))
        .expect("the saved trace is named");
    assert!(
        err.contains(&format!(
            "--driver-cmd {} --replay {saved}",
            shell_quote(&buggy)
        )),
        "{err}"
    );
    let (code, out, _) = conform(&["--driver-cmd", &buggy, "--replay", saved], dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("observed rejected (lease_expired)"), "{out}");
    let (code, out, err) = conform(&["--driver-cmd", &example(), "--replay", saved], dir.path());
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_command_that_is_not_a_driver_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = conform(
        &["--driver-cmd", "echo hello", "--suite", "scenarios"],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did not answer the protocol's hello"), "{err}");
    let (code, _, err) = conform(
        &["--driver-cmd", &example(), "--http", "http://127.0.0.1:9"],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
}

#[test]
fn export_writes_the_corpus_and_its_manifest_without_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    let (code, out, err) = conform(
        &[
            "--export",
            corpus.to_str().unwrap(),
            "--suite",
            "random",
            "--steps",
            "200",
            "--seed",
            "5",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("PostgreSQL"), "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["schema_version"], 1);
    assert_eq!(summary["steps"], 200);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(corpus.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["suites"]["random"]["steps"], 200);
    assert_eq!(manifest["suites"]["random"]["seeds"][0], 5);
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len() as u64, manifest["traces"].as_u64().unwrap());
    for f in files {
        assert!(corpus.join(f["path"].as_str().unwrap()).is_file(), "{f}");
    }
    let (code, _, err) = conform(
        &["--export", corpus.to_str().unwrap(), "--suite", "proptest"],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
}

/// The replay form (`--export-format jsonl-gz` and `jsonl`) replayed without Rust: the Python
/// checker examples/python/replay.py drives the example's driver through the exported requests
/// and compares verdicts and projections step by step: the correct example agrees everywhere, the
/// seeded bugs diverge (a reason precedence; a token compared per job on a shared slot), with the
/// trace, the step and the difference.
#[test]
fn the_replay_form_is_replayed_without_rust_and_catches_the_seeded_bugs() {
    let dir = tempfile::tempdir().unwrap();
    let replay_py: std::path::PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "examples",
        "python",
        "replay.py",
    ]
    .iter()
    .collect();
    let replay_as = |corpus: &Path, bug: Option<&str>, version: Option<&str>| {
        let mut command = Command::new("python3");
        command.arg(&replay_py).arg(corpus);
        match bug {
            Some(bug) => command.env("LEASEWRIGHT_EXAMPLE_BUG", bug),
            None => command.env_remove("LEASEWRIGHT_EXAMPLE_BUG"),
        };
        match version {
            Some(version) => command.env("LEASEWRIGHT_EXAMPLE_VERSION", version),
            None => command.env_remove("LEASEWRIGHT_EXAMPLE_VERSION"),
        };
        let out = command.output().expect("runs python3");
        (
            out.status.code().expect("an exit code"),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let replay = |corpus: &Path, bug: Option<&str>| replay_as(corpus, bug, None);
    for (format, file) in [("jsonl-gz", "traces.jsonl.gz"), ("jsonl", "traces.jsonl")] {
        let corpus = dir.path().join(format);
        let (code, out, err) = conform(
            &[
                "--export",
                corpus.to_str().unwrap(),
                "--export-format",
                format,
                "--suite",
                "scenarios",
            ],
            dir.path(),
        );
        assert_eq!(code, 0, "{out}{err}");
        assert!(corpus.join(file).is_file(), "{out}");
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(corpus.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["file"], file);
        assert_eq!(manifest["traces"], 11);
        let (code, out, err) = replay(&corpus, None);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("traces          11") && out.contains("divergences     0"),
            "{out}"
        );
        let (code, out, err) = replay(&corpus, Some("token-across-jobs"));
        assert_eq!(code, 1, "{out}{err}");
        // Every scenario of a stale token across jobs diverges (four, of which three are shown).
        let divergent: u32 = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("divergences"))
            .and_then(|n| n.trim().parse().ok())
            .expect("a divergence count");
        assert!(divergent >= 3, "{out}");
        assert!(
            out.contains("divergence in scenario-slot-")
                && out.contains("expected rejected stale_fence, observed accepted"),
            "{out}"
        );
    }
    // A larger corpus of random walks: the reason-precedence bug diverges too.
    let corpus = dir.path().join("random");
    let (code, out, err) = conform(
        &[
            "--export",
            corpus.to_str().unwrap(),
            "--export-format",
            "jsonl-gz",
            "--suite",
            "random",
            "--steps",
            "2000",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = replay(&corpus, None);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = replay(&corpus, Some("expired-before-not-current"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("verdict: expected rejected not_current, observed rejected lease_expired"),
        "{out}"
    );
    // The walks through a failover are in the corpus (version 2 of the replay form): tokens
    // issued without the epoch diverge on them; a version 4 driver leaves them out (exit 3).
    let (code, out, err) = replay(&corpus, Some("failover-without-epoch"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("fence: expected 33, observed 1"), "{out}");
    let (code, out, err) = replay_as(&corpus, None, Some("4"));
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("divergences     0")
            && out.contains("that need driver protocol version 5 or later (the driver speaks 4)"),
        "{out}"
    );
    // Not a corpus: exit 2.
    let (code, _, err) = replay(dir.path(), None);
    assert_eq!(code, 2, "{err}");
}
