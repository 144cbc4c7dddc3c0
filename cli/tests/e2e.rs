//! End to end: the control plane in-process (on a manual clock, so leases expire only when a
//! test says so) and runners as real `leasewright runner` processes, which the tests disconnect
//! and kill. Conditions are awaited by polling with a timeout, never by fixed sleeps.

use leasewright_impl::database::TestDatabase;
use leasewright_server::app::{self, Server, ServerConfig};
use leasewright_server::client::{OperatorClient, RunnerClient};
use leasewright_server::source::{
    build_snapshot, hostile_archive, raw_archive, sha256_hex, RawEntry, SourceFile,
};
use leasewright_server::wire::{JobBody, SubmitJobRequest};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

const OPERATOR: &str = "operator-secret";

/// A child process killed (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start_server() -> (TestDatabase, Server) {
    let db = TestDatabase::create().await.expect("test database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        operator_token: Some(OPERATOR.into()),
        manual_clock: true,
        sweep_interval: None,
        ..ServerConfig::default()
    };
    // Heartbeats every half second (a sixth of the lease); the manual clock decides expiry.
    let server = app::start(db.url(), Duration::from_secs(3), listener, config)
        .await
        .expect("server");
    (db, server)
}

fn runner_process(server: &str, token: &str, workdir: &Path, extra: &[&str]) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args([
            "runner",
            "--server",
            server,
            "--token",
            token,
            "--poll-interval-ms",
            "100",
        ])
        .arg("--workdir")
        .arg(workdir)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn leasewright runner");
    Proc(child)
}

/// Poll `condition` until it yields a value, or panic after `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Fixture {
    operator: OperatorClient,
    project: Uuid,
    token: String,
}

async fn fixture(server: &Server) -> Fixture {
    let operator = OperatorClient::new(&server.url(), OPERATOR).unwrap();
    let project = operator.create_project("e2e").await.unwrap();
    let token = operator.create_runner(project, "r1").await.unwrap().token;
    Fixture {
        operator,
        project,
        token,
    }
}

fn request(files: &[(&str, &str)], command: &str, target_kind: &str) -> SubmitJobRequest {
    use base64::Engine as _;
    let snapshot = build_snapshot(
        files
            .iter()
            .map(|(path, content)| SourceFile {
                path: (*path).into(),
                mode: 0o644,
                content: content.as_bytes().to_vec(),
            })
            .collect(),
    )
    .unwrap();
    SubmitJobRequest {
        command: command.into(),
        source_revision: "e2e".into(),
        source_archive_base64: base64::engine::general_purpose::STANDARD.encode(&snapshot.archive),
        artifacts: vec![],
        target: None,
        target_kind: Some(target_kind.into()),
    }
}

async fn job(f: &Fixture, job: Uuid) -> JobBody {
    f.operator.job(f.project, job).await.unwrap()
}

async fn logs(f: &Fixture, job: Uuid) -> String {
    // Empty before the job has an attempt.
    f.operator
        .logs(f.project, job, None)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet: it executes nothing).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A TCP proxy between the runner and the control plane that the test can cut and restore.
struct Proxy {
    url: String,
    cut: Arc<AtomicBool>,
    /// Connections refused while cut: the runner noticed the loss.
    refused: Arc<AtomicUsize>,
    generation: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let cut = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let proxy = Proxy {
            url,
            cut: cut.clone(),
            refused: refused.clone(),
            generation: generation.clone(),
        };
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if cut.load(Ordering::SeqCst) {
                    refused.fetch_add(1, Ordering::SeqCst);
                    drop(inbound);
                    continue;
                }
                let mut cut_signal = generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        proxy
    }

    /// Drop every connection and refuse new ones.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_reconnects_after_its_lease_expired_is_told_to_stop_and_no_second_deployment_starts(
) {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("command.pid");
    let command = format!(
        "curl -sf -X POST -H 'content-type: application/json' -d \"$LEASEWRIGHT_DEPLOY_JSON\" \
         \"$LEASEWRIGHT_TARGET_URL\" && echo deployed && echo $$ > {} && exec sleep 60",
        pidfile.display()
    );
    let submitted = f
        .operator
        .submit(f.project, &request(&[("a", "a")], &command, "unfenced"))
        .await
        .unwrap();
    let job_id = submitted.job;
    let proxy = Proxy::start(server.addr).await;
    // The runner reaches the control plane through the proxy, the target directly.
    let _runner = runner_process(
        &proxy.url,
        &f.token,
        &dir.path().join("work"),
        &["--target-url", &server.url()],
    );
    let slot = job_id.to_string();
    eventually(
        "the deployment reached the target",
        Duration::from_secs(30),
        || async {
            let target = f.operator.target(&slot).await.ok()?;
            (target.applied_count == 1).then_some(())
        },
    )
    .await;
    let pid = eventually(
        "the command is running and its output was logged",
        Duration::from_secs(10),
        || async {
            let pid = read_pid(&pidfile)?;
            logs(&f, job_id).await.contains("deployed").then_some(pid)
        },
    )
    .await;

    // Disconnect the runner while its deployment is still active; its lease expires.
    proxy.cut();
    // Once a connection was refused, the runner's earlier calls have all been answered.
    eventually(
        "the runner lost contact",
        Duration::from_secs(15),
        || async { (proxy.refused.load(Ordering::SeqCst) > 0).then_some(()) },
    )
    .await;
    f.operator.advance_clock(60_000).await.unwrap();
    let swept = f.operator.sweep().await.unwrap();
    assert_eq!(swept.jobs, vec![job_id]);
    assert_eq!(job(&f, job_id).await.state, "uncertain");
    // Nobody can start a second deployment: the job is uncertain, its target reserved.
    let other_token = f
        .operator
        .create_runner(f.project, "r2")
        .await
        .unwrap()
        .token;
    let other = RunnerClient::new(&server.url(), &other_token, Duration::from_secs(5)).unwrap();
    assert!(other.claim(4).await.unwrap().is_empty());

    // Reconnect: the runner rejoins with its original tuple and is told to stop.
    proxy.restore();
    let observations = eventually(
        "the runner rejoined and reported",
        Duration::from_secs(30),
        || async {
            let observations = f.operator.observations(f.project, job_id).await.ok()?;
            let rejoined = observations
                .iter()
                .any(|o| o.kind == "rejoin" && o.reason.as_deref() == Some("lease_expired"));
            let reported = observations.iter().any(|o| o.kind == "result");
            (rejoined && reported).then_some(observations)
        },
    )
    .await;
    let result = observations.iter().find(|o| o.kind == "result").unwrap();
    assert_eq!(result.verdict, "rejected");
    assert_eq!(result.reason.as_deref(), Some("lease_expired"));
    // Kept as a late observation of its own attempt.
    let attempts = f.operator.attempts(f.project, job_id).await.unwrap();
    assert_eq!(attempts.len(), 1, "no second attempt");
    assert_eq!(result.attempt, Some(attempts[0].attempt));
    assert_eq!(attempts[0].state, "uncertain");
    let body = job(&f, job_id).await;
    assert_eq!(body.state, "uncertain");
    assert_eq!(body.target_reserved_by, Some(attempts[0].attempt));
    assert_eq!(f.operator.target(&slot).await.unwrap().applied_count, 1);
    // The runner obeyed: its command was killed.
    eventually(
        "the command was killed",
        Duration::from_secs(10),
        || async { process_gone(pid).then_some(()) },
    )
    .await;
    // What it printed before the loss was kept; nothing after the rejection was accepted.
    let log = logs(&f, job_id).await;
    assert!(log.contains("deployed"), "{log}");
    assert!(!log.contains("reporting"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_job_leaves_it_uncertain_and_a_reconciled_retry_with_a_larger_fence_passes(
) {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("command.pid");
    let command = format!(
        "if [ \"$LEASEWRIGHT_FENCE\" = 1 ]; then echo $$ > {}; echo first attempt started; \
         exec sleep 60; fi; echo attempt with fence $LEASEWRIGHT_FENCE passes",
        pidfile.display()
    );
    let job_id = f
        .operator
        .submit(f.project, &request(&[("b", "b")], &command, "unfenced"))
        .await
        .unwrap()
        .job;
    let mut first = runner_process(&server.url(), &f.token, &dir.path().join("w1"), &[]);
    let pid = eventually(
        "the first attempt runs",
        Duration::from_secs(30),
        || async {
            let pid = read_pid(&pidfile)?;
            logs(&f, job_id)
                .await
                .contains("first attempt started")
                .then_some(pid)
        },
    )
    .await;

    // kill -9 the runner in the middle of the job.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    f.operator.advance_clock(60_000).await.unwrap();
    f.operator.sweep().await.unwrap();
    assert_eq!(job(&f, job_id).await.state, "uncertain");
    // Its command still runs: nothing may be decided yet.
    assert!(!process_gone(pid));
    let error = f
        .operator
        .reconcile(f.project, job_id, "still_running", "retry")
        .await
        .unwrap_err();
    assert_eq!(error.rejection(), Some("execution_not_stopped"));
    // The operator stops the orphaned execution, then reconciles: stopped, retry.
    let orphan = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    let _ = rustix::process::kill_process(orphan, rustix::process::Signal::KILL);
    eventually("the orphan stopped", Duration::from_secs(10), || async {
        process_gone(pid).then_some(())
    })
    .await;
    f.operator
        .reconcile(f.project, job_id, "stopped", "retry")
        .await
        .unwrap();
    assert_eq!(job(&f, job_id).await.state, "queued");

    let _second = runner_process(&server.url(), &f.token, &dir.path().join("w2"), &[]);
    let body = eventually("the retry passed", Duration::from_secs(30), || async {
        let body = job(&f, job_id).await;
        (body.state == "passed").then_some(body)
    })
    .await;
    assert_eq!(body.fence, 2);
    let attempts = f.operator.attempts(f.project, job_id).await.unwrap();
    let ledger: Vec<_> = attempts
        .iter()
        .map(|a| (a.fence, a.state.as_str()))
        .collect();
    assert_eq!(ledger, vec![(1, "stopped"), (2, "passed")]);
    assert!(logs(&f, job_id)
        .await
        .contains("attempt with fence 2 passes"));
}

fn files_named(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == name {
                found.push(path.clone());
            }
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_source_archive_and_archives_that_escape_the_workspace_are_never_executed() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let pool = server.store().pool();
    let marker = |n: usize| dir.path().join(format!("executed-{n}"));
    let mut jobs = Vec::new();
    for n in 0..4 {
        let command = format!("touch {}", marker(n).display());
        let submitted = f
            .operator
            .submit(
                f.project,
                &request(&[("file", &format!("content {n}"))], &command, "unfenced"),
            )
            .await
            .unwrap();
        jobs.push(submitted);
    }
    // 0: the stored blob is corrupted (its digest no longer matches).
    let mut corrupted: Vec<u8> =
        sqlx::query_scalar("SELECT content FROM server_source_blobs WHERE sha256 = $1")
            .bind(&jobs[0].source_blob_sha256)
            .fetch_one(pool)
            .await
            .unwrap();
    let middle = corrupted.len() / 2;
    corrupted[middle] ^= 0x55;
    sqlx::query("UPDATE server_source_blobs SET content = $2 WHERE sha256 = $1")
        .bind(&jobs[0].source_blob_sha256)
        .bind(&corrupted)
        .execute(pool)
        .await
        .unwrap();
    // 1, 2: the blob matches its digest, but it escapes the workspace (a `..` path, a symlink).
    // 3: a consistent blob of another tree (the manifest is not the leased source identity).
    let other = build_snapshot(vec![SourceFile {
        path: "file".into(),
        mode: 0o644,
        content: b"not what was submitted".to_vec(),
    }])
    .unwrap()
    .archive;
    let hostile = [
        (
            1,
            hostile_archive(b"../escape.txt", tar::EntryType::Regular, b"owned"),
        ),
        (
            2,
            hostile_archive(b"escape.txt", tar::EntryType::Symlink, b""),
        ),
        (3, other),
    ];
    for (n, archive) in hostile {
        let sha = sha256_hex(&archive);
        sqlx::query(
            "INSERT INTO server_source_blobs (sha256, manifest_digest, content, stored_at) \
             VALUES ($1, $2, $3, now())",
        )
        .bind(&sha)
        .bind(&jobs[n].source_digest)
        .bind(&archive)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query("UPDATE server_job_specs SET blob_sha256 = $2 WHERE job_id = $1")
            .bind(jobs[n].job)
            .bind(&sha)
            .execute(pool)
            .await
            .unwrap();
    }
    let work = dir.path().join("work");
    let _runner = runner_process(&server.url(), &f.token, &work, &["--max-jobs", "4"]);
    for submitted in &jobs {
        let body = eventually("the job finished", Duration::from_secs(60), || async {
            let body = job(&f, submitted.job).await;
            (body.state == "failed").then_some(body)
        })
        .await;
        assert_eq!(body.outcome.as_deref(), Some("failed"));
        let log = logs(&f, submitted.job).await;
        assert!(log.contains("refusing to execute"), "{log}");
        assert!(!log.contains("running the command"), "{log}");
    }
    for n in 0..4 {
        assert!(!marker(n).exists(), "job {n} executed");
    }
    assert!(files_named(dir.path(), "escape.txt").is_empty());
    let log = logs(&f, jobs[0].job).await;
    assert!(log.contains("blob digest"), "{log}");
    let log = logs(&f, jobs[3].job).await;
    assert!(log.contains("manifest digest"), "{log}");
}

/// One PAX extended-header record: `<length> <key>=<value>\n`, the length counting itself.
fn pax_record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut length = body.len();
    while length != body.len() + length.to_string().len() {
        length = body.len() + length.to_string().len();
    }
    format!("{length}{body}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_paths_hard_links_devices_fifos_pax_traversals_and_bombs_are_never_executed() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let pool = server.store().pool();
    let regular = tar::EntryType::Regular;
    // An absolute path into this test's directory: it would appear there if it were followed.
    let absolute = dir.path().join("absolute-escape.txt");
    let absolute_name = absolute.to_str().unwrap().as_bytes().to_vec();
    let pax = pax_record("path", "../pax-escape.txt");
    let limits = leasewright_server::source::Limits::default();
    let many: Vec<String> = (0..=limits.max_files).map(|i| format!("f{i}")).collect();
    let count_bomb: Vec<RawEntry<'_>> = many
        .iter()
        .map(|n| (n.as_bytes(), regular, &b""[..], None))
        .collect();
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        (
            "absolute path",
            hostile_archive(&absolute_name, regular, b"owned"),
        ),
        (
            "hard link",
            hostile_archive(b"escape.txt", tar::EntryType::Link, b""),
        ),
        (
            "character device",
            hostile_archive(b"escape.txt", tar::EntryType::Char, b""),
        ),
        (
            "block device",
            hostile_archive(b"escape.txt", tar::EntryType::Block, b""),
        ),
        (
            "fifo",
            hostile_archive(b"escape.txt", tar::EntryType::Fifo, b""),
        ),
        (
            "pax traversal",
            raw_archive(&[
                (b"pax", tar::EntryType::XHeader, pax.as_bytes(), None),
                (b"innocent", regular, b"owned", None),
            ]),
        ),
        ("file-count bomb", raw_archive(&count_bomb)),
        (
            "size bomb",
            raw_archive(&[(b"zeros", regular, b"", Some(limits.max_total_bytes + 1))]),
        ),
    ];
    let marker = |n: usize| dir.path().join(format!("executed-{n}"));
    let mut jobs = Vec::new();
    for (n, (what, archive)) in hostile.iter().enumerate() {
        // Submitted as a valid source; the stored blob is then replaced by the hostile archive
        // (a blob that matches its digest: only the extraction rules stand in the way).
        let command = format!("touch {}", marker(n).display());
        let submitted = f
            .operator
            .submit(f.project, &request(&[("file", what)], &command, "unfenced"))
            .await
            .unwrap();
        let sha = sha256_hex(archive);
        sqlx::query(
            "INSERT INTO server_source_blobs (sha256, manifest_digest, content, stored_at) \
             VALUES ($1, $2, $3, now())",
        )
        .bind(&sha)
        .bind(&submitted.source_digest)
        .bind(archive)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query("UPDATE server_job_specs SET blob_sha256 = $2 WHERE job_id = $1")
            .bind(submitted.job)
            .bind(&sha)
            .execute(pool)
            .await
            .unwrap();
        jobs.push((*what, submitted.job));
    }
    let work = dir.path().join("work");
    let count = hostile.len().to_string();
    let _runner = runner_process(&server.url(), &f.token, &work, &["--max-jobs", &count]);
    for (what, job_id) in &jobs {
        let body = eventually(what, Duration::from_secs(120), || async {
            let body = job(&f, *job_id).await;
            (body.state == "failed").then_some(body)
        })
        .await;
        assert_eq!(body.outcome.as_deref(), Some("failed"), "{what}");
        let log = logs(&f, *job_id).await;
        assert!(log.contains("refusing to execute"), "{what}: {log}");
        assert!(!log.contains("running the command"), "{what}: {log}");
    }
    for (n, (what, _)) in jobs.iter().enumerate() {
        assert!(!marker(n).exists(), "{what}: executed");
    }
    assert!(!absolute.exists(), "the absolute path was written");
    for name in ["escape.txt", "pax-escape.txt"] {
        assert!(
            files_named(dir.path(), name).is_empty(),
            "{name} was written"
        );
    }
    for (what, needle) in [
        ("size bomb", "larger than"),
        ("file-count bomb", "more than"),
        ("hard link", "link or a special file"),
        ("pax traversal", "leaves the workspace"),
    ] {
        let job_id = jobs.iter().find(|(w, _)| *w == what).unwrap().1;
        let log = logs(&f, job_id).await;
        assert!(log.contains(needle), "{what}: {log}");
    }
}

fn op(url: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["op", "--server", url, "--operator-token", OPERATOR])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("leasewright op");
    assert!(
        output.status.success(),
        "op {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the process did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The README's "Run a server and a runner", with real `serve`, `op` and `runner` processes.
#[test]
fn the_quick_start_works_with_real_serve_op_and_runner_processes() {
    use std::io::BufRead;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // With DATABASE_URL: a fresh database there; without: `serve` starts its own cluster.
    let db = std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .map(|_| runtime.block_on(TestDatabase::create()).unwrap());
    let mut serve = Command::new(env!("CARGO_BIN_EXE_leasewright"));
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--operator-token",
            OPERATOR,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(db) = &db {
        serve.args(["--database-url", db.url()]);
    }
    let mut serve = Proc(serve.spawn().unwrap());
    let stderr = serve.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let url = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("serve says where it listens");
        if let Some(url) = line.split("listening on ").nth(1) {
            break url.trim().to_owned();
        }
        said.push(line);
    };
    // Where the throwaway cluster lives (without DATABASE_URL): removed after the server exits.
    let cluster_dir: Option<PathBuf> = if db.is_none() {
        let line = said
            .iter()
            .find(|l| {
                l.contains("throwaway PostgreSQL") && l.contains("removed when this process exits")
            })
            .unwrap_or_else(|| panic!("{said:?}"));
        let dir = line
            .split(" in ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert!(Path::new(dir).is_dir(), "{line}");
        Some(PathBuf::from(dir))
    } else {
        None
    };
    assert!(
        !said.iter().any(|l| l.contains(OPERATOR)),
        "tokens are never printed"
    );

    let project = op(&url, &["project", "demo"]).trim().to_owned();
    let token = op(&url, &["runner", &project, "runner-1"])
        .trim()
        .to_owned();
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("build.sh"),
        "echo \"building at fence $LEASEWRIGHT_FENCE\"\necho built > out.txt\n",
    )
    .unwrap();
    let src_dir = src.path().to_str().unwrap();
    let job = op(
        &url,
        &[
            "submit",
            &project,
            "--dir",
            src_dir,
            "--command",
            "sh build.sh",
            "--artifact",
            "out.txt",
        ],
    )
    .trim()
    .to_owned();
    // Editing the checkout after submission cannot change the run.
    std::fs::write(src.path().join("build.sh"), "echo tampered; exit 1\n").unwrap();

    let work = tempfile::tempdir().unwrap();
    let mut runner = runner_process(&url, &token, work.path(), &["--max-jobs", "1"]);
    assert!(wait_exit(&mut runner.0, Duration::from_secs(60)).success());

    let body: serde_json::Value =
        serde_json::from_str(&op(&url, &["job", &project, &job, "--wait"])).unwrap();
    assert_eq!(body["state"], "passed", "{body}");
    let log = op(&url, &["logs", &project, &job]);
    assert!(log.contains("building at fence 1"), "{log}");
    assert!(!log.contains("tampered"), "{log}");
    assert_eq!(
        op(&url, &["artifact", &project, &job, "out.txt"]),
        "built\n"
    );
    let ledger = op(&url, &["ledger", &project, &job]);
    assert!(ledger.contains("\"kind\": \"result\""), "{ledger}");

    // SIGTERM: a clean exit.
    let pid = rustix::process::Pid::from_raw(i32::try_from(serve.0.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(wait_exit(&mut serve.0, Duration::from_secs(30)).success());
    if let Some(dir) = cluster_dir {
        let deadline = Instant::now() + Duration::from_secs(30);
        while dir.exists() {
            assert!(
                Instant::now() < deadline,
                "{} was not removed",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_running_job_is_stopped_by_its_runner_and_reported_cancelled() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("command.pid");
    let command = format!(
        "echo $$ > {}; echo started; exec sleep 60",
        pidfile.display()
    );
    let job_id = f
        .operator
        .submit(f.project, &request(&[("c", "c")], &command, "unfenced"))
        .await
        .unwrap()
        .job;
    let _runner = runner_process(&server.url(), &f.token, &dir.path().join("w"), &[]);
    let pid = eventually("the command runs", Duration::from_secs(30), || async {
        let pid = read_pid(&pidfile)?;
        logs(&f, job_id).await.contains("started").then_some(pid)
    })
    .await;
    assert_eq!(
        f.operator.cancel(f.project, job_id).await.unwrap().verdict,
        "accepted"
    );
    assert_eq!(job(&f, job_id).await.state, "cancelling");
    let body = eventually("the job is cancelled", Duration::from_secs(30), || async {
        let body = job(&f, job_id).await;
        (body.state == "cancelled").then_some(body)
    })
    .await;
    assert_eq!(body.outcome.as_deref(), Some("cancelled"));
    assert!(process_gone(pid));
    let attempts = f.operator.attempts(f.project, job_id).await.unwrap();
    assert_eq!(attempts[0].state, "cancelled");
}

/// The brief's exercise: the scheduler is at fence 11 while a disconnected worker still sends
/// fence 10 to a fenced target, which refuses it; the worker's late report changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_target_refuses_a_disconnected_worker_at_fence_10_once_fence_11_has_deployed() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let command = format!(
        "if [ \"$LEASEWRIGHT_FENCE\" = 10 ]; then echo waiting; \
         while [ ! -f {go} ]; do sleep 0.1; done; fi; \
         curl -sf -X POST -H 'content-type: application/json' -d \"$LEASEWRIGHT_DEPLOY_JSON\" \
         \"$LEASEWRIGHT_TARGET_URL\" || {{ echo deploy refused; exit 1; }}; echo deployed",
        go = go.display()
    );
    let job_id = f
        .operator
        .submit(f.project, &request(&[("d", "d")], &command, "fenced"))
        .await
        .unwrap()
        .job;
    // Nine earlier attempts, each expired and reconciled (they never deployed).
    let cycler = RunnerClient::new(&server.url(), &f.token, Duration::from_secs(5)).unwrap();
    for _ in 0..9 {
        cycler.claim(1).await.unwrap().remove(0);
        f.operator.advance_clock(60_000).await.unwrap();
        f.operator.sweep().await.unwrap();
        f.operator
            .reconcile(f.project, job_id, "stopped", "retry")
            .await
            .unwrap();
    }
    // The worker at fence 10 runs, then is cut off from the control plane before it deploys.
    let proxy = Proxy::start(server.addr).await;
    let _old = runner_process(
        &proxy.url,
        &f.token,
        &dir.path().join("old"),
        &["--target-url", &server.url()],
    );
    eventually("fence 10 runs", Duration::from_secs(30), || async {
        logs(&f, job_id).await.contains("waiting").then_some(())
    })
    .await;
    proxy.cut();
    eventually(
        "the worker lost contact",
        Duration::from_secs(15),
        || async { (proxy.refused.load(Ordering::SeqCst) > 0).then_some(()) },
    )
    .await;
    f.operator.advance_clock(60_000).await.unwrap();
    f.operator.sweep().await.unwrap();
    // A mistaken finding: the operator believes the worker stopped. Fencing is what protects the
    // target now.
    f.operator
        .reconcile(f.project, job_id, "stopped", "retry")
        .await
        .unwrap();
    let mut new = runner_process(
        &server.url(),
        &f.token,
        &dir.path().join("new"),
        &["--max-jobs", "1"],
    );
    assert!(wait_exit(&mut new.0, Duration::from_secs(60)).success());
    let body = job(&f, job_id).await;
    assert_eq!((body.state.as_str(), body.fence), ("passed", 11));
    let slot = job_id.to_string();
    let target = f.operator.target(&slot).await.unwrap();
    assert_eq!(
        (target.highest_slot_token, target.applied_count),
        (Some(11), 1)
    );

    // The disconnected worker's deployment goes ahead with slot token 10 (only this job ever
    // reserved its slot, so its tokens are its fences): refused by the target.
    std::fs::write(&go, "").unwrap();
    let pool = server.store().pool();
    let (verdict, reason): (String, Option<String>) = eventually(
        "the slot token 10 mutation reached the target",
        Duration::from_secs(30),
        || async {
            sqlx::query_as("SELECT verdict, reason FROM target_mutations WHERE slot_token = 10")
                .fetch_optional(pool)
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(
        (verdict.as_str(), reason.as_deref()),
        ("rejected", Some("stale_fence"))
    );
    let target = f.operator.target(&slot).await.unwrap();
    assert_eq!(
        (target.highest_slot_token, target.applied_count),
        (Some(11), 1)
    );

    // Back in contact, the worker is told to stop; its report is kept, the outcome is not touched.
    proxy.restore();
    let attempts = f.operator.attempts(f.project, job_id).await.unwrap();
    let old_attempt = attempts.iter().find(|a| a.fence == 10).unwrap().attempt;
    eventually(
        "the old worker reported",
        Duration::from_secs(30),
        || async {
            let observations = f.operator.observations(f.project, job_id).await.ok()?;
            observations
                .iter()
                .any(|o| {
                    o.kind == "result"
                        && o.attempt == Some(old_attempt)
                        && o.reason.as_deref() == Some("not_current")
                })
                .then_some(())
        },
    )
    .await;
    let body = job(&f, job_id).await;
    assert_eq!((body.state.as_str(), body.fence), ("passed", 11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_reconnects_before_its_lease_expired_is_told_to_continue_and_passes() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let command = format!(
        "echo waiting; while [ ! -f {go} ]; do sleep 0.1; done; echo done",
        go = go.display()
    );
    let job_id = f
        .operator
        .submit(f.project, &request(&[("e", "e")], &command, "unfenced"))
        .await
        .unwrap()
        .job;
    let proxy = Proxy::start(server.addr).await;
    let _runner = runner_process(&proxy.url, &f.token, &dir.path().join("w"), &[]);
    eventually("the command runs", Duration::from_secs(30), || async {
        logs(&f, job_id).await.contains("waiting").then_some(())
    })
    .await;
    proxy.cut();
    eventually(
        "the runner lost contact",
        Duration::from_secs(15),
        || async { (proxy.refused.load(Ordering::SeqCst) > 0).then_some(()) },
    )
    .await;
    // The lease has not expired (the clock did not move): the rejoin answers continue.
    proxy.restore();
    eventually("the runner rejoined", Duration::from_secs(30), || async {
        let observations = f.operator.observations(f.project, job_id).await.ok()?;
        observations
            .iter()
            .any(|o| o.kind == "rejoin" && o.verdict == "accepted")
            .then_some(())
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let body = eventually("the job passed", Duration::from_secs(30), || async {
        let body = job(&f, job_id).await;
        (body.state == "passed").then_some(body)
    })
    .await;
    assert_eq!(body.fence, 1);
    assert!(logs(&f, job_id).await.contains("done"));
}

/// `git -C dir ARGS` (no user or system configuration), its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `leasewright op ARGS` against `url`: its exit code, stdout and stderr.
fn op_status(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["op", "--server", url, "--operator-token", OPERATOR])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("leasewright op");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Issue 30's "done when": a repository snapshot made with `git archive` runs end to end through
/// `op submit --git` and a real runner; only what the commit holds is sent (not an uncommitted
/// edit, an untracked or an ignored file), its commit id is the source revision, and `--target`
/// names the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_revision_submitted_with_op_submit_git_runs_on_a_runner() {
    let (_db, server) = start_server().await;
    let f = fixture(&server).await;
    let repo = tempfile::tempdir().unwrap();
    let long = format!("docs/{}.txt", "n".repeat(196)); // a PAX `path` record in git archive
    std::fs::create_dir_all(repo.path().join("docs")).unwrap();
    std::fs::write(repo.path().join(&long), "long name\n").unwrap();
    std::fs::write(
        repo.path().join("build.sh"),
        "echo committed build; cat docs/n*; \
         test ! -e untracked.txt && test ! -e build.log && echo clean > out.txt\n",
    )
    .unwrap();
    std::fs::write(repo.path().join(".gitignore"), "*.log\n").unwrap();
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let commit = git(repo.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    // The work tree moves on: none of this is the revision.
    std::fs::write(repo.path().join("build.sh"), "echo uncommitted; exit 1\n").unwrap();
    std::fs::write(repo.path().join("untracked.txt"), "u").unwrap();
    std::fs::write(repo.path().join("build.log"), "ignored").unwrap();

    let url = server.url();
    let project = f.project.to_string();
    let repo_dir = repo.path().to_str().unwrap().to_owned();
    let (code, out, err) = tokio::task::spawn_blocking({
        let (url, project, repo_dir) = (url.clone(), project.clone(), repo_dir.clone());
        move || {
            op_status(
                &url,
                &[
                    "submit",
                    &project,
                    "--git",
                    "HEAD",
                    "--repo",
                    &repo_dir,
                    "--command",
                    "sh build.sh",
                    "--artifact",
                    "out.txt",
                    "--target",
                    "shared-slot",
                ],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let job_id: Uuid = out.trim().parse().unwrap();

    let work = tempfile::tempdir().unwrap();
    let mut runner = runner_process(&url, &f.token, work.path(), &["--max-jobs", "1"]);
    let status =
        tokio::task::spawn_blocking(move || wait_exit(&mut runner.0, Duration::from_secs(60)))
            .await
            .unwrap();
    assert!(status.success());
    let body = job(&f, job_id).await;
    assert_eq!(body.state, "passed", "{}", logs(&f, job_id).await);
    assert_eq!(body.source_revision, commit);
    assert_eq!(body.target, "shared-slot");
    let log = logs(&f, job_id).await;
    assert!(log.contains("committed build"), "{log}");
    assert!(log.contains("long name"), "{log}");
    assert!(!log.contains("uncommitted"), "{log}");
    assert_eq!(
        f.operator
            .artifact(f.project, job_id, "out.txt")
            .await
            .unwrap(),
        b"clean\n"
    );

    // What no runner could extract is refused at submission, naming the path; a revision that
    // is no commit is a usage error. Both exit 2 and submit nothing.
    std::os::unix::fs::symlink("build.sh", repo.path().join("link.sh")).unwrap();
    git(repo.path(), &["add", "link.sh"]);
    git(repo.path(), &["commit", "-q", "-m", "a link"]);
    let (code, _, err) = tokio::task::spawn_blocking({
        let (url, project, repo_dir) = (url.clone(), project.clone(), repo_dir.clone());
        move || {
            op_status(
                &url,
                &[
                    "submit",
                    &project,
                    "--git",
                    "HEAD",
                    "--repo",
                    &repo_dir,
                    "--command",
                    "true",
                ],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("invalid_source") && err.contains("link.sh"),
        "{err}"
    );
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        op_status(
            &url,
            &[
                "submit",
                &project,
                "--git",
                "no-such-rev",
                "--repo",
                &repo_dir,
                "--command",
                "true",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no-such-rev"), "{err}");
    assert_eq!(f.operator.jobs(f.project).await.unwrap().len(), 1);
}
