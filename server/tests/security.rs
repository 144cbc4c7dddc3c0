//! Security (issue 7, item 4): project isolation on every route, tokens stored hashed and never
//! logged, SQL only with bound parameters, and a test clock no request can turn on.
//!
//! The constant-time comparison of tokens has unit tests next to the two functions that compare
//! (impl/src/store/setup.rs `authenticate`, server/src/app/extract.rs `OperatorAuth`).

mod common;

use common::*;
use leasewright_server::agent::{self, AgentConfig};
use leasewright_server::wire::LeaseBody;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use uuid::Uuid;

fn tuple_of(lease: &LeaseBody) -> Value {
    json!({
        "job": lease.job,
        "attempt": lease.attempt,
        "lease_id": lease.lease_id,
        "fence": lease.fence,
    })
}

/// A body for a tuple route, valid but for who sends it.
fn body_for(route: &Route, lease: &LeaseBody) -> Value {
    let extra = match route.body {
        BodyKind::Logs => json!({"seq": 7, "content_base64": b64(b"x")}),
        BodyKind::Put => json!({"name": "out.txt", "content_base64": b64(b"x")}),
        BodyKind::Get => json!({"name": "out.txt"}),
        BodyKind::Result => json!({"outcome": "passed", "result_digest": "d"}),
        _ => json!({}),
    };
    with(tuple_of(lease), &extra)
}

// -------------------------------------------------------------------------------------------
// (a) A runner of one project touching another project's job is refused on every route.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_or_a_path_of_another_project_is_refused_on_every_route_and_changes_nothing() {
    let (_db, server) = start_with(config(true)).await;
    let w = World::build(&server, true).await;
    let mut before = w.snapshot().await;
    let mut checked = 0;
    // Every runner route that names a job, with B's runner copying A's exact tuples: of a running
    // job (l1, l2) and of an uncertain one (l4). The answer is wrong_project whatever the state of
    // the attempt it copied (identity is checked before standing), kept unattributed.
    for route in ROUTES.iter().filter(|r| r.has_tuple()) {
        for (sender, lease, reason) in [
            (&w.rb, &w.l1, "wrong_project"),
            (&w.rb, &w.l2, "wrong_project"),
            (&w.rb, &w.l4, "wrong_project"),
            // Another runner of the same project copying ra1's tuple.
            (&w.ra2, &w.l1, "runner_mismatch"),
        ] {
            let body = body_for(route, lease);
            let raw = Raw {
                method: "POST",
                path: route.path.into(),
                token: Some(sender.token.clone()),
                body: Some(serde_json::to_vec(&body).unwrap()),
            };
            let answer = w.send(&raw).await.unwrap();
            assert_eq!(
                (answer.status, answer.code().as_deref()),
                (409, Some(reason)),
                "{}",
                route.name()
            );
            let effect = LedgerEffect {
                observation: Some(ExpectedObservation::of(
                    route,
                    sender.id,
                    &body,
                    "rejected",
                    Some(reason),
                )),
                ..LedgerEffect::default()
            };
            before = w
                .check_unchanged(&before, &effect)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", route.name()));
            checked += 1;
        }
    }
    // B's runner claims: A's queued job stays queued.
    let claim = Raw {
        method: "POST",
        path: "/v1/runner/claim".into(),
        token: Some(w.rb.token.clone()),
        body: Some(br#"{"capacity": 64}"#.to_vec()),
    };
    let answer = w.send(&claim).await.unwrap();
    assert_eq!(
        (answer.status, answer.code().as_deref()),
        (409, Some("no_queued_job"))
    );
    before = w
        .check_unchanged(&before, &LedgerEffect::default())
        .await
        .unwrap();
    // Operator routes under B's path naming A's jobs (or A's attempt under B's job).
    let (a, b) = (w.a, w.b);
    let b1 = w.lb.job;
    for route in ROUTES.iter().filter(|r| r.path.contains("{job}")) {
        for job in [w.l1.job, w.l4.job] {
            let mut paths = vec![(
                fill_path(route.path, b, job),
                if route.method == "GET" { 404 } else { 409 },
                if route.method == "GET" {
                    "unknown_job"
                } else {
                    "wrong_project"
                },
            )];
            if route.path.ends_with("/logs") || route.path.contains("/artifacts/") {
                let attempt = if job == w.l1.job {
                    w.l1.attempt
                } else {
                    w.l4.attempt
                };
                paths.push((
                    format!("{}?attempt={attempt}", fill_path(route.path, b, b1)),
                    404,
                    "unknown_attempt",
                ));
            }
            for (path, status, code) in paths {
                let body = match route.body {
                    BodyKind::Reconcile => {
                        Some(br#"{"finding": "stopped", "decision": "abort"}"#.to_vec())
                    }
                    BodyKind::Empty => Some(b"{}".to_vec()),
                    _ => None,
                };
                let raw = Raw {
                    method: route.method,
                    path: path.clone(),
                    token: Some(OPERATOR.into()),
                    body,
                };
                let answer = w.send(&raw).await.unwrap();
                assert_eq!(
                    (answer.status, answer.code().as_deref()),
                    (status, Some(code)),
                    "{path}"
                );
                let record = (b, job, "rejected".into(), Some(code.into()));
                let effect = LedgerEffect {
                    reconciliation: (route.body == BodyKind::Reconcile).then(|| record.clone()),
                    cancel: route.path.ends_with("/cancel").then_some(record),
                    ..LedgerEffect::default()
                };
                before = w
                    .check_unchanged(&before, &effect)
                    .await
                    .unwrap_or_else(|e| panic!("{path}: {e}"));
                checked += 1;
            }
        }
    }
    // A's reads never show B's jobs, nor B's A's.
    let a_jobs = w.operator.jobs(a).await.unwrap();
    let b_jobs = w.operator.jobs(b).await.unwrap();
    assert!(a_jobs.iter().all(|j| j.project == a));
    assert!(b_jobs.iter().all(|j| j.project == b) && b_jobs.len() == 1);
    // A's attempts carry none of B's messages: the copies are kept unattributed.
    for lease in [&w.l1, &w.l2, &w.l4] {
        let observations = w.operator.observations(a, lease.job).await.unwrap();
        assert!(observations
            .iter()
            .filter(|o| o.runner == w.rb.id || (o.runner == w.ra2.id && lease.job == w.l1.job))
            .all(|o| o.attempt.is_none() && o.verdict == "rejected"));
    }
    assert!(checked >= 9 * 4 + 8, "{checked} cases");
}

fn fill_path(path: &str, project: Uuid, job: Uuid) -> String {
    path.replace("{project}", &project.to_string())
        .replace("{job}", &job.to_string())
        .replace("{name}", "out.txt")
}

// -------------------------------------------------------------------------------------------
// (b) Tokens are stored hashed: the plaintext is in no column of any table.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_table_holds_a_token_only_the_runner_tokens_sha256() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    // Use the token, so every table a runner writes has rows.
    f.operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = lease.tuple(None);
    f.runner.log_append(&tuple, 0, b"log\n").await.unwrap();
    f.runner.artifact_put(&tuple, "a", b"a").await.unwrap();
    f.runner.cache_put(&tuple, "k", b"k").await.unwrap();
    f.runner.result(&tuple, "passed", "d").await.unwrap();
    let secret = f.token.rsplit('_').next().unwrap().to_owned();
    assert_eq!(secret.len(), 64, "a runner token is lw_<id>_<64 hex>");
    let pool = server.store().pool();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables \
         WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        tables.iter().any(|t| t == "leasewright.runners"),
        "{tables:?}"
    );
    let mut rows = 0;
    let mut hash_seen = false;
    let token_hash = hex::encode(sha2::Sha256::digest(f.token.as_bytes()));
    // Every row of every table as text (bytea as hex): the token, its secret, in text or in hex.
    let needles = [
        f.token.clone(),
        secret.clone(),
        hex::encode(f.token.as_bytes()),
        hex::encode(secret.as_bytes()),
        OPERATOR.to_owned(),
        hex::encode(OPERATOR.as_bytes()),
    ];
    for table in &tables {
        // Table names from information_schema, quoted by format('%I'): test code.
        let texts: Vec<String> = sqlx::query_scalar(&format!("SELECT t::text FROM {table} AS t"))
            .fetch_all(pool)
            .await
            .unwrap();
        for text in texts {
            rows += 1;
            for needle in &needles {
                assert!(
                    !text.contains(needle.as_str()),
                    "{table} holds a token: {text}"
                );
            }
            hash_seen |= text.contains(&token_hash);
        }
    }
    assert!(rows > 10, "{rows} rows scanned");
    // The control: the runner's row is there, with the token's SHA-256 and nothing else of it.
    assert!(
        hash_seen,
        "runners.token_sha256 should hold the token's SHA-256"
    );
    let stored: Vec<u8> = sqlx::query_scalar("SELECT token_sha256 FROM runners")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(hex::encode(stored), token_hash);
}

// -------------------------------------------------------------------------------------------
// (d) Tokens are never logged: everything at TRACE, from the server and from a real runner agent
// in-process, into a buffer.

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Buffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Every event of this test process, at TRACE.
fn captured_logs() -> &'static Buffer {
    static LOGS: OnceLock<Buffer> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Buffer::default();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(buffer.clone())
            .try_init()
            .expect("the test process's only subscriber");
        buffer
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_appears_in_the_logs_at_trace_level() {
    let logs = captured_logs();
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let runner_id = f.token.split('_').nth(1).unwrap().to_owned();
    let secret = f.token.rsplit('_').next().unwrap().to_owned();
    // Refused tokens too: another secret for the same runner, another operator token.
    let wrong_secret = "ab".repeat(32);
    let wrong_runner_token = format!("lw_{runner_id}_{wrong_secret}");
    let wrong_operator = "not-the-operator-secret-0123456789";
    for (token, path, body) in [
        (wrong_runner_token.as_str(), "/v1/runner/claim", json!({})),
        (wrong_operator, "/v1/projects", json!({"name": "x"})),
        (OPERATOR, "/v1/runner/claim", json!({})),
    ] {
        let (status, _) = post(&server, Some(token), path, &body).await;
        assert_eq!(status, 401);
    }
    // A real runner agent runs a job end to end: claim, source, heartbeats, logs, artifact,
    // result, every call with its token.
    let mut request = submit_request(None, "unfenced");
    request.artifacts = vec!["run.sh".into()];
    let job = f.operator.submit(f.project, &request).await.unwrap().job;
    let workdir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::new(&server.url(), &f.token, workdir.path().to_owned());
    config.max_jobs = Some(1);
    config.poll_interval = Duration::from_millis(50);
    tokio::time::timeout(Duration::from_secs(60), agent::run(config))
        .await
        .expect("the agent finished its job")
        .unwrap();
    assert_eq!(
        f.operator.job(f.project, job).await.unwrap().state,
        "passed"
    );
    // The job's workspace (its extracted source, run.sh) went with the job. What stays is the
    // archive the runner verified, kept under its blob digest for the next lease naming it.
    let snapshot =
        leasewright_server::source::build_snapshot(vec![leasewright_server::source::SourceFile {
            path: "run.sh".into(),
            mode: 0o755,
            content: b"echo hi\n".to_vec(),
        }])
        .unwrap();
    let kept = workdir
        .path()
        .join("sources")
        .join(format!("{}.tar.gz", snapshot.blob_sha256));
    assert_eq!(std::fs::read(&kept).unwrap(), snapshot.archive);
    let left: Vec<_> = walk(workdir.path());
    assert!(
        left.iter().all(|p| p.is_dir() || *p == kept),
        "files left in the workspace: {left:?}"
    );
    // Operator reads and a metrics scrape.
    f.operator.observations(f.project, job).await.unwrap();
    f.operator.logs(f.project, job, None).await.unwrap();
    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut stderr_copy = Vec::new();
    let text = {
        let bytes = logs.0.lock().unwrap();
        stderr_copy.extend_from_slice(&bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    };
    // The capture works: the agent's and the store's own events are there, DEBUG and TRACE too.
    assert!(text.contains("runner started"), "no agent event captured");
    assert!(text.contains("result reported"), "no agent event captured");
    assert!(
        text.contains(" DEBUG ") && text.contains(" TRACE "),
        "not at TRACE"
    );
    for (what, needle) in [
        ("the runner token", f.token.as_str()),
        ("the runner token's secret", secret.as_str()),
        ("a refused runner secret", wrong_secret.as_str()),
        ("the operator token", OPERATOR),
        ("a refused operator token", wrong_operator),
    ] {
        if text.contains(needle) {
            let _ = std::io::stderr().write_all(&stderr_copy);
            panic!("{what} appears in the logs");
        }
        assert!(!metrics.contains(needle), "{what} appears in /metrics");
    }
}

// -------------------------------------------------------------------------------------------
// (e) All SQL uses bound parameters.
//
// The rule, checked on impl/src/*.rs, server/src/*.rs and every .sql file of impl/:
//
// 1. The SQL text given to sqlx (`query`, `query_as`, `query_scalar`, their `_with` forms,
//    `raw_sql`) is a string literal, a constant (SCREAMING_CASE path: a `const` cannot hold a
//    run-time value), a statement loaded from impl/sql (`self.sql(..)`, `sql::NAME.text`,
//    `sql::NAME.issue()`), or a
//    local variable bound only to those. Never `format!`, concatenation, or any other expression.
// 2. No `format!`-family macro, and no `+` concatenation, builds text from a literal that holds an
//    SQL keyword (so a query cannot be assembled in a variable and passed later), and no executor
//    method (`execute`, `fetch*`) is called with a built string. The exceptions are listed in
//    ALLOWED with their reason, and each must still match (a stale one fails).
// 3. The .sql files run no dynamic SQL: no EXECUTE, format(), quote_*(), or %s/%I/%L and {}
//    templates; values appear only as $n placeholders.

const SQL_KEYWORDS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT",
    "REVOKE", "COPY", "WHERE", "VALUES", "EXECUTE",
];

/// (file, the start of the flagged text, why it is safe).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "impl/src/standby.rs",
        "format!(\n        r#\"DO $replicate$",
        "test support (a manual-clock server's test hooks): schema names are identifiers, which \
         PostgreSQL cannot take as bound parameters; schema_name() admits only a-z, 0-9 and _, \
         checked just above",
    ),
    (
        "impl/src/standby.rs",
        "format!(\n        r#\"DO $restore$",
        "the same schema names",
    ),
    (
        "impl/src/standby.rs",
        ".execute(sql.as_str())",
        "the two statements above",
    ),
    (
        "impl/src/schema.rs",
        "format!(\"CREATE SCHEMA IF NOT EXISTS {schema}\")",
        "a schema name is an identifier, which PostgreSQL cannot take as a bound parameter; \
         schema_name() admits only a-z, 0-9 and _ (no quoting needed), checked just above",
    ),
    (
        "impl/src/schema.rs",
        ".execute(format!(\"CREATE SCHEMA IF NOT EXISTS {schema}\")",
        "the same statement",
    ),
    (
        "impl/src/database.rs",
        "format!(\"CREATE DATABASE {name} TEMPLATE template0\")",
        "the test harness names a database lw_test_<random uuid>: an identifier, which PostgreSQL \
         cannot take as a bound parameter; no input reaches it",
    ),
    (
        "impl/src/database.rs",
        ".execute(format!(\"CREATE DATABASE {name} TEMPLATE template0\")",
        "the same statement",
    ),
    (
        "impl/src/database.rs",
        "format!(\"DROP DATABASE IF EXISTS {name} WITH (FORCE)\")",
        "the same generated identifier",
    ),
    (
        "impl/src/database.rs",
        ".execute(sql.as_str())",
        "the DROP DATABASE just above",
    ),
    (
        "impl/src/store/claim.rs",
        "sqlx::raw_sql(session",
        "test only (the claim's plan test): `session` is one of two static SET strings the tests pass",
    ),
    (
        "impl/src/store/claim.rs",
        "sqlx::raw_sql(&format!(\n            \"PREPARE claim(",
        "test only: PREPARE of the claim's own static statement text, which PREPARE cannot take as \
         a parameter",
    ),
    (
        "impl/src/store/claim.rs",
        "sqlx::raw_sql(&format!(\"EXECUTE {}\", execute(",
        "test only: EXECUTE of the prepared claim with the test's own runner id (a UUID the store \
         generated); EXECUTE takes no bound parameters",
    ),
    (
        "impl/src/store/claim.rs",
        "format!(\"EXECUTE {}\"",
        "the same EXECUTE (test only)",
    ),
    (
        "impl/src/store/claim.rs",
        "format!(\n            \"EXPLAIN ({options}) EXECUTE {}\"",
        "the same EXPLAIN EXECUTE, its options one of two constants (test only)",
    ),
    (
        "impl/src/store/claim.rs",
        "sqlx::query_scalar(&format!(",
        "test only: EXPLAIN EXECUTE of the prepared claim with the test's own runner id (a UUID \
         the store generated); EXPLAIN of EXECUTE takes no bound parameters",
    ),
    (
        "impl/src/store/reads.rs",
        "sqlx::raw_sql(&format!(\n            \"PREPARE security_log(",
        "test only (the security log's plan test): PREPARE of the statement's own static text, \
         which PREPARE cannot take as a parameter",
    ),
    (
        "impl/src/store/reads.rs",
        "format!(\"EXECUTE security_log(",
        "test only: EXECUTE of the prepared security log with the test's own project id (a UUID \
         the store generated); EXECUTE takes no bound parameters",
    ),
    (
        "impl/src/store/reads.rs",
        "sqlx::raw_sql(&execute",
        "the same EXECUTE (test only)",
    ),
    (
        "impl/src/store/reads.rs",
        "sqlx::query_scalar(&format!(\"EXPLAIN (FORMAT JSON) {execute}\")",
        "test only: EXPLAIN of the same EXECUTE",
    ),
];

/// Byte ranges of Rust string literals (normal and raw) in `source`.
fn string_literals(source: &str) -> Vec<(usize, usize)> {
    let bytes = source.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' => {
                // A char literal ('"', '\'', 'x') or a lifetime: skip what a char literal spans.
                if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') {
                    i += 4;
                } else if bytes.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if (bytes.get(i + 1) == Some(&b'"') || bytes.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                let mut hashes = 0;
                let mut j = i + 1;
                while bytes.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if bytes.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = source[j + 1..]
                    .find(&close)
                    .map_or(bytes.len(), |e| j + 1 + e + close.len());
                spans.push((i, end));
                i = end;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                spans.push((start, i + 1));
                i += 1;
            }
            _ => i += 1,
        }
    }
    spans
}

fn has_sql_keyword(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .any(|word| SQL_KEYWORDS.contains(&word))
}

/// The text of the balanced parentheses that open at `open` (exclusive), skipping literals.
fn balanced(source: &str, open: usize, literals: &[(usize, usize)]) -> (usize, usize) {
    let mut depth = 0;
    let mut i = open;
    while i < source.len() {
        if let Some(&(_, end)) = literals.iter().find(|(s, _)| *s == i) {
            i = end;
            continue;
        }
        match source.as_bytes()[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return (open + 1, i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (open + 1, source.len())
}

fn line_of(source: &str, at: usize) -> usize {
    source[..at].matches('\n').count() + 1
}

fn in_literal(literals: &[(usize, usize)], at: usize) -> bool {
    literals.iter().any(|&(s, e)| s <= at && at < e)
}

fn is_constant_path(text: &str) -> bool {
    let last = text.rsplit("::").next().unwrap_or_default();
    !last.is_empty()
        && last
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether `arg` (the SQL text argument of a query) is static text, per rule 1.
fn static_sql_argument(source: &str, literals: &[(usize, usize)], arg: &str) -> bool {
    let arg = arg.trim().trim_start_matches('&');
    let arg = arg.strip_suffix(".as_str()").unwrap_or(arg);
    let is_literal = arg.starts_with('"') || arg.starts_with("r\"") || arg.starts_with("r#");
    if is_literal && string_literals(arg).first() == Some(&(0, arg.len())) {
        return true;
    }
    if is_constant_path(arg) {
        return true;
    }
    if let Some(inner) = arg
        .strip_prefix("self.sql(")
        .and_then(|a| a.strip_suffix(')'))
    {
        return is_constant_path(inner)
            || (is_identifier(inner) && bound_statically(source, literals, inner));
    }
    // `sql::NAME.text`, or `sql::NAME.issue()` (the same text, counted as executed).
    if let Some(path) = arg
        .strip_suffix(".text")
        .or_else(|| arg.strip_suffix(".issue()"))
    {
        return is_constant_path(path);
    }
    is_identifier(arg) && bound_statically(source, literals, arg)
}

/// Whether every `let NAME =` binding in `source` binds static SQL (and there is one): its
/// right-hand side names only constants, `self.sql(..)` and control flow; no literal, no macro,
/// no operator that builds text.
fn bound_statically(source: &str, literals: &[(usize, usize)], name: &str) -> bool {
    let pattern = format!("let {name} =");
    let mut found = false;
    for (at, _) in source.match_indices(&pattern) {
        if in_literal(literals, at) {
            continue;
        }
        found = true;
        let rhs_start = at + pattern.len();
        let Some(end) = source[rhs_start..].find(';') else {
            return false;
        };
        let rhs = &source[rhs_start..rhs_start + end];
        let forbidden = [
            "\"",
            "!",
            "+",
            "to_string",
            "to_owned",
            "String",
            "push",
            "as_str",
            "join",
        ];
        if forbidden.iter().any(|f| rhs.contains(f)) {
            return false;
        }
    }
    found
}

/// Rule 1 and 2 on one Rust file. Each finding: (file, flagged text, message).
fn check_rust(file: &str, source: &str) -> Vec<(String, String, String)> {
    let literals = string_literals(source);
    let mut findings = Vec::new();
    let mut flag = |at: usize, text: &str, message: &str| {
        findings.push((
            file.to_owned(),
            text.to_owned(),
            format!("{file}:{}: {message}: {text}", line_of(source, at)),
        ));
    };
    let comment_line = |at: usize| {
        let line_start = source[..at].rfind('\n').map_or(0, |n| n + 1);
        source[line_start..at].trim_start().starts_with("//")
    };
    // Rule 1: the SQL text of every sqlx query.
    for entry in [
        "query(",
        "query_as(",
        "query_scalar(",
        "query_with(",
        "query_as_with(",
        "query_scalar_with(",
        "raw_sql(",
        "query::<",
        "query_as::<",
        "query_scalar::<",
    ] {
        for (at, _) in source.match_indices(&format!("sqlx::{entry}")) {
            if in_literal(&literals, at) || comment_line(at) {
                continue;
            }
            let open = at + source[at..].find('(').unwrap();
            let (start, end) = balanced(source, open, &literals);
            let arg = &source[start..end];
            // The first argument only (query_with takes the arguments second).
            let first = split_first_argument(arg, start, &literals, source);
            if !static_sql_argument(source, &literals, first) {
                flag(
                    at,
                    &source[at..end.min(at + 120)],
                    "SQL text that is not static",
                );
            }
        }
    }
    // Every query function is called qualified (`sqlx::query`), so the loop above sees it.
    for (at, _) in source.match_indices("use sqlx::") {
        if in_literal(&literals, at) || comment_line(at) {
            continue;
        }
        let end = at + source[at..].find(';').unwrap_or(source.len() - at);
        let imported = &source[at..end];
        let imports_query = imported
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .any(|word| word.starts_with("query") || word == "raw_sql");
        if imports_query {
            flag(at, imported, "a query function imported unqualified");
        }
    }
    for builder in ["QueryBuilder", "AssertSqlSafe", "push_unsafe"] {
        for (at, _) in source.match_indices(builder) {
            if !in_literal(&literals, at) && !comment_line(at) {
                flag(at, builder, "a query builder assembles SQL text");
            }
        }
    }
    // Rule 2: text built from an SQL literal.
    for &(start, end) in &literals {
        let literal = &source[start..end];
        if !has_sql_keyword(literal) || comment_line(start) {
            continue;
        }
        let before = source[..start].trim_end();
        for mac in [
            "format!(",
            "format_args!(",
            "write!(",
            "writeln!(",
            "concat!(",
            "push_str(",
        ] {
            if before.ends_with(mac) {
                let at = before.len() - mac.len();
                let (_, close) = balanced(source, before.len() - 1, &literals);
                flag(
                    at,
                    &source[at..=close.min(source.len() - 1)],
                    "SQL text built at run time",
                );
            }
        }
        let after = source[end..].trim_start();
        let after = after
            .strip_prefix(".to_owned()")
            .or_else(|| after.strip_prefix(".to_string()"))
            .unwrap_or(after)
            .trim_start();
        if after.starts_with('+') {
            flag(start, literal, "SQL text concatenated at run time");
        }
    }
    for method in [
        ".execute(",
        ".fetch_one(",
        ".fetch_optional(",
        ".fetch_all(",
        ".fetch(",
        ".prepare(",
    ] {
        for (at, _) in source.match_indices(method) {
            if in_literal(&literals, at) || comment_line(at) {
                continue;
            }
            let (start, end) = balanced(source, at + method.len() - 1, &literals);
            let arg = source[start..end].trim();
            if arg.contains("format!") || arg.ends_with(".as_str()") || arg.starts_with('"') {
                flag(
                    at,
                    &source[at..=end.min(source.len() - 1)],
                    "an executor given built SQL text",
                );
            }
        }
    }
    findings
}

/// The first top-level argument of an argument list.
fn split_first_argument<'a>(
    arg: &'a str,
    offset: usize,
    literals: &[(usize, usize)],
    _source: &str,
) -> &'a str {
    let mut depth = 0;
    let mut i = 0;
    let bytes = arg.as_bytes();
    while i < bytes.len() {
        if let Some(&(_, end)) = literals.iter().find(|(s, _)| *s == offset + i) {
            i = end - offset;
            continue;
        }
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => return &arg[..i],
            _ => {}
        }
        i += 1;
    }
    arg
}

/// `code` without its SQL array constants, `'{a,b}'::text[]` (a literal cast to an array type:
/// braces that are the array's syntax, not a template's, e.g. migration 0024's CHECKs).
fn without_array_literals(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(start) = rest.find("'{") {
        let literal = &rest[start + 2..];
        let array = literal.find("}'::").and_then(|end| {
            let inner = &literal[..end];
            let cast = &literal[end + 4..];
            let type_len = cast
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(cast.len());
            let is_array = type_len > 0 && cast[type_len..].starts_with("[]");
            let plain = !inner.contains(['{', '}', '\'', '%']);
            (is_array && plain).then_some(end + 4 + type_len + 2)
        });
        match array {
            Some(len) => {
                out.push_str(&rest[..start]);
                out.push_str("ARRAY_CONSTANT");
                rest = &literal[len..];
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = literal;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Rule 3 on one .sql file.
fn check_sql(file: &str, source: &str) -> Vec<String> {
    let mut findings = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = line.split("--").next().unwrap_or_default();
        let upper = code.to_uppercase();
        let words: Vec<&str> = upper
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .collect();
        let mut problems = Vec::new();
        // `EXECUTE FUNCTION f()` in a CREATE TRIGGER names a function; any other EXECUTE runs a
        // string as SQL.
        let executes = words
            .iter()
            .zip(words.iter().skip(1).chain(std::iter::once(&"")))
            .any(|(w, next)| *w == "EXECUTE" && *next != "FUNCTION" && *next != "PROCEDURE");
        if executes {
            problems.push("EXECUTE (dynamic SQL)");
        }
        for call in [
            "FORMAT(",
            "QUOTE_IDENT(",
            "QUOTE_LITERAL(",
            "QUOTE_NULLABLE(",
        ] {
            if upper.replace(' ', "").contains(call) {
                problems.push("a function that builds SQL text");
            }
        }
        let unquoted = without_array_literals(code);
        if ["%s", "%I", "%L", "{", "}"]
            .iter()
            .any(|t| unquoted.contains(t))
        {
            problems.push("a template placeholder");
        }
        for problem in problems {
            findings.push(format!("{file}:{}: {problem}: {line}", n + 1));
        }
    }
    findings
}

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn files(dir: &str, extension: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![repo_root().join(dir)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                let relative = path
                    .strip_prefix(repo_root())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((relative, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_sql_statement_takes_its_values_as_bound_parameters() {
    let mut findings = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    let rust: Vec<_> = files("impl/src", "rs")
        .into_iter()
        .chain(files("server/src", "rs"))
        .collect();
    assert!(rust.len() >= 10, "{} Rust files", rust.len());
    let mut queries = 0;
    for (file, source) in &rust {
        queries += source.matches("sqlx::query").count();
        for (file, text, message) in check_rust(file, source) {
            match ALLOWED
                .iter()
                .position(|(f, start, _)| *f == file && text.starts_with(start))
            {
                Some(i) => used[i] = true,
                None => findings.push(message),
            }
        }
    }
    assert!(
        queries >= 50,
        "only {queries} queries found: is the check reading the sources?"
    );
    let sql: Vec<_> = files("impl/sql", "sql")
        .into_iter()
        .chain(files("impl/migrations", "sql"))
        .collect();
    assert!(sql.len() >= 40, "{} .sql files", sql.len());
    for (file, source) in &sql {
        findings.extend(check_sql(file, source));
    }
    for (i, used) in used.iter().enumerate() {
        if !used {
            findings.push(format!(
                "stale ALLOWED entry (nothing matches it): {:?}",
                ALLOWED[i]
            ));
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn the_bound_parameter_check_fails_on_sql_built_from_values() {
    let bad = [
        r#"async fn f(id: &str) { sqlx::query(&format!("SELECT * FROM jobs WHERE id = '{id}'")).execute(&pool).await; }"#,
        r#"async fn f(n: &str) { let q = format!("DELETE FROM jobs WHERE name = '{}'", n); sqlx::query(&q).execute(&pool).await; }"#,
        r#"async fn f(t: &str) { let q = "SELECT * FROM ".to_owned() + t; sqlx::query(&q).fetch_all(&pool).await; }"#,
        r#"async fn f(n: &str) { pool.execute(format!("UPDATE jobs SET name = '{n}'").as_str()).await; }"#,
        r#"async fn f(s: String) { sqlx::query_scalar::<_, i64>(s.as_str()).fetch_one(&pool).await; }"#,
        r#"async fn f(n: &str) { let mut q = QueryBuilder::new("SELECT 1"); q.push(n); }"#,
        r#"async fn f(w: &str) { let q = sql::JOB_LOCK.text.to_owned() + w; sqlx::query(&q); }"#,
        r#"use sqlx::query; async fn f(q: String) { query(&q).execute(&pool).await; }"#,
        r#"async fn f(s: Statement) { sqlx::query(s.issue()).execute(&pool).await; }"#,
    ];
    for snippet in bad {
        assert!(
            !check_rust("snippet.rs", snippet).is_empty(),
            "not flagged: {snippet}"
        );
    }
    let good = [
        r#"async fn f(id: Uuid) { sqlx::query("SELECT * FROM jobs WHERE id = $1").bind(id).execute(&pool).await; }"#,
        r#"async fn f(&self) { sqlx::query(self.sql(sql::JOB_LOCK)).bind(1).fetch_one(&mut *tx).await; }"#,
        r#"async fn f() { sqlx::query(sql::TARGET_LOCK.text).bind(slot).fetch_one(conn).await; }"#,
        r#"async fn f() { sqlx::query(sql::TARGET_LOCK.issue()).bind(slot).fetch_one(conn).await; }"#,
        r#"async fn f(&self, retry: bool) { let statement = if retry { sql::A } else { sql::B }; sqlx::query_scalar::<_, Uuid>(self.sql(statement)).bind(1); }"#,
        r#"const SCHEMA: &str = "CREATE TABLE t (x int)"; async fn f() { sqlx::raw_sql(SCHEMA).execute(&pool).await; }"#,
        r#"fn message(x: u32) -> String { format!("selected {x} rows") }"#,
    ];
    for snippet in good {
        assert_eq!(
            check_rust("snippet.rs", snippet),
            Vec::<(String, String, String)>::new(),
            "flagged: {snippet}"
        );
    }
    assert!(!check_sql("x.sql", "DO $$ BEGIN EXECUTE 'DELETE FROM ' || $1; END $$").is_empty());
    assert!(!check_sql("x.sql", "SELECT format('%I', $1)").is_empty());
    // Braces are a template's unless they are an array constant's.
    assert!(!check_sql("x.sql", "SELECT * FROM jobs WHERE id = '{id}'").is_empty());
    assert!(!check_sql("x.sql", "SELECT '{id}'::text").is_empty());
    assert!(!check_sql("x.sql", "SELECT '{a,{b}}'::text[]").is_empty());
    assert!(check_sql(
        "x.sql",
        "CHECK (kind = ANY ('{fenced,idempotent}'::text[]))"
    )
    .is_empty());
    assert!(check_sql(
        "x.sql",
        "-- EXECUTE in a comment\nSELECT id FROM jobs WHERE id = $1"
    )
    .is_empty());
}

// -------------------------------------------------------------------------------------------
// (f) The manual clock cannot be enabled by a request.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_manual_clock_the_test_clock_route_is_404_whatever_is_sent_and_time_follows_the_system_clock(
) {
    let (_db, server) = start(false).await;
    assert!(server.manual_clock.is_none());
    let f = fixture(&server).await;
    let http = reqwest::Client::new();
    let url = server.url();
    // Generated requests to the test clock's route and its neighbours.
    let strategy = (
        prop::sample::select(vec!["POST", "GET", "PUT", "PATCH", "DELETE"]),
        prop::sample::select(vec![
            "/v1/test/clock",
            "/v1/test/clock/",
            "/v1/test/clock?manual_clock=true",
            "/v1/test/clock?enable=1",
            "/v1/test//clock",
            "/v1/TEST/clock",
            "/v1/test/clock/enable",
            "/v1/test",
        ]),
        prop::sample::select(vec![
            json!({"advance_ms": 86_400_000}),
            json!({"set": "2001-01-01T00:00:00Z"}),
            json!({"set": "2001-01-01T00:00:00Z", "advance_ms": 1}),
            json!({"manual_clock": true}),
            json!({"enable": true, "clock": "manual"}),
            json!({}),
        ]),
        prop::collection::vec(
            (
                prop::sample::select(vec![
                    "x-leasewright-manual-clock",
                    "x-manual-clock",
                    "x-test-clock",
                    "x-leasewright-test",
                    "cookie",
                ]),
                prop::sample::select(vec!["1", "true", "on", "manual", "manual_clock=1"]),
            ),
            0..3,
        ),
        prop::sample::select(vec![Some(OPERATOR.to_owned()), Some(f.token.clone()), None]),
    );
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]),
    );
    let mut requests = Vec::new();
    for _ in 0..64 {
        requests.push(proptest::strategy::ValueTree::current(
            &strategy.new_tree(&mut runner).unwrap(),
        ));
    }
    for (method, path, body, headers, token) in requests {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = http
            .request(method.clone(), format!("{url}{path}"))
            .json(&body);
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{method} {path} {headers:?}: {answer}"
        );
    }
    // The server's time is still the system's: a submission and a claim are stamped now, not in
    // 2001 nor a day ahead.
    let before = chrono::Utc::now() - chrono::Duration::milliseconds(1);
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let after = chrono::Utc::now() + chrono::Duration::milliseconds(1);
    let submitted = f.operator.job(f.project, job).await.unwrap().submitted_at;
    assert!(
        before <= submitted && submitted <= after,
        "{before} <= {submitted} <= {after}"
    );
    let expiry = lease.lease_expiry - chrono::Duration::seconds(30);
    assert!(
        before <= expiry && expiry <= after,
        "{before} <= {expiry} <= {after}"
    );
    // And it moves with the system clock.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let heartbeat = f.runner.heartbeat(&lease.tuple(None)).await.unwrap();
    assert!(heartbeat.lease_expiry > lease.lease_expiry);
}

/// Every path under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}
