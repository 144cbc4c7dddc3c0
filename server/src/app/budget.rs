//! The bound of payload bytes in flight (issue 15, finding 8): the per-attempt quota bounds what
//! an attempt stores, not what the server holds while it reads bodies. Every payload request
//! (logs, artifacts, cache entries, sources) takes its declared length (its `Content-Length`, else
//! the route's body limit) from one budget before its body is read and gives it back when its
//! answer is made; a request that would go past the budget is answered at once
//! `503 payload_budget_exhausted` with `Retry-After: 1`, which the runner retries like any 503.
//!
//! Shared fairly between projects (issue 30, finding 8): one project's requests together hold at
//! most its share of the budget (`project_share`, half by default), so a project that floods the
//! payload routes (or stalls its uploads until their timeouts) leaves the rest to the others. A
//! request is counted against its sender's project: a runner token's project (as the request
//! slots found it, app/slots.rs: a runner's project never changes); the operator's submissions and requests
//! that authenticate no runner share one more account. A body larger than the share is charged
//! the share in its project's account (it runs alone there) and its whole declared length in the
//! budget, so the bytes held never exceed the budget (docs/http.md, "Payload budget").

use super::error::ApiError;
use super::slots::Caller;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasewright_impl::ProjectId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// The account a payload request is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Account {
    Project(ProjectId),
    /// The operator's submissions and requests that authenticate no runner.
    Other,
}

/// The budget shared by every payload route of one server.
#[derive(Clone)]
pub(super) struct PayloadBudget {
    bytes: Arc<Semaphore>,
    /// Permits are counted in KiB so a 4 GiB budget fits a semaphore's `u32` requests.
    capacity_kib: u32,
    /// The most KiB one account may hold at once.
    share_kib: u32,
    /// What a request without `Content-Length` is charged: the route's body limit.
    body_limit: usize,
    /// KiB held per account (an account holding nothing has no entry).
    held: Arc<Mutex<HashMap<Account, u32>>>,
    /// The server's state, for the bytes-in-flight metric (`None`: the OpenAPI document's
    /// router, which serves nothing).
    state: Option<AppState>,
}

const KIB: usize = 1024;

/// The default share of the payload budget one project may hold: half.
pub const DEFAULT_PROJECT_SHARE: f64 = 0.5;

impl PayloadBudget {
    pub(super) fn new(
        in_flight_bytes: usize,
        body_limit: usize,
        project_share: f64,
        state: Option<AppState>,
    ) -> Self {
        let capacity_kib = u32::try_from(in_flight_bytes.div_ceil(KIB).max(1)).unwrap_or(u32::MAX);
        let share = if project_share.is_finite() {
            project_share.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let share_kib = ((f64::from(capacity_kib) * share) as u32).clamp(1, capacity_kib);
        Self {
            bytes: Arc::new(Semaphore::new(capacity_kib as usize)),
            capacity_kib,
            share_kib,
            body_limit,
            held: Arc::default(),
            state,
        }
    }

    /// The account of a request: its project, as the request slots found it (app/slots.rs,
    /// [`Caller`]), with no database read of its own.
    fn account(&self, request: &Request) -> Account {
        match request.extensions().get::<Caller>() {
            Some(Caller {
                project: Some(project),
                ..
            }) => Account::Project(*project),
            _ => Account::Other,
        }
    }
}

/// An account's KiB, given back when the request's answer is made.
struct Held {
    held: Arc<Mutex<HashMap<Account, u32>>>,
    account: Account,
    kib: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("held");
        if let Some(n) = held.get_mut(&self.account) {
            *n = n.saturating_sub(self.kib);
            if *n == 0 {
                held.remove(&self.account);
            }
        }
    }
}

fn exhausted(message: &'static str) -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "payload_budget_exhausted",
        message,
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Admit a payload request if its bytes fit in the budget and in its project's share; hold them
/// until the answer is made.
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
    let account = budget.account(&request);
    // The account's share first: a project at its share is refused before it takes any of the
    // budget, whatever is free. A body larger than the share is charged the share (alone).
    let share_kib = kib.min(budget.share_kib);
    let held = {
        let mut held = budget.held.lock().expect("held");
        let now = held.get(&account).copied().unwrap_or(0);
        if now + share_kib > budget.share_kib {
            drop(held);
            return exhausted(
                "this project's share of the payload bytes being received at once is in use; retry",
            );
        }
        *held.entry(account).or_insert(0) += share_kib;
        Held {
            held: Arc::clone(&budget.held),
            account,
            kib: share_kib,
        }
    };
    let Ok(permit) = Arc::clone(&budget.bytes).try_acquire_many_owned(kib) else {
        drop(held);
        return exhausted("too many payload bytes are being received at once; retry");
    };
    let in_flight = InFlight::new(budget.state.clone(), kib);
    let response = next.run(request).await;
    drop(in_flight);
    drop(permit);
    drop(held);
    response
}

/// The bytes a request holds, shown by `leasewright_payload_in_flight_bytes` until it is dropped
/// (its answer made, or the request abandoned).
struct InFlight {
    state: Option<AppState>,
    bytes: i64,
}

impl InFlight {
    fn new(state: Option<AppState>, kib: u32) -> Self {
        let bytes = i64::from(kib) * KIB as i64;
        if let Some(state) = &state {
            state.0.metrics.payload_in_flight(bytes);
        }
        Self { state, bytes }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(state) = &self.state {
            state.0.metrics.payload_in_flight(-self.bytes);
        }
    }
}
