//! The control plane the suite plays: the runner routes of docs/http.md with the wire format of
//! server/src/wire.rs (only what a runner calls), each scenario's answers decided by its plan,
//! every request recorded with its receipt time and its answer's time on the machine's clock
//! ([`uptime`]), the one the suite's command ticks on too.

use super::scenarios::{Reply, Route, Scenario, View};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use leasewright_server::source::Snapshot;
use leasewright_server::wire::{
    ClaimResponse, ErrorBody, ErrorDetail, HeartbeatResponse, LeaseBody, RejoinResponse,
    ResultAnswer, ResultsResponse, VerdictResponse,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use uuid::Uuid;

/// Seconds since the machine booted (`/proc/uptime`, 10 ms resolution): the one clock the
/// harness, and the command the runner runs, both read, so the command's ticks and the
/// requests' receipt times compare without any clock of the runner's.
pub fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// One request the runner sent, as the control plane saw it.
#[derive(Clone, Debug)]
pub struct Record {
    pub route: Route,
    /// When it was received ([`uptime`]).
    pub received: f64,
    /// When it was answered, the status and the code (`accepted`, a reason, an error code);
    /// `None` when it was never answered (a hang, or the runner gave up first).
    pub answered: Option<(f64, u16, String)>,
    /// A result's outcome and digest.
    pub outcome: Option<(String, String)>,
    /// The message named no lease the control plane issued to this runner.
    pub foreign_tuple: bool,
}

/// One scenario's state on the control plane.
pub struct Scene {
    pub spec: &'static Scenario,
    pub snapshot: Arc<Snapshot>,
    /// The command's tick file.
    pub ticks: PathBuf,
    pub leases: Vec<LeaseBody>,
    pub records: Vec<Record>,
}

impl Scene {
    /// The latest end of the runner's lease the runner may rightly reckon: the receipt time of
    /// the last claim or heartbeat answered `accepted`, plus the TTL (the runner sent it before).
    pub fn lease_end(&self) -> Option<f64> {
        let ttl = self.spec.ttl_ms as f64 / 1000.0;
        self.records
            .iter()
            .filter(|r| matches!(r.route, Route::Claim | Route::Heartbeat))
            .filter(|r| matches!(&r.answered, Some((_, 200, _))))
            .map(|r| r.received + ttl)
            .reduce(f64::max)
    }

    fn view(&self, now: f64) -> View {
        View {
            now,
            claimed: self.records.iter().any(|r| r.route == Route::Claim),
            lease_end: self.lease_end(),
            heartbeats: self
                .records
                .iter()
                .filter(|r| r.route == Route::Heartbeat)
                .count(),
            results: self
                .records
                .iter()
                .filter(|r| r.route == Route::Result)
                .count(),
            ticking: ticked(&self.ticks),
        }
    }
}

/// Whether the command has ticked at least once.
pub fn ticked(ticks: &std::path::Path) -> bool {
    std::fs::metadata(ticks).is_ok_and(|m| m.len() > 0)
}

/// Every scene, by the bearer token of its runner.
#[derive(Clone, Default)]
pub struct ControlPlane {
    scenes: Arc<Mutex<HashMap<String, Scene>>>,
}

impl ControlPlane {
    pub fn add(&self, token: &str, scene: Scene) {
        self.lock().insert(token.to_owned(), scene);
    }

    /// A copy of what a scene recorded, and its lease end.
    pub fn records(&self, token: &str) -> (Vec<Record>, Option<f64>) {
        let scenes = self.lock();
        let scene = &scenes[token];
        (scene.records.clone(), scene.lease_end())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Scene>> {
        self.scenes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves the runner routes on 127.0.0.1 (a free port); the base URL.
    pub async fn serve(&self) -> std::io::Result<(String, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(self.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((url, server))
    }
}

fn json<T: serde::Serialize>(status: StatusCode, body: &T) -> Response {
    (status, axum::Json(body)).into_response()
}

fn error(status: u16, code: &str, retry_after: Option<u64>, rejected: bool) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.to_owned(),
            message: format!("runner suite: {code}"),
            rule: None,
            path: None,
        },
        verdict: rejected.then(|| "rejected".to_owned()),
        instruction: None,
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json(status, &body);
    if let Some(seconds) = retry_after {
        if let Ok(value) = seconds.to_string().parse() {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
    }
    response
}

/// The lease a scene's claim grants: a fresh tuple, its TTL, the suite's source, and the command
/// that ticks into the scene's tick file.
fn new_lease(scene: &Scene) -> LeaseBody {
    let ttl = scene.spec.ttl_ms;
    let ticks = match scene.spec.command_ticks {
        Some(n) => format!(" {n}"),
        None => " ''".to_owned(),
    };
    let prints = if scene.spec.prints { " print" } else { "" };
    LeaseBody {
        job: Uuid::new_v4(),
        attempt: Uuid::new_v4(),
        lease_id: Uuid::new_v4(),
        fence: 1,
        lease_expiry: chrono::Utc::now()
            + chrono::Duration::milliseconds(i64::try_from(ttl).unwrap_or(i64::MAX)),
        lease_ttl_ms: ttl,
        source_revision: "runner-suite".to_owned(),
        source_digest: scene.snapshot.manifest_digest.clone(),
        source_blob_sha256: Some(scene.snapshot.blob_sha256.clone()),
        command: format!("sh tick.sh '{}'{ticks}{prints}", scene.ticks.display()),
        artifacts: Vec::new(),
        target: format!("runner-suite-{}", scene.spec.name),
        target_kind: "unfenced".to_owned(),
        slot_token: 1,
    }
}

fn route_of(path: &str) -> Option<Route> {
    Some(match path {
        "/v1/runner/claim" => Route::Claim,
        "/v1/runner/heartbeat" => Route::Heartbeat,
        "/v1/runner/rejoin" => Route::Rejoin,
        "/v1/runner/source" => Route::Source,
        "/v1/runner/logs" => Route::Logs,
        "/v1/runner/artifacts/put" => Route::ArtifactPut,
        "/v1/runner/result" | "/v1/runner/results" => Route::Result,
        _ => return None,
    })
}

/// Whether `body` names a lease issued in `scene` (the whole tuple).
fn names_a_lease(scene: &Scene, body: &serde_json::Value) -> bool {
    let field = |name: &str| body.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    scene.leases.iter().any(|lease| {
        field("job") == Some(lease.job.to_string())
            && field("attempt") == Some(lease.attempt.to_string())
            && field("lease_id") == Some(lease.lease_id.to_string())
            && body.get("fence").and_then(serde_json::Value::as_i64) == Some(lease.fence)
    })
}

async fn handle(
    State(plane): State<ControlPlane>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = uptime();
    let Some(route) = route_of(uri.path()) else {
        return error(404, "not_found", None, false);
    };
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let batch = uri.path() == "/v1/runner/results";
    // Record the request (each item of a batch result as one result) and ask the plan.
    let (indexes, reply) = {
        let mut scenes = plane.lock();
        let Some(scene) = scenes.get_mut(&token) else {
            return error(401, "unauthorized", None, false);
        };
        let view = scene.view(received);
        let items: Vec<serde_json::Value> = match (batch, body.get("results")) {
            (true, Some(serde_json::Value::Array(items))) => items.clone(),
            _ => vec![body.clone()],
        };
        let mut indexes = Vec::new();
        let mut foreign = false;
        for item in &items {
            let named = route == Route::Claim || names_a_lease(scene, item);
            foreign |= !named;
            let outcome = (route == Route::Result).then(|| {
                let text = |name: &str| {
                    item.get(name)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_owned()
                };
                (text("outcome"), text("result_digest"))
            });
            scene.records.push(Record {
                route,
                received,
                answered: None,
                outcome,
                foreign_tuple: !named,
            });
            indexes.push(scene.records.len() - 1);
        }
        let reply = if foreign {
            Reply::Rejected("lease_mismatch")
        } else {
            (scene.spec.plan)(&view, route)
        };
        (indexes, reply)
    };
    let ticks = plane.lock()[&token].ticks.clone();
    let reply = settle(reply, &ticks).await;
    // Answer, and record the answer's time and code.
    let mut scenes = plane.lock();
    let Some(scene) = scenes.get_mut(&token) else {
        return error(401, "unauthorized", None, false);
    };
    let (response, status, code) = answer(scene, route, batch, indexes.len(), &reply);
    let answered = uptime();
    for index in indexes {
        scene.records[index].answered = Some((answered, status, code.clone()));
    }
    response
}

/// Waits out a reply's delays (a late answer, an answer held until the command ticks, a hang).
async fn settle(mut reply: Reply, ticks: &std::path::Path) -> Reply {
    loop {
        reply = match reply {
            Reply::Late(seconds, then) => {
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                *then
            }
            Reply::AfterTicks(then) => {
                // Bounded: a runner that never starts the command gets the answer anyway.
                for _ in 0..500 {
                    if ticked(ticks) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                *then
            }
            Reply::Hang => std::future::pending().await,
            other => return other,
        }
    }
}

/// The response for a settled reply, its status and its code.
fn answer(
    scene: &mut Scene,
    route: Route,
    batch: bool,
    items: usize,
    reply: &Reply,
) -> (Response, u16, String) {
    match *reply {
        Reply::Status {
            status,
            code,
            retry_after,
        } => (error(status, code, retry_after, false), status, code.into()),
        Reply::Rejected(reason) if batch => {
            let body = ResultsResponse {
                results: vec![
                    ResultAnswer {
                        verdict: "rejected".into(),
                        reason: Some(reason.into()),
                    };
                    items
                ],
            };
            (json(StatusCode::OK, &body), 200, reason.into())
        }
        Reply::Rejected(reason) => (error(409, reason, None, true), 409, reason.into()),
        Reply::CancelRequested | Reply::Default => {
            let cancel = matches!(*reply, Reply::CancelRequested);
            let expiry = chrono::Utc::now()
                + chrono::Duration::milliseconds(i64::try_from(scene.spec.ttl_ms).unwrap_or(0));
            let response = match route {
                Route::Claim => {
                    if scene.leases.len() >= scene.spec.jobs {
                        return (
                            error(409, "no_queued_job", None, true),
                            409,
                            "no_queued_job".into(),
                        );
                    }
                    let lease = new_lease(scene);
                    scene.leases.push(lease.clone());
                    let body = ClaimResponse {
                        verdict: "accepted".into(),
                        leases: vec![lease],
                    };
                    json(StatusCode::OK, &body)
                }
                Route::Heartbeat => json(
                    StatusCode::OK,
                    &HeartbeatResponse {
                        verdict: "accepted".into(),
                        lease_expiry: expiry,
                        cancel_requested: cancel,
                    },
                ),
                Route::Rejoin => json(
                    StatusCode::OK,
                    &RejoinResponse {
                        verdict: "accepted".into(),
                        instruction: if cancel { "cancel" } else { "continue" }.into(),
                    },
                ),
                Route::Source => {
                    let snapshot = &scene.snapshot;
                    let headers = [
                        ("content-type", "application/gzip".to_owned()),
                        ("x-leasewright-blob-sha256", snapshot.blob_sha256.clone()),
                        (
                            "x-leasewright-source-digest",
                            snapshot.manifest_digest.clone(),
                        ),
                        ("x-leasewright-source-revision", "runner-suite".to_owned()),
                    ];
                    let mut response = snapshot.archive.clone().into_response();
                    for (name, value) in headers {
                        if let Ok(value) = value.parse() {
                            response.headers_mut().insert(name, value);
                        }
                    }
                    response
                }
                Route::Result if batch => json(
                    StatusCode::OK,
                    &ResultsResponse {
                        results: vec![
                            ResultAnswer {
                                verdict: "accepted".into(),
                                reason: None,
                            };
                            items
                        ],
                    },
                ),
                Route::Logs | Route::ArtifactPut | Route::Result => json(
                    StatusCode::OK,
                    &VerdictResponse {
                        verdict: "accepted".into(),
                    },
                ),
            };
            let code = if cancel {
                "cancel_requested"
            } else {
                "accepted"
            };
            (response, 200, code.into())
        }
        Reply::Late(..) | Reply::AfterTicks(_) | Reply::Hang => {
            unreachable!("settled before answering")
        }
    }
}
