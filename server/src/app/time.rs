//! The operator routes that move time: the expiry sweep and (test mode only) the manual clock.

use super::error::{ok, ApiError, ApiResult};
use super::extract::{JsonBody, OperatorAuth, OptionalJsonBody};
use super::projects::project_exists;
use super::AppState;
use crate::wire::{ClockRequest, ClockResponse, ErrorBody, SweepRequest, SweepResponse};
use axum::extract::State;
use leasewright_impl::{Clock, SweepVerdict};

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
