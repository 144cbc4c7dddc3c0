//! Errors: the JSON error body, the rejection of a protocol message (409 with its reason code), and
//! the mapping of the Store's typed errors to statuses (docs/http.md). Database internals never
//! reach a caller.

use super::AppState;
use crate::wire::{ErrorBody, ErrorDetail, VerdictResponse};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasewright_impl::{MessageKind, Reason, Verdict};

/// A non-2xx answer: `{"error": {"code", "message"}}` (docs/http.md).
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: String,
    pub(super) message: String,
    pub(super) rejected: bool,
    pub(super) instruction: Option<&'static str>,
    /// `invalid_source`: the rule broken and the offending path.
    pub(super) source_rule: Option<(&'static str, Option<String>)>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            rejected: false,
            instruction: None,
            source_rule: None,
        }
    }

    /// `422 invalid_source`: the archive breaks an extraction rule.
    pub(super) fn invalid_source(error: &crate::source::SourceError) -> Self {
        Self {
            source_rule: Some((error.rule(), error.path().map(str::to_owned))),
            ..Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_source",
                error.to_string(),
            )
        }
    }

    pub(super) fn rejected(reason: Reason) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            code: reason.as_str().to_owned(),
            message: format!("rejected: {}", reason_message(reason)),
            rejected: true,
            instruction: None,
            source_rule: None,
        }
    }

    pub(super) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown bearer token",
        )
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(super) fn not_found(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
}

pub(super) fn reason_message(reason: Reason) -> &'static str {
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
        Reason::NoQueuedJob => "no queued job whose target slot is free",
        Reason::ReconcileRequired => "the job is uncertain: reconcile it",
        Reason::NotUncertain => "the job is not uncertain",
        Reason::ExecutionNotStopped => "nothing may be decided about an execution still running",
        Reason::NothingToAdopt => "no outcome was observed to adopt",
        Reason::StaleFence => "the target has applied a higher slot token",
    }
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(db_error)`
pub(super) fn db_error(error: sqlx::Error) -> ApiError {
    if transient(&error) {
        tracing::error!(%error, "database error");
        database_unavailable()
    } else {
        internal_error(&error)
    }
}

/// Whether a database error says the database could not decide now, so that the same request
/// may succeed later (`503 database_unavailable`, retried): the connection failed or was cut
/// (no SQLSTATE, or class 08), the server is shutting down or starting (57P01-57P03), the
/// transaction lost a serialization or deadlock race (40001, 40P01), the server is out of
/// resources (class 53), a statement or lock timeout (57014, 55P03), or the host is not the
/// primary any more (25006 read-only transaction, or "recovery is in progress" from a standby,
/// after a failover). Everything else (a numeric overflow, a check violation, a permission
/// denied, an undefined table or function, a value the code cannot decode...) is deterministic:
/// the same request fails the same way, so retrying it is no use.
pub(super) fn transient(error: &sqlx::Error) -> bool {
    use sqlx::Error as S;
    match error {
        S::Database(database) => {
            let Some(code) = database.code() else {
                return true;
            };
            let code = code.as_ref();
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(
                    code,
                    "57P01" | "57P02" | "57P03" | "57014" | "40001" | "40P01" | "55P03" | "25006"
                )
                || (code == "55000" && database.message().contains("recovery is in progress"))
        }
        S::Io(_)
        | S::Tls(_)
        | S::Protocol(_)
        | S::PoolTimedOut
        | S::PoolClosed
        | S::WorkerCrashed
        | S::BeginFailed => true,
        _ => false,
    }
}

/// The stable code of a deterministic failure: a bug or a broken database, never the client's
/// fault and never worth a retry. Answered 500 with no `Retry-After` (docs/http.md).
pub(super) const INTERNAL_ERROR: &str = "internal_error";

/// `500 internal_error`, with a log line naming the cause (the database's SQLSTATE and message
/// go to the log, never to the caller).
pub(super) fn internal_error(error: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(%error, "internal error: a deterministic failure, answered 500");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        INTERNAL_ERROR,
        "the server failed deterministically; retrying will not help (the cause is in its log)",
    )
}

/// The stable code of every database failure: the request got no decision (a write cut off
/// mid-commit may or may not have committed: it is neither accepted nor rejected). Answered 503
/// with `Retry-After` (docs/http.md).
pub(super) const DATABASE_UNAVAILABLE: &str = "database_unavailable";

/// How long a client should wait before it retries a `503 database_unavailable`, in seconds.
pub(super) const DATABASE_RETRY_AFTER_SECONDS: &str = "1";

/// `503 database_unavailable`.
pub(super) fn database_unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        DATABASE_UNAVAILABLE,
        "the database is unavailable",
    )
}

impl ApiError {
    /// The answer's message (what a client reads in `error.message`).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<leasewright_impl::Error> for ApiError {
    fn from(error: leasewright_impl::Error) -> Self {
        use leasewright_impl::Error as E;
        match &error {
            E::Database(database) if transient(database) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                DATABASE_UNAVAILABLE,
                error.to_string(),
            ),
            E::Database(database) => {
                // The database's message names the cause (e.g. the epoch out of range).
                let database_error = database.as_database_error();
                tracing::error!(
                    sqlstate = database_error.and_then(|e| e.code()).as_deref().unwrap_or(""),
                    cause = %database,
                    "internal error: a deterministic database failure, answered 500"
                );
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    INTERNAL_ERROR,
                    "the server failed deterministically; retrying will not help (the cause is \
                     in its log)",
                )
            }
            E::Migration(_) | E::Schema(_) | E::OutOfRange(_) | E::Permission(_) => {
                internal_error(&error)
            }
            E::ProjectNameTaken => ApiError::new(
                StatusCode::CONFLICT,
                "project_name_taken",
                error.to_string(),
            ),
            E::RunnerNameTaken => {
                ApiError::new(StatusCode::CONFLICT, "runner_name_taken", error.to_string())
            }
            E::UnknownProject => ApiError::not_found("unknown_project", error.to_string()),
            E::TargetKindMismatch => ApiError::new(
                StatusCode::CONFLICT,
                "target_kind_mismatch",
                error.to_string(),
            ),
            E::InvalidArgument(_) => ApiError::bad_request(error.to_string()),
            E::QuotaExceeded { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                error.to_string(),
            ),
            E::Constraint { .. } | E::Invariant(_) => internal_error(&error),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let database_failed = self.code == DATABASE_UNAVAILABLE;
        let (rule, path) = self
            .source_rule
            .map_or((None, None), |(rule, path)| (Some(rule.to_owned()), path));
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                rule,
                path,
            },
            verdict: self.rejected.then(|| "rejected".to_owned()),
            instruction: self.instruction.map(str::to_owned),
        };
        let mut response = (self.status, Json(body)).into_response();
        if database_failed {
            // No decision was made: retry, after a pause (docs/http.md); the gate wakes the
            // database watcher (app/database.rs).
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(DATABASE_RETRY_AFTER_SECONDS),
            );
            response
                .extensions_mut()
                .insert(super::database::DatabaseFailed);
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of a stalled body may never come: the connection is not reused.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn ok<T: serde::Serialize>(body: T) -> ApiResult {
    Ok(Json(body).into_response())
}

pub(super) fn created<T: serde::Serialize>(body: T) -> ApiResult {
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

impl AppState {
    /// A rejection, counted.
    pub(super) fn reject(&self, kind: &str, reason: Reason) -> ApiError {
        self.0.metrics.rejection(kind, reason.as_str());
        ApiError::rejected(reason)
    }

    /// The answer to a verdict: accepted/acknowledged → 200 via `accepted`; rejected → 409.
    pub(super) fn answer<T>(
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

pub(super) fn plain_verdict<T>(_: Option<T>, verdict: &'static str) -> ApiResult {
    ok(VerdictResponse {
        verdict: verdict.to_owned(),
    })
}
