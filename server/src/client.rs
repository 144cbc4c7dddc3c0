//! A small HTTP client for the runner routes ([`RunnerClient`]) and the operator routes
//! ([`OperatorClient`]).

use crate::wire::*;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why a call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer: the server could not be reached, or the connection broke (the message names
    /// the cause: connection refused, TLS, timeout, ...).
    #[error("network: {0}")]
    Network(String),
    /// The server's base URL is not an `http://` or `https://` URL with a host.
    #[error("{0}")]
    InvalidUrl(String),
    /// A protocol rejection (409) with the spec's reason code.
    #[error("rejected: {code}")]
    Rejected {
        code: String,
        instruction: Option<String>,
    },
    /// Any other non-2xx answer.
    #[error("HTTP {status}: {code}: {message}")]
    Http {
        status: u16,
        code: String,
        message: String,
        /// The answer's `Retry-After`, when it gave one in seconds (an HTTP date is ignored: it
        /// would compare the runner's clock with the server's).
        retry_after: Option<Duration>,
    },
}

impl CallError {
    /// Whether the call may succeed if sent again: no answer (refused or reset connection, a
    /// timeout), or an answer that says the server did not decide now: any `5xx` (`503`: the
    /// database is unavailable or the request timed out; `500`: the server failed, possibly
    /// after committing; `502`/`504` from a proxy), `408`, `429`. The outcome of such a call is
    /// unknown. Every other `4xx` is a decision and is not retried.
    pub fn is_transient(&self) -> bool {
        match self {
            CallError::Network(_) => true,
            CallError::Http { status, .. } => matches!(status, 408 | 429 | 500..=599),
            CallError::Rejected { .. } | CallError::InvalidUrl(_) => false,
        }
    }

    /// How long the server asked to be left alone (`Retry-After` in seconds), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CallError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The rejection reason, if this is a protocol rejection.
    pub fn rejection(&self) -> Option<&str> {
        match self {
            CallError::Rejected { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Why an answer copied into a writer ([`Http::get_into`]) stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The call failed, before or while the body arrived.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The writer refused a piece.
    #[error("cannot write the output: {0}")]
    Write(std::io::Error),
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(network)`
fn network(error: reqwest::Error) -> CallError {
    CallError::Network(describe(&error))
}

/// A reqwest error with its cause named: reqwest's own text ("error sending request for url")
/// hides it in the error's source chain, which is walked here: what failed (cannot connect, TLS,
/// timed out, ...), the URL, then every cause down to the operating system's.
pub fn describe(error: &reqwest::Error) -> String {
    let mut causes: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        // hyper and hyper-util repeat their inner error in their own text: keep each once.
        if !causes.iter().any(|seen| seen.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    let detail = if causes.is_empty() {
        error.to_string()
    } else {
        causes.join(": ")
    };
    let lower = detail.to_lowercase();
    let tls = [
        "tls",
        "certificate",
        "handshake",
        "corrupt message",
        "alert",
    ]
    .iter()
    .any(|word| lower.contains(word));
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() && tls {
        "TLS failed"
    } else if error.is_connect() && lower.contains("refused") {
        "connection refused"
    } else if error.is_connect() {
        "cannot connect"
    } else if error.is_builder() {
        "invalid request"
    } else if error.is_decode() || error.is_body() {
        "cannot read the answer"
    } else {
        "request failed"
    };
    match error.url() {
        Some(url) => format!("{what} ({url}): {detail}"),
        None => format!("{what}: {detail}"),
    }
}

/// `base` if it is an `http://` or `https://` URL with a host, else why not.
pub fn check_base_url(base: &str) -> Result<(), CallError> {
    let invalid = |why: &str| {
        CallError::InvalidUrl(format!(
            "invalid server URL {base:?}: {why} (expected http://HOST:PORT or https://HOST:PORT)"
        ))
    };
    let url = reqwest::Url::parse(base).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(&format!(
            "the scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    Ok(())
}

/// The longest `Retry-After` taken at its word: a larger value is read as this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

async fn check(response: reqwest::Response) -> Result<reqwest::Response, CallError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
    let bytes = response.bytes().await.map_err(network)?;
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) if body.verdict.as_deref() == Some("rejected") => Err(CallError::Rejected {
            code: body.error.code,
            instruction: body.instruction,
        }),
        Ok(body) => Err(CallError::Http {
            status: status.as_u16(),
            code: body.error.code,
            message: body.error.message,
            retry_after,
        }),
        Err(_) => Err(CallError::Http {
            status: status.as_u16(),
            code: "unknown".into(),
            message: String::from_utf8_lossy(&bytes).into_owned(),
            retry_after,
        }),
    }
}

/// The log route of the job's current (or latest) attempt, or of `attempt`.
fn logs_path(project: Uuid, job: Uuid, attempt: Option<Uuid>) -> String {
    let query = attempt.map_or_else(String::new, |a| format!("?attempt={a}"));
    format!("/v1/projects/{project}/jobs/{job}/logs{query}")
}

/// `text` as one URL path segment: every byte but RFC 3986's unreserved characters
/// percent-encoded, so that `out/report.txt` stays one segment and `../x` cannot climb. (`.`
/// and `..` alone are dot segments however encoded: callers refuse them.)
pub fn path_segment(text: &str) -> String {
    let mut segment = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    segment
}

/// The shared plumbing: a base URL and a bearer token.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    base: String,
    token: String,
    /// Sent with every request as `Leasewright-Test-Time` when set (test mode only).
    test_time: Option<TestTime>,
    /// Each request's timeout, when shorter than the client's own ([`Http::within`]).
    timeout: Option<Duration>,
    /// The client's own timeout: the most a request and its whole answer may take, except an
    /// answer streamed into a writer ([`Http::get_into`]), which may take as long as it keeps
    /// arriving (no wait for its next piece longer than this).
    total: Duration,
}

/// A replay's own time, shared by the clients of one trace and sent with each of their requests
/// as [`crate::wire::TEST_TIME_HEADER`]: a server on a manual clock handles the request at that
/// time, so several traces can replay on one server at once (docs/http.md, "Test clock").
#[derive(Clone, Debug, Default)]
pub struct TestTime(std::sync::Arc<std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>>);

impl TestTime {
    /// A time to send, standing at `at`.
    pub fn new(at: chrono::DateTime<chrono::Utc>) -> Self {
        let time = Self::default();
        time.set(at);
        time
    }

    /// Moves it to `at`.
    pub fn set(&self, at: chrono::DateTime<chrono::Utc>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
    }

    /// The time it stands at.
    pub fn get(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never printed.
        f.debug_struct("Http")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// A client of `base` (e.g. `http://127.0.0.1:8080`) with bearer `token`.
    pub fn new(base: &str, token: &str, timeout: Duration) -> Result<Self, CallError> {
        check_base_url(base)?;
        // No total timeout on the client itself: each request sets its own ([`Http::with_headers`]),
        // so that a streamed answer is bounded by its silences, not by its size.
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .read_timeout(timeout)
            .build()
            .map_err(network)?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            test_time: None,
            timeout: None,
            total: timeout,
        })
    }

    /// The same client (and connection pool) speaking with another bearer token.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            client: self.client.clone(),
            base: self.base.clone(),
            token: token.to_owned(),
            test_time: self.test_time.clone(),
            timeout: self.timeout,
            total: self.total,
        }
    }

    /// The same client sending `time` with every request (a server on a manual clock handles
    /// each at that time); clients made from it by [`Http::with_token`] send it too.
    pub fn with_test_time(&self, time: TestTime) -> Self {
        Self {
            test_time: Some(time),
            ..self.clone()
        }
    }

    /// The same client (and connection pool) giving each request at most `timeout` (never more
    /// than the client's own timeout).
    pub fn within(&self, timeout: Duration) -> Self {
        Self {
            timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// The request with its bearer token, its timeout and, when set, its test time. `Whole`: the
    /// request and its whole answer within the client's timeout (or the shorter one of
    /// [`Http::within`]); `Streamed`: only a timeout set by [`Http::within`] bounds the whole,
    /// otherwise the answer streams on while no piece is later than the client's timeout.
    fn with_headers(
        &self,
        request: reqwest::RequestBuilder,
        answer: Answer,
    ) -> reqwest::RequestBuilder {
        let request = request.bearer_auth(&self.token);
        let request = match (self.timeout, answer) {
            (Some(timeout), _) => request.timeout(timeout.min(self.total)),
            (None, Answer::Whole) => request.timeout(self.total),
            (None, Answer::Streamed) => request,
        };
        match self.test_time.as_ref().and_then(TestTime::get) {
            Some(at) => request.header(
                crate::wire::TEST_TIME_HEADER,
                at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
            None => request,
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn post_raw<B: Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<reqwest::Response, CallError> {
        let response = self
            .with_headers(
                self.client.post(format!("{}{path}", self.base)),
                Answer::Whole,
            )
            .json(body)
            .send()
            .await
            .map_err(network)?;
        check(response).await
    }

    /// POST a JSON body, parse a JSON answer.
    pub async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, CallError> {
        self.post_raw(path, body)
            .await?
            .json()
            .await
            .map_err(network)
    }

    /// GET a JSON answer.
    pub async fn get<R: DeserializeOwned>(&self, path: &str) -> Result<R, CallError> {
        let bytes = self.get_bytes(path).await?;
        serde_json::from_slice(&bytes).map_err(|e| CallError::Network(e.to_string()))
    }

    /// GET raw bytes.
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, CallError> {
        Ok(self
            .get_response(path, Answer::Whole)
            .await?
            .bytes()
            .await
            .map_err(network)?
            .to_vec())
    }

    /// GET raw bytes into `out`, each piece written as it arrives (one piece held at a time,
    /// whatever the body's size); the number of bytes written. A body cut short (the connection
    /// broke, fewer bytes than announced) is an error, never a shorter answer.
    pub async fn get_into<W: std::io::Write>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<u64, CopyError> {
        let mut response = self.get_response(path, Answer::Streamed).await?;
        let mut written = 0;
        while let Some(piece) = response.chunk().await.map_err(network)? {
            out.write_all(&piece).map_err(CopyError::Write)?;
            written += piece.len() as u64;
        }
        out.flush().map_err(CopyError::Write)?;
        Ok(written)
    }

    /// A GET's answer, checked (a non-2xx answer is its error), its body not yet read.
    async fn get_response(
        &self,
        path: &str,
        answer: Answer,
    ) -> Result<reqwest::Response, CallError> {
        let response = self
            .with_headers(self.client.get(format!("{}{path}", self.base)), answer)
            .send()
            .await
            .map_err(network)?;
        check(response).await
    }
}

/// The route of an artifact; `.` and `..` are refused before any request.
fn artifact_path(
    project: Uuid,
    job: Uuid,
    name: &str,
    attempt: Option<Uuid>,
) -> Result<String, CallError> {
    if name == "." || name == ".." {
        return Err(CallError::Http {
            status: 400,
            code: "bad_request".into(),
            message: "an artifact name cannot be . or ..".into(),
            retry_after: None,
        });
    }
    let name = path_segment(name);
    let query = attempt.map_or_else(String::new, |a| format!("?attempt={a}"));
    Ok(format!(
        "/v1/projects/{project}/jobs/{job}/artifacts/{name}{query}"
    ))
}

/// How a request's answer is read, which decides its timeout ([`Http::with_headers`]).
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// Read whole into memory: the request and its answer within one timeout.
    Whole,
    /// Copied into a writer as it arrives: bounded by its silences.
    Streamed,
}

/// What a source download brought.
#[derive(Clone, Debug)]
pub struct SourceDownload {
    pub blob_sha256: Option<String>,
    pub source_digest: Option<String>,
    pub source_revision: Option<String>,
    pub bytes: u64,
}

/// The runner routes.
#[derive(Clone, Debug)]
pub struct RunnerClient {
    pub http: Http,
}

impl RunnerClient {
    pub fn new(base: &str, token: &str, timeout: Duration) -> Result<Self, CallError> {
        Ok(Self {
            http: Http::new(base, token, timeout)?,
        })
    }

    /// The same client (and connection pool) giving each request at most `timeout`.
    pub fn within(&self, timeout: Duration) -> Self {
        Self {
            http: self.http.within(timeout),
        }
    }

    /// `claim`: the leases granted (empty when `no_queued_job`).
    pub async fn claim(&self, capacity: u32) -> Result<Vec<LeaseBody>, CallError> {
        let request = ClaimRequest {
            capacity: Some(capacity),
            runner_time: Some(chrono::Utc::now()),
        };
        match self
            .http
            .post::<_, ClaimResponse>("/v1/runner/claim", &request)
            .await
        {
            Ok(response) => Ok(response.leases),
            Err(CallError::Rejected { code, .. }) if code == "no_queued_job" => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    pub async fn heartbeat(&self, tuple: &TupleBody) -> Result<HeartbeatResponse, CallError> {
        self.http.post("/v1/runner/heartbeat", tuple).await
    }

    pub async fn rejoin(&self, tuple: &TupleBody) -> Result<RejoinResponse, CallError> {
        self.http.post("/v1/runner/rejoin", tuple).await
    }

    /// `source fetch`, streamed into the file `dest`.
    pub async fn source_to_file(
        &self,
        tuple: &TupleBody,
        dest: &Path,
        max_bytes: u64,
    ) -> Result<SourceDownload, CallError> {
        let mut response = self.http.post_raw("/v1/runner/source", tuple).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let mut download = SourceDownload {
            blob_sha256: header("x-leasewright-blob-sha256"),
            source_digest: header("x-leasewright-source-digest"),
            source_revision: header("x-leasewright-source-revision"),
            bytes: 0,
        };
        let io = |e: std::io::Error| CallError::Network(format!("writing the source: {e}"));
        let mut file = tokio::fs::File::create(dest).await.map_err(io)?;
        while let Some(chunk) = response.chunk().await.map_err(network)? {
            download.bytes += chunk.len() as u64;
            if download.bytes > max_bytes {
                return Err(CallError::Network(
                    "the source archive exceeds the runner's limit".into(),
                ));
            }
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.flush().await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
        Ok(download)
    }

    /// `source fetch` into memory: the snapshot's bytes (for small sources, such as a
    /// conformance trace's).
    pub async fn source(&self, tuple: &TupleBody) -> Result<Vec<u8>, CallError> {
        let response = self.http.post_raw("/v1/runner/source", tuple).await?;
        Ok(response.bytes().await.map_err(network)?.to_vec())
    }

    pub async fn log_append(
        &self,
        tuple: &TupleBody,
        seq: i64,
        content: &[u8],
    ) -> Result<VerdictResponse, CallError> {
        let body = LogAppendRequest {
            tuple: *tuple,
            seq,
            content_base64: B64.encode(content),
        };
        self.http.post("/v1/runner/logs", &body).await
    }

    pub async fn artifact_put(
        &self,
        tuple: &TupleBody,
        name: &str,
        content: &[u8],
    ) -> Result<VerdictResponse, CallError> {
        let body = PutRequest {
            tuple: *tuple,
            name: name.into(),
            content_base64: B64.encode(content),
        };
        self.http.post("/v1/runner/artifacts/put", &body).await
    }

    pub async fn artifact_get(&self, tuple: &TupleBody, name: &str) -> Result<Vec<u8>, CallError> {
        let body = GetRequest {
            tuple: *tuple,
            name: name.into(),
        };
        let response: GetResponse = self.http.post("/v1/runner/artifacts/get", &body).await?;
        B64.decode(response.content_base64)
            .map_err(|e| CallError::Network(e.to_string()))
    }

    pub async fn cache_put(
        &self,
        tuple: &TupleBody,
        key: &str,
        content: &[u8],
    ) -> Result<VerdictResponse, CallError> {
        let body = PutRequest {
            tuple: *tuple,
            name: key.into(),
            content_base64: B64.encode(content),
        };
        self.http.post("/v1/runner/cache/put", &body).await
    }

    pub async fn cache_get(&self, tuple: &TupleBody, key: &str) -> Result<Vec<u8>, CallError> {
        let body = GetRequest {
            tuple: *tuple,
            name: key.into(),
        };
        let response: GetResponse = self.http.post("/v1/runner/cache/get", &body).await?;
        B64.decode(response.content_base64)
            .map_err(|e| CallError::Network(e.to_string()))
    }

    pub async fn result(
        &self,
        tuple: &TupleBody,
        outcome: &str,
        result_digest: &str,
    ) -> Result<VerdictResponse, CallError> {
        let body = ResultRequest {
            tuple: *tuple,
            outcome: outcome.into(),
            result_digest: result_digest.into(),
        };
        self.http.post("/v1/runner/result", &body).await
    }

    /// Several results at once (`POST /v1/runner/results`): one answer per item, in order.
    pub async fn results(
        &self,
        items: &[(TupleBody, String, String)],
    ) -> Result<Vec<ResultAnswer>, CallError> {
        let body = ResultsRequest {
            results: items
                .iter()
                .map(|(tuple, outcome, result_digest)| ResultRequest {
                    tuple: *tuple,
                    outcome: outcome.clone(),
                    result_digest: result_digest.clone(),
                })
                .collect(),
        };
        let response: ResultsResponse = self.http.post("/v1/runner/results", &body).await?;
        Ok(response.results)
    }
}

/// The operator routes.
#[derive(Clone, Debug)]
pub struct OperatorClient {
    pub http: Http,
}

impl OperatorClient {
    pub fn new(base: &str, token: &str) -> Result<Self, CallError> {
        Self::with_timeout(base, token, Duration::from_secs(60))
    }

    /// A client whose requests and answers may each take up to `timeout` (the test hooks' whole-
    /// database work: [`OperatorClient::prune_hook`] on a database holding a whole suite's jobs).
    pub fn with_timeout(base: &str, token: &str, timeout: Duration) -> Result<Self, CallError> {
        Ok(Self {
            http: Http::new(base, token, timeout)?,
        })
    }

    pub async fn create_project(&self, name: &str) -> Result<Uuid, CallError> {
        let body = CreateProjectRequest { name: name.into() };
        let response: ProjectResponse = self.http.post("/v1/projects", &body).await?;
        Ok(response.project)
    }

    pub async fn create_runner(
        &self,
        project: Uuid,
        name: &str,
    ) -> Result<RunnerResponse, CallError> {
        let body = CreateRunnerRequest { name: name.into() };
        self.http
            .post(&format!("/v1/projects/{project}/runners"), &body)
            .await
    }

    pub async fn submit(
        &self,
        project: Uuid,
        request: &SubmitJobRequest,
    ) -> Result<SubmitJobResponse, CallError> {
        self.http
            .post(&format!("/v1/projects/{project}/jobs"), request)
            .await
    }

    /// Every job of the project, in submission order (every page).
    pub async fn jobs(&self, project: Uuid) -> Result<Vec<JobBody>, CallError> {
        let path = format!("/v1/projects/{project}/jobs");
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let list: JobList = self.http.get(&page_path(&path, after, None)).await?;
            all.extend(list.jobs);
            match list.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// One page of the project's jobs in submission order: at most `limit` (the server's
    /// default without one) after the cursor `after`, only those in `state` when given.
    pub async fn jobs_page(
        &self,
        project: Uuid,
        state: Option<&str>,
        after: Option<i64>,
        limit: Option<i64>,
    ) -> Result<JobList, CallError> {
        let mut path = page_path(&format!("/v1/projects/{project}/jobs"), after, limit);
        if let Some(state) = state {
            let separator = if path.contains('?') { '&' } else { '?' };
            path = format!("{path}{separator}state={}", path_segment(state));
        }
        self.http.get(&path).await
    }

    /// One page of the project's runners in creation order (revoked ones too): at most `limit`
    /// (the server's default without one) after the cursor `after`.
    pub async fn runners_page(
        &self,
        project: Uuid,
        after: Option<i64>,
        limit: Option<i64>,
    ) -> Result<RunnerList, CallError> {
        self.http
            .get(&page_path(
                &format!("/v1/projects/{project}/runners"),
                after,
                limit,
            ))
            .await
    }

    /// Revoke a runner of the project: its token authenticates nothing from now on.
    pub async fn revoke_runner(
        &self,
        project: Uuid,
        runner: Uuid,
    ) -> Result<RunnerBody, CallError> {
        self.http
            .post(
                &format!("/v1/projects/{project}/runners/{runner}/revoke"),
                &serde_json::json!({}),
            )
            .await
    }

    pub async fn job(&self, project: Uuid, job: Uuid) -> Result<JobBody, CallError> {
        self.http
            .get(&format!("/v1/projects/{project}/jobs/{job}"))
            .await
    }

    /// Every attempt of the job, in fence order (every page).
    pub async fn attempts(&self, project: Uuid, job: Uuid) -> Result<Vec<AttemptBody>, CallError> {
        let path = format!("/v1/projects/{project}/jobs/{job}/attempts");
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let list: AttemptList = self.http.get(&page_path(&path, after, None)).await?;
            all.extend(list.attempts);
            match list.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// The job's ledger of observations, in the order received (every page).
    pub async fn observations(
        &self,
        project: Uuid,
        job: Uuid,
    ) -> Result<Vec<ObservationBody>, CallError> {
        self.all_observations(&format!("/v1/projects/{project}/jobs/{job}/observations"))
            .await
    }

    /// The project's security log: what its runners sent naming another project's job, or none
    /// (every page).
    pub async fn security_log(&self, project: Uuid) -> Result<Vec<ObservationBody>, CallError> {
        self.all_observations(&format!("/v1/projects/{project}/security-log"))
            .await
    }

    /// One page of a list of observations (`path`: a job's observations or a security log).
    pub async fn observation_page(
        &self,
        path: &str,
        after: Option<i64>,
        limit: Option<i64>,
    ) -> Result<ObservationList, CallError> {
        self.http.get(&page_path(path, after, limit)).await
    }

    async fn all_observations(&self, path: &str) -> Result<Vec<ObservationBody>, CallError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let list = self.observation_page(path, after, None).await?;
            all.extend(list.observations);
            match list.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// The log of the job's current (or latest) attempt, or of `attempt`.
    pub async fn logs(
        &self,
        project: Uuid,
        job: Uuid,
        attempt: Option<Uuid>,
    ) -> Result<Vec<u8>, CallError> {
        self.http.get_bytes(&logs_path(project, job, attempt)).await
    }

    /// The same log written into `out` piece by piece as it arrives (memory bounded by a piece,
    /// not by the log, which may reach the attempt quota); the number of bytes written.
    pub async fn logs_into<W: std::io::Write>(
        &self,
        project: Uuid,
        job: Uuid,
        attempt: Option<Uuid>,
        out: &mut W,
    ) -> Result<u64, CopyError> {
        self.http
            .get_into(&logs_path(project, job, attempt), out)
            .await
    }

    /// An artifact of the job's current (or latest) attempt.
    pub async fn artifact(
        &self,
        project: Uuid,
        job: Uuid,
        name: &str,
    ) -> Result<Vec<u8>, CallError> {
        self.artifact_of(project, job, name, None).await
    }

    /// An artifact of the job's current (or latest) attempt, or of `attempt`.
    pub async fn artifact_of(
        &self,
        project: Uuid,
        job: Uuid,
        name: &str,
        attempt: Option<Uuid>,
    ) -> Result<Vec<u8>, CallError> {
        self.http
            .get_bytes(&artifact_path(project, job, name, attempt)?)
            .await
    }

    /// The same artifact written into `out` as it arrives; the number of bytes written.
    pub async fn artifact_into<W: std::io::Write>(
        &self,
        project: Uuid,
        job: Uuid,
        name: &str,
        attempt: Option<Uuid>,
        out: &mut W,
    ) -> Result<u64, CopyError> {
        self.http
            .get_into(&artifact_path(project, job, name, attempt)?, out)
            .await
    }

    /// The job's reconciliations, in the order recorded (every page), as the route answers them.
    pub async fn reconciliations(
        &self,
        project: Uuid,
        job: Uuid,
    ) -> Result<Vec<serde_json::Value>, CallError> {
        let path = format!("/v1/projects/{project}/jobs/{job}/reconciliations");
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let mut page: serde_json::Value = self.http.get(&page_path(&path, after, None)).await?;
            if let Some(list) = page["reconciliations"].as_array_mut() {
                all.append(list);
            }
            match page["next"].as_i64() {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// The same chunks' JSON array written into `out` as it arrives (each entry carries its
    /// chunk, so the answer grows with the log); the number of bytes written.
    pub async fn log_chunks_into<W: std::io::Write>(
        &self,
        project: Uuid,
        job: Uuid,
        attempt: Option<Uuid>,
        out: &mut W,
    ) -> Result<u64, CopyError> {
        let query = attempt.map_or_else(String::new, |a| format!("?attempt={a}"));
        self.http
            .get_into(
                &format!("/v1/projects/{project}/jobs/{job}/log-chunks{query}"),
                out,
            )
            .await
    }

    /// The project's cache entry under `key`, with who stored it.
    pub async fn cache_entry(
        &self,
        project: Uuid,
        key: &str,
    ) -> Result<serde_json::Value, CallError> {
        let key = path_segment(key);
        self.http
            .get(&format!("/v1/projects/{project}/cache/{key}"))
            .await
    }

    pub async fn cancel(&self, project: Uuid, job: Uuid) -> Result<VerdictResponse, CallError> {
        self.http
            .post(
                &format!("/v1/projects/{project}/jobs/{job}/cancel"),
                &serde_json::json!({}),
            )
            .await
    }

    pub async fn reconcile(
        &self,
        project: Uuid,
        job: Uuid,
        finding: &str,
        decision: &str,
    ) -> Result<VerdictResponse, CallError> {
        let body = ReconcileRequest {
            finding: finding.into(),
            decision: decision.into(),
        };
        self.http
            .post(
                &format!("/v1/projects/{project}/jobs/{job}/reconcile"),
                &body,
            )
            .await
    }

    pub async fn sweep(&self) -> Result<SweepResponse, CallError> {
        self.http.post("/v1/sweep", &serde_json::json!({})).await
    }

    /// The expiry sweep over one project's jobs only.
    pub async fn sweep_project(&self, project: Uuid) -> Result<SweepResponse, CallError> {
        let body = SweepRequest {
            project: Some(project),
        };
        self.http.post("/v1/sweep", &body).await
    }

    pub async fn advance_clock(&self, ms: i64) -> Result<ClockResponse, CallError> {
        let body = ClockRequest {
            set: None,
            advance_ms: Some(ms),
        };
        self.http.post("/v1/test/clock", &body).await
    }

    /// The test clock (only with `--manual-clock`): set it and/or advance it; the answer is the
    /// server's time after both. An empty request only reads it.
    pub async fn clock(&self, request: &ClockRequest) -> Result<ClockResponse, CallError> {
        self.http.post("/v1/test/clock", request).await
    }

    /// The failover's test hooks (only with `--manual-clock`): the standby catches up now.
    pub async fn replicate(&self) -> Result<crate::wire::ReplicateResponse, CallError> {
        self.http
            .post("/v1/test/replicate", &serde_json::json!({}))
            .await
    }

    /// The failover's test hooks: the database goes back to the standby's copy and the epoch
    /// advances.
    pub async fn failover(&self) -> Result<crate::wire::FailoverResponse, CallError> {
        self.http
            .post("/v1/test/failover", &serde_json::json!({}))
            .await
    }

    /// The prune's test hooks: a whole audit, its watermark recorded when it is clean.
    pub async fn audit_hook(&self) -> Result<crate::wire::AuditHookResponse, CallError> {
        self.http
            .post("/v1/test/audit", &serde_json::json!({}))
            .await
    }

    /// The prune's test hooks: the audited finished jobs pruned, then an audit since the watermark.
    pub async fn prune_hook(&self) -> Result<crate::wire::PruneHookResponse, CallError> {
        self.http
            .post("/v1/test/prune", &serde_json::json!({}))
            .await
    }

    pub async fn target(&self, slot: &str) -> Result<TargetBody, CallError> {
        let slot = path_segment(slot);
        self.http.get(&format!("/v1/targets/{slot}")).await
    }
}

/// `path` with the list routes' `?after=&limit=`.
fn page_path(path: &str, after: Option<i64>, limit: Option<i64>) -> String {
    let mut query = Vec::new();
    if let Some(after) = after {
        query.push(format!("after={after}"));
    }
    if let Some(limit) = limit {
        query.push(format!("limit={limit}"));
    }
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, retry_after: Option<u64>) -> CallError {
        CallError::Http {
            status,
            code: "x".into(),
            message: String::new(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn no_answer_any_5xx_408_and_429_are_retried_and_decisions_are_not() {
        assert!(CallError::Network("reset".into()).is_transient());
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert!(http(status, None).is_transient(), "{status}");
        }
        for status in [400, 401, 404, 409, 413, 415, 422] {
            assert!(!http(status, None).is_transient(), "{status}");
        }
        let rejected = CallError::Rejected {
            code: "lease_expired".into(),
            instruction: None,
        };
        assert!(!rejected.is_transient());
        assert_eq!(
            http(503, Some(2)).retry_after(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(rejected.retry_after(), None);
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_are_server_urls() {
        for good in [
            "http://127.0.0.1:8080",
            "https://ci.example.com",
            "http://h/",
        ] {
            assert!(check_base_url(good).is_ok(), "{good}");
        }
        for bad in [
            "not-a-url",
            "127.0.0.1:8080",
            "ftp://h",
            "http://",
            "unix:/x",
            "",
        ] {
            let error = check_base_url(bad).expect_err(bad).to_string();
            assert!(error.starts_with("invalid server URL"), "{bad}: {error}");
        }
    }

    /// A server that accepts the connection and never answers: the error says it timed out
    /// (reqwest's own text says only "error sending request for url").
    #[tokio::test]
    async fn a_server_that_never_answers_is_named_a_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let http = Http::new(&base, "t", Duration::from_millis(300)).unwrap();
        let error = http.get_bytes("/healthz").await.unwrap_err().to_string();
        assert!(error.contains("timed out"), "{error}");
        assert!(error.contains(&base), "{error}");
        held.abort();
    }

    /// A writer that keeps what it is given and the largest piece it was given at once.
    #[derive(Default)]
    struct Pieces {
        bytes: Vec<u8>,
        largest: usize,
        count: usize,
    }

    impl std::io::Write for Pieces {
        fn write(&mut self, piece: &[u8]) -> std::io::Result<usize> {
            self.largest = self.largest.max(piece.len());
            self.count += 1;
            self.bytes.extend_from_slice(piece);
            Ok(piece.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A server answering every connection's request with `head` then `body`, written 64 KiB at
    /// a time, then closing the connection.
    async fn answering(head: String, body: Vec<u8>) -> (String, tokio::task::JoinHandle<()>) {
        answering_in_pieces(head, body, 64 * 1024, Duration::ZERO, false).await
    }

    /// [`answering`] writing `piece` bytes at a time with `gap` between pieces; `stall`: after the
    /// first piece, write nothing more and keep the connection open.
    async fn answering_in_pieces(
        head: String,
        body: Vec<u8>,
        piece: usize,
        gap: Duration,
        stall: bool,
    ) -> (String, tokio::task::JoinHandle<()>) {
        use tokio::io::AsyncReadExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = stream.write_all(head.as_bytes()).await;
                for (i, piece) in body.chunks(piece).enumerate() {
                    if i > 0 && stall {
                        std::future::pending::<()>().await;
                    }
                    if i > 0 && !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    let _ = stream.write_all(piece).await;
                }
                let _ = stream.shutdown().await;
            }
        });
        (base, server)
    }

    /// `op logs` of `base`'s server into `out`.
    async fn log_into(base: &str, out: &mut Pieces) -> Result<u64, CopyError> {
        log_into_within(base, Duration::from_secs(30), out).await
    }

    /// `op logs` of `base`'s server into `out` by a client of timeout `timeout`.
    async fn log_into_within(
        base: &str,
        timeout: Duration,
        out: &mut Pieces,
    ) -> Result<u64, CopyError> {
        let client = OperatorClient {
            http: Http::new(base, "t", timeout).unwrap(),
        };
        client.logs_into(Uuid::nil(), Uuid::nil(), None, out).await
    }

    /// A log that keeps arriving streams on for longer than the client's timeout (each piece
    /// well within it: 24 pieces 200 ms apart, 4.6 s in all, against 2 s, so a loaded machine
    /// would have to stall a gap tenfold to fail it), and one that stops arriving is cut once
    /// nothing came for the timeout, named a timeout (issue 36: the 60 s timeout covered the
    /// whole streamed body, so a large log over a slow link failed half-written).
    #[tokio::test]
    async fn a_streamed_log_is_cut_by_a_silence_not_by_its_length() {
        let log = vec![b'y'; 24 * 1024];
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
            log.len()
        );
        let gap = Duration::from_millis(200);
        let (base, server) = answering_in_pieces(head.clone(), log.clone(), 1024, gap, false).await;
        let mut out = Pieces::default();
        let written = log_into_within(&base, Duration::from_secs(2), &mut out)
            .await
            .unwrap();
        assert_eq!(written, 24 * 1024);
        assert!(out.bytes == log, "the log arrived changed");
        server.abort();

        let (base, server) = answering_in_pieces(head, log, 1024, Duration::ZERO, true).await;
        let mut out = Pieces::default();
        let error = log_into_within(&base, Duration::from_secs(2), &mut out)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("timed out"), "{error}");
        assert_eq!(out.bytes.len(), 1024, "the first piece was written out");
        server.abort();
    }

    /// A whole (not streamed) answer is still bounded by the client's timeout as a whole: the
    /// same slow log read by `logs` (into memory) times out.
    #[tokio::test]
    async fn an_answer_read_whole_is_bounded_by_the_timeout_as_a_whole() {
        let log = vec![b'y'; 12 * 1024];
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
            log.len()
        );
        let (base, server) =
            answering_in_pieces(head, log, 1024, Duration::from_millis(250), false).await;
        let client = OperatorClient {
            http: Http::new(&base, "t", Duration::from_secs(1)).unwrap(),
        };
        let error = client
            .logs(Uuid::nil(), Uuid::nil(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("timed out"), "{error}");
        server.abort();
    }

    /// An 8 MiB log reaches the writer intact in pieces, none near the whole log: the client
    /// never holds the body at once (issue 36: log reads with bounded memory).
    #[tokio::test]
    async fn a_log_is_written_out_piece_by_piece_as_it_arrives() {
        let log: Vec<u8> = (0..8 * 1024 * 1024_u32)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
            log.len()
        );
        let (base, server) = answering(head, log.clone()).await;
        let mut out = Pieces::default();
        let written = log_into(&base, &mut out).await.unwrap();
        assert_eq!(written, 8 * 1024 * 1024);
        assert!(out.bytes == log, "the log arrived changed");
        assert!(
            out.largest <= 1024 * 1024,
            "a piece of {} bytes of {} held at once ({} pieces)",
            out.largest,
            log.len(),
            out.count
        );
        server.abort();
    }

    /// A connection cut mid-body is an error, not a shorter log; a 404 is the server's answer.
    #[tokio::test]
    async fn a_log_cut_short_is_an_error_and_a_refusal_is_named() {
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n".to_owned();
        let (base, server) = answering(head, vec![b'x'; 200 * 1024]).await;
        let mut out = Pieces::default();
        let error = log_into(&base, &mut out).await.unwrap_err();
        assert!(
            matches!(error, CopyError::Call(CallError::Network(_))),
            "{error:?} after {} bytes",
            out.bytes.len()
        );
        server.abort();

        let body = r#"{"error":{"code":"unknown_job","message":"no such job"}}"#;
        let head = format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let (base, server) = answering(head, body.as_bytes().to_vec()).await;
        let mut out = Pieces::default();
        let error = log_into(&base, &mut out).await.unwrap_err();
        assert!(
            matches!(&error, CopyError::Call(CallError::Http { status: 404, code, .. }) if code == "unknown_job"),
            "{error:?}"
        );
        assert!(out.bytes.is_empty());
        server.abort();
    }
}
