//! The HTTP driver: the same replays as the in-process driver ([`crate::pg`]), against a running
//! `leasewright serve --manual-clock` over its HTTP API (docs/http.md).
//!
//! Every trace gets the same fresh namespace as in-process (two new projects, new runners with
//! their own tokens, new jobs) and maps abstract ids to concrete ids the same way. What differs is
//! time: the server has one clock for all its clients, so traces cannot move time in parallel.
//! The driver holds one lock for the lifetime of a session, so its traces run one at a time
//! whatever the parallelism asked for, and it sets the server's clock to the trace epoch
//! ([`crate::pg::trace_epoch`]) when a trace opens. Rows of earlier traces stay in the database;
//! they belong to other projects, and the expiry sweep is scoped to the trace's project
//! (`POST /v1/sweep {"project"}`), so they never show in a trace's verdicts or projection.
//!
//! One model tick is the server's lease ttl divided by the model's `lease_ttl` (read once, from the
//! answer to a claim of a probe job, when the driver connects): the model's lease lasts exactly
//! as long as the server's.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use leasewright_model as model;
use leasewright_server::client::{CallError, OperatorClient, RunnerClient};
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::{
    AttemptBody, ClaimRequest, ClaimResponse, ClockRequest, DeployRequest, HeartbeatResponse,
    JobBody, ObservationBody, RejoinResponse, SubmitJobRequest, TupleBody, VerdictResponse,
};
use model::{Action, Expected, LeaseModel, MessageKind, State};
use tokio::sync::{Mutex, OwnedMutexGuard};
use uuid::Uuid;

use crate::driver::{
    AttemptProjection, Driver, DriverError, JobProjection, ObservationProjection, Observed,
    Projection, Session, TargetProjection,
};
use crate::pg::{code, result_digest, runner_time, trace_epoch, FORGED_LEASE};

/// Why the driver cannot run against a server (a setup failure, not a divergence).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// No answer.
    #[error("cannot reach the server at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// The operator token was refused.
    #[error(
        "the server at {url} refused the operator token (401 unauthorized): pass the token the \
         server was started with (`leasewright serve --operator-token TOKEN`) as --operator-token"
    )]
    Unauthorized { url: String },
    /// The server has no test clock.
    #[error(
        "the server at {url} has no test clock (POST /v1/test/clock is 404): replays over HTTP \
         must move the server's time, so start the server with `leasewright serve --manual-clock` \
         (a test-only mode, off by default)"
    )]
    NoManualClock { url: String },
    /// The server's lease ttl is not a whole number of model ticks.
    #[error(
        "the server's lease ttl ({ttl_ms} ms) is not a whole number of milliseconds per model \
         tick for a model lease of {ticks} ticks: start the server with a --lease-ttl whose \
         milliseconds divide by {ticks} (the default 30 s does)"
    )]
    LeaseTtl { ttl_ms: u64, ticks: u8 },
    /// Any other answer.
    #[error("the server at {url} answered unexpectedly while {doing}: {detail}")]
    Unexpected {
        url: String,
        doing: &'static str,
        detail: String,
    },
}

/// The HTTP driver over one running server.
pub struct HttpDriver {
    operator: OperatorClient,
    /// The server's lease ttl.
    lease_ttl_ms: u64,
    /// The source every job is submitted with (base64 of a one-file snapshot).
    archive_base64: String,
    /// Held by the open session: the server's clock is global, so one trace at a time.
    clock: Arc<Mutex<()>>,
}

impl HttpDriver {
    /// Connects to the server at `url` with the operator token: checks the token, the test
    /// clock, and reads the server's lease ttl from a claim of a probe job (in a probe project of
    /// its own, finished at once).
    pub async fn connect(url: &str, operator_token: &str) -> Result<Self, SetupError> {
        let url = url.trim_end_matches('/').to_owned();
        let unexpected = |doing: &'static str| {
            let url = url.clone();
            move |error: CallError| match error {
                CallError::Network(detail) => SetupError::Unreachable {
                    url: url.clone(),
                    detail,
                },
                CallError::Http { status: 401, .. } => {
                    SetupError::Unauthorized { url: url.clone() }
                }
                other => SetupError::Unexpected {
                    url: url.clone(),
                    doing,
                    detail: other.to_string(),
                },
            }
        };
        let operator =
            OperatorClient::new(&url, operator_token).map_err(unexpected("building a client"))?;
        // The token first, on a route every server has (a never-used target slot: 404 when the
        // token is good, 401 when it is not).
        match operator.target("leasewright-conform-probe").await {
            Ok(_) => {}
            Err(CallError::Http { status: 404, .. }) => {}
            Err(error) => return Err(unexpected("checking the operator token")(error)),
        }
        match operator.clock(&ClockRequest::default()).await {
            Ok(_) => {}
            Err(CallError::Http { status: 404, .. }) => {
                return Err(SetupError::NoManualClock { url: url.clone() })
            }
            Err(error) => return Err(unexpected("reading the test clock")(error)),
        }
        let snapshot = build_snapshot(vec![SourceFile {
            path: "README".into(),
            mode: 0o644,
            content: b"a job of a conformance trace; its command is `true`\n".to_vec(),
        }])
        .map_err(|e| SetupError::Unexpected {
            url: url.clone(),
            doing: "building the source snapshot",
            detail: e.to_string(),
        })?;
        let archive_base64 = base64::engine::general_purpose::STANDARD.encode(&snapshot.archive);
        // The lease ttl: claim a probe job, read `lease_ttl_ms`, finish the job.
        let probe = format!("conform-probe-{}", Uuid::new_v4().simple());
        let doing = "claiming a probe job to read the lease ttl";
        let project = operator
            .create_project(&probe)
            .await
            .map_err(unexpected(doing))?;
        let runner = operator
            .create_runner(project, "probe")
            .await
            .map_err(unexpected(doing))?;
        operator
            .submit(project, &submit_request(&archive_base64, "probe", None))
            .await
            .map_err(unexpected(doing))?;
        let client = RunnerClient {
            http: operator.http.with_token(&runner.token),
        };
        let claimed: ClaimResponse = client
            .http
            .post("/v1/runner/claim", &ClaimRequest::default())
            .await
            .map_err(unexpected(doing))?;
        let lease = claimed
            .leases
            .into_iter()
            .next()
            .ok_or_else(|| SetupError::Unexpected {
                url: url.clone(),
                doing,
                detail: "an accepted claim without a lease".into(),
            })?;
        client
            .result(&lease.tuple(None), "passed", "sha256:probe")
            .await
            .map_err(unexpected(doing))?;
        Ok(Self {
            operator,
            lease_ttl_ms: lease.lease_ttl_ms,
            archive_base64,
            clock: Arc::new(Mutex::new(())),
        })
    }

    /// The server's lease ttl.
    pub fn lease_ttl_ms(&self) -> u64 {
        self.lease_ttl_ms
    }

    /// The server time of one tick of a model whose leases last `lease_ttl` ticks: the server's
    /// lease ttl must be a whole number of milliseconds per tick.
    pub fn tick_ms(&self, lease_ttl: u8) -> Result<i64, SetupError> {
        let error = SetupError::LeaseTtl {
            ttl_ms: self.lease_ttl_ms,
            ticks: lease_ttl,
        };
        let ticks = u64::from(lease_ttl);
        let tick = self.lease_ttl_ms.checked_div(ticks).unwrap_or(0);
        if tick == 0 || tick * ticks != self.lease_ttl_ms {
            return Err(error);
        }
        i64::try_from(tick).map_err(|_| error)
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        self.operator.http.base()
    }
}

fn submit_request(archive_base64: &str, revision: &str, kind: Option<&str>) -> SubmitJobRequest {
    SubmitJobRequest {
        command: "true".into(),
        source_revision: revision.into(),
        source_archive_base64: archive_base64.into(),
        artifacts: Vec::new(),
        target: None,
        target_kind: kind.map(str::to_owned),
    }
}

impl Driver for HttpDriver {
    type Session = HttpSession;

    fn name(&self) -> String {
        format!("http ({})", self.url())
    }

    async fn open(&self, model: &LeaseModel, trace: &str) -> Result<HttpSession, DriverError> {
        let config = &model.config;
        let tick_ms = self.tick_ms(config.lease_ttl).map_err(unmappable)?;
        // One trace at a time: the clock is the server's, not the trace's.
        let guard = Arc::clone(&self.clock).lock_owned().await;
        let op = &self.operator;
        op.clock(&ClockRequest {
            set: Some(trace_epoch()),
            advance_ms: None,
        })
        .await
        .map_err(failed)?;
        let unique = Uuid::new_v4().simple().to_string();
        let project = op
            .create_project(&format!("{trace}-{unique}"))
            .await
            .map_err(failed)?;
        let outsider_project = op
            .create_project(&format!("{trace}-{unique}-outsider"))
            .await
            .map_err(failed)?;
        let mut runners = Vec::new();
        let mut clients = Vec::new();
        let mut add = |created: leasewright_server::wire::RunnerResponse| {
            runners.push(created.runner);
            clients.push(RunnerClient {
                http: op.http.with_token(&created.token),
            });
        };
        for r in 0..config.runners {
            add(op
                .create_runner(project, &format!("runner-{r}"))
                .await
                .map_err(failed)?);
        }
        if let Some(_outsider) = model.outsider() {
            add(op
                .create_runner(outsider_project, "outsider")
                .await
                .map_err(failed)?);
        }
        let mut jobs = Vec::new();
        let mut slots = Vec::new();
        for j in 0..config.jobs {
            let submitted = op
                .submit(
                    project,
                    &submit_request(
                        &self.archive_base64,
                        &format!("rev-{j}"),
                        Some(config.target.as_str()),
                    ),
                )
                .await
                .map_err(failed)?;
            let view = op.job(project, submitted.job).await.map_err(failed)?;
            slots.push(view.target);
            jobs.push(submitted.job);
        }
        Ok(HttpSession {
            operator: op.clone(),
            tick_ms,
            project,
            outsider_project,
            runners,
            clients,
            jobs,
            attempts: Vec::new(),
            slot_tokens: Vec::new(),
            leases: BTreeMap::new(),
            slots,
            target_kind: config.target,
            last_observation: 0,
            _clock: guard,
        })
    }
}

impl HttpSession {
    /// The project whose operator takes an operator step: project 0's, or the outsider's.
    fn operator_project(&self, action: &Action) -> Uuid {
        match action {
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. } => {
                self.outsider_project
            }
            _ => self.project,
        }
    }
}

/// One trace's namespace on the server.
pub struct HttpSession {
    operator: OperatorClient,
    /// One model tick, in milliseconds of server time.
    tick_ms: i64,
    project: Uuid,
    /// The outsider's project (model project 1).
    outsider_project: Uuid,
    /// Model runner index → runner (the outsider last).
    runners: Vec<Uuid>,
    /// Model runner index → a client speaking with that runner's token.
    clients: Vec<RunnerClient>,
    /// Model job index → job.
    jobs: Vec<Uuid>,
    /// Model attempt index → attempt.
    attempts: Vec<Uuid>,
    /// Model attempt index → the slot token its lease carries, which its target mutations carry
    /// (docs/protocol.md §8.3).
    slot_tokens: Vec<i64>,
    /// Model lease id → lease id.
    leases: BTreeMap<u8, Uuid>,
    /// Model job index → its target slot.
    slots: Vec<String>,
    target_kind: model::TargetKind,
    /// The highest observation id seen so far.
    last_observation: i64,
    /// The server's clock is this trace's until the session ends.
    _clock: OwnedMutexGuard<()>,
}

impl HttpSession {
    fn tuple(&self, m: &model::Message) -> Result<(&RunnerClient, TupleBody), DriverError> {
        fn get<T: Copy>(v: &[T], i: u8, what: &str) -> Result<T, DriverError> {
            v.get(i as usize)
                .copied()
                .ok_or_else(|| unmappable(format!("{what} {i}")))
        }
        let client = self
            .clients
            .get(m.sender as usize)
            .ok_or_else(|| unmappable(format!("runner {}", m.sender)))?;
        Ok((
            client,
            TupleBody {
                job: get(&self.jobs, m.job, "job")?,
                attempt: get(&self.attempts, m.attempt, "attempt")?,
                lease_id: if m.lease == model::FORGED_LEASE {
                    FORGED_LEASE
                } else {
                    *self
                        .leases
                        .get(&m.lease)
                        .ok_or_else(|| unmappable(format!("lease {}", m.lease)))?
                },
                fence: i64::from(m.fence),
                runner_time: Some(runner_time(m.runner_time)),
            },
        ))
    }

    fn index_of<T: PartialEq>(v: &[T], x: &T, what: &str) -> Result<u8, DriverError> {
        v.iter()
            .position(|y| y == x)
            .map(|i| i as u8)
            .ok_or_else(|| {
                DriverError::Implementation(format!("the implementation shows an unknown {what}"))
            })
    }

    async fn deliver(&self, m: &model::Message) -> Result<Observed, DriverError> {
        let (client, tuple) = self.tuple(m)?;
        match m.kind {
            MessageKind::Heartbeat => answer(
                client
                    .http
                    .post::<_, HeartbeatResponse>("/v1/runner/heartbeat", &tuple)
                    .await,
                |r| &r.verdict,
            ),
            MessageKind::Result(outcome) => answer(
                client
                    .result(&tuple, outcome.as_str(), &result_digest(outcome, m.digest))
                    .await,
                |r| &r.verdict,
            ),
            MessageKind::Rejoin => answer(
                client
                    .http
                    .post::<_, RejoinResponse>("/v1/runner/rejoin", &tuple)
                    .await,
                |r| &r.verdict,
            ),
            MessageKind::TargetMutation => {
                let slot = &self.slots[m.job as usize];
                let slot_token = *self
                    .slot_tokens
                    .get(m.attempt as usize)
                    .ok_or_else(|| unmappable(format!("attempt {}", m.attempt)))?;
                let body = DeployRequest {
                    kind: self.target_kind.as_str().into(),
                    job: tuple.job,
                    attempt: tuple.attempt,
                    slot_token,
                    deployment_id: tuple.job.to_string(),
                };
                answer(
                    self.operator
                        .http
                        .post::<_, VerdictResponse>(&format!("/v1/targets/{slot}/deploy"), &body)
                        .await,
                    |r| &r.verdict,
                )
            }
        }
    }

    /// Every observation naming one of this trace's jobs, oldest first.
    async fn records(&self) -> Result<Vec<ObservationBody>, DriverError> {
        let mut all = Vec::new();
        for job in &self.jobs {
            all.extend(
                self.operator
                    .observations(self.project, *job)
                    .await
                    .map_err(failed)?,
            );
        }
        all.sort_by_key(|o| o.id);
        Ok(all)
    }

    /// The projection of `o`, read from the observations of model job `job` (the route is per
    /// job, so the body does not repeat the job it names).
    fn observation(
        &self,
        job: usize,
        o: &ObservationBody,
    ) -> Result<ObservationProjection, DriverError> {
        let verdict: model::Verdict = code(&o.verdict)?;
        let reason = match (&o.reason, verdict) {
            (Some(reason), model::Verdict::Rejected) => Some(code(reason)?),
            (None, model::Verdict::Rejected) => {
                return Err(DriverError::Implementation(
                    "a rejected observation without a reason".into(),
                ))
            }
            _ => None,
        };
        let kind = match o.kind.as_str() {
            "heartbeat" => "heartbeat",
            "result" => "result",
            "rejoin" => "rejoin",
            other => {
                return Err(DriverError::Implementation(format!(
                    "an observation of kind {other} in a trace that sends none"
                )))
            }
        };
        Ok(ObservationProjection {
            attempt: match o.attempt {
                Some(a) => Some(Self::index_of(&self.attempts, &a, "attempt")?),
                None => None,
            },
            sender: Self::index_of(&self.runners, &o.runner, "runner")?,
            kind,
            job: u8::try_from(job).map_err(|_| unmappable(format!("job {job}")))?,
            named_attempt: Self::index_of(&self.attempts, &o.named_attempt, "attempt")?,
            verdict,
            reason,
        })
    }

    fn job_projection(
        &self,
        view: &JobBody,
        attempts: &[AttemptBody],
    ) -> Result<JobProjection, DriverError> {
        let mut ledger = Vec::with_capacity(attempts.len());
        for a in attempts {
            ledger.push(AttemptProjection {
                attempt: Self::index_of(&self.attempts, &a.attempt, "attempt")?,
                runner: Self::index_of(&self.runners, &a.runner, "runner")?,
                fence: u8::try_from(a.fence).map_err(|_| {
                    DriverError::Implementation(format!("fence {} out of range", a.fence))
                })?,
                state: code(&a.state)?,
            });
        }
        ledger.sort_by_key(|a| a.attempt);
        let state: model::JobState = code(&view.state)?;
        let current_attempt = match view.current_attempt {
            Some(a) => Some(Self::index_of(&self.attempts, &a, "attempt")?),
            None => None,
        };
        let lease_holder = match current_attempt {
            Some(a) if state.is_leased() => {
                ledger.iter().find(|l| l.attempt == a).map(|l| l.runner)
            }
            _ => None,
        };
        Ok(JobProjection {
            state,
            current_attempt,
            fence: u8::try_from(view.fence).map_err(|_| {
                DriverError::Implementation(format!("fence {} out of range", view.fence))
            })?,
            lease_holder,
            cancel_requested: view.cancel_requested,
            target_reserved: view.target_reserved_by.is_some(),
            ledger,
        })
    }
}

impl Session for HttpSession {
    async fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> Result<Option<Observed>, DriverError> {
        let verdict = match action {
            Action::Claim { runner } => {
                let client = self
                    .clients
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                let request = ClaimRequest {
                    capacity: Some(1),
                    runner_time: None,
                };
                let result = client
                    .http
                    .post::<_, ClaimResponse>("/v1/runner/claim", &request)
                    .await;
                if let Ok(claimed) = &result {
                    let [lease] = claimed.leases.as_slice() else {
                        return Err(DriverError::Implementation(format!(
                            "a claim of one job answered {} leases",
                            claimed.leases.len()
                        )));
                    };
                    let index = self.attempts.len();
                    let Some(created) = after.attempts.get(index) else {
                        return Err(DriverError::Implementation(
                            "the implementation accepted a claim the model rejected".into(),
                        ));
                    };
                    self.attempts.push(lease.attempt);
                    self.slot_tokens.push(lease.slot_token);
                    self.leases.insert(created.lease, lease.lease_id);
                }
                Some(answer(result, |r| &r.verdict)?)
            }
            // A heartbeat is a request the server answers at once (the model keeps none in
            // flight).
            Action::Heartbeat {
                runner,
                runner_time,
            } => Some(
                self.deliver(&crate::pg::heartbeat(before, *runner, *runner_time)?)
                    .await?,
            ),
            Action::Deliver { message } => Some(self.deliver(message).await?),
            Action::Replay {
                runner,
                message,
                forge,
            } => Some(
                self.deliver(&LeaseModel::replayed(before, message, *runner, *forge))
                    .await?,
            ),
            Action::Tick => {
                self.operator
                    .advance_clock(self.tick_ms)
                    .await
                    .map_err(failed)?;
                None
            }
            Action::ExpirySweep => {
                let swept = self
                    .operator
                    .sweep_project(self.project)
                    .await
                    .map_err(failed)?;
                Some(match swept.verdict.as_str() {
                    "uncertain" => Expected::UNCERTAIN,
                    "accepted" => Expected::ACCEPTED,
                    other => {
                        return Err(DriverError::Implementation(format!(
                            "the sweep answered `{other}`"
                        )))
                    }
                })
            }
            Action::Cancel { job } | Action::OutsiderCancel { job } => {
                let project = self.operator_project(action);
                let id = self.jobs[*job as usize];
                Some(answer(self.operator.cancel(project, id).await, |r| {
                    &r.verdict
                })?)
            }
            Action::Reconcile {
                job,
                finding,
                decision,
            }
            | Action::OutsiderReconcile {
                job,
                finding,
                decision,
            } => {
                let project = self.operator_project(action);
                let id = self.jobs[*job as usize];
                Some(answer(
                    self.operator
                        .reconcile(project, id, finding.as_str(), decision.as_str())
                        .await,
                    |r| &r.verdict,
                )?)
            }
            // Runner-local steps, as in-process: nothing reaches the server.
            Action::Result { .. }
            | Action::TargetMutation { .. }
            | Action::StopExecuting { .. }
            | Action::Disconnect { .. }
            | Action::Rejoin { .. } => None,
        };
        Ok(verdict)
    }

    async fn mark(&mut self) -> Result<(), DriverError> {
        self.last_observation = self
            .records()
            .await?
            .iter()
            .map(|o| o.id)
            .max()
            .unwrap_or(0);
        Ok(())
    }

    async fn project(&mut self) -> Result<Projection, DriverError> {
        // Four independent reads of committed state, at once: the step before has finished.
        let this = &*self;
        let (views, attempts, observations, target_states) = tokio::try_join!(
            async { this.operator.jobs(this.project).await.map_err(failed) },
            async {
                let mut all = Vec::with_capacity(this.jobs.len());
                for id in &this.jobs {
                    all.push(
                        this.operator
                            .attempts(this.project, *id)
                            .await
                            .map_err(failed)?,
                    );
                }
                Ok(all)
            },
            async {
                let mut all = Vec::with_capacity(this.jobs.len());
                for id in &this.jobs {
                    all.push(
                        this.operator
                            .observations(this.project, *id)
                            .await
                            .map_err(failed)?,
                    );
                }
                Ok(all)
            },
            async {
                let mut all = Vec::with_capacity(this.slots.len());
                for slot in &this.slots {
                    all.push(match this.operator.target(slot).await {
                        Ok(state) => (state.applied_count, state.highest_slot_token.unwrap_or(0)),
                        // A slot no mutation has reached yet.
                        Err(CallError::Http { status: 404, .. }) => (0, 0),
                        Err(error) => return Err(failed(error)),
                    });
                }
                Ok(all)
            },
        )?;
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for ((j, id), attempts) in self.jobs.iter().enumerate().zip(&attempts) {
            let view = views
                .iter()
                .find(|v| v.job == *id)
                .ok_or_else(|| DriverError::Implementation(format!("job {j} vanished")))?;
            jobs.push(self.job_projection(view, attempts)?);
        }
        let mut recorded: Vec<(usize, ObservationBody)> = observations
            .into_iter()
            .enumerate()
            .flat_map(|(j, list)| list.into_iter().map(move |o| (j, o)))
            .filter(|(_, o)| o.id > self.last_observation)
            .collect();
        recorded.sort_by_key(|(_, o)| o.id);
        if let Some(max) = recorded.iter().map(|(_, o)| o.id).max() {
            self.last_observation = max;
        }
        let cap = i64::from(crate::driver::applied_cap(self.target_kind));
        let targets = target_states
            .into_iter()
            .map(|(applied, highest)| TargetProjection {
                applied: applied.clamp(0, cap) as u8,
                highest_fence: highest.clamp(0, 255) as u8,
            })
            .collect();
        let observation = match recorded.as_slice() {
            [] => None,
            [(j, o)] => Some(self.observation(*j, o)?),
            many => {
                return Err(DriverError::Implementation(format!(
                    "one step recorded {} observations",
                    many.len()
                )))
            }
        };
        Ok(Projection {
            jobs,
            targets,
            observation,
            details: None,
        })
    }
}

/// The verdict of an answer: 200 with `accepted`/`acknowledged`, or a 409 rejection with the
/// spec's reason. Any other failure is the implementation's, not a verdict.
fn answer<T>(
    result: Result<T, CallError>,
    verdict: impl FnOnce(&T) -> &String,
) -> Result<Observed, DriverError> {
    match result {
        Ok(body) => match verdict(&body).as_str() {
            "accepted" => Ok(Expected::ACCEPTED),
            "acknowledged" => Ok(Expected::ACKNOWLEDGED),
            other => Err(DriverError::Implementation(format!(
                "a 200 answer with the verdict `{other}`"
            ))),
        },
        Err(CallError::Rejected { code, .. }) => Ok(match code.parse::<model::Reason>() {
            Ok(reason) => Expected::rejected(reason),
            // A reason the spec does not name: a rejection without a known reason, which never
            // equals an expected verdict.
            Err(_) => Expected {
                verdict: model::Verdict::Rejected,
                reason: None,
            },
        }),
        Err(error) => Err(failed(error)),
    }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn failed(error: CallError) -> DriverError {
    DriverError::Implementation(format!("HTTP: {error}"))
}

fn unmappable(what: impl std::fmt::Display) -> DriverError {
    DriverError::Unmappable(what.to_string())
}
