//! Request slots shared fairly between projects (issue 30, item 5): the payload budget
//! (budget.rs) bounds the bytes one project's payload requests hold, not how many requests it
//! keeps in flight; a project whose runners flood the control routes (claims, heartbeats,
//! results) could hold every request the server serves at once, and every database connection
//! with them, and the other projects' requests would wait behind them. Every request to a `/v1/`
//! route takes one of the server's request slots (`--max-requests-in-flight`) before it is
//! handled and gives it back with its answer; one account (a project's runners together, the
//! operator, or requests that authenticate neither) holds at most its share of them
//! (`--request-project-share`, half by default). A request past either is answered at once
//! `503 request_slots_exhausted` with `Retry-After: 1`, which the runner retries like any 503
//! (docs/http.md, "Request slots"). `/healthz`, `/metrics` and `/openapi.json` take no slot.

use super::error::ApiError;
use super::extract::bearer;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasewright_impl::ProjectId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The default number of requests served at once: 1024.
pub const DEFAULT_MAX_REQUESTS_IN_FLIGHT: usize = 1024;

/// The default share of the request slots one account may hold: half.
pub const DEFAULT_REQUEST_PROJECT_SHARE: f64 = 0.5;

/// Whose slots a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Account {
    /// The runners of one project.
    Project(ProjectId),
    /// The operator token.
    Operator,
    /// Requests that authenticate neither (refused 401 by the route, or unauthenticated routes).
    Other,
}

/// The request slots of one server.
#[derive(Clone)]
pub(super) struct RequestSlots {
    state: AppState,
    total: usize,
    share: usize,
    /// Slots held, in all and per account (an account holding none has no entry).
    held: Arc<Mutex<(usize, HashMap<Account, usize>)>>,
}

impl RequestSlots {
    pub(super) fn new(state: AppState, total: usize, share: f64) -> Self {
        let total = total.max(1);
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let share = ((total as f64 * share) as usize).clamp(1, total);
        Self {
            state,
            total,
            share,
            held: Arc::default(),
        }
    }

    async fn account(&self, headers: &axum::http::HeaderMap) -> Result<Account, ApiError> {
        let Some(token) = bearer(headers) else {
            return Ok(Account::Other);
        };
        if self.state.is_operator_token(token) {
            return Ok(Account::Operator);
        }
        Ok(match self.state.project_of_token(token).await? {
            Some(project) => Account::Project(project),
            None => Account::Other,
        })
    }
}

/// A slot, given back when the request's answer is made (or the request abandoned).
struct Slot {
    slots: RequestSlots,
    account: Account,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().expect("request slots");
        held.0 = held.0.saturating_sub(1);
        if let Some(n) = held.1.get_mut(&self.account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.1.remove(&self.account);
            }
        }
        drop(held);
        self.slots.state.0.metrics.requests_in_flight(-1);
    }
}

fn exhausted(message: &'static str) -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "request_slots_exhausted",
        message,
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Admit a `/v1/` request if its account is below its share and a slot is free; hold the slot
/// until the answer is made.
pub(super) async fn admit(
    State(slots): State<RequestSlots>,
    request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let account = match slots.account(request.headers()).await {
        Ok(account) => account,
        Err(error) => return error.into_response(),
    };
    let slot = {
        let mut held = slots.held.lock().expect("request slots");
        let mine = held.1.get(&account).copied().unwrap_or(0);
        if mine >= slots.share {
            drop(held);
            return exhausted(
                "this project's share of the requests served at once is in use; retry",
            );
        }
        if held.0 >= slots.total {
            drop(held);
            return exhausted("too many requests are being served at once; retry");
        }
        held.0 += 1;
        *held.1.entry(account).or_insert(0) += 1;
        slots.state.0.metrics.requests_in_flight(1);
        Slot {
            slots: slots.clone(),
            account,
        }
    };
    let response = next.run(request).await;
    drop(slot);
    response
}
