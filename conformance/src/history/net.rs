//! The load over HTTP: the same runner tasks as [`super::load`], each with its own runner token,
//! talking to the in-process control plane (`leasewright_server::app`) through a loopback proxy
//! that drops, delays and duplicates requests; the operator (sweeps, cancels, reconciliations)
//! talks to the server directly; the server can be restarted while the runners execute.
//!
//! Where the history is recorded. A runner's own view of a call through a lossy proxy says little
//! (an answer lost on the way back, a request delivered twice), so the proxy records every
//! delivery it makes to the server: invoked when it starts sending the request, completed when
//! the server's answer has arrived, with that answer. A request the proxy drops is never
//! delivered and not recorded; a duplicate is a delivery of its own; an answer the proxy drops on
//! the way back is still recorded (the server gave it). The operator's calls are recorded by its
//! client, as in-process. The server reads the system clock; the recorder reads the same.

use super::load::{self, Api, Failed, LoadConfig, LoadError, RunOutcome, Setup};
use super::{Answer, Call, FaultCounts, Recorder};
use crate::generate::SplitMix64;
use backon::Retryable;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use imp::{Decision, Finding, JobId, Outcome, Reason, RejoinAnswer, RunnerId, Verdict};
use leasewright_impl as imp;
use leasewright_server::app::{self, ServerConfig};
use leasewright_server::client::{CallError, OperatorClient, RunnerClient};
use leasewright_server::wire::{ClaimRequest, ClaimResponse, SubmitJobRequest, TupleBody};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use uuid::Uuid;

const OPERATOR_TOKEN: &str = "history-operator";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the proxy does to runner requests, and how often the server restarts.
#[derive(Clone, Debug)]
pub struct NetFaults {
    /// Percent of requests dropped before they reach the server.
    pub drop_request_percent: usize,
    /// Percent of answers dropped on their way back (the server did act).
    pub drop_answer_percent: usize,
    /// Percent of requests delayed by up to `max_delay` before delivery.
    pub delay_percent: usize,
    /// Percent of requests delivered a second time, up to `max_delay` later.
    pub duplicate_percent: usize,
    pub max_delay: Duration,
    /// Every this often, the control-plane server is stopped and a new one started on the same
    /// database while the runners execute.
    pub restart_server: Option<Duration>,
}

impl NetFaults {
    /// A lossy network: 5% of requests dropped, 5% of answers dropped, 10% delayed, 10%
    /// duplicated, by up to `max_delay`.
    pub fn lossy(max_delay: Duration) -> Self {
        Self {
            drop_request_percent: 5,
            drop_answer_percent: 5,
            delay_percent: 10,
            duplicate_percent: 10,
            max_delay,
            restart_server: None,
        }
    }

    /// The names of the faults that are on.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.drop_request_percent
            + self.drop_answer_percent
            + self.delay_percent
            + self.duplicate_percent
            > 0
        {
            names.push("proxy");
        }
        if self.restart_server.is_some() {
            names.push("restart-server");
        }
        names
    }

    /// A network that does nothing to requests.
    pub fn none() -> Self {
        Self {
            drop_request_percent: 0,
            drop_answer_percent: 0,
            delay_percent: 0,
            duplicate_percent: 0,
            max_delay: Duration::ZERO,
            restart_server: None,
        }
    }
}

// ------------------------------------------------------------------------------------------
// The protocol over HTTP.

/// The runner clients (through the proxy) and the recorded operator client (direct).
pub struct HttpApi {
    recorder: Arc<Recorder>,
    runners: HashMap<RunnerId, RunnerClient>,
    operator: Mutex<OperatorClient>,
    project: Uuid,
    submit: SubmitJobRequest,
}

impl std::fmt::Debug for HttpApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpApi")
            .field("runners", &self.runners.len())
            .finish_non_exhaustive()
    }
}

fn body(tuple: &imp::Tuple, runner_time: Option<DateTime<Utc>>) -> TupleBody {
    TupleBody {
        job: tuple.job.0,
        attempt: tuple.attempt.0,
        lease_id: tuple.lease_id.0,
        fence: tuple.fence,
        runner_time,
    }
}

/// A protocol rejection, or a failure whose outcome is unknown.
fn rejection<T>(error: &CallError) -> Result<Verdict<T>, Failed> {
    match error.rejection().and_then(Reason::from_code) {
        Some(reason) => Ok(Verdict::Rejected(reason)),
        None => Err(Failed),
    }
}

fn verdict_of(verdict: &str) -> Result<Verdict<()>, Failed> {
    match verdict {
        "accepted" => Ok(Verdict::Accepted(())),
        "acknowledged" => Ok(Verdict::Acknowledged),
        _ => Err(Failed),
    }
}

fn recorded_answer(result: &Result<Verdict<()>, Failed>, error: Option<&CallError>) -> Answer {
    match result {
        Ok(Verdict::Accepted(())) => Answer::Accepted,
        Ok(Verdict::Acknowledged) => Answer::Acknowledged,
        Ok(Verdict::Rejected(reason)) => Answer::Rejected(*reason),
        Err(Failed) => Answer::Unknown(error.map_or("failed".into(), ToString::to_string)),
    }
}

impl HttpApi {
    fn runner(&self, runner: RunnerId) -> Result<&RunnerClient, Failed> {
        self.runners.get(&runner).ok_or(Failed)
    }

    fn operator(&self) -> OperatorClient {
        lock(&self.operator).clone()
    }

    pub(crate) async fn claim(
        &self,
        runner: RunnerId,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::Lease>, Failed> {
        let request = ClaimRequest {
            capacity: Some(1),
            runner_time,
        };
        let answer: Result<ClaimResponse, CallError> = self
            .runner(runner)?
            .http
            .post("/v1/runner/claim", &request)
            .await;
        match answer {
            Ok(response) => match response.leases.into_iter().next() {
                Some(lease) => Ok(Verdict::Accepted(imp::Lease {
                    tuple: imp::Tuple {
                        runner,
                        job: JobId(lease.job),
                        attempt: imp::AttemptId(lease.attempt),
                        lease_id: imp::LeaseId(lease.lease_id),
                        fence: lease.fence,
                    },
                    lease_expiry: lease.lease_expiry,
                    slot_token: lease.slot_token,
                    target: lease.target,
                    // A kind the protocol does not know is an answer no client can act on.
                    target_kind: imp::TargetKind::from_code(&lease.target_kind).ok_or(Failed)?,
                    source_revision: lease.source_revision,
                    source_digest: lease.source_digest,
                    command: lease.command,
                })),
                None => Ok(Verdict::Rejected(Reason::NoQueuedJob)),
            },
            Err(error) => rejection(&error),
        }
    }

    pub(crate) async fn heartbeat(
        &self,
        tuple: &imp::Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<imp::HeartbeatAnswer>, Failed> {
        match self
            .runner(tuple.runner)?
            .heartbeat(&body(tuple, runner_time))
            .await
        {
            Ok(response) if response.verdict == "accepted" => {
                Ok(Verdict::Accepted(imp::HeartbeatAnswer {
                    lease_expiry: response.lease_expiry,
                    cancel_requested: response.cancel_requested,
                }))
            }
            Ok(_) => Err(Failed),
            Err(error) => rejection(&error),
        }
    }

    pub(crate) async fn rejoin(
        &self,
        tuple: &imp::Tuple,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<RejoinAnswer, Failed> {
        match self
            .runner(tuple.runner)?
            .rejoin(&body(tuple, runner_time))
            .await
        {
            Ok(response) => match response.instruction.as_str() {
                "continue" => Ok(RejoinAnswer::Continue),
                "cancel" => Ok(RejoinAnswer::Cancel),
                _ => Err(Failed),
            },
            Err(error) => match error.rejection().and_then(Reason::from_code) {
                Some(reason) => Ok(RejoinAnswer::Stop(reason)),
                None => Err(Failed),
            },
        }
    }

    pub(crate) async fn result(
        &self,
        tuple: &imp::Tuple,
        outcome: Outcome,
        digest: &str,
        runner_time: Option<DateTime<Utc>>,
    ) -> Result<Verdict<()>, Failed> {
        match self
            .runner(tuple.runner)?
            .result(&body(tuple, runner_time), outcome.as_str(), digest)
            .await
        {
            Ok(response) => verdict_of(&response.verdict),
            Err(error) => rejection(&error),
        }
    }

    pub(crate) async fn sweep(&self, client: &str) -> Result<imp::SweepVerdict, Failed> {
        let id = self.recorder.invoke(client, Call::Sweep, None);
        let answer = self.operator().sweep().await;
        let (recorded, result) = match &answer {
            Ok(response) if response.verdict == "uncertain" => {
                let jobs: Vec<JobId> = response.jobs.iter().map(|j| JobId(*j)).collect();
                (
                    Answer::Swept(jobs.clone()),
                    Ok(imp::SweepVerdict::Uncertain(jobs)),
                )
            }
            Ok(response) if response.verdict == "accepted" => {
                (Answer::Accepted, Ok(imp::SweepVerdict::Accepted))
            }
            Ok(response) => (
                Answer::Unknown(format!("verdict {}", response.verdict)),
                Err(Failed),
            ),
            Err(error) => (Answer::Unknown(error.to_string()), Err(Failed)),
        };
        self.recorder.complete(id, recorded);
        result
    }

    pub(crate) async fn cancel(&self, client: &str, job: JobId) -> Result<Verdict<()>, Failed> {
        let id = self.recorder.invoke(client, Call::Cancel { job }, None);
        let answer = self.operator().cancel(self.project, job.0).await;
        let result = match &answer {
            Ok(response) => verdict_of(&response.verdict),
            Err(error) => rejection(error),
        };
        self.recorder
            .complete(id, recorded_answer(&result, answer.as_ref().err()));
        result
    }

    pub(crate) async fn reconcile(
        &self,
        client: &str,
        job: JobId,
        finding: Finding,
        decision: Decision,
    ) -> Result<Verdict<()>, Failed> {
        let call = Call::Reconcile {
            job,
            finding,
            decision,
        };
        let id = self.recorder.invoke(client, call, None);
        let answer = self
            .operator()
            .reconcile(self.project, job.0, finding.as_str(), decision.as_str())
            .await;
        let result = match &answer {
            Ok(response) => verdict_of(&response.verdict),
            Err(error) => rejection(error),
        };
        self.recorder
            .complete(id, recorded_answer(&result, answer.as_ref().err()));
        result
    }

    pub(crate) async fn submit(&self) -> bool {
        self.operator()
            .submit(self.project, &self.submit)
            .await
            .is_ok()
    }
}

// ------------------------------------------------------------------------------------------
// The proxy.

/// An HTTP/1.1 message: the start line and headers (lower-cased names), and the body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The message with `connection: close` and an exact content length.
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (name, value) in &self.headers {
            if matches!(
                name.as_str(),
                "connection" | "content-length" | "transfer-encoding" | "keep-alive"
            ) {
                continue;
            }
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Read one HTTP/1.1 message (`Ok(None)`: the connection closed before one started).
async fn read_message<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    to_eof_without_length: bool,
) -> std::io::Result<Option<Message>> {
    let mut start = String::new();
    if reader.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "headers cut off",
            ));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let mut message = Message {
        start: start.trim_end().to_owned(),
        headers,
        body: Vec::new(),
    };
    if let Some(length) = message.header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "content-length"))?;
        message.body = vec![0; length];
        reader.read_exact(&mut message.body).await?;
    } else if message
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "chunk size"))?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            message.body.extend_from_slice(&chunk[..size]);
        }
    } else if to_eof_without_length {
        reader.read_to_end(&mut message.body).await?;
    }
    Ok(Some(message))
}

/// The protocol call a runner request is, if it is one the history records.
fn request_call(request: &Message) -> Option<(Call, Option<DateTime<Utc>>)> {
    let path = request.start.split_whitespace().nth(1)?;
    let token = request.header("authorization")?.strip_prefix("Bearer ")?;
    let runner = RunnerId(Uuid::try_parse(token.strip_prefix("lw_")?.split('_').next()?).ok()?);
    let json: serde_json::Value = serde_json::from_slice(&request.body).ok()?;
    let runner_time = json
        .get("runner_time")
        .and_then(|t| serde_json::from_value::<DateTime<Utc>>(t.clone()).ok());
    let uuid = |field: &str| -> Option<Uuid> {
        json.get(field)
            .and_then(|v| v.as_str())
            .and_then(|s| Uuid::try_parse(s).ok())
    };
    let tuple = || -> Option<imp::Tuple> {
        Some(imp::Tuple {
            runner,
            job: JobId(uuid("job")?),
            attempt: imp::AttemptId(uuid("attempt")?),
            lease_id: imp::LeaseId(uuid("lease_id")?),
            fence: json.get("fence")?.as_i64()?,
        })
    };
    let call = match path {
        "/v1/runner/claim" => Call::Claim { runner },
        "/v1/runner/heartbeat" => Call::Heartbeat { tuple: tuple()? },
        "/v1/runner/rejoin" => Call::Rejoin { tuple: tuple()? },
        "/v1/runner/result" => Call::Result {
            tuple: tuple()?,
            outcome: Outcome::from_code(json.get("outcome")?.as_str()?)?,
            digest: json.get("result_digest")?.as_str()?.to_owned(),
        },
        _ => return None,
    };
    Some((call, runner_time))
}

/// The answer a server response gives to `call`.
fn response_answer(call: &Call, response: &Message) -> Answer {
    let status: u16 = response
        .start
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&response.body) else {
        return Answer::Unknown(format!("HTTP {status} without JSON"));
    };
    if status == 409 && json.get("verdict").and_then(|v| v.as_str()) == Some("rejected") {
        let code = json
            .pointer("/error/code")
            .and_then(|c| c.as_str())
            .unwrap_or("");
        return match Reason::from_code(code) {
            Some(reason) => Answer::Rejected(reason),
            None => Answer::Unknown(format!("rejected with unknown code {code}")),
        };
    }
    if status != 200 {
        return Answer::Unknown(format!("HTTP {status}"));
    }
    let verdict = json.get("verdict").and_then(|v| v.as_str()).unwrap_or("");
    let parsed = match call {
        Call::Claim { runner } => json.pointer("/leases/0").and_then(|lease| {
            let uuid = |f: &str| lease.get(f)?.as_str().and_then(|s| Uuid::try_parse(s).ok());
            Some(Answer::Claimed {
                tuple: imp::Tuple {
                    runner: *runner,
                    job: JobId(uuid("job")?),
                    attempt: imp::AttemptId(uuid("attempt")?),
                    lease_id: imp::LeaseId(uuid("lease_id")?),
                    fence: lease.get("fence")?.as_i64()?,
                },
                lease_expiry: serde_json::from_value(lease.get("lease_expiry")?.clone()).ok()?,
            })
        }),
        Call::Heartbeat { .. } if verdict == "accepted" => (|| {
            Some(Answer::Extended {
                lease_expiry: serde_json::from_value(json.get("lease_expiry")?.clone()).ok()?,
                cancel_requested: json.get("cancel_requested")?.as_bool()?,
            })
        })(),
        Call::Rejoin { .. } => match json.get("instruction").and_then(|i| i.as_str()) {
            Some("continue") => Some(Answer::Continue),
            Some("cancel") => Some(Answer::CancelInstruction),
            _ => None,
        },
        Call::Result { .. } => match verdict {
            "accepted" => Some(Answer::Accepted),
            "acknowledged" => Some(Answer::Acknowledged),
            _ => None,
        },
        _ => None,
    };
    parsed.unwrap_or_else(|| Answer::Unknown(format!("unexpected answer {json}")))
}

/// The control-plane servers a proxy forwards to (one, or every replica's address).
pub type Upstreams = Arc<Mutex<Vec<SocketAddr>>>;

/// A loopback TCP proxy in front of the control plane (one request per connection).
pub struct Proxy {
    pub addr: SocketAddr,
    upstream: Upstreams,
    /// Deliveries (originals and duplicates) under way.
    pub in_flight: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

struct ProxyState {
    upstream: Upstreams,
    recorder: Arc<Recorder>,
    faults: NetFaults,
    counts: Arc<Mutex<FaultCounts>>,
    rng: Mutex<SplitMix64>,
    in_flight: Arc<AtomicUsize>,
}

impl Proxy {
    /// A proxy on a free loopback port, forwarding to `upstream`.
    pub async fn start(
        upstream: SocketAddr,
        recorder: Arc<Recorder>,
        faults: NetFaults,
        counts: Arc<Mutex<FaultCounts>>,
        seed: u64,
    ) -> std::io::Result<Proxy> {
        let upstream = Arc::new(Mutex::new(vec![upstream]));
        Self::start_over(upstream, recorder, faults, counts, seed).await
    }

    /// A proxy on a free loopback port that sends each request to one of `upstream`'s servers,
    /// drawn at random (the others in turn when it refuses the connection).
    pub async fn start_over(
        upstream: Upstreams,
        recorder: Arc<Recorder>,
        faults: NetFaults,
        counts: Arc<Mutex<FaultCounts>>,
        seed: u64,
    ) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let state = Arc::new(ProxyState {
            upstream: upstream.clone(),
            recorder,
            faults,
            counts,
            rng: Mutex::new(SplitMix64::new(seed)),
            in_flight: in_flight.clone(),
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(state.clone(), stream));
            }
        });
        Ok(Proxy {
            addr,
            upstream,
            in_flight,
            task,
        })
    }

    /// Forward to another server from now on.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *lock(&self.upstream) = vec![upstream];
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Deliver `request` to the server, recording it; the server's response, if one came.
async fn deliver(state: &ProxyState, request: &Message, client: &str) -> Option<Message> {
    let upstream = lock(&state.upstream).clone();
    let first = lock(&state.rng).below(upstream.len().max(1));
    // A server that refuses the connection got nothing: try the next one (a load balancer's
    // retry). None connected: not delivered, not recorded.
    let mut connected = None;
    for k in 0..upstream.len() {
        if let Ok(stream) = TcpStream::connect(upstream[(first + k) % upstream.len()]).await {
            connected = Some(stream);
            break;
        }
    }
    let mut stream = connected?;
    let call = request_call(request);
    let id = call
        .clone()
        .map(|(call, runner_time)| state.recorder.invoke(client, call, runner_time));
    let exchange = async {
        stream.write_all(&request.encode()).await?;
        let mut reader = BufReader::new(stream);
        read_message(&mut reader, true).await
    };
    let response = exchange.await;
    if let (Some(id), Some((call, _))) = (id, &call) {
        let answer = match &response {
            Ok(Some(response)) => response_answer(call, response),
            Ok(None) => Answer::Unknown("the server closed the connection".into()),
            Err(error) => Answer::Unknown(format!("proxy: {error}")),
        };
        state.recorder.complete(id, answer);
    }
    response.ok().flatten()
}

async fn serve(state: Arc<ProxyState>, client: TcpStream) {
    let (read, mut write) = client.into_split();
    let mut reader = BufReader::new(read);
    let Ok(Some(request)) = read_message(&mut reader, false).await else {
        return;
    };
    let (drop_request, delay, duplicate, drop_answer, delay_by, duplicate_after) = {
        let mut rng = lock(&state.rng);
        let f = &state.faults;
        let max = f.max_delay.as_millis().max(1) as usize;
        (
            rng.below(100) < f.drop_request_percent,
            rng.below(100) < f.delay_percent,
            rng.below(100) < f.duplicate_percent,
            rng.below(100) < f.drop_answer_percent,
            Duration::from_millis(rng.below(max) as u64),
            Duration::from_millis(rng.below(max) as u64),
        )
    };
    if drop_request {
        lock(&state.counts).proxy_drops += 1;
        return; // the client sees the connection close without an answer
    }
    state.in_flight.fetch_add(1, Ordering::SeqCst);
    if duplicate {
        lock(&state.counts).proxy_duplicates += 1;
        let state = state.clone();
        let copy = Message {
            start: request.start.clone(),
            headers: request.headers.clone(),
            body: request.body.clone(),
        };
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::time::sleep(duplicate_after).await;
            let _ = deliver(&state, &copy, "proxy-duplicate").await;
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
    if delay {
        lock(&state.counts).proxy_delays += 1;
        tokio::time::sleep(delay_by).await;
    }
    let response = deliver(&state, &request, "proxy").await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    let Some(response) = response else {
        return;
    };
    if drop_answer {
        lock(&state.counts).proxy_drops += 1;
        return;
    }
    let _ = write.write_all(&response.encode()).await;
    let _ = write.shutdown().await;
}

// ------------------------------------------------------------------------------------------
// The server and the run.

/// Start a control plane on a free port. The server's start-up future is not provably `Send`
/// (sqlx's executor bounds), so a spawned task runs it to completion in place (multi-threaded
/// runtime only); the server itself runs on the current runtime.
async fn start_server(
    database_url: &str,
    lease_ttl: Duration,
    schema: &str,
) -> Result<app::Server, String> {
    let (database_url, schema) = (database_url.to_owned(), schema.to_owned());
    tokio::task::block_in_place(move || {
        tokio::runtime::Handle::current().block_on(start_server_owned(
            database_url,
            lease_ttl,
            schema,
        ))
    })
}

async fn start_server_owned(
    database_url: String,
    lease_ttl: Duration,
    schema: String,
) -> Result<app::Server, String> {
    let database_url = database_url.as_str();
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let config = ServerConfig {
        operator_token: Some(OPERATOR_TOKEN.into()),
        manual_clock: false,
        sweep_interval: None,
        schema,
        ..ServerConfig::default()
    };
    app::start(database_url, lease_ttl, listener, config)
        .await
        .map_err(|e| e.to_string())
}

fn setup_error(what: &str, error: impl std::fmt::Display) -> LoadError {
    LoadError::Other(format!("{what}: {error}"))
}

/// Control-plane replicas: real `leasewright serve` processes on one database, each running its
/// own expiry sweep, behind a proxy that sends every request to any of them.
#[derive(Clone, Debug)]
pub struct ReplicaProcesses {
    /// The `leasewright` executable.
    pub program: std::path::PathBuf,
    /// How many run at once.
    pub count: usize,
    /// Each replica's own expiry-sweep interval (`serve --sweep-interval-ms`).
    pub sweep_interval: Duration,
    /// The schema the replicas keep the tables in (`serve --schema`).
    pub schema: String,
}

/// One running replica: its process, its address, and the recorded op that stands for the
/// sweeps it runs on its own while it lives.
struct Replica {
    child: tokio::process::Child,
    addr: SocketAddr,
    sweeps: usize,
}

/// Start replica `index`: `serve` on a free port (the database and the operator token in its
/// environment, never on its command line), ready once it prints its address. Its own sweeps
/// are recorded as one sweep call of unknown outcome, invoked before it starts and completed
/// when it is killed: each may have made any expired job uncertain at any moment of its life,
/// which is what the checker allows for a sweep whose answer is lost.
async fn start_replica(
    spec: &ReplicaProcesses,
    database_url: &str,
    lease_ttl: Duration,
    index: usize,
    recorder: &Recorder,
) -> Result<Replica, String> {
    let sweeps = recorder.invoke(&format!("replica-{index} sweeper"), Call::Sweep, None);
    let started = async {
        let mut child = tokio::process::Command::new(&spec.program)
            .args(["serve", "--listen", "127.0.0.1:0", "--lease-ttl"])
            .arg(format!("{}", lease_ttl.as_secs_f64()))
            .arg("--sweep-interval-ms")
            .arg(spec.sweep_interval.as_millis().max(10).to_string())
            .args(["--schema", &spec.schema])
            .env("DATABASE_URL", database_url)
            .env("LEASEWRIGHT_OPERATOR_TOKEN", OPERATOR_TOKEN)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", spec.program.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let mut said = Vec::new();
        let addr = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    return addr.trim().parse::<SocketAddr>().ok();
                }
                said.push(line);
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(addr) = addr else {
            let _ = child.start_kill();
            return Err(format!(
                "replica {index} did not start: {}",
                said.join(" | ")
            ));
        };
        // Keep reading its log so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Replica {
            child,
            addr,
            sweeps,
        })
    };
    let replica = started.await;
    if replica.is_err() {
        recorder.complete(sweeps, Answer::Unknown("the replica did not start".into()));
    }
    replica
}

/// Kill the replica at once (SIGKILL: requests under way are cut, transactions roll back).
async fn kill_replica(replica: &mut Replica, recorder: &Recorder) {
    let _ = replica.child.start_kill();
    let _ = replica.child.wait().await;
    recorder.complete(
        replica.sweeps,
        Answer::Unknown("the replica was killed".into()),
    );
}

/// Run the load over HTTP against a fresh database at `database_url`, then check it.
pub async fn run(
    database_url: &str,
    config: &LoadConfig,
    faults: &NetFaults,
) -> Result<RunOutcome, LoadError> {
    run_with(database_url, config, faults, None).await
}

/// Run the load over HTTP, on the in-process control plane or, with `replicas`, on several
/// `serve` processes on the one database (`faults.restart_server` then kills one of them with
/// SIGKILL and starts it again), then check it.
pub async fn run_with(
    database_url: &str,
    config: &LoadConfig,
    faults: &NetFaults,
    replicas: Option<&ReplicaProcesses>,
) -> Result<RunOutcome, LoadError> {
    let clock: Arc<dyn imp::Clock> = Arc::new(imp::SystemClock);
    let recorder = Recorder::new(clock.clone());
    let counts = Arc::new(Mutex::new(FaultCounts::default()));
    let mut server = None;
    let mut live = Vec::new();
    match replicas {
        None => {
            server = Some(
                start_server(database_url, config.lease_ttl, &config.schema)
                    .await
                    .map_err(|e| setup_error("starting the control plane", e))?,
            );
        }
        Some(spec) => {
            for index in 0..spec.count.max(1) {
                live.push(
                    start_replica(spec, database_url, config.lease_ttl, index, &recorder)
                        .await
                        .map_err(|e| setup_error("starting a replica", e))?,
                );
            }
        }
    }
    let upstreams: Upstreams = Arc::new(Mutex::new(match &server {
        Some(server) => vec![server.addr],
        None => live.iter().map(|r| r.addr).collect(),
    }));
    let proxy = Proxy::start_over(
        upstreams.clone(),
        recorder.clone(),
        faults.clone(),
        counts.clone(),
        config.seed ^ 0x9e0c_5eed,
    )
    .await
    .map_err(|e| setup_error("starting the proxy", e))?;
    // The operator reaches the replicas through a proxy that only spreads its requests.
    let operator_proxy = match &server {
        Some(_) => None,
        None => Some(
            Proxy::start_over(
                upstreams.clone(),
                recorder.clone(),
                NetFaults::none(),
                counts.clone(),
                config.seed ^ 0x0be7_a702,
            )
            .await
            .map_err(|e| setup_error("starting the operator's proxy", e))?,
        ),
    };
    let operator_url = match (&server, &operator_proxy) {
        (Some(server), _) => server.url(),
        (None, Some(proxy)) => proxy.url(),
        (None, None) => unreachable!("a server or replicas"),
    };
    let operator = OperatorClient::new(&operator_url, OPERATOR_TOKEN)
        .map_err(|e| setup_error("operator client", e))?;
    let project = operator
        .create_project("history")
        .await
        .map_err(|e| setup_error("creating the project", e))?;
    let timeout = config.lease_ttl * 10 + faults.max_delay * 2;
    let mut runners = Vec::new();
    let mut clients = HashMap::new();
    for i in 0..config.runners {
        let created = operator
            .create_runner(project, &format!("runner-{i}"))
            .await
            .map_err(|e| setup_error("creating a runner", e))?;
        let client = RunnerClient::new(&proxy.url(), &created.token, timeout)
            .map_err(|e| setup_error("runner client", e))?;
        runners.push(RunnerId(created.runner));
        clients.insert(RunnerId(created.runner), client);
    }
    let snapshot =
        leasewright_server::source::build_snapshot(vec![leasewright_server::source::SourceFile {
            path: "run.sh".into(),
            mode: 0o755,
            content: b"true\n".to_vec(),
        }])
        .map_err(|e| setup_error("source snapshot", e))?;
    let api = Arc::new(HttpApi {
        recorder: recorder.clone(),
        runners: clients,
        operator: Mutex::new(operator),
        project,
        submit: SubmitJobRequest {
            command: "sh run.sh".into(),
            source_revision: "rev".into(),
            source_archive_base64: base64::engine::general_purpose::STANDARD
                .encode(&snapshot.archive),
            artifacts: Vec::new(),
            target: None,
            target_kind: Some("unfenced".into()),
        },
    });
    let reader = imp::Store::connect(
        database_url,
        clock,
        imp::StoreConfig {
            lease_ttl: config.lease_ttl,
            max_connections: 4,
            acquire_timeout: Duration::from_secs(3),
            schema: config.schema.clone(),
        },
    )
    .await?;
    let stop_background = Arc::new(AtomicBool::new(false));
    let proxy = Arc::new(proxy);
    let server = Arc::new(tokio::sync::Mutex::new(server));
    let live = Arc::new(tokio::sync::Mutex::new(live));
    let mut background = Vec::new();
    match (faults.restart_server, replicas) {
        (Some(every), None) => background.push(tokio::spawn(restart_servers(
            server.clone(),
            proxy.clone(),
            api.clone(),
            database_url.to_owned(),
            config.lease_ttl,
            config.schema.clone(),
            every,
            stop_background.clone(),
            counts.clone(),
        ))),
        (Some(every), Some(spec)) => background.push(tokio::spawn(kill_replicas(
            live.clone(),
            upstreams.clone(),
            spec.clone(),
            database_url.to_owned(),
            config.lease_ttl,
            every,
            stop_background.clone(),
            counts.clone(),
            recorder.clone(),
            config.seed ^ 0x4e91_ca5e,
        ))),
        (None, _) => {}
    }
    let mut in_flight = vec![proxy.in_flight.clone()];
    if let Some(proxy) = &operator_proxy {
        in_flight.push(proxy.in_flight.clone());
    }
    let mut fault_names = faults.names();
    if replicas.is_some() {
        fault_names.retain(|name| *name != "restart-server");
        if faults.restart_server.is_some() {
            fault_names.push("kill-replica");
        }
    }
    let setup = Setup {
        api: Api::Http(api),
        recorder: recorder.clone(),
        reader: reader.clone(),
        project: imp::ProjectId(project),
        runners,
        stop_background,
        faults: counts,
        background,
        in_flight,
        fault_names,
    };
    let outcome = load::drive(setup, database_url, config, true).await;
    if let Some(server) = server.lock().await.take() {
        let _ = server.stop().await;
    }
    for replica in live.lock().await.iter_mut() {
        kill_replica(replica, &recorder).await;
    }
    reader.close().await;
    outcome
}

/// Every `every`, kill one replica drawn at random with SIGKILL and, half a lease later, start
/// it again (on a new port; the proxies follow).
#[allow(clippy::too_many_arguments)]
async fn kill_replicas(
    live: Arc<tokio::sync::Mutex<Vec<Replica>>>,
    upstreams: Upstreams,
    spec: ReplicaProcesses,
    database_url: String,
    lease_ttl: Duration,
    every: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<Mutex<FaultCounts>>,
    recorder: Arc<Recorder>,
    seed: u64,
) {
    let mut rng = SplitMix64::new(seed);
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(every).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut replicas = live.lock().await;
        if replicas.is_empty() {
            break;
        }
        let index = rng.below(replicas.len());
        kill_replica(&mut replicas[index], &recorder).await;
        *lock(&upstreams) = replicas
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, r)| r.addr)
            .collect();
        lock(&counts).server_restarts += 1;
        drop(replicas);
        // Down for a moment: its requests under way were cut, the others go elsewhere.
        tokio::time::sleep(lease_ttl / 2).await;
        let started = (|| start_replica(&spec, &database_url, lease_ttl, index, &recorder))
            .retry(super::retries(Duration::from_millis(200), 49))
            .notify(|error, _| eprintln!("restarting replica {index}: {error}"))
            .await;
        match started {
            Ok(new) => {
                let mut replicas = live.lock().await;
                replicas[index] = new;
                *lock(&upstreams) = replicas.iter().map(|r| r.addr).collect();
            }
            Err(error) => eprintln!("restarting replica {index}: {error}"),
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn restart_servers(
    server: Arc<tokio::sync::Mutex<Option<app::Server>>>,
    proxy: Arc<Proxy>,
    api: Arc<HttpApi>,
    database_url: String,
    lease_ttl: Duration,
    schema: String,
    every: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<Mutex<FaultCounts>>,
) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(every).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut slot = server.lock().await;
        if let Some(old) = slot.take() {
            let _ = old.stop().await;
        }
        // Down for a moment: runners see refused connections and rejoin.
        tokio::time::sleep(lease_ttl / 2).await;
        let started = (|| start_server(&database_url, lease_ttl, &schema))
            .retry(super::retries(Duration::from_millis(100), 49))
            .await;
        let Ok(new) = started else {
            eprintln!("restarting the control plane failed");
            continue;
        };
        proxy.set_upstream(new.addr);
        if let Ok(operator) = OperatorClient::new(&new.url(), OPERATOR_TOKEN) {
            *lock(&api.operator) = operator;
        }
        *slot = Some(new);
        lock(&counts).server_restarts += 1;
    }
}
