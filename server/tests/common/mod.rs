//! Helpers shared by the server's integration tests (server/tests/*.rs): an in-process server on
//! a fresh database (DATABASE_URL or a throwaway cluster), a project with a runner, a submission,
//! and raw JSON requests. Each test binary uses a part of it.
#![allow(dead_code)]

use base64::Engine as _;
use leasewright_impl::database::TestDatabase;
use leasewright_server::app::{self, Server, ServerConfig};
use leasewright_server::client::{OperatorClient, RunnerClient};
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::{LeaseBody, SubmitJobRequest};
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

pub const OPERATOR: &str = "operator-secret";

/// The configuration of the tests' servers: the operator token [`OPERATOR`], no periodic sweep,
/// a 1 MiB payload limit, the demonstration targets routed.
pub fn config(manual_clock: bool) -> ServerConfig {
    ServerConfig {
        operator_token: Some(OPERATOR.into()),
        manual_clock,
        sweep_interval: None,
        max_payload_bytes: 1024 * 1024,
        demo_targets: true,
        ..ServerConfig::default()
    }
}

/// A server in-process on a fresh database, lease TTL 30 s.
pub async fn start(manual_clock: bool) -> (TestDatabase, Server) {
    start_with(config(manual_clock)).await
}

/// A server in-process on a fresh database with `config`, lease TTL 30 s.
pub async fn start_with(config: ServerConfig) -> (TestDatabase, Server) {
    let db = TestDatabase::create().await.expect("test database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = app::start(db.url(), Duration::from_secs(30), listener, config)
        .await
        .expect("server");
    (db, server)
}

/// A project with one runner.
pub struct Fixture {
    pub operator: OperatorClient,
    pub project: Uuid,
    pub token: String,
    pub runner: RunnerClient,
    /// The runner's id.
    pub runner_id: Uuid,
}

pub async fn fixture(server: &Server) -> Fixture {
    fixture_named(server, "p").await
}

/// A project named `name` with one runner named `r`.
pub async fn fixture_named(server: &Server, name: &str) -> Fixture {
    let operator = OperatorClient::new(&server.url(), OPERATOR).unwrap();
    let project = operator.create_project(name).await.unwrap();
    let created = operator.create_runner(project, "r").await.unwrap();
    let token = created.token;
    let runner = RunnerClient::new(&server.url(), &token, Duration::from_secs(10)).unwrap();
    Fixture {
        operator,
        project,
        token,
        runner,
        runner_id: created.runner,
    }
}

/// A submission of a one-file source (`run.sh`) running `sh run.sh`.
pub fn submit_request(target: Option<&str>, target_kind: &str) -> SubmitJobRequest {
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: b"echo hi\n".to_vec(),
    }])
    .unwrap();
    SubmitJobRequest {
        command: "sh run.sh".into(),
        source_revision: "rev-1".into(),
        source_archive_base64: b64(&snapshot.archive),
        artifacts: vec![],
        target: target.map(str::to_owned),
        target_kind: Some(target_kind.into()),
    }
}

/// POST `body` with `token`; the status and the JSON answer (Null when not JSON).
pub async fn post(server: &Server, token: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The ownership tuple of `lease` with another lease id and fence, and a fixed runner time.
pub fn tuple_json(lease: &LeaseBody, lease_id: Uuid, fence: i64) -> Value {
    json!({
        "job": lease.job,
        "attempt": lease.attempt,
        "lease_id": lease_id,
        "fence": fence,
        "runner_time": "2001-01-01T00:00:00Z",
    })
}

/// `tuple` with the fields of `extra` added (or replaced).
pub fn with(mut tuple: Value, extra: &Value) -> Value {
    if let (Some(map), Some(extra)) = (tuple.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            map.insert(k.clone(), v.clone());
        }
    }
    tuple
}

/// Standard base64, padded.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A TCP proxy between the server and PostgreSQL that can make the database unreachable: every
/// open connection cut, every new one closed at once (so each call in flight and each new one
/// fails: `503 database_unavailable`).
pub struct DatabaseProxy {
    pub addr: std::net::SocketAddr,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl DatabaseProxy {
    pub async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let links = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let accept = {
            let (down, links) = (down.clone(), links.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if down.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let upstream = upstream.clone();
                    let link = tokio::spawn(async move {
                        if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    links.lock().unwrap().push(link.abort_handle());
                }
            })
        };
        Self {
            addr,
            down,
            links,
            _accept: accept,
        }
    }

    /// The database unreachable until [`DatabaseProxy::up`].
    pub fn down(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    pub fn up(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `url` (`postgres://user@host:port/db`) split into the address and the URL through `via`.
pub fn proxied_url(url: &str, via: std::net::SocketAddr) -> (String, String) {
    let scheme_end = url.find("://").unwrap() + 3;
    let authority_start = url[scheme_end..]
        .find('@')
        .map_or(scheme_end, |at| scheme_end + at + 1);
    let authority_end = authority_start + url[authority_start..].find('/').unwrap();
    let upstream = url[authority_start..authority_end].to_owned();
    let proxied = format!("{}{via}{}", &url[..authority_start], &url[authority_end..]);
    (upstream, proxied)
}

// -------------------------------------------------------------------------------------------
// Every route of the router (server/src/app/mod.rs), with what it takes. server/tests/bad_input.rs
// checks that this table is exactly the router's routes and docs/http.md's.

/// Who a route authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// No token (health, metrics, the demo target's deploy route).
    None,
    /// A runner token.
    Runner,
    /// The operator token.
    Operator,
}

/// The body limit a route reads its body under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The route reads no body.
    NoBody,
    /// 64 KiB.
    Control,
    /// The server's payload limit.
    Payload,
}

/// What a route's JSON body is (docs/http.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// No body (GET).
    None,
    /// `{"capacity"?, "runner_time"?}`.
    Claim,
    /// The ownership tuple alone (heartbeat, rejoin, source).
    Tuple,
    /// The tuple + `seq`, `content_base64`.
    Logs,
    /// The tuple + `name`, `content_base64` (artifact and cache put).
    Put,
    /// The tuple + `name` (artifact and cache get).
    Get,
    /// The tuple + `outcome`, `result_digest`.
    Result,
    /// `{"results": [Result...]}` (the batch result): no tuple at the top.
    Results,
    /// `{"kind", "job", "attempt", "fence", "deployment_id"}`.
    Deploy,
    /// `{"name"}` (projects and runners).
    Name,
    /// A job submission.
    Submit,
    /// `{}` (cancel).
    Empty,
    /// `{"finding", "decision"}`.
    Reconcile,
    /// `{"project"?}` or empty (sweep).
    Sweep,
    /// `{"set"?, "advance_ms"?}` (the test clock).
    Clock,
}

/// One route of the router.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub method: &'static str,
    /// The router's path pattern (`{project}`, `{job}`, `{slot}`, `{name}`).
    pub path: &'static str,
    pub auth: Auth,
    pub limit: Limit,
    pub body: BodyKind,
    /// The protocol message kind a runner route records as an observation (tuple routes).
    pub kind: Option<&'static str>,
}

const fn route(
    method: &'static str,
    path: &'static str,
    auth: Auth,
    limit: Limit,
    body: BodyKind,
    kind: Option<&'static str>,
) -> Route {
    Route {
        method,
        path,
        auth,
        limit,
        body,
        kind,
    }
}

use Auth::{Operator as Op, Runner as Rn};
use BodyKind as B;
use Limit::{Control as Ctl, NoBody as NoB, Payload as Pay};

/// Every route of the router, in the router's order.
pub const ROUTES: &[Route] = &[
    route("GET", "/healthz", Auth::None, NoB, B::None, None),
    route("GET", "/metrics", Auth::None, NoB, B::None, None),
    route("GET", "/openapi.json", Auth::None, NoB, B::None, None),
    route("POST", "/v1/runner/claim", Rn, Ctl, B::Claim, None),
    route(
        "POST",
        "/v1/runner/heartbeat",
        Rn,
        Ctl,
        B::Tuple,
        Some("heartbeat"),
    ),
    route(
        "POST",
        "/v1/runner/rejoin",
        Rn,
        Ctl,
        B::Tuple,
        Some("rejoin"),
    ),
    route(
        "POST",
        "/v1/runner/source",
        Rn,
        Ctl,
        B::Tuple,
        Some("source_fetch"),
    ),
    route(
        "POST",
        "/v1/runner/logs",
        Rn,
        Pay,
        B::Logs,
        Some("log_append"),
    ),
    route(
        "POST",
        "/v1/runner/artifacts/put",
        Rn,
        Pay,
        B::Put,
        Some("artifact_put"),
    ),
    route(
        "POST",
        "/v1/runner/artifacts/get",
        Rn,
        Ctl,
        B::Get,
        Some("artifact_get"),
    ),
    route(
        "POST",
        "/v1/runner/cache/put",
        Rn,
        Pay,
        B::Put,
        Some("cache_put"),
    ),
    route(
        "POST",
        "/v1/runner/cache/get",
        Rn,
        Ctl,
        B::Get,
        Some("cache_get"),
    ),
    route(
        "POST",
        "/v1/runner/result",
        Rn,
        Ctl,
        B::Result,
        Some("result"),
    ),
    route("POST", "/v1/runner/results", Rn, Ctl, B::Results, None),
    route(
        "POST",
        "/v1/targets/{slot}/deploy",
        Auth::None,
        Ctl,
        B::Deploy,
        None,
    ),
    route("GET", "/v1/targets/{slot}", Op, NoB, B::None, None),
    route("POST", "/v1/projects", Op, Ctl, B::Name, None),
    route(
        "POST",
        "/v1/projects/{project}/runners",
        Op,
        Ctl,
        B::Name,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/runners",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "POST",
        "/v1/projects/{project}/runners/{runner}/revoke",
        Op,
        Ctl,
        B::Empty,
        None,
    ),
    route(
        "POST",
        "/v1/projects/{project}/jobs",
        Op,
        Pay,
        B::Submit,
        None,
    ),
    route("GET", "/v1/projects/{project}/jobs", Op, NoB, B::None, None),
    route(
        "GET",
        "/v1/projects/{project}/security-log",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/attempts",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/observations",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/reconciliations",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/logs",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/log-chunks",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/jobs/{job}/artifacts/{name}",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "GET",
        "/v1/projects/{project}/cache/{key}",
        Op,
        NoB,
        B::None,
        None,
    ),
    route(
        "POST",
        "/v1/projects/{project}/jobs/{job}/cancel",
        Op,
        Ctl,
        B::Empty,
        None,
    ),
    route(
        "POST",
        "/v1/projects/{project}/jobs/{job}/reconcile",
        Op,
        Ctl,
        B::Reconcile,
        None,
    ),
    route("POST", "/v1/sweep", Op, Ctl, B::Sweep, None),
    route("POST", "/v1/test/clock", Op, Ctl, B::Clock, None),
    route("POST", "/v1/test/replicate", Op, Ctl, B::Empty, None),
    route("POST", "/v1/test/failover", Op, Ctl, B::Empty, None),
    route("POST", "/v1/test/audit", Op, Ctl, B::Empty, None),
    route("POST", "/v1/test/prune", Op, Ctl, B::Empty, None),
];

impl Route {
    /// `METHOD path`.
    pub fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// Whether the route reads a JSON body.
    pub fn has_body(&self) -> bool {
        self.body != BodyKind::None
    }

    /// Whether the route names an ownership tuple (and records an observation).
    pub fn has_tuple(&self) -> bool {
        self.kind.is_some()
    }
}

// -------------------------------------------------------------------------------------------
// Raw requests.

/// A request as sent, byte for byte.
#[derive(Clone, Debug)]
pub struct Raw {
    pub method: &'static str,
    /// The path and query, as written on the wire (percent-encoding kept).
    pub path: String,
    pub token: Option<String>,
    /// `None`: no body at all.
    pub body: Option<Vec<u8>>,
}

/// The answer to a [`Raw`] request.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (Null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// `error.code` of an error body.
    pub fn code(&self) -> Option<String> {
        self.json()["error"]["code"].as_str().map(str::to_owned)
    }
}

/// Send `raw`; an error when no HTTP answer came back (a closed connection: a panic).
pub async fn send(http: &reqwest::Client, base: &str, raw: &Raw) -> Result<Answer, String> {
    let method = reqwest::Method::from_bytes(raw.method.as_bytes()).map_err(|e| e.to_string())?;
    let mut request = http.request(method, format!("{base}{}", raw.path));
    if let Some(token) = &raw.token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(body) = &raw.body {
        request = request
            .header("content-type", "application/json")
            .body(body.clone());
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("no answer to {} {}: {e:?}", raw.method, raw.path))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("no body for {} {}: {e:?}", raw.method, raw.path))?
        .to_vec();
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

/// The stable error codes of docs/http.md's error table and protocol §6 (every 4xx code a
/// client can see).
pub const ERROR_CODES: &[&str] = &[
    "bad_request",
    "unauthorized",
    "not_found",
    "unknown_project",
    "unknown_job",
    "unknown_attempt",
    "unknown_target",
    "source_not_stored",
    "method_not_allowed",
    "project_name_taken",
    "runner_name_taken",
    "target_kind_mismatch",
    "payload_too_large",
    "invalid_source",
    // Protocol §6 reasons (409).
    "unknown_runner",
    "wrong_project",
    "runner_mismatch",
    "lease_mismatch",
    "fence_mismatch",
    "not_current",
    "conflicting_result",
    "job_finished",
    "lease_expired",
    "cancel_requested",
    "cancel_not_requested",
    "sequence_conflict",
    "no_queued_job",
    "reconcile_required",
    "not_uncertain",
    "execution_not_stopped",
    "nothing_to_adopt",
    "stale_fence",
];

/// Check that `answer` is a 4xx error in docs/http.md's format: a JSON body
/// `{"error": {"code", "message"}}` with a documented code, `"verdict": "rejected"` exactly on
/// 409 protocol rejections.
pub fn check_error_format(answer: &Answer) -> Result<String, String> {
    if !(400..500).contains(&answer.status) {
        return Err(format!(
            "status {} (expected a 4xx): {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        ));
    }
    if !answer.content_type.starts_with("application/json") {
        return Err(format!(
            "status {} with content-type {:?}, not JSON: {}",
            answer.status,
            answer.content_type,
            String::from_utf8_lossy(&answer.body)
        ));
    }
    let body = answer.json();
    let code = body["error"]["code"]
        .as_str()
        .ok_or_else(|| format!("no error.code in {body}"))?;
    if !ERROR_CODES.contains(&code) {
        return Err(format!("undocumented error code {code:?}: {body}"));
    }
    if body["error"]["message"].as_str().is_none_or(str::is_empty) {
        return Err(format!("no error.message in {body}"));
    }
    Ok(code.to_owned())
}

// -------------------------------------------------------------------------------------------
// A world of two projects with jobs in every interesting state, and its snapshot.

/// The ledger tables: append-only records of requests (accepted or rejected). Everything else is
/// state, which a refused request must leave exactly as it was.
pub const LEDGERS: &[&str] = &[
    "observations",
    "reconciliations",
    "cancels",
    "expiry_sweeps",
    "target_mutations",
];

/// A runner: its id and token.
#[derive(Clone, Debug)]
pub struct RunnerRef {
    pub id: Uuid,
    pub token: String,
}

/// Two projects on a manual-clock server whose time never moves after the set-up:
///
/// - project A, runners `ra1`, `ra2`: job `a4` uncertain (claimed by `ra1`, lease expired,
///   swept); `a1` running under `ra1` (fenced target `fenced-slot` deployed at fence 1, a log
///   chunk, an artifact `out.txt`, a cache entry `k`); `a2` running under `ra2` (idempotent
///   target `idem-slot` deployed); `a3` queued (only when asked for).
/// - project B, runner `rb`: job `b1` running under `rb`.
pub struct World {
    pub url: String,
    pub http: reqwest::Client,
    pub pool: sqlx::PgPool,
    pub operator: OperatorClient,
    pub a: Uuid,
    pub b: Uuid,
    pub ra1: RunnerRef,
    pub ra2: RunnerRef,
    pub rb: RunnerRef,
    pub l1: LeaseBody,
    pub l2: LeaseBody,
    pub l4: LeaseBody,
    pub lb: LeaseBody,
    pub a3: Option<Uuid>,
    /// Every table of the database but the ledgers.
    pub tables: Vec<String>,
}

/// A world's state, read through the operator routes and from the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// `GET path` → status and body, for every operator read of the world (observations apart).
    pub views: std::collections::BTreeMap<String, String>,
    /// table → (rows, md5 of the sorted rows), for every table but the ledgers.
    pub tables: std::collections::BTreeMap<String, (i64, String)>,
    /// ledger → highest id.
    pub ledgers: std::collections::BTreeMap<String, i64>,
}

impl Snapshot {
    /// What differs from `other`, outside the ledgers (empty: nothing).
    pub fn state_diff(&self, other: &Snapshot) -> Vec<String> {
        let mut diff = Vec::new();
        for (key, value) in &self.views {
            if other.views.get(key) != Some(value) {
                diff.push(format!("view {key}: {value} -> {:?}", other.views.get(key)));
            }
        }
        for (table, value) in &self.tables {
            if other.tables.get(table) != Some(value) {
                diff.push(format!(
                    "table {table}: {value:?} -> {:?}",
                    other.tables.get(table)
                ));
            }
        }
        diff
    }
}

async fn runner_ref(operator: &OperatorClient, project: Uuid, name: &str) -> RunnerRef {
    let created = operator.create_runner(project, name).await.unwrap();
    RunnerRef {
        id: created.runner,
        token: created.token,
    }
}

fn runner_client(url: &str, runner: &RunnerRef) -> RunnerClient {
    RunnerClient::new(url, &runner.token, Duration::from_secs(10)).unwrap()
}

impl World {
    /// Build the world on `server` (which must run on a manual clock).
    pub async fn build(server: &Server, with_queued_job: bool) -> World {
        let url = server.url();
        let operator = OperatorClient::new(&url, OPERATOR).unwrap();
        let a = operator.create_project("a").await.unwrap();
        let b = operator.create_project("b").await.unwrap();
        let ra1 = runner_ref(&operator, a, "ra1").await;
        let ra2 = runner_ref(&operator, a, "ra2").await;
        let rb = runner_ref(&operator, b, "rb").await;
        let (c1, c2, cb) = (
            runner_client(&url, &ra1),
            runner_client(&url, &ra2),
            runner_client(&url, &rb),
        );
        // a4: claimed, expired, swept: uncertain.
        let a4 = operator
            .submit(a, &submit_request(Some("slot-a4"), "unfenced"))
            .await
            .unwrap()
            .job;
        let l4 = c1.claim(1).await.unwrap().remove(0);
        assert_eq!(l4.job, a4);
        operator.advance_clock(31_000).await.unwrap();
        assert_eq!(operator.sweep().await.unwrap().jobs, vec![a4]);
        // a1 under ra1, a2 under ra2.
        let a1 = operator
            .submit(a, &submit_request(Some("fenced-slot"), "fenced"))
            .await
            .unwrap()
            .job;
        let a2 = operator
            .submit(a, &submit_request(Some("idem-slot"), "idempotent"))
            .await
            .unwrap()
            .job;
        let l1 = c1.claim(1).await.unwrap().remove(0);
        let l2 = c2.claim(1).await.unwrap().remove(0);
        assert_eq!((l1.job, l2.job), (a1, a2));
        let t1 = l1.tuple(None);
        c1.log_append(&t1, 0, b"hello\n").await.unwrap();
        c1.artifact_put(&t1, "out.txt", b"artifact").await.unwrap();
        c1.cache_put(&t1, "k", b"cached").await.unwrap();
        let http = reqwest::Client::new();
        for (slot, kind, lease) in [
            ("fenced-slot", "fenced", &l1),
            ("idem-slot", "idempotent", &l2),
        ] {
            let (status, body) = post(
                server,
                None,
                &format!("/v1/targets/{slot}/deploy"),
                &json!({"kind": kind, "job": lease.job, "attempt": lease.attempt,
                        "slot_token": lease.slot_token, "deployment_id": lease.job.to_string()}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
        }
        let a3 = if with_queued_job {
            Some(
                operator
                    .submit(a, &submit_request(None, "unfenced"))
                    .await
                    .unwrap()
                    .job,
            )
        } else {
            None
        };
        operator
            .submit(b, &submit_request(None, "unfenced"))
            .await
            .unwrap();
        let lb = cb.claim(1).await.unwrap().remove(0);
        let pool = server.store().pool().clone();
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let tables = tables
            .into_iter()
            .filter(|t| !LEDGERS.contains(&t.as_str()))
            .collect();
        World {
            url,
            http,
            pool,
            operator,
            a,
            b,
            ra1,
            ra2,
            rb,
            l1,
            l2,
            l4,
            lb,
            a3,
            tables,
        }
    }

    /// Send a raw request.
    pub async fn send(&self, raw: &Raw) -> Result<Answer, String> {
        send(&self.http, &self.url, raw).await
    }

    /// The operator's GET of `path`: status and body.
    async fn view(&self, path: &str) -> String {
        let raw = Raw {
            method: "GET",
            path: path.to_owned(),
            token: Some(OPERATOR.into()),
            body: None,
        };
        let answer = self.send(&raw).await.unwrap();
        format!(
            "{} {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )
    }

    /// The world's state: every operator read of state (jobs, attempts, each attempt's log and
    /// `out.txt` artifact, the targets) and every table but the ledgers.
    pub async fn snapshot(&self) -> Snapshot {
        let mut paths = Vec::new();
        for project in [self.a, self.b] {
            paths.push(format!("/v1/projects/{project}/jobs"));
            for job in self.operator.jobs(project).await.unwrap() {
                // Reconciliations are a ledger: checked row by row, not as a view.
                let base = format!("/v1/projects/{project}/jobs/{}", job.job);
                paths.push(format!("{base}/attempts"));
                for attempt in self.operator.attempts(project, job.job).await.unwrap() {
                    for tail in ["/logs", "/artifacts/out.txt"] {
                        paths.push(format!("{base}{tail}?attempt={}", attempt.attempt));
                    }
                }
            }
        }
        for slot in ["fenced-slot", "idem-slot", "slot-a4"] {
            paths.push(format!("/v1/targets/{slot}"));
        }
        let mut snapshot = self.database_snapshot().await;
        for path in paths {
            let view = self.view(&path).await;
            snapshot.views.insert(path, view);
        }
        snapshot
    }

    /// The database part of [`World::snapshot`] only (one query for the tables, one for the
    /// ledgers): what a case checks; the operator reads are checked around each family.
    pub async fn database_snapshot(&self) -> Snapshot {
        // Identifiers from information_schema, quoted: test code, not the server's.
        let tables: Vec<String> = self
            .tables
            .iter()
            .map(|table| {
                format!(
                    "SELECT '{table}'::text, count(*), \
                     coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '') \
                     FROM \"{table}\" AS t"
                )
            })
            .collect();
        let rows: Vec<(String, i64, String)> = sqlx::query_as(&tables.join(" UNION ALL "))
            .fetch_all(&self.pool)
            .await
            .unwrap();
        let tables = rows.into_iter().map(|(t, n, md5)| (t, (n, md5))).collect();
        let ledgers: Vec<String> = LEDGERS
            .iter()
            .map(|l| format!("SELECT '{l}'::text, coalesce(max(id), 0)::bigint FROM {l}"))
            .collect();
        let rows: Vec<(String, i64)> = sqlx::query_as(&ledgers.join(" UNION ALL "))
            .fetch_all(&self.pool)
            .await
            .unwrap();
        Snapshot {
            views: std::collections::BTreeMap::new(),
            tables,
            ledgers: rows.into_iter().collect(),
        }
    }

    /// The rows of `ledger` added since `since`, as JSON objects.
    pub async fn ledger_rows(&self, since: &Snapshot, ledger: &str) -> Vec<Value> {
        let sql =
            format!("SELECT row_to_json(l)::text FROM {ledger} AS l WHERE id > $1 ORDER BY id");
        let rows: Vec<String> = sqlx::query_scalar(&sql)
            .bind(since.ledgers[ledger])
            .fetch_all(&self.pool)
            .await
            .unwrap();
        rows.iter()
            .map(|r| serde_json::from_str(r).unwrap())
            .collect()
    }

    /// Whether `/healthz` still answers 200.
    pub async fn healthy(&self) -> bool {
        let raw = Raw {
            method: "GET",
            path: "/healthz".into(),
            token: None,
            body: None,
        };
        self.send(&raw).await.is_ok_and(|a| a.status == 200)
    }
}

/// What a refused (or replayed) request may add to the ledgers: exactly these rows, nothing else.
#[derive(Clone, Debug, Default)]
pub struct LedgerEffect {
    /// One observation of a runner message: (sender, kind, named tuple, verdict, reason,
    /// attributed to the named attempt).
    pub observation: Option<ExpectedObservation>,
    /// One reconciliation: (project, job, verdict, reason).
    pub reconciliation: Option<(Uuid, Uuid, String, Option<String>)>,
    /// One cancel: (project, job, verdict, reason).
    pub cancel: Option<(Uuid, Uuid, String, Option<String>)>,
    /// One target mutation: (slot, verdict, reason).
    pub target_mutation: Option<(String, String, Option<String>)>,
}

/// The observation a runner message must leave.
#[derive(Clone, Debug)]
pub struct ExpectedObservation {
    pub sender: Uuid,
    pub kind: String,
    pub job: Uuid,
    pub attempt: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
    pub verdict: String,
    pub reason: Option<String>,
    pub attributed: bool,
}

/// The reasons of protocol §6.1 checks 1-5: a message refused by them is kept unattributed.
pub const UNATTRIBUTED: &[&str] = &[
    "unknown_runner",
    "unknown_job",
    "wrong_project",
    "unknown_attempt",
    "runner_mismatch",
];

impl ExpectedObservation {
    /// The observation a tuple message `body` from `sender` on `route` leaves when answered with
    /// `verdict` (and `reason` when rejected).
    pub fn of(
        route: &Route,
        sender: Uuid,
        body: &Value,
        verdict: &str,
        reason: Option<&str>,
    ) -> ExpectedObservation {
        let uuid = |field: &str| Uuid::parse_str(body[field].as_str().unwrap()).unwrap();
        ExpectedObservation {
            sender,
            kind: route.kind.unwrap().to_owned(),
            job: uuid("job"),
            attempt: uuid("attempt"),
            lease_id: uuid("lease_id"),
            fence: body["fence"].as_i64().unwrap(),
            verdict: verdict.to_owned(),
            reason: reason.map(str::to_owned),
            attributed: reason.is_none_or(|r| !UNATTRIBUTED.contains(&r)),
        }
    }

    fn check(&self, row: &Value) -> Result<(), String> {
        let text = |field: &str| row[field].as_str().map(str::to_owned);
        let expected_attempt = self.attributed.then(|| self.attempt.to_string());
        let checks = [
            (
                "sender_runner_id",
                text("sender_runner_id"),
                Some(self.sender.to_string()),
            ),
            ("kind", text("kind"), Some(self.kind.clone())),
            (
                "named_job_id",
                text("named_job_id"),
                Some(self.job.to_string()),
            ),
            (
                "named_attempt_id",
                text("named_attempt_id"),
                Some(self.attempt.to_string()),
            ),
            (
                "named_lease_id",
                text("named_lease_id"),
                Some(self.lease_id.to_string()),
            ),
            (
                "named_fence",
                row["named_fence"].as_i64().map(|f| f.to_string()),
                Some(self.fence.to_string()),
            ),
            ("verdict", text("verdict"), Some(self.verdict.clone())),
            ("reason", text("reason"), self.reason.clone()),
            ("attempt_id", text("attempt_id"), expected_attempt),
        ];
        for (field, actual, expected) in checks {
            if actual != expected {
                return Err(format!(
                    "observation {field}: {actual:?}, expected {expected:?} (row {row})"
                ));
            }
        }
        Ok(())
    }
}

impl World {
    /// Check that the state outside the ledgers is `before`'s and that the ledgers grew by
    /// exactly `effect` (with the operator reads too when `before` has them). Returns the
    /// snapshot after.
    pub async fn check_unchanged(
        &self,
        before: &Snapshot,
        effect: &LedgerEffect,
    ) -> Result<Snapshot, String> {
        let after = if before.views.is_empty() {
            self.database_snapshot().await
        } else {
            self.snapshot().await
        };
        let diff = before.state_diff(&after);
        if !diff.is_empty() {
            return Err(format!("the state changed:\n  {}", diff.join("\n  ")));
        }
        let observations = self.ledger_rows(before, "observations").await;
        match (&effect.observation, observations.as_slice()) {
            (None, []) => {}
            (Some(expected), [row]) => expected.check(row)?,
            (expected, rows) => {
                return Err(format!(
                    "observations added: {rows:?}, expected {expected:?}"
                ))
            }
        }
        // The operators' ledgers: one row each at most, of the expected project, job and verdict.
        for (ledger, expected) in [
            ("reconciliations", &effect.reconciliation),
            ("cancels", &effect.cancel),
            ("expiry_sweeps", &None),
        ] {
            let rows = self.ledger_rows(before, ledger).await;
            match (expected, rows.as_slice()) {
                (None, []) => {}
                (Some((project, job, verdict, reason)), [row])
                    if row["project_id"] == json!(project.to_string())
                        && row["job_id"] == json!(job.to_string())
                        && row["verdict"] == json!(verdict)
                        && row["reason"].as_str() == reason.as_deref() => {}
                (expected, rows) => {
                    return Err(format!("{ledger} added: {rows:?}, expected {expected:?}"))
                }
            }
        }
        let mutations = self.ledger_rows(before, "target_mutations").await;
        match (&effect.target_mutation, mutations.as_slice()) {
            (None, []) => {}
            (Some((slot, verdict, reason)), [row])
                if row["slot"] == json!(slot)
                    && row["verdict"] == json!(verdict)
                    && row["reason"].as_str() == reason.as_deref() => {}
            (expected, rows) => {
                return Err(format!(
                    "target mutations added: {rows:?}, expected {expected:?}"
                ))
            }
        }
        Ok(after)
    }
}

/// The body a runner's command sends to its slot's target (the runner agent's
/// `LEASEWRIGHT_DEPLOY_JSON`): the lease's slot token, never its fence.
pub fn deployment(lease: &LeaseBody) -> Value {
    json!({
        "kind": lease.target_kind,
        "job": lease.job,
        "attempt": lease.attempt,
        "slot_token": lease.slot_token,
        "deployment_id": lease.job.to_string(),
    })
}

/// The request slots held (`leasewright_requests_in_flight` on `/metrics`).
pub async fn requests_in_flight(server: &Server) -> f64 {
    let text = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("leasewright_requests_in_flight "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Open a connection and send `head` (a request that never finishes): `Ok(stream)` once the
/// server holds a request slot for it (a bounded poll of `/metrics`), `Err(answer)` when it is
/// answered at once instead (e.g. `503 request_slots_exhausted`).
pub async fn stall_request(server: &Server, head: &[u8]) -> Result<tokio::net::TcpStream, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let before = requests_in_flight(server).await;
    let mut stalled = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    stalled.write_all(head).await.expect("write");
    let mut answer = [0u8; 512];
    let mut polls = 0;
    loop {
        tokio::select! {
            read = stalled.read(&mut answer) => {
                let n = read.expect("read");
                return Err(String::from_utf8_lossy(&answer[..n]).to_string());
            }
            now = requests_in_flight(server) => {
                if now >= before + 1.0 {
                    return Ok(stalled);
                }
                polls += 1;
                assert!(polls < 3000, "the stalled request was neither admitted nor refused");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
