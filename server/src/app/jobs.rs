//! The operator routes of jobs: submission, the views (job, attempts, observations,
//! reconciliations, logs and their chunks, artifacts, cache entries), cancel and reconcile.

use super::error::{created, db_error, ok, plain_verdict, ApiError, ApiResult};
use super::extract::{
    decode, identifier, parse_uuid, JsonBody, OperatorAuth, OptionalJsonBody, QueryParams,
    Segments, B64,
};
use super::projects::project_exists;
use super::runner::job_spec;
use super::AppState;
use crate::source;
use crate::wire::*;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use base64::Engine as _;
use chrono::Utc;
use leasewright_impl::{
    AttemptId, AttemptView, Decision, Finding, JobId, JobView, NewJob, ObservationView, ProjectId,
    TargetKind, Verdict,
};
use serde::Deserialize;
use sha2::Digest as _;
use uuid::Uuid;

/// Submit a job with its source (a gzip-compressed tar, re-snapshotted deterministically).
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/jobs",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("Idempotency-Key" = Option<String>, Header, description = "at most 1024 bytes: the same key and request again answer the first job")),
    request_body = SubmitJobRequest,
    responses(
        (status = 201, description = "the job, its source and its spec, stored in one transaction", body = SubmitJobResponse),
        (status = 200, description = "the same Idempotency-Key and request again: the first job", body = SubmitJobResponse),
        (status = 404, description = "`unknown_project`", body = ErrorBody),
        (status = 409, description = "`idempotency_key_reused` or `target_kind_mismatch`", body = ErrorBody),
        (status = 422, description = "`invalid_source`: the archive breaks the extraction rules; `error.rule` names the rule, `error.path` the offending entry", body = ErrorBody)
    )
)]
pub(super) async fn submit_job(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    headers: axum::http::HeaderMap,
    JsonBody(mut body): JsonBody<SubmitJobRequest>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?;
            if key.is_empty() {
                return Err(ApiError::bad_request("Idempotency-Key must not be empty"));
            }
            Some(identifier(key, "Idempotency-Key")?.to_owned())
        }
    };
    let request_sha256 = hex::encode(sha2::Sha256::digest(
        serde_json::to_vec(&body).map_err(|e| ApiError::bad_request(e.to_string()))?,
    ));
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
    // Each form of the source is let go once the next is made, so a submission holds at most two
    // of them at once (docs/http.md, memory).
    let archive = decode(&std::mem::take(&mut body.source_archive_base64))?;
    let limits = state.0.source_limits;
    // Re-read under the submission rules and re-snapshot deterministically: what is stored is
    // always a canonical snapshot, whatever the client sent.
    let snapshot = tokio::task::spawn_blocking(move || {
        let files = source::read_archive(&archive, limits);
        drop(archive);
        files.and_then(source::build_snapshot)
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            super::error::INTERNAL_ERROR,
            "task failed",
        )
    })?
    .map_err(|e| ApiError::invalid_source(&e))?;
    // One transaction: the blob, the job, its spec and its idempotency key are stored together
    // or not at all, so a claim never sees a job without its source and a crash leaves no half.
    let mut tx = leasewright_impl::begin_transaction(state.0.store.pool(), None)
        .await
        .map_err(db_error)?;
    if let Some(key) = &idempotency_key {
        // Submissions of one key wait for each other; the first one's job is every one's answer.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))")
            .bind(project.0.to_string())
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let earlier: Option<(Uuid, String)> = sqlx::query_as(
            "SELECT job_id, request_sha256 FROM server_submissions \
             WHERE project_id = $1 AND idempotency_key = $2",
        )
        .bind(project.0)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        if let Some((job, earlier_sha256)) = earlier {
            if earlier_sha256 != request_sha256 {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used for another submission",
                ));
            }
            return ok(SubmitJobResponse {
                job,
                source_revision: body.source_revision,
                source_digest: snapshot.manifest_digest,
                source_blob_sha256: snapshot.blob_sha256,
                file_count: snapshot.file_count,
            });
        }
    }
    sqlx::query(
        "INSERT INTO server_source_blobs (sha256, manifest_digest, content, stored_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (sha256) DO NOTHING",
    )
    .bind(&snapshot.blob_sha256)
    .bind(&snapshot.manifest_digest)
    .bind(&snapshot.archive)
    .bind(Utc::now())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    let job = state
        .0
        .store
        .submit_job_in(
            &mut tx,
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
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    if let Some(key) = &idempotency_key {
        sqlx::query(
            "INSERT INTO server_submissions (project_id, idempotency_key, job_id, request_sha256) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(project.0)
        .bind(key)
        .bind(job.0)
        .bind(&request_sha256)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    created(SubmitJobResponse {
        job: job.0,
        source_revision: body.source_revision,
        source_digest: snapshot.manifest_digest,
        source_blob_sha256: snapshot.blob_sha256,
        file_count: snapshot.file_count,
    })
}

pub(super) async fn job_body(state: &AppState, view: JobView) -> Result<JobBody, ApiError> {
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
pub(super) async fn project_job(
    state: &AppState,
    project: &str,
    job: &str,
) -> Result<JobView, ApiError> {
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

/// The default and the largest page of every list route (`?limit=`).
pub const DEFAULT_PAGE_LIMIT: i64 = 100;
pub const MAX_PAGE_LIMIT: i64 = 1000;

/// `?limit=&after=` of the list routes: at most `limit` items (default
/// [`DEFAULT_PAGE_LIMIT`], 1 to [`MAX_PAGE_LIMIT`]) after the cursor `after` (a previous page's
/// `next`; 0 or absent: from the start).
#[derive(Deserialize)]
pub(super) struct PageQuery {
    limit: Option<i64>,
    after: Option<i64>,
}

impl PageQuery {
    /// (after, limit), checked.
    pub(super) fn bounds(&self) -> Result<(i64, i64), ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE_LIMIT);
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(ApiError::bad_request(format!(
                "limit must be 1 to {MAX_PAGE_LIMIT}"
            )));
        }
        let after = self.after.unwrap_or(0);
        if after < 0 {
            return Err(ApiError::bad_request("after must not be negative"));
        }
        Ok((after, limit))
    }
}

/// A page read with one row more than `limit`: the first `limit` rows, and the cursor of the
/// next page when there is one.
pub(super) fn page<T>(
    mut rows: Vec<T>,
    limit: i64,
    cursor: impl Fn(&T) -> i64,
) -> (Vec<T>, Option<i64>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() <= limit {
        return (rows, None);
    }
    rows.truncate(limit);
    let next = rows.last().map(cursor);
    (rows, next)
}

/// `?limit=&after=&state=` of `GET .../jobs`: a page ([`PageQuery`]) of the jobs in one state.
#[derive(Deserialize)]
pub(super) struct JobsQuery {
    limit: Option<i64>,
    after: Option<i64>,
    state: Option<String>,
}

/// The project's jobs.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs",
    tag = "operator",
    security(("operator_token" = [])),
    params(
        ("project" = Uuid, Path, description = "the project id"),
        ("state" = Option<String>, Query, description = "only the jobs in this state (`queued`, `running`, `cancelling`, `uncertain`, `passed`, `failed`, `cancelled`, `aborted`)"),
        ("limit" = Option<i64>, Query, description = "at most this many jobs (1 to 1000, default 100)"),
        ("after" = Option<i64>, Query, description = "the cursor: a previous page's `next`")
    ),
    responses(
        (status = 200, description = "the project's jobs in submission order", body = JobList),
        (status = 404, description = "`unknown_project`", body = ErrorBody)
    )
)]
pub(super) async fn list_jobs(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    QueryParams(query): QueryParams<JobsQuery>,
) -> ApiResult {
    let (after, limit) = PageQuery {
        limit: query.limit,
        after: query.after,
    }
    .bounds()?;
    let job_state = match query.state.as_deref() {
        None => None,
        Some(code) => Some(
            leasewright_impl::JobState::from_code(code)
                .ok_or_else(|| ApiError::bad_request("state is not a job state"))?,
        ),
    };
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT id, submitted_seq FROM jobs WHERE project_id = $1 AND submitted_seq > $2 \
         AND ($4::text IS NULL OR state = $4) ORDER BY submitted_seq LIMIT $3",
    )
    .bind(project.0)
    .bind(after)
    .bind(limit + 1)
    .bind(job_state.map(|s| s.as_str()))
    .fetch_all(state.0.store.pool())
    .await
    .map_err(db_error)?;
    let (rows, next) = page(rows, limit, |(_, seq)| *seq);
    let mut jobs = Vec::with_capacity(rows.len());
    for (id, _) in rows {
        if let Some(view) = state.0.store.job(JobId(id)).await? {
            jobs.push(job_body(&state, view).await?);
        }
    }
    ok(JobList { jobs, next })
}

/// A job.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    responses(
        (status = 200, description = "the job", body = JobBody),
        (status = 404, description = "`unknown_project` or `unknown_job` (a job of another project too)", body = ErrorBody)
    )
)]
pub(super) async fn get_job(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    ok(job_body(&state, view).await?)
}

pub(super) fn attempt_body(a: AttemptView) -> AttemptBody {
    AttemptBody {
        attempt: a.id.0,
        job: a.job.0,
        runner: a.runner.0,
        lease_id: a.lease_id.0,
        fence: a.fence,
        slot_token: a.slot_token,
        state: a.state.as_str().into(),
        lease_expiry: a.lease_expiry,
        outcome: a.outcome.map(|o| o.as_str().into()),
        result_digest: a.result_digest,
        claimed_at: a.claimed_at,
        ended_at: a.ended_at,
    }
}

/// A job's attempts.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/attempts",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    responses(
        (status = 200, description = "the attempts in fence order", body = AttemptList),
        (status = 404, description = "`unknown_project` or `unknown_job` (a job of another project too)", body = ErrorBody)
    )
)]
pub(super) async fn get_attempts(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<PageQuery>,
) -> ApiResult {
    let (after, limit) = query.bounds()?;
    let view = project_job(&state, &project, &job).await?;
    let rows = state
        .0
        .store
        .attempts_page(view.id, after, limit + 1)
        .await?;
    let (rows, next) = page(rows, limit, |a| a.fence);
    ok(AttemptList {
        attempts: rows.into_iter().map(attempt_body).collect(),
        next,
    })
}

pub(super) fn observation_body(o: ObservationView) -> ObservationBody {
    ObservationBody {
        id: o.id,
        kind: o.kind.as_str().into(),
        runner: o.named.runner.0,
        named_job: o.named.job.0,
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

/// A job's observations (the ledger of runner messages).
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/observations",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    responses(
        (status = 200, description = "every recorded runner message, in receipt order", body = ObservationList),
        (status = 404, description = "`unknown_project` or `unknown_job` (a job of another project too)", body = ErrorBody)
    )
)]
pub(super) async fn get_observations(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<PageQuery>,
) -> ApiResult {
    let (after, limit) = query.bounds()?;
    let view = project_job(&state, &project, &job).await?;
    let rows = state
        .0
        .store
        .observations_page(view.id, after, limit + 1)
        .await?;
    let (rows, next) = page(rows, limit, |o| o.id);
    ok(ObservationList {
        observations: rows.into_iter().map(observation_body).collect(),
        next,
    })
}

/// The project's security log: what its runners sent naming another project's job, or none
/// (docs/protocol.md §7), never listed in that job's ledger.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/security-log",
    tag = "operator",
    security(("operator_token" = [])),
    params(
        ("project" = Uuid, Path, description = "the project id"),
        ("limit" = Option<i64>, Query, description = "page size, 1 to 1000 (default 100)"),
        ("after" = Option<i64>, Query, description = "the previous page's `next` cursor")
    ),
    responses(
        (status = 200, description = "one page of what the project's runners sent naming a job that is not the project's, in receipt order", body = ObservationList),
        (status = 400, description = "`bad_request`: a limit outside 1 to 1000 or a negative cursor", body = ErrorBody),
        (status = 404, description = "`unknown_project`", body = ErrorBody)
    )
)]
pub(super) async fn get_security_log(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    QueryParams(query): QueryParams<PageQuery>,
) -> ApiResult {
    let (after, limit) = query.bounds()?;
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let rows = state
        .0
        .store
        .security_log(project, after, limit + 1)
        .await?;
    let (rows, next) = page(rows, limit, |o| o.id);
    ok(ObservationList {
        observations: rows.into_iter().map(observation_body).collect(),
        next,
    })
}

/// A job's reconciliations.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/reconciliations",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    responses(
        (status = 200, description = "the reconciliations", body = ReconciliationList),
        (status = 404, description = "`unknown_project` or `unknown_job` (a job of another project too)", body = ErrorBody)
    )
)]
pub(super) async fn get_reconciliations(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<PageQuery>,
) -> ApiResult {
    let (after, limit) = query.bounds()?;
    let view = project_job(&state, &project, &job).await?;
    let list = state
        .0
        .store
        .reconciliations_page(view.id, after, limit + 1)
        .await?;
    let (list, next) = page(list, limit, |r| r.id);
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
        next,
    })
}

#[derive(Deserialize)]
pub(super) struct AttemptQuery {
    attempt: Option<String>,
}

/// The attempt a log or artifact read means: the one named, else the current one, else the
/// latest.
pub(super) async fn chosen_attempt(
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

/// An attempt's log.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/logs",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id"), ("attempt" = Option<Uuid>, Query, description = "the attempt; default: the current one, else the latest")),
    responses(
        (status = 200, description = "the log of the chosen attempt", body = String, content_type = "text/plain"),
        (status = 404, description = "`unknown_job` or `unknown_attempt`", body = ErrorBody)
    )
)]
pub(super) async fn get_logs(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<AttemptQuery>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let attempt = chosen_attempt(&state, &view, &query).await?;
    // Streamed in pages: memory bounded whatever the log's size (app/log_stream.rs).
    let body = super::log_stream::body(&state, attempt, super::log_stream::Shape::Text);
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

/// An attempt's log chunk by chunk, each with its sequence number (`GET .../logs` joins them).
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/log-chunks",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id"), ("attempt" = Option<Uuid>, Query, description = "the attempt; default: the current one, else the latest")),
    responses(
        (status = 200, description = "the chosen attempt's log chunks, in sequence order", body = Vec<LogChunkBody>),
        (status = 404, description = "`unknown_job` (a job of another project too) or `unknown_attempt`", body = ErrorBody)
    )
)]
pub(super) async fn get_log_chunks(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, job)): Segments<(String, String)>,
    QueryParams(query): QueryParams<AttemptQuery>,
) -> ApiResult {
    let view = project_job(&state, &project, &job).await?;
    let attempt = chosen_attempt(&state, &view, &query).await?;
    // Streamed in pages: memory bounded whatever the log's size (app/log_stream.rs); the same
    // JSON array of `LogChunkBody` as before.
    let body = super::log_stream::body(&state, attempt, super::log_stream::Shape::Chunks);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// A project's cache entry, with the attempt (and its job) that stored it last.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/cache/{key}",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("key" = String, Path, description = "the cache key")),
    responses(
        (status = 200, description = "the entry and who stored it last", body = CacheEntryBody),
        (status = 404, description = "`unknown_project` or `not_found` (no entry with this key in this project)", body = ErrorBody)
    )
)]
pub(super) async fn get_cache_entry(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, key)): Segments<(String, String)>,
) -> ApiResult {
    identifier(&key, "the cache key")?;
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    match state.0.store.cache_entry(project, &key).await? {
        Some(entry) => ok(CacheEntryBody {
            key,
            content_base64: B64.encode(&entry.content),
            sha256: entry.content_sha256,
            stored_by_attempt: entry.stored_by_attempt.0,
            stored_by_job: entry.stored_by_job.map(|j| j.0),
            stored_at: entry.stored_at,
        }),
        None => Err(ApiError::not_found("not_found", "no such cache entry")),
    }
}

/// An artifact of an attempt.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/jobs/{job}/artifacts/{name}",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id"), ("name" = String, Path, description = "the artifact name"), ("attempt" = Option<Uuid>, Query, description = "the attempt; default: the current one, else the latest")),
    responses(
        (status = 200, description = "the artifact's bytes", body = BinaryBody, content_type = "application/octet-stream"),
        (status = 404, description = "`unknown_job`, `unknown_attempt` or `not_found` (no such artifact)", body = ErrorBody)
    )
)]
pub(super) async fn get_artifact(
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
#[derive(Default, Deserialize, utoipa::ToSchema)]
pub(super) struct EmptyRequest {}

/// R6 `cancel`.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/jobs/{job}/cancel",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "accepted or acknowledged", body = VerdictResponse),
        (status = 409, description = "rejected: `unknown_job`, `wrong_project`, `job_finished` or `reconcile_required`", body = ErrorBody)
    )
)]
pub(super) async fn cancel(
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

/// R7 `reconcile`: the operator's finding about an uncertain job and the decision.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/jobs/{job}/reconcile",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id"), ("job" = Uuid, Path, description = "the job id")),
    request_body = ReconcileRequest,
    responses(
        (status = 200, description = "accepted or acknowledged", body = VerdictResponse),
        (status = 409, description = "rejected: `unknown_job`, `wrong_project`, `not_uncertain`, `execution_not_stopped`, `nothing_to_adopt` or `cancel_requested`", body = ErrorBody)
    )
)]
pub(super) async fn reconcile(
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
