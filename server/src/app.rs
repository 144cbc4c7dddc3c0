//! The HTTP control plane (docs/http.md). Every protocol decision comes from the impl
//! [`Store`]; this module only authenticates, translates JSON to the Store's API and back, and
//! keeps the content-addressed source store.

use crate::metrics::Metrics;
use crate::source::{self, Limits};
use crate::wire::*;
use axum::body::Bytes;
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, Query, Request, State,
};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use chrono::Utc;
use leasewright_impl::{
    AttemptId, AttemptView, Clock, Decision, Finding, JobId, JobView, LeaseId, ManualClock,
    MessageKind, NewJob, ObservationView, Outcome, ProjectId, Reason, RejoinAnswer, RunnerId,
    Store, SweepVerdict, TargetAdapter, TargetKind, TargetMutation, Tuple, Verdict,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The control routes' body limit (tuples, names, small JSON).
const CONTROL_BODY_LIMIT: usize = 64 * 1024;

/// How the HTTP server behaves (no `Debug`: it holds the operator token).
#[derive(Clone)]
pub struct ServerConfig {
    /// The operator token; generated when `None`.
    pub operator_token: Option<String>,
    /// Whether `POST /v1/test/clock` exists (the server then runs on a manual clock).
    pub manual_clock: bool,
    /// How often the expiry sweep runs; `None`: never by itself (only `POST /v1/sweep`).
    pub sweep_interval: Option<Duration>,
    /// The body limit of the payload routes (source submission, logs, artifacts, cache).
    pub max_payload_bytes: usize,
    /// Limits of a submitted source archive.
    pub source_limits: Limits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            operator_token: None,
            manual_clock: false,
            sweep_interval: Some(Duration::from_secs(1)),
            max_payload_bytes: 64 * 1024 * 1024,
            source_limits: Limits::default(),
        }
    }
}

struct Inner {
    store: Store,
    manual_clock: Option<ManualClock>,
    operator_token_sha256: [u8; 32],
    metrics: Metrics,
    source_limits: Limits,
}

/// The shared state of the handlers.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// A fresh random token.
pub fn random_token(prefix: &str) -> anyhow::Result<String> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|_| anyhow::anyhow!("no system randomness"))?;
    Ok(format!("{prefix}{}", hex::encode(secret)))
}

fn digest32(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether two byte strings are equal, in a time that depends only on their lengths (public:
/// both are SHA-256 digests), never on where they differ. `subtle` keeps the optimizer from
/// turning the comparison into an early exit.
fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    left.ct_eq(right).into()
}

/// The server's own tables (the content-addressed source store and the job specs). Created if
/// missing; the protocol's tables belong to impl/migrations.
const SERVER_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS server_source_blobs (
    sha256          text        PRIMARY KEY,
    manifest_digest text        NOT NULL,
    content         bytea       NOT NULL,
    stored_at       timestamptz NOT NULL,
    CONSTRAINT server_source_blobs_sha256_is_hex CHECK (sha256 ~ '^[0-9a-f]{64}$')
);
CREATE INDEX IF NOT EXISTS server_source_blobs_by_manifest ON server_source_blobs (manifest_digest);
CREATE TABLE IF NOT EXISTS server_job_specs (
    job_id      uuid   PRIMARY KEY REFERENCES jobs (id),
    blob_sha256 text   NOT NULL,
    artifacts   text[] NOT NULL
);
"#;

/// Create the server's tables (serialized by an advisory lock when several servers start).
pub async fn ensure_schema(store: &Store) -> Result<(), ApiError> {
    let mut tx = store.pool().begin().await.map_err(db_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock(7406041988)")
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    sqlx::raw_sql(SERVER_SCHEMA)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok(())
}

impl AppState {
    /// The state over `store`. `manual_clock` must be the clock the store reads, if any.
    pub fn new(
        store: Store,
        manual_clock: Option<ManualClock>,
        operator_token: &str,
        source_limits: Limits,
    ) -> Self {
        AppState(Arc::new(Inner {
            store,
            manual_clock,
            operator_token_sha256: digest32(operator_token.as_bytes()),
            metrics: Metrics::default(),
            source_limits,
        }))
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.0.store
    }

    /// Run the expiry sweep once (rule R4).
    pub async fn sweep(&self) -> Result<SweepVerdict, ApiError> {
        self.sweep_in(None).await
    }

    /// Run the expiry sweep once over the jobs of `project` (`None`: every project).
    pub async fn sweep_in(&self, project: Option<ProjectId>) -> Result<SweepVerdict, ApiError> {
        let verdict = self.0.store.sweep_expired_in(project).await?;
        let expired = match &verdict {
            SweepVerdict::Uncertain(jobs) => jobs.len(),
            SweepVerdict::Accepted => 0,
        };
        if expired > 0 {
            tracing::info!(expired, "expiry sweep: jobs became uncertain");
        }
        self.0.metrics.sweep(expired);
        Ok(verdict)
    }
}

// -------------------------------------------------------------------------------------------
// Errors.

/// A non-2xx answer: `{"error": {"code", "message"}}` (docs/http.md).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
    rejected: bool,
    instruction: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            rejected: false,
            instruction: None,
        }
    }

    fn rejected(reason: Reason) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            code: reason.as_str().to_owned(),
            message: format!("rejected: {}", reason_message(reason)),
            rejected: true,
            instruction: None,
        }
    }

    fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown bearer token",
        )
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn not_found(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
}

fn reason_message(reason: Reason) -> &'static str {
    match reason {
        Reason::UnknownRunner => "the sending runner does not exist",
        Reason::UnknownJob => "no job has the named id",
        Reason::WrongProject => "the job belongs to another project",
        Reason::UnknownAttempt => "the named attempt is not an attempt of this job",
        Reason::RunnerMismatch => "the attempt was claimed by another runner",
        Reason::LeaseMismatch => "the lease id is not the attempt's lease id",
        Reason::FenceMismatch => "the fence is not the attempt's fence",
        Reason::NotCurrent => "the attempt is not the job's current attempt (late report)",
        Reason::ConflictingResult => "the attempt holds another committed outcome",
        Reason::JobFinished => "the job is terminal",
        Reason::LeaseExpired => "the lease expired",
        Reason::CancelRequested => "the job is being cancelled",
        Reason::CancelNotRequested => "a cancelled result while no cancel was requested",
        Reason::SequenceConflict => "this log sequence number holds other content",
        Reason::NotFound => "no such artifact or cache entry",
        Reason::NoQueuedJob => "no queued job whose target is free",
        Reason::ReconcileRequired => "the job is uncertain: reconcile it",
        Reason::NotUncertain => "the job is not uncertain",
        Reason::ExecutionNotStopped => "nothing may be decided about an execution still running",
        Reason::NothingToAdopt => "no outcome was observed to adopt",
        Reason::StaleFence => "the target has applied a higher fence",
    }
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(db_error)`
fn db_error(error: sqlx::Error) -> ApiError {
    tracing::error!(%error, "database error");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
        "the database is unavailable",
    )
}

impl From<leasewright_impl::Error> for ApiError {
    fn from(error: leasewright_impl::Error) -> Self {
        use leasewright_impl::Error as E;
        match &error {
            E::Database(_) | E::Migration(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                error.to_string(),
            ),
            E::ProjectNameTaken => ApiError::new(
                StatusCode::CONFLICT,
                "project_name_taken",
                error.to_string(),
            ),
            E::RunnerNameTaken => {
                ApiError::new(StatusCode::CONFLICT, "runner_name_taken", error.to_string())
            }
            E::UnknownProject => ApiError::not_found("unknown_project", error.to_string()),
            E::InvalidArgument(_) => ApiError::bad_request(error.to_string()),
            E::Constraint { .. } | E::Invariant(_) => {
                tracing::error!(%error, "internal error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    error.to_string(),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
            verdict: self.rejected.then(|| "rejected".to_owned()),
            instruction: self.instruction.map(str::to_owned),
        };
        (self.status, Json(body)).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

fn ok<T: serde::Serialize>(body: T) -> ApiResult {
    Ok(Json(body).into_response())
}

fn created<T: serde::Serialize>(body: T) -> ApiResult {
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

// -------------------------------------------------------------------------------------------
// Extractors.

/// A JSON body whose failures are JSON errors (400, 413).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the request body exceeds this route's limit",
                )
            } else {
                ApiError::bad_request(rejection.body_text())
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON body: an object (docs/http.md), whose strings hold no NUL character (PostgreSQL text
/// cannot store one: it would be a database error, a 5xx, instead of a 400).
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if has_escaped_nul(bytes) {
        return Err(ApiError::bad_request(
            "strings must not contain the NUL character (\\u0000)",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Whether JSON text holds the escape `\u0000` (a raw NUL byte is not JSON at all). A `\u0000`
/// preceded by an even number of backslashes is the escape; after an odd number it is text.
fn has_escaped_nul(bytes: &[u8]) -> bool {
    let mut backslashes = 0usize;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'\\' {
            backslashes += 1;
            continue;
        }
        if byte == b'u' && backslashes % 2 == 1 && bytes[i + 1..].starts_with(b"0000") {
            return true;
        }
        backslashes = 0;
    }
    false
}

/// The longest name, key, slot or deployment id taken (a PostgreSQL index entry holds at most
/// about 2.7 KB; a longer key would be a database error, a 5xx, instead of a 400).
pub const MAX_IDENTIFIER_BYTES: usize = 1024;

/// `text` if it is a usable name, key, slot or deployment id: at most
/// [`MAX_IDENTIFIER_BYTES`], no NUL character.
fn identifier<'a>(text: &'a str, what: &str) -> Result<&'a str, ApiError> {
    if text.len() > MAX_IDENTIFIER_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} is longer than {MAX_IDENTIFIER_BYTES} bytes"
        )));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{what} must not contain the NUL character"
        )));
    }
    Ok(text)
}

/// Path parameters whose failures (not UTF-8, a wrong count) are JSON errors (400).
pub struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Segments(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// A query string whose failures are JSON errors (400).
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

/// A JSON body that may be empty (then `T::default()`); otherwise as [`JsonBody`].
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the request body exceeds this route's limit",
                )
            } else {
                ApiError::bad_request(rejection.body_text())
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse_json(&bytes).map(OptionalJsonBody)
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The runner a bearer token authenticates (authentication only: ownership is the Store's).
pub struct RunnerAuth(pub RunnerId);

impl FromRequestParts<AppState> for RunnerAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        match state.0.store.authenticate(token).await? {
            Some(runner) => Ok(RunnerAuth(runner)),
            None => Err(ApiError::unauthorized()),
        }
    }
}

/// The operator (one operator token for the whole server).
pub struct OperatorAuth;

impl FromRequestParts<AppState> for OperatorAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        if constant_time_eq(&digest32(token.as_bytes()), &state.0.operator_token_sha256) {
            Ok(OperatorAuth)
        } else {
            Err(ApiError::unauthorized())
        }
    }
}

fn parse_uuid(text: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(text).map_err(|_| ApiError::bad_request(format!("{what} is not a UUID")))
}

fn tuple(runner: RunnerId, body: &TupleBody) -> Tuple {
    Tuple {
        runner,
        job: JobId(body.job),
        attempt: AttemptId(body.attempt),
        lease_id: LeaseId(body.lease_id),
        fence: body.fence,
    }
}

fn decode(content: &str) -> Result<Vec<u8>, ApiError> {
    B64.decode(content)
        .map_err(|_| ApiError::bad_request("content_base64 is not valid base64"))
}

impl AppState {
    /// A rejection, counted.
    fn reject(&self, kind: &str, reason: Reason) -> ApiError {
        self.0.metrics.rejection(kind, reason.as_str());
        ApiError::rejected(reason)
    }

    /// The answer to a verdict: accepted/acknowledged → 200 via `accepted`; rejected → 409.
    fn answer<T>(
        &self,
        kind: MessageKind,
        verdict: Verdict<T>,
        accepted: impl FnOnce(Option<T>, &'static str) -> ApiResult,
    ) -> ApiResult {
        match verdict {
            Verdict::Accepted(value) => accepted(Some(value), "accepted"),
            Verdict::Acknowledged => accepted(None, "acknowledged"),
            Verdict::Rejected(reason) => Err(self.reject(kind.as_str(), reason)),
        }
    }
}

fn plain_verdict<T>(_: Option<T>, verdict: &'static str) -> ApiResult {
    ok(VerdictResponse {
        verdict: verdict.to_owned(),
    })
}

// -------------------------------------------------------------------------------------------
// Runner routes.

async fn job_spec(state: &AppState, job: Uuid) -> Result<Option<(String, Vec<String>)>, ApiError> {
    let row = sqlx::query("SELECT blob_sha256, artifacts FROM server_job_specs WHERE job_id = $1")
        .bind(job)
        .fetch_optional(state.0.store.pool())
        .await
        .map_err(db_error)?;
    match row {
        Some(row) => Ok(Some((
            row.try_get("blob_sha256").map_err(db_error)?,
            row.try_get("artifacts").map_err(db_error)?,
        ))),
        None => Ok(None),
    }
}

async fn claim(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<ClaimRequest>,
) -> ApiResult {
    let capacity = body.capacity.unwrap_or(1).clamp(1, 64) as usize;
    let store = &state.0.store;
    let verdict = store
        .claim_batch(runner, capacity, body.runner_time)
        .await?;
    let leases = match verdict {
        Verdict::Accepted(leases) => leases,
        Verdict::Acknowledged => Vec::new(),
        Verdict::Rejected(reason) => return Err(state.reject("claim", reason)),
    };
    state.0.metrics.claim(leases.len());
    let ttl_ms = store.lease_ttl().num_milliseconds().max(0) as u64;
    let mut bodies = Vec::with_capacity(leases.len());
    for lease in leases {
        // The spec row is written right after the job row at submission: wait for it briefly.
        let mut spec = job_spec(&state, lease.tuple.job.0).await?;
        for _ in 0..40 {
            if spec.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            spec = job_spec(&state, lease.tuple.job.0).await?;
        }
        let view = store.job(lease.tuple.job).await?;
        let (blob, artifacts) = spec.map_or((None, Vec::new()), |(b, a)| (Some(b), a));
        bodies.push(LeaseBody {
            job: lease.tuple.job.0,
            attempt: lease.tuple.attempt.0,
            lease_id: lease.tuple.lease_id.0,
            fence: lease.tuple.fence,
            lease_expiry: lease.lease_expiry,
            lease_ttl_ms: ttl_ms,
            source_revision: lease.source_revision,
            source_digest: lease.source_digest,
            source_blob_sha256: blob,
            command: lease.command,
            artifacts,
            target: view.as_ref().map(|v| v.target.clone()).unwrap_or_default(),
            target_kind: view
                .map(|v| v.target_kind.as_str().to_owned())
                .unwrap_or_default(),
        });
    }
    ok(ClaimResponse {
        verdict: "accepted".into(),
        leases: bodies,
    })
}

async fn heartbeat(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<TupleBody>,
) -> ApiResult {
    let verdict = state
        .0
        .store
        .heartbeat(&tuple(runner, &body), body.runner_time)
        .await?;
    state.answer(MessageKind::Heartbeat, verdict, |answer, verdict| {
        let answer = answer.ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "heartbeat acknowledged",
            )
        })?;
        ok(HeartbeatResponse {
            verdict: verdict.into(),
            lease_expiry: answer.lease_expiry,
            cancel_requested: answer.cancel_requested,
        })
    })
}

async fn rejoin(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<TupleBody>,
) -> ApiResult {
    let answer = state
        .0
        .store
        .rejoin(&tuple(runner, &body), body.runner_time)
        .await?;
    match answer {
        RejoinAnswer::Continue => ok(RejoinResponse {
            verdict: "accepted".into(),
            instruction: "continue".into(),
        }),
        RejoinAnswer::Cancel => ok(RejoinResponse {
            verdict: "accepted".into(),
            instruction: "cancel".into(),
        }),
        RejoinAnswer::Stop(reason) => {
            let mut error = state.reject("rejoin", reason);
            error.instruction = Some("stop");
            Err(error)
        }
    }
}

async fn source(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<TupleBody>,
) -> ApiResult {
    let verdict = state
        .0
        .store
        .fetch_source(&tuple(runner, &body), body.runner_time)
        .await?;
    let identity = match verdict {
        Verdict::Accepted(identity) => identity,
        Verdict::Acknowledged => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "source fetch acknowledged",
            ))
        }
        Verdict::Rejected(reason) => return Err(state.reject("source_fetch", reason)),
    };
    let (blob_sha256, _) = job_spec(&state, body.job)
        .await?
        .ok_or_else(|| ApiError::not_found("source_not_stored", "the job has no stored source"))?;
    let content: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT content FROM server_source_blobs WHERE sha256 = $1")
            .bind(&blob_sha256)
            .fetch_optional(state.0.store.pool())
            .await
            .map_err(db_error)?;
    let content = content
        .ok_or_else(|| ApiError::not_found("source_not_stored", "the source blob is missing"))?;
    let mut response = content.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/gzip"),
    );
    for (name, value) in [
        ("x-leasewright-source-revision", identity.source_revision),
        ("x-leasewright-source-digest", identity.source_digest),
        ("x-leasewright-blob-sha256", blob_sha256),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

async fn logs(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<LogAppendRequest>,
) -> ApiResult {
    let content = decode(&body.content_base64)?;
    if body.seq < 0 {
        return Err(ApiError::bad_request("seq must not be negative"));
    }
    let verdict = state
        .0
        .store
        .append_log(
            &tuple(runner, &body.tuple),
            body.seq,
            &content,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::LogAppend, verdict, plain_verdict)
}

async fn artifact_put(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<PutRequest>,
) -> ApiResult {
    let content = decode(&body.content_base64)?;
    identifier(&body.name, "name")?;
    let verdict = state
        .0
        .store
        .put_artifact(
            &tuple(runner, &body.tuple),
            &body.name,
            &content,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::ArtifactPut, verdict, plain_verdict)
}

fn content_answer(content: Option<Vec<u8>>, verdict: &'static str) -> ApiResult {
    ok(GetResponse {
        verdict: verdict.into(),
        content_base64: B64.encode(content.unwrap_or_default()),
    })
}

async fn artifact_get(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<GetRequest>,
) -> ApiResult {
    identifier(&body.name, "name")?;
    let verdict = state
        .0
        .store
        .get_artifact(
            &tuple(runner, &body.tuple),
            &body.name,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::ArtifactGet, verdict, content_answer)
}

async fn cache_put(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<PutRequest>,
) -> ApiResult {
    let content = decode(&body.content_base64)?;
    identifier(&body.name, "name")?;
    let verdict = state
        .0
        .store
        .cache_put(
            &tuple(runner, &body.tuple),
            &body.name,
            &content,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::CachePut, verdict, plain_verdict)
}

async fn cache_get(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<GetRequest>,
) -> ApiResult {
    identifier(&body.name, "name")?;
    let verdict = state
        .0
        .store
        .cache_get(
            &tuple(runner, &body.tuple),
            &body.name,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::CacheGet, verdict, content_answer)
}

async fn result(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<ResultRequest>,
) -> ApiResult {
    let outcome = Outcome::from_code(&body.outcome)
        .ok_or_else(|| ApiError::bad_request("outcome must be one of passed, failed, cancelled"))?;
    let verdict = state
        .0
        .store
        .report_result(
            &tuple(runner, &body.tuple),
            outcome,
            &body.result_digest,
            body.tuple.runner_time,
        )
        .await?;
    state.answer(MessageKind::Result, verdict, plain_verdict)
}

// -------------------------------------------------------------------------------------------
// Demo targets (rule R9: not the control plane; the target applies only its own rule).

async fn target_deploy(
    State(state): State<AppState>,
    Segments(slot): Segments<String>,
    JsonBody(body): JsonBody<DeployRequest>,
) -> ApiResult {
    let kind = TargetKind::from_code(&body.kind)
        .ok_or_else(|| ApiError::bad_request("kind must be fenced, idempotent or unfenced"))?;
    identifier(&slot, "the target slot")?;
    identifier(&body.deployment_id, "deployment_id")?;
    // An attempt's fence is at least 1 (protocol §3): nothing else is a fence.
    if body.fence < 1 {
        return Err(ApiError::bad_request("fence must be at least 1"));
    }
    let target = state
        .0
        .store
        .demo_target(kind, &slot)
        .await
        .map_err(|e| match e {
            leasewright_impl::Error::InvalidArgument(_) => ApiError::new(
                StatusCode::CONFLICT,
                "target_kind_mismatch",
                "the target slot exists with another kind",
            ),
            other => other.into(),
        })?;
    let verdict = target
        .mutate(&TargetMutation {
            job: JobId(body.job),
            attempt: AttemptId(body.attempt),
            fence: body.fence,
            deployment_id: body.deployment_id,
        })
        .await?;
    match verdict {
        Verdict::Accepted(()) => plain_verdict(Some(()), "accepted"),
        Verdict::Acknowledged => plain_verdict(None::<()>, "acknowledged"),
        Verdict::Rejected(reason) => Err(state.reject("target_mutation", reason)),
    }
}

async fn target_state(state: &AppState, slot: &str) -> Result<Option<TargetBody>, ApiError> {
    let row = sqlx::query("SELECT kind, highest_fence, applied_count FROM targets WHERE slot = $1")
        .bind(slot)
        .fetch_optional(state.0.store.pool())
        .await
        .map_err(db_error)?;
    row.map(|row| {
        Ok(TargetBody {
            slot: slot.to_owned(),
            kind: row.try_get("kind").map_err(db_error)?,
            highest_fence: row.try_get("highest_fence").map_err(db_error)?,
            applied_count: row.try_get("applied_count").map_err(db_error)?,
        })
    })
    .transpose()
}

async fn target_get(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(slot): Segments<String>,
) -> ApiResult {
    identifier(&slot, "the target slot")?;
    match target_state(&state, &slot).await? {
        Some(body) => ok(body),
        None => Err(ApiError::not_found(
            "unknown_target",
            "no mutation has reached this target slot",
        )),
    }
}

// -------------------------------------------------------------------------------------------
// Operator routes.

async fn create_project(
    State(state): State<AppState>,
    _: OperatorAuth,
    JsonBody(body): JsonBody<CreateProjectRequest>,
) -> ApiResult {
    if body.name.is_empty() {
        return Err(ApiError::bad_request("name must not be empty"));
    }
    identifier(&body.name, "name")?;
    let project = state.0.store.create_project(&body.name).await?;
    created(ProjectResponse {
        project: project.0,
        name: body.name,
    })
}

async fn project_exists(state: &AppState, project: Uuid) -> Result<ProjectId, ApiError> {
    let exists: Option<Uuid> = sqlx::query_scalar("SELECT id FROM projects WHERE id = $1")
        .bind(project)
        .fetch_optional(state.0.store.pool())
        .await
        .map_err(db_error)?;
    exists
        .map(ProjectId)
        .ok_or_else(|| ApiError::not_found("unknown_project", "no such project"))
}

async fn create_runner(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    JsonBody(body): JsonBody<CreateRunnerRequest>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    if body.name.is_empty() {
        return Err(ApiError::bad_request("name must not be empty"));
    }
    identifier(&body.name, "name")?;
    let (runner, token) = state.0.store.create_runner(project, &body.name).await?;
    created(RunnerResponse {
        runner: runner.0,
        token,
    })
}

async fn submit_job(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    JsonBody(body): JsonBody<SubmitJobRequest>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let kind = match body.target_kind.as_deref() {
        None => TargetKind::Unfenced,
        Some(code) => TargetKind::from_code(code).ok_or_else(|| {
            ApiError::bad_request("target_kind must be fenced, idempotent or unfenced")
        })?,
    };
    if body.command.is_empty() {
        return Err(ApiError::bad_request("command must not be empty"));
    }
    if let Some(target) = &body.target {
        identifier(target, "target")?;
    }
    let archive = decode(&body.source_archive_base64)?;
    let limits = state.0.source_limits;
    // Re-read under the extraction rules and re-snapshot deterministically: what is stored is
    // always a canonical snapshot, whatever the client sent.
    let snapshot = tokio::task::spawn_blocking(move || {
        source::read_archive(&archive, limits).and_then(source::build_snapshot)
    })
    .await
    .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "task failed"))?
    .map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_source",
            e.to_string(),
        )
    })?;
    let pool = state.0.store.pool();
    sqlx::query(
        "INSERT INTO server_source_blobs (sha256, manifest_digest, content, stored_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (sha256) DO NOTHING",
    )
    .bind(&snapshot.blob_sha256)
    .bind(&snapshot.manifest_digest)
    .bind(&snapshot.archive)
    .bind(Utc::now())
    .execute(pool)
    .await
    .map_err(db_error)?;
    let job = state
        .0
        .store
        .submit_job(
            project,
            NewJob {
                source_revision: body.source_revision.clone(),
                source_digest: snapshot.manifest_digest.clone(),
                command: body.command,
                target: body.target,
                target_kind: kind,
            },
        )
        .await?;
    sqlx::query(
        "INSERT INTO server_job_specs (job_id, blob_sha256, artifacts) VALUES ($1, $2, $3)",
    )
    .bind(job.0)
    .bind(&snapshot.blob_sha256)
    .bind(&body.artifacts)
    .execute(pool)
    .await
    .map_err(db_error)?;
    created(SubmitJobResponse {
        job: job.0,
        source_revision: body.source_revision,
        source_digest: snapshot.manifest_digest,
        source_blob_sha256: snapshot.blob_sha256,
        file_count: snapshot.file_count,
    })
}

async fn job_body(state: &AppState, view: JobView) -> Result<JobBody, ApiError> {
    let spec = job_spec(state, view.id.0).await?;
    let reservation = state.0.store.target_reservation(view.id).await?;
    let (blob, artifacts) = spec.map_or((None, Vec::new()), |(b, a)| (Some(b), a));
    Ok(JobBody {
        job: view.id.0,
        project: view.project.0,
        state: view.state.as_str().into(),
        current_attempt: view.current_attempt.map(|a| a.0),
        fence: view.fence,
        cancel_requested: view.cancel_requested,
        outcome: view.outcome.map(|o| o.as_str().into()),
        result_digest: view.result_digest,
        source_revision: view.source_revision,
        source_digest: view.source_digest,
        source_blob_sha256: blob,
        command: view.command,
        artifacts,
        target: view.target,
        target_kind: view.target_kind.as_str().into(),
        target_reserved_by: reservation.map(|(_, attempt)| attempt.0),
        submitted_at: view.submitted_at,
        finished_at: view.finished_at,
    })
}

/// The job, if it belongs to `project` (another project's job is `unknown_job` here).
async fn project_job(state: &AppState, project: &str, job: &str) -> Result<JobView, ApiError> {
    let project = parse_uuid(project, "project")?;
    let job = parse_uuid(job, "job")?;
    match state.0.store.job(JobId(job)).await? {
        Some(view) if view.project.0 == project => Ok(view),
        _ => Err(ApiError::not_found(
            "unknown_job",
            "no such job in this project",
        )),
    }
}

async fn list_jobs(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let ids: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE project_id = $1 ORDER BY submitted_seq")
            .bind(project.0)
            .fetch_all(state.0.store.pool())
            .await
            .map_err(db_error)?;
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(view) = state.0.store.job(JobId(id)).await? {
            jobs.push(job_body(&state, view).await?);
        }
    }
    ok(JobList { jobs })
}

async fn get_job(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    ok(job_body(&state, view).await?)
}

fn attempt_body(a: AttemptView) -> AttemptBody {
    AttemptBody {
        attempt: a.id.0,
        job: a.job.0,
        runner: a.runner.0,
        lease_id: a.lease_id.0,
        fence: a.fence,
        state: a.state.as_str().into(),
        lease_expiry: a.lease_expiry,
        outcome: a.outcome.map(|o| o.as_str().into()),
        result_digest: a.result_digest,
        claimed_at: a.claimed_at,
        ended_at: a.ended_at,
    }
}

async fn get_attempts(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let attempts = state.0.store.attempts(view.id).await?;
    ok(AttemptList {
        attempts: attempts.into_iter().map(attempt_body).collect(),
    })
}

fn observation_body(o: ObservationView) -> ObservationBody {
    ObservationBody {
        id: o.id,
        kind: o.kind.as_str().into(),
        runner: o.named.runner.0,
        named_attempt: o.named.attempt.0,
        named_lease_id: o.named.lease_id.0,
        named_fence: o.named.fence,
        attempt: o.attempt.map(|a| a.0),
        received_at: o.received_at,
        runner_time: o.runner_time,
        verdict: o.verdict.as_str().into(),
        reason: o.verdict.reason().map(|r| r.as_str().into()),
        outcome: o.outcome.map(|x| x.as_str().into()),
        payload_sha256: o.payload_sha256,
    }
}

async fn get_observations(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let observations = state.0.store.observations(view.id).await?;
    ok(ObservationList {
        observations: observations.into_iter().map(observation_body).collect(),
    })
}

async fn get_reconciliations(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let list = state.0.store.reconciliations(view.id).await?;
    ok(ReconciliationList {
        reconciliations: list
            .into_iter()
            .map(|r| ReconciliationBody {
                id: r.id,
                attempt: r.attempt.map(|a| a.0),
                finding: r.finding.as_str().into(),
                decision: r.decision.as_str().into(),
                verdict: r.verdict.as_str().into(),
                reason: r.verdict.reason().map(|x| x.as_str().into()),
                decided_at: r.decided_at,
            })
            .collect(),
    })
}

#[derive(Deserialize)]
struct AttemptQuery {
    attempt: Option<String>,
}

/// The attempt a log or artifact read means: the one named, else the current one, else the
/// latest.
async fn chosen_attempt(
    state: &AppState,
    view: &JobView,
    query: &AttemptQuery,
) -> Result<AttemptId, ApiError> {
    let attempts = state.0.store.attempts(view.id).await?;
    let chosen = match &query.attempt {
        Some(text) => {
            let id = AttemptId(parse_uuid(text, "attempt")?);
            attempts.iter().find(|a| a.id == id).map(|a| a.id)
        }
        None => view
            .current_attempt
            .or_else(|| attempts.last().map(|a| a.id)),
    };
    chosen.ok_or_else(|| ApiError::not_found("unknown_attempt", "the job has no such attempt"))
}

async fn get_logs(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<AttemptQuery>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let attempt = chosen_attempt(&state, &view, &query).await?;
    let chunks = state.0.store.logs(attempt).await?;
    let mut text = Vec::new();
    for (_, chunk) in chunks {
        text.extend_from_slice(&chunk);
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

async fn get_artifact(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job, name)): Segments<(String, String, String)>,
    QueryParams(query): QueryParams<AttemptQuery>,
) -> ApiResult {
    identifier(&name, "the artifact name")?;
    let view = project_job(&state, &project, &job).await?;
    let attempt = chosen_attempt(&state, &view, &query).await?;
    let content: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT content FROM artifacts WHERE attempt_id = $1 AND name = $2")
            .bind(attempt.0)
            .bind(&name)
            .fetch_optional(state.0.store.pool())
            .await
            .map_err(db_error)?;
    match content {
        Some(content) => Ok((
            [(header::CONTENT_TYPE, "application/octet-stream")],
            content,
        )
            .into_response()),
        None => Err(ApiError::not_found("not_found", "no such artifact")),
    }
}

/// A body that carries nothing: `{}` (or no body at all).
#[derive(Default, Deserialize)]
struct EmptyRequest {}

async fn cancel(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    let project = parse_uuid(&project, "project")?;
    let job = parse_uuid(&job, "job")?;
    let verdict = state.0.store.cancel(ProjectId(project), JobId(job)).await?;
    match verdict {
        Verdict::Accepted(()) => plain_verdict(Some(()), "accepted"),
        Verdict::Acknowledged => plain_verdict(None::<()>, "acknowledged"),
        Verdict::Rejected(reason) => Err(state.reject("cancel", reason)),
    }
}

async fn reconcile(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    JsonBody(body): JsonBody<ReconcileRequest>,
) -> ApiResult {
    let project = parse_uuid(&project, "project")?;
    let job = parse_uuid(&job, "job")?;
    let finding = Finding::from_code(&body.finding).ok_or_else(|| {
        ApiError::bad_request(
            "finding must be one of stopped, still_running, observed_passed, observed_failed",
        )
    })?;
    let decision = Decision::from_code(&body.decision)
        .ok_or_else(|| ApiError::bad_request("decision must be one of retry, abort, adopt"))?;
    let verdict = state
        .0
        .store
        .reconcile(ProjectId(project), JobId(job), finding, decision)
        .await?;
    match verdict {
        Verdict::Accepted(()) => plain_verdict(Some(()), "accepted"),
        Verdict::Acknowledged => plain_verdict(None::<()>, "acknowledged"),
        Verdict::Rejected(reason) => Err(state.reject("reconcile", reason)),
    }
}

async fn sweep(
    State(state): State<AppState>,
    _: OperatorAuth,
    OptionalJsonBody(body): OptionalJsonBody<SweepRequest>,
) -> ApiResult {
    let project = match body.project {
        Some(project) => Some(project_exists(&state, project).await?),
        None => None,
    };
    match state.sweep_in(project).await? {
        SweepVerdict::Uncertain(jobs) => ok(SweepResponse {
            verdict: "uncertain".into(),
            jobs: jobs.into_iter().map(|j| j.0).collect(),
        }),
        SweepVerdict::Accepted => ok(SweepResponse {
            verdict: "accepted".into(),
            jobs: Vec::new(),
        }),
    }
}

async fn test_clock(
    State(state): State<AppState>,
    _: OperatorAuth,
    JsonBody(body): JsonBody<ClockRequest>,
) -> ApiResult {
    let clock = state.0.manual_clock.as_ref().ok_or_else(|| {
        ApiError::not_found("not_found", "the server does not run on a manual clock")
    })?;
    // Checked: the time stays within RFC 3339's years 1..=9999 (and PostgreSQL's range); an
    // overflowing move is a 400, never a panic.
    let out_of_range = || ApiError::bad_request("the clock must stay within the years 1 to 9999");
    let mut now = body.set.unwrap_or_else(|| clock.now());
    if let Some(ms) = body.advance_ms {
        now = chrono::Duration::try_milliseconds(ms)
            .and_then(|by| now.checked_add_signed(by))
            .ok_or_else(out_of_range)?;
    }
    if !(1..=9999).contains(&chrono::Datelike::year(&now)) {
        return Err(out_of_range());
    }
    clock.set(now);
    ok(ClockResponse { now: clock.now() })
}

async fn healthz(State(state): State<AppState>) -> ApiResult {
    sqlx::query("SELECT 1")
        .execute(state.0.store.pool())
        .await
        .map_err(db_error)?;
    ok(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(state): State<AppState>) -> ApiResult {
    let uncertain: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'uncertain'")
        .fetch_one(state.0.store.pool())
        .await
        .map_err(db_error)?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.0.metrics.render(uncertain),
    )
        .into_response())
}

async fn fallback() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take this method",
    )
}

async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state.0.metrics.request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// The router. The `POST /v1/test/clock` route exists only when the state has a manual clock,
/// which only the process's command line can give it.
pub fn router(state: AppState, max_payload_bytes: usize) -> Router {
    let control = DefaultBodyLimit::max(CONTROL_BODY_LIMIT);
    let payload = DefaultBodyLimit::max(max_payload_bytes);
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/runner/claim", post(claim).layer(control))
        .route("/v1/runner/heartbeat", post(heartbeat).layer(control))
        .route("/v1/runner/rejoin", post(rejoin).layer(control))
        .route("/v1/runner/source", post(source).layer(control))
        .route("/v1/runner/logs", post(logs).layer(payload))
        .route(
            "/v1/runner/artifacts/put",
            post(artifact_put).layer(payload),
        )
        .route(
            "/v1/runner/artifacts/get",
            post(artifact_get).layer(control),
        )
        .route("/v1/runner/cache/put", post(cache_put).layer(payload))
        .route("/v1/runner/cache/get", post(cache_get).layer(control))
        .route("/v1/runner/result", post(result).layer(control))
        .route(
            "/v1/targets/{slot}/deploy",
            post(target_deploy).layer(control),
        )
        .route("/v1/targets/{slot}", get(target_get))
        .route("/v1/projects", post(create_project).layer(control))
        .route(
            "/v1/projects/{project}/runners",
            post(create_runner).layer(control),
        )
        .route(
            "/v1/projects/{project}/jobs",
            post(submit_job).layer(payload).get(list_jobs),
        )
        .route("/v1/projects/{project}/jobs/{job}", get(get_job))
        .route(
            "/v1/projects/{project}/jobs/{job}/attempts",
            get(get_attempts),
        )
        .route(
            "/v1/projects/{project}/jobs/{job}/observations",
            get(get_observations),
        )
        .route(
            "/v1/projects/{project}/jobs/{job}/reconciliations",
            get(get_reconciliations),
        )
        .route("/v1/projects/{project}/jobs/{job}/logs", get(get_logs))
        .route(
            "/v1/projects/{project}/jobs/{job}/artifacts/{name}",
            get(get_artifact),
        )
        .route(
            "/v1/projects/{project}/jobs/{job}/cancel",
            post(cancel).layer(control),
        )
        .route(
            "/v1/projects/{project}/jobs/{job}/reconcile",
            post(reconcile).layer(control),
        )
        .route("/v1/sweep", post(sweep).layer(control));
    if state.0.manual_clock.is_some() {
        router = router.route("/v1/test/clock", post(test_clock).layer(control));
    }
    router
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// A running server (in-process).
pub struct Server {
    pub addr: std::net::SocketAddr,
    pub state: AppState,
    pub manual_clock: Option<ManualClock>,
    pub operator_token: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        self.state.store()
    }

    /// Stop serving and wait for the server to finish.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.abort();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await??;
        }
        Ok(())
    }

    /// Wait until the server stops (it stops on its own only on an I/O error).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        if let Some(task) = self.task.take() {
            task.await??;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.abort();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Connect a store to `database_url` and serve on `listener`.
pub async fn start(
    database_url: &str,
    lease_ttl: Duration,
    listener: tokio::net::TcpListener,
    config: ServerConfig,
) -> anyhow::Result<Server> {
    let manual_clock = config.manual_clock.then(|| ManualClock::new(Utc::now()));
    let clock: Arc<dyn Clock> = match &manual_clock {
        Some(manual) => Arc::new(manual.clone()),
        None => Arc::new(leasewright_impl::SystemClock),
    };
    let store = Store::connect(
        database_url,
        clock,
        leasewright_impl::StoreConfig {
            lease_ttl,
            ..Default::default()
        },
    )
    .await?;
    ensure_schema(&store)
        .await
        .map_err(|e| anyhow::anyhow!("creating the server's tables: {}", e.message))?;
    let operator_token = match &config.operator_token {
        Some(token) => token.clone(),
        None => random_token("lwop_")?,
    };
    let state = AppState::new(
        store,
        manual_clock.clone(),
        &operator_token,
        config.source_limits,
    );
    let app = router(state.clone(), config.max_payload_bytes);
    let addr = listener.local_addr()?;
    let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    });
    let sweeper = config.sweep_interval.map(|interval| {
        let state = state.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Err(error) = state.sweep().await {
                    tracing::warn!(code = %error.code, "expiry sweep failed");
                }
            }
        })
    });
    Ok(Server {
        addr,
        state,
        manual_clock,
        operator_token,
        shutdown: Some(shutdown),
        task: Some(task),
        sweeper,
    })
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, digest32, has_escaped_nul};

    #[test]
    fn operator_token_hashes_are_equal_only_when_every_byte_is() {
        let hash = digest32(b"operator-secret");
        assert!(constant_time_eq(&hash, &digest32(b"operator-secret")));
        assert!(!constant_time_eq(&hash, &digest32(b"operator-secret ")));
        for at in [0, 16, 31] {
            let mut other = hash;
            other[at] ^= 1;
            assert!(!constant_time_eq(&hash, &other), "byte {at}");
        }
        assert!(!constant_time_eq(&hash, &hash[..31]));
        assert!(!constant_time_eq(&hash, b""));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn an_escaped_nul_is_found_and_an_escaped_backslash_before_u0000_is_text() {
        assert!(has_escaped_nul(br#"{"name": "a\u0000b"}"#));
        assert!(has_escaped_nul(br#"{"a\u0000": 1}"#));
        assert!(has_escaped_nul(br#"{"name": "\\\u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\\u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\u0001 u0000"}"#));
        assert!(!has_escaped_nul(br#"{"name": "\\\\u0000"}"#));
    }
}
