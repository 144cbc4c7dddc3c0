//! The example GitHub Actions workflow (examples/ci/github-actions.yml, docs/ci.md) is valid YAML,
//! shards the conformance suite over its whole matrix, uploads JUnit and trace artifacts, and
//! every `leasewright` command it runs is one this binary accepts (the arguments parse).

use std::process::Command;

use serde_yaml::Value;

fn workflow() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/ci/github-actions.yml"
    );
    serde_yaml::from_str(&std::fs::read_to_string(path).expect("the workflow file"))
        .expect("valid YAML")
}

fn steps(job: &Value) -> Vec<&Value> {
    job["steps"].as_sequence().expect("steps").iter().collect()
}

/// The `leasewright` invocations of a job, with `${{ matrix.shard }}` replaced by `shard`.
fn commands(job: &Value, shard: &str) -> Vec<Vec<String>> {
    steps(job)
        .into_iter()
        .filter_map(|s| s["run"].as_str())
        .filter_map(|run| run.trim().strip_prefix("./target/release/leasewright "))
        .map(|args| {
            args.replace("${{ matrix.shard }}", shard)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn accepts(args: &[String]) -> bool {
    Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(args)
        .arg("--help")
        .output()
        .expect("runs leasewright")
        .status
        .success()
}

#[test]
fn the_example_workflow_runs_commands_this_binary_accepts() {
    let doc = workflow();
    let jobs = &doc["jobs"];
    let check = &jobs["check"];
    let conform = &jobs["conform"];
    let shards: Vec<u64> = conform["strategy"]["matrix"]["shard"]
        .as_sequence()
        .expect("a shard matrix")
        .iter()
        .map(|s| s.as_u64().expect("a shard number"))
        .collect();
    let n = shards.len() as u64;
    assert_eq!(shards, (1..=n).collect::<Vec<_>>(), "shards 1..=N");
    let check_commands = commands(check, "1");
    assert!(check_commands.iter().any(|c| c[0] == "check"));
    for shard in &shards {
        let shard = shard.to_string();
        let runs = commands(conform, &shard);
        assert_eq!(runs.len(), 1, "{runs:?}");
        let run = &runs[0];
        assert_eq!(run[0], "conform");
        let at = run.iter().position(|a| a == "--shard").expect("--shard");
        assert_eq!(run[at + 1], format!("{shard}/{n}"), "{run:?}");
    }
    for args in check_commands.iter().chain(&commands(conform, "1")) {
        assert!(args.contains(&"--junit".to_string()), "{args:?}");
        assert!(accepts(args), "leasewright refuses `{}`", args.join(" "));
    }
    // Every job uploads its reports and traces, even when a step failed.
    for job in [check, conform] {
        let upload = steps(job)
            .into_iter()
            .find(|s| {
                s["uses"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("actions/upload-artifact"))
            })
            .expect("an upload step");
        assert_eq!(upload["if"].as_str(), Some("always()"));
        let paths = upload["with"]["path"].as_str().expect("paths");
        assert!(paths.contains(".xml"), "{paths}");
        assert!(
            paths.contains("counterexamples/") || paths.contains("divergent/"),
            "{paths}"
        );
    }
    // A command the binary refuses is caught.
    assert!(!accepts(&[
        "conform".into(),
        "--shard".into(),
        "5/4".into()
    ]));
}
