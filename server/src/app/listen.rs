//! The HTTP listener: HTTP/1.1 connections with the limits a slow or hostile client needs
//! (docs/http.md, "Connection limits").

use super::error::ApiError;
use axum::body::Bytes;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{BoxError, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt as _;

/// Timeouts and caps of the HTTP connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's headers, from the connection's start or
    /// the end of its previous answer: so also how long an idle keep-alive connection stays open.
    pub header_read_timeout: Duration,
    /// How long a request body may stall between two of its chunks.
    pub body_read_timeout: Duration,
    /// The longest one request may take, from its headers to its answer (not a test hook's:
    /// [`TEST_HOOKS`]).
    pub request_timeout: Duration,
    /// The most connections open at once (further ones wait in the listen backlog); never more
    /// than the process's open-file limit leaves room for.
    pub max_connections: usize,
    /// The most requests one connection carries; the last answer closes it.
    pub max_requests_per_connection: u64,
    /// How long, once the server is told to stop (SIGTERM), the requests under way may take to
    /// finish; a request still running then is answered `503 shutting_down` (with
    /// `Retry-After`: it got no decision it can rely on, and every runner message is
    /// idempotent), and every connection is closed within [`SHUTDOWN_WRITE_MARGIN`] more.
    pub shutdown_grace: Duration,
}

/// The test hooks' paths (routed only on a `--manual-clock` server; elsewhere they answer 404 at
/// once). They work on the whole database (a failover's copy and restore, a whole audit, a prune
/// of every finished job), so [`ConnectionLimits::request_timeout`], which bounds the API's
/// requests, does not bound them; [`TEST_HOOK_TIMEOUT`] does.
const TEST_HOOKS: &str = "/v1/test/";

/// The longest a test hook may take.
const TEST_HOOK_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// How long the answers of a shutdown may take to be written once the grace is over.
pub const SHUTDOWN_WRITE_MARGIN: Duration = Duration::from_secs(1);

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_requests_per_connection: 1000,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// The error of a request body that stalled past [`ConnectionLimits::body_read_timeout`].
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled past the read timeout")]
pub(super) struct BodyReadTimeout;

/// A request body that fails with [`BodyReadTimeout`] when no chunk arrives for `idle`.
struct IdleTimeoutBody<B> {
    inner: B,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleTimeoutBody<B> {
    fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

impl<B> http_body::Body for IdleTimeoutBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.idle;
                this.deadline.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyReadTimeout)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The most connections the open-file limit leaves room for (a reserve for the database pool,
/// logs and the listener), or `wanted` if that is fewer.
fn connection_cap(wanted: usize) -> usize {
    const RESERVE: u64 = 256;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    match limit {
        Some(limit) => {
            let room = usize::try_from(limit.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
            wanted.min(room.max(16))
        }
        None => wanted,
    }
}

/// The longest a request to `path` may take: [`TEST_HOOK_TIMEOUT`] for a test hook, otherwise
/// [`ConnectionLimits::request_timeout`].
fn request_timeout(path: &str, limits: &ConnectionLimits) -> Duration {
    match path.starts_with(TEST_HOOKS) {
        true => TEST_HOOK_TIMEOUT,
        false => limits.request_timeout,
    }
}

/// The answer to a request that ran past [`ConnectionLimits::request_timeout`].
fn request_timeout_response() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "request_timeout",
        "the request did not finish within the server's request timeout; its outcome is unknown",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The answer to a request still running when the shutdown grace ran out.
fn shutting_down_response() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
        "the server is shutting down and this request did not finish within its grace; its \
         outcome is unknown: retry against a running server",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Serve `app` on `listener` until `shutdown` resolves; then accept nothing more, close every
/// idle connection, let the requests under way finish for at most
/// [`ConnectionLimits::shutdown_grace`], answer those still running `503 shutting_down`, and
/// return within [`SHUTDOWN_WRITE_MARGIN`] more: the whole shutdown is bounded by the grace
/// plus the margin, whatever the clients do.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let cap = connection_cap(limits.max_connections.max(1));
    let permits = Arc::new(Semaphore::new(cap));
    let (closing_tx, closing_rx) = watch::channel(false);
    let (expired_tx, expired_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(connection(
            stream,
            app.clone(),
            limits,
            (closing_rx.clone(), expired_rx.clone()),
            permit,
        ));
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let open = connections.len();
    closing_tx.send_replace(true);
    {
        let drained = async { while connections.join_next().await.is_some() {} };
        tokio::pin!(drained);
        if tokio::time::timeout(limits.shutdown_grace, &mut drained)
            .await
            .is_err()
        {
            tracing::warn!(
                grace_ms = limits.shutdown_grace.as_millis() as u64,
                "shutdown: requests still running after the grace are answered 503 shutting_down"
            );
            expired_tx.send_replace(true);
            let _ = tokio::time::timeout(SHUTDOWN_WRITE_MARGIN, &mut drained).await;
        }
    }
    connections.abort_all();
    tracing::info!(connections = open, "shutdown: every connection closed");
    Ok(())
}

/// One connection: hyper's HTTP/1.1 with a header read timeout (which also ends an idle
/// kept-alive connection), a body idle timeout, a request timeout and a request count.
async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    limits: ConnectionLimits,
    (mut closing, expired): (watch::Receiver<bool>, watch::Receiver<bool>),
    _permit: OwnedSemaphorePermit,
) {
    let served = Arc::new(AtomicU64::new(0));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let app = app.clone();
        let mut expired = expired.clone();
        let count = served.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let request = request.map(|body| IdleTimeoutBody::new(body, limits.body_read_timeout));
            let timeout = request_timeout(request.uri().path(), &limits);
            let answer = tokio::time::timeout(timeout, app.oneshot(request));
            let mut response = tokio::select! {
                answer = answer => match answer {
                    Ok(Ok(response)) => response,
                    Ok(Err(never)) => match never {},
                    Err(_) => request_timeout_response(),
                },
                // The shutdown's grace ran out (a closed channel: the server is gone).
                _ = expired.wait_for(|expired| *expired) => shutting_down_response(),
            };
            if count >= limits.max_requests_per_connection {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended");
            }
            return;
        }
        _ = closing.wait_for(|closing| *closing) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_hooks_are_bounded_by_their_own_timeout_and_every_other_route_by_the_limit() {
        let limits = ConnectionLimits {
            request_timeout: Duration::from_millis(5),
            ..ConnectionLimits::default()
        };
        for hook in ["/v1/test/prune", "/v1/test/audit", "/v1/test/failover"] {
            assert_eq!(request_timeout(hook, &limits), TEST_HOOK_TIMEOUT, "{hook}");
        }
        for route in [
            "/v1/projects",
            "/v1/runner/claim",
            "/v1/testing",
            "/healthz",
        ] {
            assert_eq!(
                request_timeout(route, &limits),
                limits.request_timeout,
                "{route}"
            );
        }
    }
}
