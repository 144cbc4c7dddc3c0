//! The command driver: any implementation, in any language, behind a child process that speaks the
//! language-neutral driver protocol (docs/conformance.md, "The driver protocol"; one JSON Schema
//! per message in docs/conformance-driver/).
//!
//! `leasewright conform --driver-cmd "CMD"` starts CMD (through `sh -c`) and speaks one JSON object
//! per line over its stdin and stdout, in the manner of Jepsen's Maelstrom: the harness asks, the
//! driver answers each request with exactly one line before the next request is sent. Everything
//! is in the model's vocabulary with abstract ids (runner 0, job 1, attempt 2, lease 3, slot 0):
//! the driver maps them to its implementation's own ids, and the harness never learns those.
//!
//! One process serves one trace at a time; a trace's `open` discards whatever the process held
//! before. Traces run in parallel on several processes of the same command (`--parallel`), each
//! started once and reused for trace after trace. A process that answers out of turn, with an
//! error, or not at all within [`REPLY_TIMEOUT`] is killed and not reused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasewright_model::{
    Action, AttemptState, Expected, Fence, JobState, LeaseModel, Message, MessageKind, Reason,
    RunnerId, SideEffect, State, TargetKind,
};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::driver::{
    applied_cap, payload_label, rejoin_instruction, Answer, AttemptProjection, Details, Driver,
    DriverError, JobProjection, ObservationDetails, ObservationProjection, Observed, Part,
    PayloadDigests, Projection, Session, TargetProjection,
};
use crate::driver::{heartbeat, result_digest};

/// The protocol's name, sent in `hello`.
pub const PROTOCOL: &str = "leasewright-driver";
/// The newest protocol version this harness speaks, sent in `hello`. A driver answers with the
/// version it speaks: [`VERSIONS`] are accepted, any other is refused at setup.
pub const VERSION: u64 = 5;
/// The versions this harness accepts. Version 2 adds the rule details (class 5 of
/// docs/conformance.md): a verdict's `answer` and an observation's `lease`, `fence`, `outcome`,
/// `runner_time` and `digest`. Over a version 1 driver they are not compared, and the summary says
/// so. Version 3 adds the traces versions 1 and 2 cannot say ([`crate::suite::LeftOut`]): slots
/// shared by the jobs the model puts on them, the outsider project's jobs, the side effects of R8
/// and messages naming ids no one created. Over a version 1 or 2 driver those traces are left out,
/// and the summary says how many. Version 4 adds replica clocks: `open` says the trace's δ
/// (`max_clock_skew`, in ticks) and the `replica_clock` step moves the server's receipt time to
/// another replica's clock, and a walk pruned between its jobs is pruned (the `audit_mark` and
/// `prune` steps); over a version 1 to 3 driver the replica clocks are left out and a pruned walk
/// replays unpruned. Version 5 adds the failover: the `replicate` step says what a standby holds,
/// the `failover` step promotes it (the epoch rises, claims wait); over a version 1 to 4 driver
/// the failovers are left out.
pub const VERSIONS: std::ops::RangeInclusive<u64> = 1..=5;
/// The first version that replays every trace of every suite of its time (all but the failovers
/// and, before version 4, the replica clocks).
pub const VERSION_WITH_EVERY_TRACE: u64 = 3;
/// The first version that replays replica clocks and prunes the pruned walks.
pub const VERSION_4: u64 = 4;
/// The first version that replays failovers (the `replicate` and `failover` steps).
pub const VERSION_5: u64 = 5;
/// How long the harness waits for one answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the command cannot serve as a driver (a setup failure, not a divergence).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The command could not be started.
    #[error("cannot start the driver command `{command}`: {detail}")]
    Spawn { command: String, detail: String },
    /// The command did not answer `hello` as the protocol says.
    #[error(
        "the driver command `{command}` did not answer the protocol's hello \
         (docs/conformance.md, \"The driver protocol\"): {detail}"
    )]
    Handshake { command: String, detail: String },
    /// The command speaks another version.
    #[error(
        "the driver command `{command}` speaks version {theirs} of the driver protocol; this \
         harness speaks versions 1 to {VERSION}"
    )]
    Version { command: String, theirs: u64 },
}

/// One running driver process.
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Process {
    fn spawn(command: &str) -> std::io::Result<Process> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        Ok(Process {
            child,
            stdin,
            stdout,
            next_id: 1,
        })
    }

    /// Sends `request` (an object; its `id` is added) and reads the one answer, which must name
    /// the request in `in_reply_to` and must not be an `error`.
    async fn call(&mut self, mut request: Value) -> Result<Value, DriverError> {
        let id = self.next_id;
        self.next_id += 1;
        request["id"] = json!(id);
        let kind = request["type"].as_str().unwrap_or("?").to_owned();
        let mut line = serde_json::to_string(&request).expect("a request serializes");
        line.push('\n');
        let io = |e: std::io::Error| failed(format!("writing `{kind}` to the driver: {e}"));
        self.stdin.write_all(line.as_bytes()).await.map_err(io)?;
        self.stdin.flush().await.map_err(io)?;
        let answer = match tokio::time::timeout(REPLY_TIMEOUT, self.stdout.next_line()).await {
            Err(_) => {
                return Err(failed(format!(
                    "no answer to `{kind}` within {} s",
                    REPLY_TIMEOUT.as_secs()
                )))
            }
            Ok(Err(e)) => return Err(failed(format!("reading the answer to `{kind}`: {e}"))),
            Ok(Ok(None)) => {
                let status = self.child.try_wait().ok().flatten();
                return Err(failed(format!(
                    "the driver closed its output instead of answering `{kind}`{}",
                    status.map(|s| format!(" ({s})")).unwrap_or_default()
                )));
            }
            Ok(Ok(Some(text))) => text,
        };
        let answer: Value = serde_json::from_str(&answer).map_err(|e| {
            failed(format!(
                "the answer to `{kind}` is not one JSON object on a line ({e}): {answer}"
            ))
        })?;
        if answer["in_reply_to"] != json!(id) {
            return Err(failed(format!(
                "the answer to `{kind}` (id {id}) names in_reply_to {}",
                answer["in_reply_to"]
            )));
        }
        if answer["type"] == "error" {
            return Err(failed(format!(
                "the driver answered `{kind}` with an error: {}",
                answer["message"].as_str().unwrap_or("(no message)")
            )));
        }
        Ok(answer)
    }

    /// Starts `command` and checks its `hello`: the protocol and the version. Returns the process,
    /// the implementation's name and the version it speaks.
    async fn start(command: &str) -> Result<(Process, String, u64), SetupError> {
        let mut process = Process::spawn(command).map_err(|e| SetupError::Spawn {
            command: command.into(),
            detail: e.to_string(),
        })?;
        let handshake = |detail: String| SetupError::Handshake {
            command: command.into(),
            detail,
        };
        let answer = process
            .call(json!({"type": "hello", "protocol": PROTOCOL, "version": VERSION}))
            .await
            .map_err(|e| handshake(e.to_string()))?;
        let hello: HelloOk = serde_json::from_value(answer.clone())
            .map_err(|e| handshake(format!("{e}: {answer}")))?;
        if hello.kind != "hello_ok" || hello.protocol != PROTOCOL {
            return Err(handshake(format!(
                "expected a hello_ok of {PROTOCOL}: {answer}"
            )));
        }
        if !VERSIONS.contains(&hello.version) {
            return Err(SetupError::Version {
                command: command.into(),
                theirs: hello.version,
            });
        }
        Ok((process, hello.implementation, hello.version))
    }
}

#[derive(Deserialize)]
struct HelloOk {
    #[serde(rename = "type")]
    kind: String,
    protocol: String,
    version: u64,
    implementation: String,
}

/// Processes not serving a trace right now.
type Idle = Arc<Mutex<Vec<Process>>>;

/// The command driver: traces replayed on child processes of one command.
pub struct CmdDriver {
    command: String,
    implementation: String,
    /// The protocol version the command speaks.
    version: u64,
    idle: Idle,
}

impl CmdDriver {
    /// Starts `command` once and checks that it speaks this version of the protocol; more
    /// processes of it are started as parallel traces need them.
    pub async fn connect(command: &str) -> Result<Self, SetupError> {
        let (process, implementation, version) = Process::start(command).await?;
        Ok(Self {
            command: command.into(),
            implementation,
            version,
            idle: Arc::new(Mutex::new(vec![process])),
        })
    }

    /// The command.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The implementation's name, as its driver gave it in `hello_ok`.
    pub fn implementation(&self) -> &str {
        &self.implementation
    }

    /// The protocol version the command speaks.
    pub fn version(&self) -> u64 {
        self.version
    }

    async fn process(&self) -> Result<Process, DriverError> {
        let idle = self.idle.lock().expect("the idle list").pop();
        match idle {
            Some(process) => Ok(process),
            None => Process::start(&self.command)
                .await
                .map(|(process, _, _)| process)
                .map_err(|e| failed(e.to_string())),
        }
    }
}

/// The `open` request for a trace of `model` (see the schema `open.schema.json`).
pub fn open_request(model: &LeaseModel, trace: &str) -> Value {
    let c = &model.config;
    // Every job of both projects, in the model's order (project 0's, then the outsider
    // project's), each with the slot the model puts it on: jobs naming one slot share it (its
    // reservation and its token counter, docs/protocol.md §8.1). A version 1 or 2 driver is sent
    // only traces where `project` is 0 and slot j is job j's (`suite::driver_cmd_leaves_out`).
    let jobs: Vec<Value> = (0..c.all_jobs())
        .map(|j| {
            json!({
                "slot": c.slot_of(j),
                "target_kind": c.target.as_str(),
                "project": if j < c.jobs { 0 } else { 1 },
            })
        })
        .collect();
    json!({
        "type": "open",
        "trace": trace,
        "config": {
            "runners": c.runners,
            "outsider": model.outsider().is_some(),
            "jobs": jobs,
            "lease_ttl": c.lease_ttl,
            // Version 4: δ, the largest skew between the replicas' clocks, in ticks (0: one
            // clock). The expiry sweep acts 2δ past a lease's expiry (docs/protocol.md §3.1).
            "max_clock_skew": c.replica_skew,
        },
    })
}

/// The tuple fields of a runner message.
fn tuple(m: &Message) -> Value {
    json!({
        "runner": m.sender,
        "job": m.job,
        "attempt": m.attempt,
        "lease": m.lease,
        "fence": m.fence,
        "runner_time": m.runner_time,
    })
}

/// The fields of a side-effect step (version 3): its action and its payload.
fn side_effect_fields(effect: SideEffect) -> Value {
    use crate::side_effects::{payload_bytes, ARTIFACT_NAME, CACHE_KEY};
    let content = payload_bytes(effect).map(|b| String::from_utf8(b).expect("UTF-8 payloads"));
    match effect {
        SideEffect::SourceFetch => json!({"action": "source_fetch"}),
        SideEffect::LogAppend { seq, .. } => {
            json!({"action": "log_append", "seq": seq, "content": content})
        }
        SideEffect::ArtifactPut { .. } => {
            json!({"action": "artifact_put", "name": ARTIFACT_NAME, "content": content})
        }
        SideEffect::ArtifactGet => json!({"action": "artifact_get", "name": ARTIFACT_NAME}),
        SideEffect::CachePut { .. } => {
            json!({"action": "cache_put", "key": CACHE_KEY, "content": content})
        }
        SideEffect::CacheGet => json!({"action": "cache_get", "key": CACHE_KEY}),
    }
}

/// The step a message's delivery is, in `before` (which names the slot a job is on).
fn delivery(before: &State, m: &Message) -> Value {
    let slot = before
        .jobs
        .get(usize::from(m.job))
        .map_or(m.job, |j| j.slot);
    match m.kind {
        MessageKind::Heartbeat => with(tuple(m), json!({"action": "heartbeat"})),
        MessageKind::Rejoin => with(tuple(m), json!({"action": "rejoin"})),
        MessageKind::Result(outcome) => with(
            tuple(m),
            json!({"action": "result", "outcome": outcome.as_str(), "digest": result_digest(outcome, m.digest)}),
        ),
        // Version 3: the side effects of R8, each with its payload as a string (the bytes the
        // other drivers send, `crate::side_effects`).
        MessageKind::SideEffect(effect) => with(tuple(m), side_effect_fields(effect)),
        // The slot token the message carries (a stale or forged one included), not the named
        // attempt's own: the target compares what it is sent (§8.4). The slot is the one the
        // model puts the job on (shared by several jobs with `Config::shared_slot`).
        MessageKind::TargetMutation => json!({
            "action": "target_mutation",
            "runner": m.sender,
            "slot": slot,
            "job": m.job,
            "attempt": m.attempt,
            "slot_token": m.token,
            "deployment": m.job,
        }),
    }
}

fn with(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

/// The `step` the model's `action` from `before` to `after` is on the wire, or `None` for a step
/// the implementation never sees (a runner sending a message that is then in flight, a runner
/// stopping or disconnecting): the harness sends nothing for those and expects no verdict.
pub fn step_request(
    before: &State,
    action: &Action,
    after: &State,
) -> Result<Option<Value>, DriverError> {
    // The project whose operator takes an operator step: the job's own, or (the model's
    // `outsider_*` actions) the other one.
    let operator = |job: u8, outsider: bool| {
        let own = LeaseModel::project_of(before, job);
        if outsider {
            1 - own.min(1)
        } else {
            own
        }
    };
    let step = match action {
        // Version 5: the standby the last `replicate` step brought up to date is promoted: the
        // implementation holds what it held then, its epoch rises, and the new epoch's first
        // claim comes at once (runners poll), starting the wait (docs/protocol.md §2 "Epochs").
        // A version 1 to 4 driver is never sent such a trace (`suite::LeftOut::Failover`).
        Action::Failover => json!({"action": "failover"}),
        // A second server starts only where servers differ in lease ttl (`Config::policy_ttl`),
        // which no suite replays.
        Action::ServerStarts => {
            return Err(DriverError::Unmappable(crate::select::FAILOVER.into()))
        }
        // Version 4: the next steps are served by a replica whose clock reads `offset` ticks off
        // the true one (a version 1 to 3 driver is never sent such a trace).
        Action::ReplicaClock { offset } => json!({"action": "replica_clock", "offset": offset}),
        Action::Claim { runner } => {
            // The names the claim's attempt and lease take from now on, if it is accepted.
            let attempt = before.attempts.len();
            let lease = after.attempts.get(attempt).map(|a| a.lease);
            json!({"action": "claim", "runner": runner, "attempt": attempt, "lease": lease})
        }
        // A batch claim: the claim step with a `limit` (docs/conformance.md). The jobs it takes,
        // in submission order, take the attempts `attempt`, `attempt + 1`, ... and the leases
        // `leases[0]`, `leases[1]`, ... (the model's, for the jobs the model takes).
        Action::ClaimBatch { runner, limit } => {
            let attempt = before.attempts.len();
            let leases: Vec<u8> = after.attempts[attempt.min(after.attempts.len())..]
                .iter()
                .map(|a| a.lease)
                .collect();
            json!({
                "action": "claim",
                "runner": runner,
                "limit": limit,
                "attempt": attempt,
                "lease": leases.first(),
                "leases": leases,
            })
        }
        Action::Heartbeat {
            runner,
            runner_time,
            attempt,
        } => delivery(before, &heartbeat(before, *runner, *attempt, *runner_time)?),
        Action::Deliver { message } => delivery(before, message),
        Action::Replay {
            runner,
            message,
            forge,
        } => delivery(
            before,
            &LeaseModel::replayed(before, message, *runner, *forge),
        ),
        Action::Tick => json!({"action": "tick"}),
        // An operator of project 0 revokes one of its runners (docs/conformance.md): no
        // verdict; from then on the implementation refuses the runner `unknown_runner` and
        // records nothing it sends.
        Action::RunnerRevoke { runner } => {
            json!({"action": "runner_revoke", "project": 0, "runner": runner})
        }
        // The model's sweep covers every job of both projects. A version 1 or 2 driver is sent
        // `project` 0 (its traces have no job of another project); version 3 says no project:
        // the sweep over every project of the trace, as the server's sweeper runs it.
        Action::ExpirySweep => json!({"action": "expiry_sweep"}),
        Action::Cancel { job } | Action::OutsiderCancel { job } => json!({
            "action": "cancel",
            "project": operator(*job, matches!(action, Action::OutsiderCancel { .. })),
            "job": job,
        }),
        Action::Reconcile {
            job,
            finding,
            decision,
        }
        | Action::OutsiderReconcile {
            job,
            finding,
            decision,
        } => json!({
            "action": "reconcile",
            "project": operator(*job, matches!(action, Action::OutsiderReconcile { .. })),
            "job": job,
            "finding": finding.as_str(),
            "decision": decision.as_str(),
        }),
        Action::SideEffect { runner, effect } => delivery(
            before,
            &LeaseModel::message(before, *runner, MessageKind::SideEffect(*effect), 0).ok_or_else(
                || DriverError::Unmappable(format!("a side effect from runner {runner}")),
            )?,
        ),
        Action::Result { .. }
        | Action::TargetMutation { .. }
        | Action::StopExecuting { .. }
        | Action::Disconnect { .. }
        | Action::Rejoin { .. } => return Ok(None),
    };
    Ok(Some(json!({"type": "step", "step": step})))
}

impl Driver for CmdDriver {
    type Session = CmdSession;

    fn name(&self) -> String {
        format!("driver-cmd ({})", self.implementation)
    }

    /// A walk pruned between its jobs ([`super::prune`]) is pruned over a version 4 driver (the
    /// `audit_mark` and `prune` steps); an older driver replays it as the walk it is. A walk
    /// through a failover (version 5) brings the standby up to date (`replicate`) before each
    /// transition a failover loses ([`super::failover::snapshot_steps`]).
    async fn open_trace(
        &self,
        model: &LeaseModel,
        trace: &crate::generate::Generated<LeaseModel>,
    ) -> Result<CmdSession, DriverError> {
        let mut session = self.open(model, &trace.name).await?;
        if self.version >= VERSION_5 && super::failover::has_failover(trace) {
            session.replicate_before = super::failover::snapshot_steps(trace).ok_or_else(|| {
                DriverError::Unmappable(
                    "a failover whose lost transition is not one of the trace's steps".into(),
                )
            })?;
        }
        if self.version >= VERSION_4 && super::prune::is_prune_walk(&trace.name) {
            session.prune = Some(CmdPrune {
                plan: super::prune::plan(trace).ok_or_else(|| {
                    DriverError::Unmappable("a prune walk with no step to prune before".into())
                })?,
                pruned: Vec::new(),
            });
        }
        Ok(session)
    }

    async fn open(&self, model: &LeaseModel, trace: &str) -> Result<CmdSession, DriverError> {
        let mut process = self.process().await?;
        let answer = process.call(open_request(model, trace)).await?;
        expect_type(&answer, "opened")?;
        Ok(CmdSession {
            step: 0,
            prune: None,
            replicate_before: std::collections::BTreeSet::new(),
            differences: Vec::new(),
            process: Some(process),
            idle: Arc::clone(&self.idle),
            model: model.clone(),
            jobs: usize::from(model.config.all_jobs()),
            slots: usize::from(model.config.slots()),
            version: self.version,
            details: self.version >= 2,
            answer: None,
            sent_payload: None,
            payloads: PayloadDigests::default(),
        })
    }
}

/// A walk pruned between its jobs over a version 4 driver: its plan, and the jobs the prune
/// deleted.
struct CmdPrune {
    plan: super::prune::Plan,
    pruned: Vec<u8>,
}

/// One trace on one driver process. The process goes back to the driver's idle list when the
/// session ends, unless a call failed (then it is killed).
pub struct CmdSession {
    /// The model steps taken so far (the plan of a pruned walk counts them).
    step: usize,
    /// A walk pruned between its jobs (version 4).
    prune: Option<CmdPrune>,
    /// The steps before which the standby is brought up to date (version 5): each the
    /// transition a later failover loses.
    replicate_before: std::collections::BTreeSet<usize>,
    /// What the session found to differ from the model ([`Session::differences`]).
    differences: Vec<String>,
    process: Option<Process>,
    idle: Idle,
    model: LeaseModel,
    /// The jobs (of both projects) and the slots the trace opened.
    jobs: usize,
    slots: usize,
    /// The protocol version the driver speaks.
    version: u64,
    /// Whether the driver reports the rule details (version 2).
    details: bool,
    /// The value the last step's rule returned, as the driver reported it.
    answer: Option<Answer>,
    /// The payload the last step sent, as [`payload_label`] names it.
    sent_payload: Option<String>,
    payloads: PayloadDigests,
}

impl Drop for CmdSession {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            self.idle.lock().expect("the idle list").push(process);
        }
    }
}

impl CmdSession {
    /// Before step `i` of a pruned walk: the audit's mark, or the prune, as its plan says.
    async fn prune_before(&mut self, before: &State, i: usize) -> Result<(), DriverError> {
        let Some(plan) = self.prune.as_ref().map(|p| p.plan.clone()) else {
            return Ok(());
        };
        if i == plan.audit_before {
            let answer = self
                .call(json!({"type": "step", "step": {"action": "audit_mark"}}))
                .await?;
            expect_type(&answer, "verdict")?;
        } else if i == plan.prune_before {
            let answer = self
                .call(json!({"type": "step", "step": {"action": "prune"}}))
                .await?;
            expect_type(&answer, "verdict")?;
            let report: WirePrune = serde_json::from_value(answer["answer"]["prune"].clone())
                .map_err(|e| failed(format!("the prune's answer: {e}")))?;
            let pruned: std::collections::BTreeSet<u8> = report.pruned.iter().copied().collect();
            self.differences.extend(super::prune::judge(
                &plan,
                before,
                &pruned,
                report.kept_unaudited,
            ));
            if let Some(run) = self.prune.as_mut() {
                run.pruned = pruned.into_iter().collect();
            }
        }
        Ok(())
    }

    async fn call(&mut self, request: Value) -> Result<Value, DriverError> {
        let Some(process) = self.process.as_mut() else {
            return Err(failed("the driver process failed earlier in this trace"));
        };
        match process.call(request).await {
            Ok(answer) => Ok(answer),
            Err(error) => {
                // Out of step with the harness: never reused (dropping it kills it).
                self.process = None;
                Err(error)
            }
        }
    }
}

impl Session for CmdSession {
    async fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> Result<Option<Observed>, DriverError> {
        self.answer = None;
        let i = self.step;
        self.step += 1;
        if self.replicate_before.contains(&i) {
            let answer = self
                .call(json!({"type": "step", "step": {"action": "replicate"}}))
                .await?;
            expect_type(&answer, "verdict")?;
        }
        self.prune_before(before, i).await?;
        let delivered = crate::coverage::delivered(before, action);
        self.sent_payload = delivered.and_then(|m| payload_label(&m));
        let effect = match delivered.map(|m| m.kind) {
            Some(MessageKind::SideEffect(effect)) => Some(effect),
            _ => None,
        };
        let Some(mut request) = step_request(before, action, after)? else {
            return Ok(None);
        };
        if self.version < VERSION_WITH_EVERY_TRACE && request["step"]["action"] == "expiry_sweep" {
            // Versions 1 and 2 name the project swept; their traces have project 0's jobs only.
            request["step"]["project"] = json!(0);
        }
        let answer = self.call(request).await?;
        expect_type(&answer, "verdict")?;
        let verdict: WireVerdict = parse(&answer, "verdict")?;
        self.answer = verdict.answer.map(|a| a.into_answer(effect));
        let observed = match (verdict.verdict.as_deref(), verdict.reason.as_deref()) {
            (None, _) => None,
            (Some(v), reason) => Some(Expected {
                verdict: name(v)?,
                // A reason that is not the spec's is a rejection without a known reason, which
                // never equals an expected verdict (as in the other drivers).
                reason: reason.and_then(|r| r.parse::<Reason>().ok()),
            }),
        };
        Ok(observed)
    }

    async fn project(&mut self) -> Result<Projection, DriverError> {
        let answer = self.call(json!({"type": "project"})).await?;
        expect_type(&answer, "projection")?;
        let wire: WireProjection = parse(&answer, "projection")?;
        if wire.jobs.len() != self.jobs {
            return Err(failed(format!(
                "the projection shows {} jobs; the trace submitted {}",
                wire.jobs.len(),
                self.jobs
            )));
        }
        if wire.slots.len() != self.slots {
            return Err(failed(format!(
                "the projection shows {} slots; the trace named {}",
                wire.slots.len(),
                self.slots
            )));
        }
        let kind = self.model.config.target;
        let mut jobs = Vec::with_capacity(wire.jobs.len());
        for job in wire.jobs {
            let state: JobState = name(&job.state)?;
            let mut ledger = Vec::with_capacity(job.ledger.len());
            for a in job.ledger {
                ledger.push(AttemptProjection {
                    attempt: a.attempt,
                    runner: a.runner,
                    fence: a.fence,
                    state: name::<AttemptState>(&a.state)?,
                });
            }
            ledger.sort_by_key(|a| a.attempt);
            let lease_holder = match job.current_attempt {
                Some(a) if state.is_leased() => {
                    ledger.iter().find(|l| l.attempt == a).map(|l| l.runner)
                }
                _ => None,
            };
            jobs.push(JobProjection {
                state,
                current_attempt: job.current_attempt,
                fence: job.fence,
                lease_holder,
                cancel_requested: job.cancel_requested,
                target_reserved: job.target_reserved,
                ledger,
            });
        }
        let targets = wire
            .slots
            .iter()
            .map(|s| TargetProjection {
                applied: s.applied.min(u64::from(applied_cap(kind))) as u8,
                // The model keeps the highest token of a fenced slot only (the other kinds'
                // rules do not read it).
                highest_fence: if kind == TargetKind::Fenced {
                    s.highest_token.min(255) as u8
                } else {
                    0
                },
            })
            .collect();
        let mut observation_details = None;
        let observation = match wire.observations.as_slice() {
            [] => None,
            [o] => Some(ObservationProjection {
                attempt: o.attempt,
                sender: o.runner,
                // `heartbeat`, `result`, `rejoin` or (version 3) a side effect's code.
                kind: crate::side_effects::kind_name(&o.kind).ok_or_else(|| {
                    failed(format!(
                        "an observation of kind `{}` in a trace that sends none",
                        o.kind
                    ))
                })?,
                job: o.job,
                named_attempt: o.named_attempt,
                verdict: name(&o.verdict)?,
                reason: match &o.reason {
                    Some(r) => Some(name(r)?),
                    None => None,
                },
            }),
            many => {
                return Err(failed(format!(
                    "one step recorded {} observations",
                    many.len()
                )))
            }
        };
        if let ([o], true) = (wire.observations.as_slice(), self.details) {
            observation_details = Some(ObservationDetails {
                lease: o.lease.unwrap_or(u8::MAX),
                fence: o.fence.unwrap_or(u8::MAX),
                outcome: match &o.outcome {
                    Some(outcome) => Some(name(outcome)?),
                    None => None,
                },
                runner_time: o.runner_time,
                payload: self
                    .payloads
                    .label(o.digest.as_deref(), self.sent_payload.as_deref()),
            });
        }
        Ok(Projection {
            jobs,
            targets,
            observation,
            // A version 1 driver reports no details: then they are not compared.
            details: self.details.then(|| Details {
                observation: observation_details,
                answer: self.answer.clone(),
            }),
            stored: None,
            unread: Vec::new(),
            pruned: self
                .prune
                .as_ref()
                .map(|p| p.pruned.clone())
                .unwrap_or_default(),
        })
    }

    fn differences(&mut self) -> Vec<String> {
        std::mem::take(&mut self.differences)
    }

    async fn mark(&mut self) -> Result<(), DriverError> {
        let answer = self.call(json!({"type": "mark"})).await?;
        expect_type(&answer, "marked")
    }
}

impl crate::suite::SuiteDriver for CmdDriver {
    fn heading(&self) -> String {
        format!(
            "conformance: model against `{}` ({}, driver protocol v{})",
            self.command, self.implementation, self.version
        )
    }
    fn replay_options(&self) -> String {
        format!(" --driver-cmd {}", shell_quote(&self.command))
    }
    fn parallel(&self, asked: usize) -> usize {
        asked
    }
    fn accepts(&self, _: &LeaseModel) -> Result<(), String> {
        Ok(())
    }
    fn leaves_out(
        &self,
        model: &LeaseModel,
        trace: &crate::generate::Generated<LeaseModel>,
    ) -> Option<crate::suite::LeftOut> {
        if self.version >= VERSION_5 {
            None
        } else if self.version >= VERSION_4 {
            crate::drivers::failover::has_failover(trace).then_some(crate::suite::LeftOut::Failover)
        } else if self.version >= VERSION_WITH_EVERY_TRACE {
            crate::suite::in_process_only(model, trace)
        } else {
            crate::suite::driver_cmd_leaves_out(model, trace)
        }
    }
    fn why_left_out(&self, why: crate::suite::LeftOut) -> &'static str {
        use crate::suite::LeftOut;
        // A version 1 or 2 driver leaves these classes out, version 3 the replica clocks and
        // the failovers, version 4 the failovers only, version 5 none.
        match why {
            LeftOut::SharedSlot => {
                "driver protocol versions 1 and 2 name slot j for job j (version 3 names slots \
                 per trace)"
            }
            LeftOut::OutsiderJobs => {
                "driver protocol versions 1 and 2 have one project's jobs (version 3 has both)"
            }
            LeftOut::SideEffects => {
                "driver protocol versions 1 and 2 have no side-effect steps (version 3 has them)"
            }
            LeftOut::UnknownIdentity => {
                "driver protocol versions 1 and 2 name only ids a trace created (version 3 names \
                 the others too)"
            }
            LeftOut::ReplicaClocks => {
                "driver protocol versions 1 to 3 have one server clock (version 4 says the \
                 trace's δ and the replica_clock step)"
            }
            LeftOut::Failover => {
                "driver protocol versions 1 to 4 have no failover (version 5 has the replicate \
                 and failover steps)"
            }
            // Only the HTTP driver leaves these out.
            LeftOut::DemoTarget => "",
        }
    }
    fn statement_counts(&self) -> Option<Vec<(&'static str, u64)>> {
        None
    }
    fn not_compared(&self) -> Vec<Part> {
        if self.version >= 2 {
            Vec::new()
        } else {
            vec![Part::ObservationDetails, Part::Answers]
        }
    }
}

/// The command that runs this repository's example driver, examples/python/driver.py (an
/// in-memory implementation in Python, standard library only), by its absolute path: for tests.
pub fn python_example() -> String {
    let driver: std::path::PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "examples",
        "python",
        "driver.py",
    ]
    .iter()
    .collect();
    format!("python3 {}", shell_quote(&driver.display().to_string()))
}

/// `text` as one word for `sh`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[derive(Deserialize)]
struct WireVerdict {
    verdict: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    /// Version 2: the value the step's rule returned (absent or null: none).
    #[serde(default)]
    answer: Option<WireAnswer>,
}

/// What a version 4 driver's prune deleted and kept (`verdict.schema.json`, `prune`).
#[derive(Deserialize)]
struct WirePrune {
    pruned: Vec<u8>,
    kept_unaudited: u64,
}

/// The value a rule returned, as a version 2 driver reports it (`verdict.schema.json`).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireAnswer {
    Claim {
        job: u8,
        fence: Fence,
        lease_ticks: i64,
        #[serde(default)]
        slot_token: Option<u8>,
    },
    Heartbeat {
        lease_ticks: i64,
        cancel_requested: bool,
    },
    Rejoin {
        instruction: String,
    },
    Sweep {
        uncertain: Vec<u8>,
    },
    /// Version 3: the content an accepted `artifact get` or `cache get` served.
    Served {
        content: String,
    },
    /// A batch claim (the claim step with a `limit`): the jobs it took.
    ClaimBatch {
        leases: Vec<WireClaimed>,
    },
}

/// One job of a batch claim's answer.
#[derive(Deserialize)]
struct WireClaimed {
    job: u8,
    fence: Fence,
    lease_ticks: i64,
    #[serde(default)]
    slot_token: Option<u8>,
}

impl WireAnswer {
    /// The answer, for a step that sent `effect` (if it sent a side effect).
    fn into_answer(self, effect: Option<SideEffect>) -> Answer {
        match self {
            WireAnswer::Claim {
                job,
                fence,
                lease_ticks,
                slot_token,
            } => Answer::Claim {
                job,
                fence,
                lease_ticks,
                // A driver that does not say answers 0, which no claim issues (§8.3).
                slot_token: slot_token.unwrap_or(0),
            },
            WireAnswer::Heartbeat {
                lease_ticks,
                cancel_requested,
            } => Answer::Heartbeat {
                lease_ticks,
                cancel_requested,
            },
            WireAnswer::Rejoin { instruction } => Answer::Rejoin {
                instruction: match instruction.as_str() {
                    "continue" => rejoin_instruction(true, false),
                    "cancel" => rejoin_instruction(true, true),
                    "stop" => rejoin_instruction(false, false),
                    _ => "(an instruction the spec does not name)",
                },
            },
            WireAnswer::Sweep { mut uncertain } => {
                uncertain.sort_unstable();
                Answer::Sweep { uncertain }
            }
            WireAnswer::Served { content } => Answer::Served {
                content: match effect {
                    Some(effect) => crate::side_effects::served_label(effect, content.as_bytes()),
                    None => format!("content served by a step that is no get: {content:?}"),
                },
            },
            WireAnswer::ClaimBatch { leases } => Answer::ClaimBatch {
                leases: leases
                    .into_iter()
                    .map(|l| crate::driver::ClaimedJob {
                        job: l.job,
                        fence: l.fence,
                        lease_ticks: l.lease_ticks,
                        slot_token: l.slot_token.unwrap_or(0),
                    })
                    .collect(),
            },
        }
    }
}

#[derive(Deserialize)]
struct WireProjection {
    jobs: Vec<WireJob>,
    slots: Vec<WireSlot>,
    observations: Vec<WireObservation>,
}

#[derive(Deserialize)]
struct WireJob {
    state: String,
    current_attempt: Option<u8>,
    fence: Fence,
    cancel_requested: bool,
    target_reserved: bool,
    ledger: Vec<WireAttempt>,
}

#[derive(Deserialize)]
struct WireAttempt {
    attempt: u8,
    runner: RunnerId,
    fence: Fence,
    state: String,
}

#[derive(Deserialize)]
struct WireSlot {
    applied: u64,
    highest_token: u64,
}

#[derive(Deserialize)]
struct WireObservation {
    attempt: Option<u8>,
    runner: RunnerId,
    kind: String,
    job: u8,
    named_attempt: u8,
    verdict: String,
    #[serde(default)]
    reason: Option<String>,
    /// Version 2: the named lease (0: one no claim issued).
    #[serde(default)]
    lease: Option<u8>,
    /// Version 2: the named fence.
    #[serde(default)]
    fence: Option<Fence>,
    /// Version 2: a result's outcome.
    #[serde(default)]
    outcome: Option<String>,
    /// Version 2: the runner time the message carried.
    #[serde(default)]
    runner_time: Option<u8>,
    /// Version 2: the payload digest recorded (a result's digest; version 3: a side effect's).
    #[serde(default)]
    digest: Option<String>,
}

fn expect_type(answer: &Value, kind: &str) -> Result<(), DriverError> {
    if answer["type"] == kind {
        Ok(())
    } else {
        Err(failed(format!(
            "expected a `{kind}` answer, got type {}",
            answer["type"]
        )))
    }
}

fn parse<T: serde::de::DeserializeOwned>(answer: &Value, kind: &str) -> Result<T, DriverError> {
    T::deserialize(answer).map_err(|e| failed(format!("a `{kind}` answer that is not one: {e}")))
}

/// One of the spec's stable names.
fn name<T: std::str::FromStr>(text: &str) -> Result<T, DriverError> {
    text.parse().map_err(|_| {
        failed(format!(
            "the driver answered `{text}`, not a name of the spec"
        ))
    })
}

fn failed(detail: impl Into<String>) -> DriverError {
    DriverError::Implementation(detail.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasewright_model::Config;
    use stateright::Model;

    #[test]
    fn runner_local_steps_send_nothing_and_a_claim_names_what_it_creates() {
        let model = LeaseModel::new(Config::one_job());
        let init = model.init_state();
        let claim = Action::Claim { runner: 1 };
        let after = model.next_state(&init, claim.clone()).expect("a claim");
        let request = step_request(&init, &claim, &after)
            .unwrap()
            .expect("a claim is sent");
        assert_eq!(
            request,
            json!({"type": "step", "step": {"action": "claim", "runner": 1, "attempt": 0,
                "lease": after.attempts[0].lease}})
        );
        let stop = Action::StopExecuting {
            runner: 1,
            attempt: None,
        };
        let stopped = model.next_state(&after, stop.clone()).expect("a stop");
        assert_eq!(step_request(&after, &stop, &stopped).unwrap(), None);
    }
}
