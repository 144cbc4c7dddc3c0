//! The bound of payload bytes in flight (issue 15, finding 8): the per-attempt quota bounds what
//! an attempt stores, not what the server holds while it reads bodies. Every payload request
//! (logs, artifacts, cache entries, sources) takes its declared length (its `Content-Length`, else
//! the route's body limit) from one budget before its body is read and gives it back when its
//! answer is made; a request that would go past the budget is answered at once
//! `503 payload_budget_exhausted` with `Retry-After: 1`, which the runner retries like any 503.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// The budget shared by every payload route of one server.
#[derive(Clone)]
pub(super) struct PayloadBudget {
    bytes: Arc<Semaphore>,
    /// Permits are counted in KiB so a 4 GiB budget fits a semaphore's `u32` requests.
    capacity_kib: u32,
    /// What a request without `Content-Length` is charged: the route's body limit.
    body_limit: usize,
}

const KIB: usize = 1024;

impl PayloadBudget {
    pub(super) fn new(in_flight_bytes: usize, body_limit: usize) -> Self {
        let capacity_kib = u32::try_from(in_flight_bytes.div_ceil(KIB).max(1)).unwrap_or(u32::MAX);
        Self {
            bytes: Arc::new(Semaphore::new(capacity_kib as usize)),
            capacity_kib,
            body_limit,
        }
    }
}

/// Admit a payload request if its bytes fit in the budget; hold them until the answer is made.
pub(super) async fn admit(
    State(budget): State<PayloadBudget>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(budget.body_limit, |n| n.min(budget.body_limit));
    // A body larger than the whole budget is charged the whole budget: it runs alone.
    let kib = u32::try_from(declared.div_ceil(KIB).max(1))
        .unwrap_or(u32::MAX)
        .min(budget.capacity_kib);
    let Ok(permit) = Arc::clone(&budget.bytes).try_acquire_many_owned(kib) else {
        let mut response = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "payload_budget_exhausted",
            "too many payload bytes are being received at once; retry",
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let response = next.run(request).await;
    drop(permit);
    response
}
