//! Output that suits a log: `runner` (and `serve`, which shares its logging) writes one JSON
//! object per line with `--log-format json`, and text without colour escape codes when stderr is
//! not a terminal.

use std::process::{Command, Stdio};
use std::time::Duration;

/// The runner's stderr for about a second against a server that is not there (it logs its start
/// and each failed claim, then is stopped).
fn runner_logs(format: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args([
            "runner",
            "--log-format",
            format,
            "--server",
            "http://127.0.0.1:9",
            "--poll-interval-ms",
            "100",
        ])
        // The secret from the environment, not the command line.
        .env("LEASEWRIGHT_RUNNER_TOKEN", "t")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs leasewright");
    std::thread::sleep(Duration::from_millis(1200));
    child.kill().expect("stops the runner it started");
    let out = child.wait_with_output().expect("its output");
    String::from_utf8(out.stderr).expect("utf-8")
}

#[test]
fn json_logs_are_one_object_per_line_and_text_logs_have_no_colour_off_a_terminal() {
    let json = runner_logs("json");
    let lines: Vec<&str> = json.lines().collect();
    assert!(lines.len() >= 2, "{json}");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    assert!(json.contains("runner started"), "{json}");
    let text = runner_logs("text");
    assert!(text.contains("runner started"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in a log: {text:?}");
    assert!(serde_json::from_str::<serde_json::Value>(text.lines().next().unwrap()).is_err());
}
