//! The operator routes that move time: the expiry sweep and (test mode only) the manual clock.

use super::error::{ok, ApiError, ApiResult};
use super::extract::{JsonBody, OperatorAuth, OptionalJsonBody};
use super::projects::project_exists;
use super::AppState;
use crate::wire::{
    ClockRequest, ClockResponse, ErrorBody, SweepRequest, SweepResponse, TEST_TIME_HEADER,
};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use leasewright_impl::{Clock, ManualClock, SweepVerdict};

/// R4 `expiry sweep`, over every project or one.
#[utoipa::path(
    post,
    path = "/v1/sweep",
    tag = "operator",
    security(("operator_token" = [])),
    request_body(content = Option<SweepRequest>, description = "`{}`, `{\"project\"}` or no body"),
    responses(
        (status = 200, description = "`uncertain` with the jobs that became uncertain, or `accepted` with none", body = SweepResponse),
        (status = 404, description = "`unknown_project`", body = ErrorBody)
    )
)]
pub(super) async fn sweep(
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

/// The test hook: set or advance the manual clock (only with `serve --manual-clock`).
#[utoipa::path(
    post,
    path = "/v1/test/clock",
    tag = "test",
    security(("operator_token" = [])),
    request_body = ClockRequest,
    responses(
        (status = 200, description = "the server's time after the move", body = ClockResponse),
        (status = 404, description = "`not_found`: the server does not run with `--manual-clock`", body = ErrorBody)
    )
)]
pub(super) async fn test_clock(
    State(state): State<AppState>,
    _: OperatorAuth,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<ClockRequest>,
) -> ApiResult {
    let clock = manual_clock(&state)?;
    if headers.contains_key(TEST_TIME_HEADER) {
        // A request with a time of its own reads that time (how a driver finds out that the
        // server supports the header) and moves no clock.
        if body.set.is_some() || body.advance_ms.is_some() {
            return Err(ApiError::bad_request(format!(
                "a request with its own time ({TEST_TIME_HEADER}) moves no clock: send `set` or \
                 `advance_ms` without the header"
            )));
        }
        return ok(ClockResponse { now: clock.now() });
    }
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

/// On a manual-clock server only (the layer is not installed otherwise): a request carrying
/// `Leasewright-Test-Time` is handled at that time instead of the shared manual clock's
/// ([`ManualClock::at`]), so that a replay can run several traces on one server at once, each at
/// its own time. A header that is not an RFC 3339 time within the years 1 to 9999 is a 400.
pub(super) async fn request_time(request: Request, next: Next) -> Response {
    let Some(value) = request.headers().get(TEST_TIME_HEADER) else {
        return next.run(request).await;
    };
    let parsed = value
        .to_str()
        .ok()
        .and_then(|text| DateTime::parse_from_rfc3339(text.trim()).ok())
        .map(|at| at.with_timezone(&Utc))
        .filter(|at| (1..=9999).contains(&chrono::Datelike::year(at)));
    match parsed {
        Some(at) => ManualClock::at(at, next.run(request)).await,
        None => ApiError::bad_request(format!(
            "{TEST_TIME_HEADER} must be an RFC 3339 time within the years 1 to 9999"
        ))
        .into_response(),
    }
}

/// The server's manual clock; `404 not_found` when it runs on the system clock: then no test hook
/// (`/v1/test/…`) exists.
pub(super) fn manual_clock(state: &AppState) -> Result<&ManualClock, ApiError> {
    state.0.manual_clock.as_ref().ok_or_else(|| {
        ApiError::not_found("not_found", "the server does not run on a manual clock")
    })
}
