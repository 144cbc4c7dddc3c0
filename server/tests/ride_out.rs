//! The runner rides out an outage of the control plane's database (issue 26, item 6;
//! docs/reliability.md "The runner rides out an outage"): a quiet job keeps its lease, with the
//! default TTL, through a 10 s database outage; a result answered 500, then 503, is delivered
//! until the server decides it; an honest `lease_expired` still stops the work at once.
//!
//! Each test runs a real agent (`agent::run`) against an in-process server and waits on
//! outcomes (observations in the ledger, the agent's end), never on a timing threshold.

use leasewright_server::agent::{self, AgentConfig};
use leasewright_server::app::Server;
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::ObservationBody;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

mod common;

use common::*;

/// `leasewright serve`'s default `--lease-ttl`.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Poll `condition` until it yields a value; panic after `bound` (a bound on a hang, not a
/// threshold: every test's outcome comes long before it).
async fn eventually<T, F, Fut>(what: &str, bound: Duration, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(bound, async {
        loop {
            if let Some(value) = condition().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for: {what}"))
}

/// A job running `command` (a one-file source; `command` prints nothing of its own).
async fn submit(f: &Fixture, command: &str) -> Uuid {
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: command.as_bytes().to_vec(),
    }])
    .unwrap();
    let mut request = submit_request(None, "unfenced");
    request.source_archive_base64 = b64(&snapshot.archive);
    f.operator.submit(f.project, &request).await.unwrap().job
}

/// A command that waits, silently, for the file `go`.
fn wait_for(go: &Path) -> String {
    format!("while [ ! -f '{}' ]; do sleep 0.1; done\n", go.display())
}

/// One agent, for one job, against `url`.
fn spawn_runner(
    url: &str,
    f: &Fixture,
    workdir: &Path,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let mut config = AgentConfig::new(url, &f.token, workdir.to_owned());
    config.max_jobs = Some(1);
    tokio::spawn(agent::run(config))
}

async fn observations(f: &Fixture, job: Uuid) -> Vec<ObservationBody> {
    f.operator.observations(f.project, job).await.unwrap()
}

/// Wait until the job's command runs (the runner's own line before it is stored).
async fn command_running(f: &Fixture, job: Uuid) {
    eventually("the command runs", Duration::from_secs(60), || async {
        let log = f.operator.logs(f.project, job, None).await.ok()?;
        String::from_utf8_lossy(&log)
            .contains("running the command")
            .then_some(())
    })
    .await;
}

async fn job_state(f: &Fixture, job: Uuid) -> String {
    f.operator.job(f.project, job).await.unwrap().state
}

/// (kind, verdict, reason) of each observation, for messages.
fn summary(observations: &[ObservationBody]) -> Vec<String> {
    observations
        .iter()
        .map(|o| format!("{} {} {:?}", o.kind, o.verdict, o.reason))
        .collect()
}

/// A server with `lease_ttl` (system clock) whose database connections all go through a
/// [`DatabaseProxy`] that the test can cut (`down`) and restore (`up`).
async fn behind_a_database_proxy(
    lease_ttl: Duration,
) -> (
    leasewright_impl::database::TestDatabase,
    DatabaseProxy,
    Server,
) {
    let db = leasewright_impl::database::TestDatabase::create()
        .await
        .unwrap();
    let unused: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    let (upstream, _) = proxied_url(db.url(), unused);
    let proxy = DatabaseProxy::start(upstream).await;
    let (_, proxied) = proxied_url(db.url(), proxy.addr);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = leasewright_server::app::start(&proxied, lease_ttl, listener, config(false))
        .await
        .unwrap();
    (db, proxy, server)
}

/// Issue 26: with the default 30 s lease, one heartbeat that met a database outage lost the
/// lease of a job that printed nothing (the next heartbeat came a third of the TTL later, as a
/// rejoin, which does not renew; the one after was told `lease_expired`). Now the heartbeat is
/// retried with backoff while the lease can still be valid: the job keeps its lease through a
/// 10 s outage (every database connection cut, new ones refused: the server answers 503) and
/// its result is accepted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_job_keeps_its_default_lease_through_a_ten_second_database_outage() {
    let (_db, proxy, server) = behind_a_database_proxy(DEFAULT_LEASE_TTL).await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let job = submit(&f, &wait_for(&go)).await;
    let runner = spawn_runner(&server.url(), &f, &dir.path().join("work"));
    command_running(&f, job).await;
    let before = observations(&f, job).await.last().map_or(0, |o| o.id);

    proxy.down();
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy.up();

    // The first heartbeat the server decides after the outage.
    let first_after = eventually(
        "a heartbeat decided after the outage",
        Duration::from_secs(60),
        || async {
            let observations = f.operator.observations(f.project, job).await.ok()?;
            observations
                .into_iter()
                .find(|o| o.id > before && o.kind == "heartbeat")
        },
    )
    .await;
    std::fs::write(&go, "").unwrap();
    tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("the runner finishes its job")
        .unwrap()
        .unwrap();

    let observations = observations(&f, job).await;
    let ledger = summary(&observations);
    // The runner met the outage: a heartbeat (or the rejoin retrying it) was answered 503.
    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| (l.contains("route=\"/v1/runner/heartbeat\"")
                || l.contains("route=\"/v1/runner/rejoin\""))
                && l.contains("status=\"503\"")),
        "no heartbeat met the outage:\n{metrics}"
    );
    assert_eq!(
        (first_after.verdict.as_str(), first_after.reason.as_deref()),
        ("accepted", None),
        "the first heartbeat after the outage; ledger: {ledger:#?}"
    );
    assert!(
        observations
            .iter()
            .filter(|o| o.kind == "heartbeat" || o.kind == "rejoin")
            .all(|o| o.verdict == "accepted"),
        "a heartbeat or rejoin was rejected: {ledger:#?}"
    );
    let result = observations.iter().find(|o| o.kind == "result").unwrap();
    assert_eq!(result.verdict, "accepted", "{ledger:#?}");
    assert_eq!(job_state(&f, job).await, "passed", "{ledger:#?}");
    server.stop().await.unwrap();
}

/// What the fault proxy does to the runner's results.
#[derive(Default)]
struct ResultFaults {
    /// Results seen so far.
    seen: AtomicUsize,
}

/// An HTTP proxy in front of `server` that answers the runner's first result `500` without
/// passing it on, passes the second on and answers it `503` with `Retry-After: 1` (the result
/// committed, its answer lost), and passes everything else through.
async fn result_fault_proxy(server: &Server) -> (String, Arc<ResultFaults>) {
    use axum::body::{to_bytes, Body};
    use axum::extract::{Request, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};

    #[derive(Clone)]
    struct Proxy {
        upstream: String,
        http: reqwest::Client,
        faults: Arc<ResultFaults>,
    }

    async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let body = to_bytes(body, usize::MAX).await.unwrap();
        let is_result = parts.uri.path().starts_with("/v1/runner/result");
        let n = if is_result {
            proxy.faults.seen.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            0
        };
        if n == 1 {
            let body = r#"{"error": {"code": "internal_error", "message": "injected"}}"#;
            return (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        }
        let url = format!("{}{}", proxy.upstream, parts.uri);
        let answer = proxy
            .http
            .request(parts.method, url)
            .headers(parts.headers)
            .body(body)
            .send()
            .await
            .unwrap();
        if n == 2 {
            let body = r#"{"error": {"code": "database_unavailable", "message": "injected"}}"#;
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(axum::http::header::RETRY_AFTER, "1")],
                body,
            )
                .into_response();
        }
        let mut response = Response::builder().status(answer.status().as_u16());
        for (name, value) in answer.headers() {
            response = response.header(name, value);
        }
        response
            .body(Body::from(answer.bytes().await.unwrap()))
            .unwrap()
    }

    let faults = Arc::new(ResultFaults::default());
    let proxy = Proxy {
        upstream: server.url(),
        http: reqwest::Client::new(),
        faults: faults.clone(),
    };
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, faults)
}

/// Issue 26: after one 500 on its result the runner dropped the result (the job stayed
/// `running` until its lease ran out). Now a result that gets no decision (`5xx`, no answer) is
/// kept and sent again until the server decides it: the first answered 500 before it reached
/// the server, the second committed but answered 503, the third is `acknowledged`, and the job
/// ends `passed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_answered_500_then_503_is_delivered_again_and_the_job_passes() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let (url, faults) = result_fault_proxy(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let job = submit(&f, "true\n").await;
    let runner = spawn_runner(&url, &f, &dir.path().join("work"));
    tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("the runner finishes its job")
        .unwrap()
        .unwrap();
    let observations = observations(&f, job).await;
    let ledger = summary(&observations);
    let results: Vec<(&str, Option<&str>)> = observations
        .iter()
        .filter(|o| o.kind == "result")
        .map(|o| (o.verdict.as_str(), o.reason.as_deref()))
        .collect();
    assert_eq!(faults.seen.load(Ordering::SeqCst), 3, "{ledger:#?}");
    assert_eq!(
        results,
        vec![("accepted", None), ("acknowledged", None)],
        "{ledger:#?}"
    );
    assert_eq!(job_state(&f, job).await, "passed", "{ledger:#?}");
    server.stop().await.unwrap();
}

/// An honest rejection still stops the work at once: the server's (manual) clock passes the
/// lease's expiry, the next heartbeat is told `lease_expired`, and the runner kills the command
/// (which would never end: the runner's own end shows it was killed) and reports, without
/// retrying the heartbeat or rejoining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_expired_heartbeat_stops_the_work_at_once_without_retries() {
    let (_db, server) = start(true).await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    let job = submit(&f, &wait_for(&never)).await;
    let runner = spawn_runner(&server.url(), &f, &dir.path().join("work"));
    command_running(&f, job).await;
    f.operator
        .advance_clock(DEFAULT_LEASE_TTL.as_millis() as i64 + 1000)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("the runner stops the work and ends")
        .unwrap()
        .unwrap();
    let observations = observations(&f, job).await;
    let ledger = summary(&observations);
    let rejected = observations
        .iter()
        .position(|o| o.kind == "heartbeat" && o.reason.as_deref() == Some("lease_expired"))
        .unwrap_or_else(|| panic!("no heartbeat was told lease_expired: {ledger:#?}"));
    // After the rejection: the result (kept as a late observation) and nothing else.
    let after: Vec<(&str, Option<&str>)> = observations[rejected + 1..]
        .iter()
        .map(|o| (o.kind.as_str(), o.reason.as_deref()))
        .collect();
    assert_eq!(
        after,
        vec![("result", Some("lease_expired"))],
        "{ledger:#?}"
    );
    let result = &observations[rejected + 1];
    assert_eq!(result.outcome.as_deref(), Some("failed"), "{ledger:#?}");
    server.stop().await.unwrap();
}

/// Issue 26 (docs/protocol.md §12): a runner cut off from the control plane for longer than its
/// lease stops its work itself when the lease has run out by its own reckoning, while the
/// control plane is still unreachable. A failover that forgot its claim lets another attempt
/// start once this lease has expired; an execution that outlived its lease unseen would run
/// beside it. Before, the runner kept executing until the control plane answered again. The
/// command writes a heartbeat file every 0.1 s: it is stopped when the file stops changing, and
/// the database stays cut off until then (a bound of 60 s on a hang, far past the 3 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_cut_off_past_its_lease_stops_the_work_before_the_control_plane_answers() {
    let (_db, proxy, server) = behind_a_database_proxy(Duration::from_secs(3)).await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let beat = dir.path().join("beat");
    let command = format!(
        "i=0; while true; do i=$((i+1)); echo $i > '{0}.tmp'; mv '{0}.tmp' '{0}'; sleep 0.1; done\n",
        beat.display()
    );
    let job = submit(&f, &command).await;
    let runner = spawn_runner(&server.url(), &f, &dir.path().join("work"));
    command_running(&f, job).await;

    proxy.down();
    let read = || std::fs::read_to_string(&beat).unwrap_or_default();
    eventually(
        "the command stopped while the control plane was unreachable",
        Duration::from_secs(60),
        || async {
            let before = read();
            tokio::time::sleep(Duration::from_millis(600)).await;
            (!before.is_empty() && read() == before).then_some(())
        },
    )
    .await;
    assert!(
        !runner.is_finished(),
        "the runner waits for the control plane to decide its result"
    );
    proxy.up();
    tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("the runner reports and ends")
        .unwrap()
        .unwrap();
    let observations = observations(&f, job).await;
    let ledger = summary(&observations);
    let result = observations
        .iter()
        .find(|o| o.kind == "result")
        .unwrap_or_else(|| panic!("the result is kept: {ledger:#?}"));
    assert_eq!(
        (result.verdict.as_str(), result.reason.as_deref()),
        ("rejected", Some("lease_expired")),
        "{ledger:#?}"
    );
    server.stop().await.unwrap();
}

/// A runner keeps the archives it verified (`<workdir>/sources`, by blob digest): a second job
/// with the same source is extracted from its copy, with no source fetch, and a copy whose bytes
/// no longer match the digest is removed and fetched afresh (docs/protocol.md §7.2). Every job
/// ran its command and passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_reuses_a_verified_source_and_fetches_again_when_its_copy_changed() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let fetches = |job: Uuid| {
        let f = &f;
        async move {
            observations(f, job)
                .await
                .iter()
                .filter(|o| o.kind == "source_fetch" && o.verdict == "accepted")
                .count()
        }
    };
    let mut fetched = Vec::new();
    for round in 0..3 {
        if round == 2 {
            let cached: Vec<_> = std::fs::read_dir(work.join("sources"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(cached.len(), 1, "one copy for one source: {cached:?}");
            std::fs::write(&cached[0], b"not the archive").unwrap();
        }
        let job = submit(&f, "true\n").await;
        tokio::time::timeout(
            Duration::from_secs(60),
            spawn_runner(&server.url(), &f, &work),
        )
        .await
        .expect("the runner finishes its job")
        .unwrap()
        .unwrap();
        assert_eq!(job_state(&f, job).await, "passed", "round {round}");
        fetched.push(fetches(job).await);
    }
    assert_eq!(fetched, [1, 0, 1], "source fetches of the three jobs");
}
