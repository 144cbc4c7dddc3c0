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
//!
//! Requests that authenticate no one (no bearer token, or one of no runner) share a small share
//! of their own ([`anonymous_share`]: a thirty-second of the slots, at least one), never a
//! project's.
//!
//! A runner token is unauthenticated until proven: a token the database has not verified yet
//! (a runner's first request to this server, or a made-up one) is looked up within a small
//! share of its own, as small as the anonymous one (one of its slots held, and one of its
//! database permits for the lookup itself); only a token the database verified moves its
//! request to its project's share, and one of no runner goes on in the anonymous share. One
//! lookup per token at a time: requests with a token being looked up wait for its verdict
//! holding no slot (a new runner's burst takes one slot, not one each). A
//! verified token is kept (its SHA-256, with its project: [`AppState`]'s `verified_tokens`), so
//! a known runner's later requests take their project's share at once, without the database. A
//! flood of distinct made-up tokens therefore holds at most that small share of the slots and
//! its database connections, however many tokens it makes up; a new runner may meet such a
//! flood there (`503 request_slots_exhausted`, retried) until its first request is through, but
//! never the anonymous requests' stalled bodies (their share is another). What the slots learned
//! of the token ([`Caller`]) goes with the request, so the payload budget and the route's
//! authentication do not look it up again.
//!
//! A share covers the database connections too (issue 36, item 4): the store's pool is shared by
//! every request, and a project within its share of request slots could hold every connection
//! (its statements waiting on a lock, or simply many at once) while another project's heartbeat
//! waited for one. Each account also holds at most its share of the pool's connections
//! ([`database_share`]): a request takes one of its account's database permits before its
//! handler uses the database (a request with a body once its body has been read, so a slow
//! upload holds no permit; one without, before its handler runs) and gives it back with its
//! answer. A request past its account's permits waits for one (it holds its request slot
//! meanwhile, so the wait is bounded by the account's share of slots and the request timeout).

use super::error::ApiError;
use super::extract::{bearer, digest32};
use super::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasewright_impl::{ProjectId, RunnerId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
    /// Runner tokens being looked up in the database: not verified before, so nobody's yet.
    Unverified,
}

/// What the request slots learned of a request's bearer token, kept in the request's extensions
/// for the steps after them (the payload budget, [`RunnerAuth`](super::extract::RunnerAuth)), so
/// that none reads the database for the token again.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caller {
    /// The project whose shares the request takes (`None`: the operator's, or nobody's).
    pub(super) project: Option<ProjectId>,
    /// What the database said of the token when the slots looked it up for this request (the
    /// runner it authenticates; `Some(None)`: none). `None`: not looked up here (no token, the
    /// operator's, or one verified before, whose runner the route still authenticates: it may
    /// have been revoked since).
    pub(super) looked_up: Option<Option<RunnerId>>,
}

/// The slots held by one account, and its database permits.
struct Held {
    slots: usize,
    database: Arc<Semaphore>,
}

/// The request slots of one server.
#[derive(Clone)]
pub(super) struct RequestSlots {
    state: AppState,
    total: usize,
    share: usize,
    /// The share of requests that authenticate no one.
    anonymous: usize,
    /// The database permits of a project's (or the operator's) requests, and of anonymous ones.
    database_share: usize,
    database_anonymous: usize,
    /// Slots held, in all and per account (an account holding none has no entry).
    held: Arc<Mutex<(usize, HashMap<Account, Held>)>>,
    /// The lookups of tokens under way, by the token's SHA-256 ([`RequestSlots::look_up`]).
    lookups: Arc<Mutex<HashMap<[u8; 32], Arc<Lookup>>>>,
}

/// A request refused before it is handled: its answer (boxed: a result's error stays small).
type Refusal = Box<Response>;

/// One token's lookup: its verdict once the database answered.
type Lookup = tokio::sync::OnceCell<Option<(RunnerId, ProjectId)>>;

/// The slots that requests authenticating no one may hold together: a thirty-second of the
/// slots, at least one, never more than a project's share.
pub(super) fn anonymous_share(total: usize, share: usize) -> usize {
    (total / 32).clamp(1, share.max(1))
}

/// The database connections one account's requests may hold at once: its share of the pool
/// (at least one, and at most the pool less one, so that another account always finds one when
/// the pool has two or more).
pub(super) fn database_share(pool: usize, share: f64) -> usize {
    let pool = pool.max(1);
    let wanted = (pool as f64 * share).floor() as usize;
    wanted.clamp(1, pool.saturating_sub(1).max(1))
}

impl RequestSlots {
    pub(super) fn new(state: AppState, total: usize, share: f64) -> Self {
        let total = total.max(1);
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let pool = state.0.store.pool().options().get_max_connections() as usize;
        let database = database_share(pool, share);
        let share_slots = ((total as f64 * share) as usize).clamp(1, total);
        Self {
            state,
            total,
            share: share_slots,
            anonymous: anonymous_share(total, share_slots),
            database_share: database,
            database_anonymous: database_share(pool, 1.0 / 8.0).min(database),
            held: Arc::default(),
            lookups: Arc::default(),
        }
    }

    fn share_of(&self, account: Account) -> usize {
        match account {
            Account::Other | Account::Unverified => self.anonymous,
            Account::Project(_) | Account::Operator => self.share,
        }
    }

    /// Take a slot of `account`, with its database permits: `Err` with the `503` answer when the
    /// account is at its share or every slot is taken.
    fn take(&self, account: Account) -> Result<(Slot, Arc<Semaphore>), Refusal> {
        let mut held = self.held.lock().expect("request slots");
        let mine = held.1.get(&account).map_or(0, |h| h.slots);
        if mine >= self.share_of(account) {
            drop(held);
            return Err(Box::new(exhausted(match account {
                Account::Other => "the share of requests that authenticate no one is in use; retry",
                Account::Unverified => {
                    "the share of requests whose token is being verified is in use; retry"
                }
                Account::Project(_) | Account::Operator => {
                    "this project's share of the requests served at once is in use; retry"
                }
            })));
        }
        if held.0 >= self.total {
            drop(held);
            return Err(Box::new(exhausted(
                "too many requests are being served at once; retry",
            )));
        }
        held.0 += 1;
        let permits = match account {
            Account::Other | Account::Unverified => self.database_anonymous,
            Account::Project(_) | Account::Operator => self.database_share,
        };
        let mine = held.1.entry(account).or_insert_with(|| Held {
            slots: 0,
            database: Arc::new(Semaphore::new(permits)),
        });
        mine.slots += 1;
        let database = Arc::clone(&mine.database);
        self.state.0.metrics.requests_in_flight(1);
        Ok((
            Slot {
                slots: self.clone(),
                account,
            },
            database,
        ))
    }

    /// Look `token` up in the database within the share of tokens being verified (one of its
    /// slots, and one of its database permits, for the lookup itself): the runner it
    /// authenticates and its project. One lookup per token at a time: the requests that come
    /// with the same token meanwhile wait for its verdict holding no slot, so a burst of one new
    /// runner's requests takes one slot, not one each.
    async fn look_up(&self, token: &str) -> Result<Option<(RunnerId, ProjectId)>, Refusal> {
        let key = digest32(token.as_bytes());
        let lookup = Arc::clone(
            self.lookups
                .lock()
                .expect("token lookups")
                .entry(key)
                .or_default(),
        );
        let verdict = lookup
            .get_or_try_init(|| async {
                let (slot, database) = self.take(Account::Unverified)?;
                let Ok(_permit) = database.acquire_owned().await else {
                    return Err(Box::new(exhausted("the server is shutting down; retry")));
                };
                let verdict = self.state.verify_token(token).await;
                drop(slot);
                verdict.map_err(|error| Box::new(error.into_response()))
            })
            .await
            .copied();
        // Done (or refused): the token's next request starts afresh.
        let mut lookups = self.lookups.lock().expect("token lookups");
        if lookups
            .get(&key)
            .is_some_and(|kept| Arc::ptr_eq(kept, &lookup))
        {
            lookups.remove(&key);
        }
        verdict
    }

    /// The slot of a request with these headers, its database permits and what was learned of
    /// its bearer token. A token not verified before is looked up here, within the share of
    /// tokens being verified (one of its slots held, and one of its database permits for the
    /// lookup itself); then a verified one moves to its project's share, and one of no runner
    /// to the share of requests that authenticate no one.
    async fn admit(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Result<(Slot, Arc<Semaphore>, Caller), Refusal> {
        let mut caller = Caller {
            project: None,
            looked_up: None,
        };
        let account = match bearer(headers) {
            None => Account::Other,
            Some(token) if self.state.is_operator_token(token) => Account::Operator,
            Some(token) => match self.state.verified_token(token) {
                Some(project) => {
                    caller.project = Some(project);
                    Account::Project(project)
                }
                None => {
                    let verdict = self.look_up(token).await?;
                    caller.looked_up = Some(verdict.map(|(runner, _)| runner));
                    caller.project = verdict.map(|(_, project)| project);
                    caller.project.map_or(Account::Other, Account::Project)
                }
            },
        };
        let (slot, database) = self.take(account)?;
        Ok((slot, database, caller))
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
        if let Some(mine) = held.1.get_mut(&self.account) {
            mine.slots = mine.slots.saturating_sub(1);
            if mine.slots == 0 {
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
    mut request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let (slot, database, caller) = match slots.admit(request.headers()).await {
        Ok(admitted) => admitted,
        Err(answer) => return *answer,
    };
    request.extensions_mut().insert(caller);
    // The account's database permit: once the body is read (a request with one), or now.
    let permit: Arc<Mutex<Option<OwnedSemaphorePermit>>> = Arc::default();
    let request = if http_body::Body::is_end_stream(request.body()) {
        match Arc::clone(&database).acquire_owned().await {
            Ok(acquired) => *permit.lock().expect("database permit") = Some(acquired),
            Err(_) => return exhausted("the server is shutting down; retry"),
        }
        request
    } else {
        let held = Arc::clone(&permit);
        request.map(|body| {
            Body::new(PermitAtEnd {
                inner: body,
                database,
                acquiring: None,
                held,
            })
        })
    };
    let response = next.run(request).await;
    // The permit goes back with the answer, even if the handler kept the body.
    drop(permit.lock().expect("database permit").take());
    drop(slot);
    response
}

type Acquiring =
    Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>> + Send>>;

/// A request body that, at its end, waits for its account's database permit before it says it
/// has ended: the handler reads its body before it uses the database.
struct PermitAtEnd {
    inner: Body,
    database: Arc<Semaphore>,
    acquiring: Option<Acquiring>,
    held: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl http_body::Body for PermitAtEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.acquiring.is_none() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(None) => {
                    if this.held.lock().expect("database permit").is_some() {
                        return Poll::Ready(None);
                    }
                    this.acquiring = Some(Box::pin(Arc::clone(&this.database).acquire_owned()));
                }
                other => return other,
            }
        }
        let acquiring = this.acquiring.as_mut().expect("acquiring");
        match acquiring.as_mut().poll(cx) {
            Poll::Ready(acquired) => {
                this.acquiring = None;
                if let Ok(acquired) = acquired {
                    *this.held.lock().expect("database permit") = Some(acquired);
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        // Not ended until the permit is held: a reader polls once more, and waits for it.
        self.inner.is_end_stream() && self.held.lock().expect("database permit").is_some()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
