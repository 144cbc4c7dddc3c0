//! Health, metrics, the fallbacks and the request-tracking middleware.

use super::error::{ok, ApiError, ApiResult};
use super::AppState;
use crate::wire::{ClockHealth, DatabaseHealth, HealthResponse};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Instant;

/// Liveness: the server and its database answer, and what that database is (primary or
/// standby, synchronous standbys, epoch).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses(
        (status = 200, description = "the database answers", body = HealthResponse)
    )
)]
pub(super) async fn healthz(State(state): State<AppState>) -> ApiResult {
    let database = super::database::replication_state(&state).await?;
    let policy = super::clock_skew::recorded_policy(state.0.store.pool())
        .await
        .map_err(super::error::db_error)?;
    let millis = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    ok(HealthResponse {
        status: "ok".into(),
        database: Some(DatabaseHealth {
            role: database.role().as_str().to_owned(),
            synchronous_commit: database.synchronous_commit,
            synchronous_standbys: database.synchronous_standbys,
            synchronous_standby_names: database.synchronous_standby_names,
            epoch: database.epoch,
            max_lease_ttl_ms: policy.map(|p| millis(p.max_lease_ttl)),
            max_clock_skew_ms: policy.map(|p| millis(p.max_clock_skew)),
        }),
        clock: state.0.clock_check.as_ref().map(|check| {
            let last = check.last();
            ClockHealth {
                offset_ms: last
                    .map(|o| o.offset.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0),
                round_trip_ms: last.map(|o| o.round_trip.as_secs_f64() * 1000.0),
                max_clock_skew_ms: check.max_clock_skew().as_secs_f64() * 1000.0,
                within_bound: check.within(),
            }
        }),
    })
}

/// Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses(
        (status = 200, description = "the Prometheus text exposition format", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8")
    )
)]
pub(super) async fn metrics(State(state): State<AppState>) -> ApiResult {
    // One query at scrape time for the queue depth and the uncertain jobs (docs/http.md,
    // "Metrics", measured there).
    let depth = state.0.store.queue_depth().await?;
    let uncertain: i64 = depth
        .iter()
        .filter(|(_, state, _)| state == "uncertain")
        .map(|(_, _, jobs)| jobs)
        .sum();
    state.0.metrics.set_queue_depth(&depth);
    let database = super::database::replication_state(&state).await?;
    state.0.metrics.database(
        database.role() == leasewright_impl::hosts::Role::Primary,
        database.synchronous_standbys,
        database.epoch,
    );
    let policy = super::clock_skew::recorded_policy(state.0.store.pool())
        .await
        .map_err(super::error::db_error)?;
    state.0.metrics.lease_policy(
        policy.map(|p| p.max_lease_ttl),
        policy.map(|p| p.max_clock_skew),
    );
    Ok((
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.0.metrics.render(uncertain),
    )
        .into_response())
}

pub(super) async fn fallback() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take this method",
    )
}

pub(super) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
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
