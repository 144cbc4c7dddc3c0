//! The example GitHub Actions workflow (examples/ci/github-actions.yml, docs/ci.md) is valid YAML,
//! runs the model check as `check --profile ci`, shards the conformance suite over its whole
//! matrix with `--shard I/N`, uploads JUnit and trace artifacts, and every `leasewright` command it
//! runs is one this binary accepts (the arguments parse, each value validated: `--help` comes last)
//! and one README.md documents (its subcommand has a row of the command table naming each option).

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

/// README.md's command table: each `leasewright SUB` with the `--options` its row names.
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let readme = include_str!("../../README.md");
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `leasewright "))
        .map(|row| {
            let (command, rest) = row.split_once('`').expect("a command cell");
            let options = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|word| word.starts_with("--") && word.len() > 2)
                .map(str::to_owned)
                .collect();
            (command.to_owned(), options)
        })
        .collect()
}

/// Whether README.md documents `args`: its subcommand has a row naming each of its options.
fn documented(args: &[String]) -> Result<(), String> {
    let table = documented_commands();
    let (_, options) = table
        .iter()
        .find(|(command, _)| command == &args[0])
        .ok_or_else(|| format!("README.md has no row for `leasewright {}`", args[0]))?;
    for arg in args.iter().filter(|a| a.starts_with("--")) {
        if !options.contains(arg) {
            return Err(format!(
                "README.md's `leasewright {}` row does not name {arg}",
                args[0]
            ));
        }
    }
    Ok(())
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
    // The model check is the one ci-profile run README.md shows, with its reports.
    let check_commands = commands(check, "1");
    assert_eq!(check_commands.len(), 1, "{check_commands:?}");
    let run = &check_commands[0];
    let mut bare = run.clone();
    for report in ["--junit", "--traces"] {
        let at = run.iter().position(|a| a == report).expect(report);
        bare.retain(|a| a != report && a != &run[at + 1]);
    }
    assert_eq!(bare, ["check", "--profile", "ci"]);
    assert!(
        include_str!("../../README.md").contains("cargo run --release -- check --profile ci"),
        "README.md shows the ci profile's command"
    );
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
        if let Err(why) = documented(args) {
            panic!("`leasewright {}`: {why}", args.join(" "));
        }
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
    // A command the binary refuses, and an option README.md does not name, are caught.
    assert!(!accepts(&[
        "conform".into(),
        "--shard".into(),
        "5/4".into()
    ]));
    assert!(!accepts(&[
        "check".into(),
        "--profile".into(),
        "nightly".into()
    ]));
    assert!(documented(&["check".into(), "--undocumented".into()]).is_err());
    assert!(documented(&["nosuch".into()]).is_err());
}
