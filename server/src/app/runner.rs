//! The runner routes (`/v1/runner/*`): every message names its tuple and the Store decides it.

use super::error::{db_error, ok, plain_verdict, ApiError, ApiResult};
use super::extract::{decode, identifier, tuple, JsonBody, RunnerAuth, B64};
use super::AppState;
use crate::metrics::ClaimOutcome;
use crate::wire::*;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use base64::Engine as _;
use leasewright_impl::{MessageKind, Outcome, RejoinAnswer, ResultReport, Verdict};
use sqlx::Row;
use std::collections::HashMap;
use uuid::Uuid;

pub(super) async fn job_spec(
    state: &AppState,
    job: Uuid,
) -> Result<Option<(String, Vec<String>)>, ApiError> {
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

/// The specs of `jobs` that have one, in one round trip (the leases of one claim).
async fn job_specs(
    state: &AppState,
    jobs: &[Uuid],
) -> Result<HashMap<Uuid, (String, Vec<String>)>, ApiError> {
    let rows = sqlx::query(
        "SELECT job_id, blob_sha256, artifacts FROM server_job_specs WHERE job_id = ANY($1)",
    )
    .bind(jobs)
    .fetch_all(state.0.store.pool())
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("job_id").map_err(db_error)?,
                (
                    row.try_get("blob_sha256").map_err(db_error)?,
                    row.try_get("artifacts").map_err(db_error)?,
                ),
            ))
        })
        .collect()
}

/// The most leases one claim asks for (docs/http.md).
pub const MAX_CLAIM_CAPACITY: u32 = 64;

/// R1 `claim` (batch): lease up to `capacity` queued jobs whose target slot is free.
#[utoipa::path(
    post,
    path = "/v1/runner/claim",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "accepted: the leases granted (at most `capacity`)", body = ClaimResponse),
        (status = 409, description = "rejected: `no_queued_job` or another reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn claim(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<ClaimRequest>,
) -> ApiResult {
    // The claim's server-side time, observed however the handler returns (docs/http.md,
    // "Metrics"): `error` unless the claim below says otherwise.
    let mut timer = ClaimTimer {
        state: &state,
        started: std::time::Instant::now(),
        outcome: ClaimOutcome::Error,
    };
    let capacity = match body.capacity.unwrap_or(1) {
        capacity @ 1..=MAX_CLAIM_CAPACITY => capacity as usize,
        _ => {
            return Err(ApiError::bad_request(format!(
                "capacity must be between 1 and {MAX_CLAIM_CAPACITY}"
            )))
        }
    };
    let store = &state.0.store;
    let verdict = store
        .claim_batch(runner, capacity, body.runner_time)
        .await?;
    let leases = match verdict {
        Verdict::Accepted(leases) => leases,
        Verdict::Acknowledged => Vec::new(),
        Verdict::Rejected(reason) => {
            if reason == leasewright_impl::Reason::NoQueuedJob {
                timer.outcome = ClaimOutcome::None;
            }
            return Err(state.reject("claim", reason));
        }
    };
    state.0.metrics.claim(leases.len());
    timer.outcome = if leases.is_empty() {
        ClaimOutcome::None
    } else {
        ClaimOutcome::Leased
    };
    let ttl_ms = store.lease_ttl().num_milliseconds().max(0) as u64;
    // A job submitted over HTTP commits its spec row in its submission's transaction, so a claim
    // never sees it without one; a job submitted another way (the Store's API) has none. One
    // round trip for every lease of the claim.
    let jobs: Vec<Uuid> = leases.iter().map(|lease| lease.tuple.job.0).collect();
    let mut specs = job_specs(&state, &jobs).await?;
    let mut bodies = Vec::with_capacity(leases.len());
    for lease in leases {
        let (blob, artifacts) = specs
            .remove(&lease.tuple.job.0)
            .map_or((None, Vec::new()), |(b, a)| (Some(b), a));
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
            target: lease.target,
            target_kind: lease.target_kind.as_str().to_owned(),
            slot_token: lease.slot_token,
        });
    }
    ok(ClaimResponse {
        verdict: "accepted".into(),
        leases: bodies,
    })
}

/// Observes the claim's server-side time when the handler returns, with its outcome.
struct ClaimTimer<'a> {
    state: &'a AppState,
    started: std::time::Instant,
    outcome: ClaimOutcome,
}

impl Drop for ClaimTimer<'_> {
    fn drop(&mut self) {
        self.state
            .0
            .metrics
            .claim_latency(self.outcome, self.started.elapsed());
    }
}

/// R2 `heartbeat`: extend the lease named by the ownership tuple.
#[utoipa::path(
    post,
    path = "/v1/runner/heartbeat",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = TupleBody,
    responses(
        (status = 200, description = "accepted: the new lease expiry", body = HeartbeatResponse),
        (status = 409, description = "rejected with a reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn heartbeat(
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
                super::error::INTERNAL_ERROR,
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

/// R5 `rejoin`: a runner that lost contact asks whether its attempt may go on.
#[utoipa::path(
    post,
    path = "/v1/runner/rejoin",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = TupleBody,
    responses(
        (status = 200, description = "accepted: `continue` or `cancel`", body = RejoinResponse),
        (status = 409, description = "rejected: the answer carries `\"instruction\": \"stop\"`", body = ErrorBody)
    )
)]
pub(super) async fn rejoin(
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

/// R8 `source fetch`: the job's immutable source snapshot.
#[utoipa::path(
    post,
    path = "/v1/runner/source",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = TupleBody,
    responses(
        (status = 200, description = "the source snapshot (gzip-compressed tar); headers `x-leasewright-blob-sha256`, `x-leasewright-source-digest`, `x-leasewright-source-revision`", body = BinaryBody, content_type = "application/gzip"),
        (status = 404, description = "`source_not_stored`", body = ErrorBody),
        (status = 409, description = "rejected with a reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn source(
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
                super::error::INTERNAL_ERROR,
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

/// R8 `log append`: one chunk of the attempt's log at sequence number `seq`.
#[utoipa::path(
    post,
    path = "/v1/runner/logs",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = LogAppendRequest,
    responses(
        (status = 200, description = "accepted, or acknowledged (the same `seq` with the same content)", body = VerdictResponse),
        (status = 409, description = "rejected: `sequence_conflict` or another reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn logs(
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

/// R8 `artifact put`: store an artifact of the attempt.
#[utoipa::path(
    post,
    path = "/v1/runner/artifacts/put",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = PutRequest,
    responses(
        (status = 200, description = "accepted", body = VerdictResponse),
        (status = 409, description = "rejected with a reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn artifact_put(
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

pub(super) fn content_answer(content: Option<Vec<u8>>, verdict: &'static str) -> ApiResult {
    ok(GetResponse {
        verdict: verdict.into(),
        content_base64: B64.encode(content.unwrap_or_default()),
    })
}

/// R8 `artifact get`: read an artifact of the attempt.
#[utoipa::path(
    post,
    path = "/v1/runner/artifacts/get",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = GetRequest,
    responses(
        (status = 200, description = "accepted: the content", body = GetResponse),
        (status = 409, description = "rejected: `not_found` or another reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn artifact_get(
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

/// R8 `cache put`: store a cache entry of the project (`name` is the key).
#[utoipa::path(
    post,
    path = "/v1/runner/cache/put",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = PutRequest,
    responses(
        (status = 200, description = "accepted", body = VerdictResponse),
        (status = 409, description = "rejected with a reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn cache_put(
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

/// R8 `cache get`: read a cache entry of the project.
#[utoipa::path(
    post,
    path = "/v1/runner/cache/get",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = GetRequest,
    responses(
        (status = 200, description = "accepted: the content", body = GetResponse),
        (status = 409, description = "rejected: `not_found` or another reason of protocol §6", body = ErrorBody)
    )
)]
pub(super) async fn cache_get(
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

/// R3 `result`: the attempt's outcome.
#[utoipa::path(
    post,
    path = "/v1/runner/result",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = ResultRequest,
    responses(
        (status = 200, description = "accepted, or acknowledged (an identical repeat)", body = VerdictResponse),
        (status = 409, description = "rejected with a reason of protocol §6; a late report is kept as a late observation", body = ErrorBody)
    )
)]
pub(super) async fn result(
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

/// The most results one batch result carries (docs/http.md).
pub const MAX_RESULTS_PER_BATCH: usize = 64;

/// `POST /v1/runner/results`: R3 `result` for each item, in order (`Store::report_results`).
/// Every item gets its own verdict; a rejected item is an answer in the list, not an error.
#[utoipa::path(
    post,
    path = "/v1/runner/results",
    tag = "runner",
    security(("runner_token" = [])),
    request_body = ResultsRequest,
    responses(
        (status = 200, description = "one answer per item, in order: each the verdict (and the reason of a rejection) a single result would get", body = ResultsResponse),
        (status = 400, description = "no items, more than 64, or an item that is not a result", body = ErrorBody)
    )
)]
pub(super) async fn results(
    State(state): State<AppState>,
    RunnerAuth(runner): RunnerAuth,
    JsonBody(body): JsonBody<ResultsRequest>,
) -> ApiResult {
    if body.results.is_empty() || body.results.len() > MAX_RESULTS_PER_BATCH {
        return Err(ApiError::bad_request(format!(
            "results must hold between 1 and {MAX_RESULTS_PER_BATCH} items"
        )));
    }
    let mut items = Vec::with_capacity(body.results.len());
    for item in &body.results {
        let outcome = Outcome::from_code(&item.outcome).ok_or_else(|| {
            ApiError::bad_request("outcome must be one of passed, failed, cancelled")
        })?;
        items.push(ResultReport {
            tuple: tuple(runner, &item.tuple),
            outcome,
            result_digest: item.result_digest.clone(),
            runner_time: item.tuple.runner_time,
        });
    }
    let verdicts = state.0.store.report_results(&items).await?;
    let results = verdicts
        .into_iter()
        .map(|verdict| match verdict {
            Verdict::Accepted(()) => ResultAnswer {
                verdict: "accepted".into(),
                reason: None,
            },
            Verdict::Acknowledged => ResultAnswer {
                verdict: "acknowledged".into(),
                reason: None,
            },
            Verdict::Rejected(reason) => {
                state
                    .0
                    .metrics
                    .rejection(MessageKind::Result.as_str(), reason.as_str());
                ResultAnswer {
                    verdict: "rejected".into(),
                    reason: Some(reason.as_str().into()),
                }
            }
        })
        .collect();
    ok(ResultsResponse { results })
}
