//! The in-process PostgreSQL driver: the implementation's `Store` API with a manual clock.
//!
//! Every trace gets its own namespace: two fresh projects (the model's project 0 and the
//! outsider's project 1), fresh runners and jobs, and a manual clock of its own, so traces run in
//! parallel on one database with no reset between them. A trace with a failover step gets a
//! schema of its own instead, whose database can lose a commit ([`super::failover`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use leasewright_impl as imp;
use leasewright_impl::TargetAdapter as _;
use leasewright_model as model;
use model::{Action, Expected, LeaseModel, MessageKind, State};
use sqlx::PgPool;
use uuid::Uuid;

use crate::driver::{
    code, heartbeat, model_runner_time, payload_label, rejoin_instruction, result_digest,
    runner_time, side_effect, trace_epoch, Answer, AttemptProjection, ClaimedJob, Details, Driver,
    DriverError, JobProjection, ObservationDetails, ObservationProjection, Observed, Projection,
    Session, TargetProjection, FORGED_LEASE, TICK,
};
use crate::driver::{implementation_stored, BatchResults, ResultBatches, Stored, UnknownIds};
use crate::generate::Generated;

use super::failover::{self, TraceSchema};
use super::prune;

/// What an unknown id stands for ([`PgSession::unknown`]).
const RUNNER: u8 = UnknownIds::RUNNER;
const JOB: u8 = UnknownIds::JOB;
const ATTEMPT: u8 = UnknownIds::ATTEMPT;

/// The in-process PostgreSQL driver.
#[derive(Clone)]
pub struct PgDriver {
    /// The store every trace's store is derived from (its migrations applied once).
    store: imp::Store,
    /// Held by a trace that sweeps over every project ([`sweeps_globally`]) for its whole
    /// replay: such traces run one at a time.
    global_lane: Arc<tokio::sync::Mutex<()>>,
    /// The database's epoch when the driver started: the epoch of every fence and slot token a
    /// trace on the shared schema issues (no trace there changes it).
    epoch: i64,
    #[cfg(feature = "mutants")]
    mutant: Option<imp::mutants::Mutant>,
}

impl PgDriver {
    /// A driver over `pool`; applies the implementation's migrations once.
    pub async fn new(pool: PgPool) -> Result<Self, imp::Error> {
        let store = imp::Store::from_pool(
            pool,
            Arc::new(imp::ManualClock::new(trace_epoch())),
            imp::StoreConfig::default(),
        )
        .await?;
        let epoch = imp::epoch::current_epoch(store.pool()).await?;
        Ok(Self {
            store,
            global_lane: Arc::new(tokio::sync::Mutex::new(())),
            epoch,
            #[cfg(feature = "mutants")]
            mutant: None,
        })
    }

    /// The same driver against an implementation with one rule removed.
    #[cfg(feature = "mutants")]
    pub fn with_mutant(mut self, mutant: imp::mutants::Mutant) -> Self {
        self.mutant = Some(mutant);
        self
    }

    /// The mutant this driver runs against, if any.
    #[cfg(feature = "mutants")]
    pub fn mutant(&self) -> Option<imp::mutants::Mutant> {
        self.mutant
    }
}

impl Driver for PgDriver {
    type Session = PgSession;

    fn name(&self) -> String {
        #[cfg(feature = "mutants")]
        if let Some(mutant) = self.mutant {
            return format!("postgres (mutant {mutant:?})");
        }
        "postgres".into()
    }

    async fn open(&self, model: &LeaseModel, trace: &str) -> Result<PgSession, DriverError> {
        // A trace that sweeps over every project runs alone among such traces, in a time of its
        // own long before every other trace's (see `sweeps_globally`).
        let global = if sweeps_globally(trace) {
            Some(Arc::clone(&self.global_lane).lock_owned().await)
        } else {
            None
        };
        let start = if global.is_some() {
            global_sweep_epoch()
        } else {
            trace_epoch()
        };
        let clock = Arc::new(imp::ManualClock::new(start));
        let store = self
            .store
            .with_clock(clock.clone(), lease_ttl(model)?)
            .map_err(failed)?;
        self.populate(model, trace, store, clock, global, self.epoch, None)
            .await
    }

    async fn open_trace(
        &self,
        model: &LeaseModel,
        trace: &Generated<LeaseModel>,
    ) -> Result<PgSession, DriverError> {
        if failover::has_failover(trace)
            || model.config.replica_skew > 0
            || prune::is_prune_walk(&trace.name)
        {
            self.open_own_schema(model, trace).await
        } else {
            self.open(model, &trace.name).await
        }
    }
}

/// The lease ttl of `model`'s traces.
fn lease_ttl(model: &LeaseModel) -> Result<std::time::Duration, DriverError> {
    (TICK * i32::from(model.config.lease_ttl))
        .to_std()
        .map_err(unmappable)
}

impl PgDriver {
    /// A trace with a failover step, in a schema of its own made by the implementation's
    /// migrations ([`super::failover`]): its epoch, lease policy and epochs' starts are its own,
    /// and its database can lose a commit without another trace's.
    async fn open_own_schema(
        &self,
        model: &LeaseModel,
        trace: &Generated<LeaseModel>,
    ) -> Result<PgSession, DriverError> {
        let snapshot_before = failover::snapshot_steps(trace).ok_or_else(|| {
            unmappable(
                "a failover whose state to go back to is not the state before one of the \
                 trace's steps",
            )
        })?;
        let options = self.store.pool().connect_options().as_ref().clone();
        let schema = TraceSchema::new(options.clone());
        imp::schema::create_schema(self.store.pool(), &schema.name)
            .await
            .map_err(failed)?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(
                imp::schema::select_schema(options.clone(), &schema.name).map_err(failed)?,
            )
            .await
            .map_err(|e| DriverError::Implementation(e.to_string()))?;
        let clock = Arc::new(imp::ManualClock::new(trace_epoch()));
        let store = imp::Store::from_pool(
            pool,
            clock.clone(),
            imp::StoreConfig {
                lease_ttl: lease_ttl(model)?,
                schema: schema.name.clone(),
                ..imp::StoreConfig::default()
            },
        )
        .await
        .map_err(failed)?;
        // Replica clocks: the trace's δ, recorded as every server records its own
        // (`serve --max-clock-skew-ms`): the sweep and the wait act 2δ late.
        if model.config.replica_skew > 0 {
            let skew = (TICK * i32::from(model.config.replica_skew))
                .to_std()
                .map_err(unmappable)?;
            store
                .record_lease_policy(Some(skew))
                .await
                .map_err(failed)?;
        }
        let epoch = imp::epoch::current_epoch(store.pool())
            .await
            .map_err(failed)?;
        // A walk pruned between its jobs: audited and pruned as its plan says.
        let prune = if prune::is_prune_walk(&trace.name) {
            Some(PruneRun {
                plan: prune::plan(trace)
                    .ok_or_else(|| unmappable("a prune walk with no step to prune before"))?,
                connect: imp::schema::select_schema(options, &schema.name).map_err(failed)?,
                watermark: None,
                pruned: BTreeSet::new(),
            })
        } else {
            None
        };
        let failover = OwnSchema {
            schema,
            snapshot_before,
            step: 0,
        };
        let mut session = self
            .populate(
                model,
                &trace.name,
                store,
                clock,
                None,
                epoch,
                Some(failover),
            )
            .await?;
        session.prune = prune;
        Ok(session)
    }

    /// The trace's projects, runners, jobs and slots, on `store`.
    #[allow(clippy::too_many_arguments)]
    async fn populate(
        &self,
        model: &LeaseModel,
        trace: &str,
        store: imp::Store,
        clock: Arc<imp::ManualClock>,
        global: Option<tokio::sync::OwnedMutexGuard<()>>,
        epoch: i64,
        own_schema: Option<OwnSchema>,
    ) -> Result<PgSession, DriverError> {
        let config = &model.config;
        // The per-attempt quota the server runs with by default (`serve`), never reached by a
        // trace's few bytes: its check is a statement the server runs on every store.
        let store =
            store.with_attempt_quota(Some(leasewright_server::app::DEFAULT_ATTEMPT_QUOTA_BYTES));
        #[cfg(feature = "mutants")]
        let store = match self.mutant {
            Some(mutant) => store.with_mutant(mutant),
            None => store,
        };
        let unique = Uuid::new_v4().simple().to_string();
        let project = store
            .create_project(&format!("{trace}-{unique}"))
            .await
            .map_err(failed)?;
        let outsider_project = store
            .create_project(&format!("{trace}-{unique}-outsider"))
            .await
            .map_err(failed)?;
        let mut runners = Vec::new();
        let mut tokens = Vec::new();
        for r in 0..config.runners {
            let (id, token) = store
                .create_runner(project, &format!("runner-{r}"))
                .await
                .map_err(failed)?;
            runners.push(id);
            tokens.push(token);
        }
        if let Some(_outsider) = model.outsider() {
            let (id, token) = store
                .create_runner(outsider_project, "outsider")
                .await
                .map_err(failed)?;
            runners.push(id);
            tokens.push(token);
        }
        let kind = imp::TargetKind::from_code(config.target.as_str())
            .ok_or_else(|| unmappable(format!("target kind {}", config.target)))?;
        // Model slot `s` is the slot named `{trace}-{unique}-slot-{s}`: fresh in every trace, so
        // its token counter starts at 0 as the model's does, and shared by every job (of either
        // project) the model puts on it (docs/protocol.md §8.1: slot names are global).
        let slot_name = |s: u8| format!("{trace}-{unique}-slot-{s}");
        let mut jobs = Vec::new();
        for j in 0..config.all_jobs() {
            let mut new = imp::NewJob::new(
                format!("rev-{j}"),
                format!("sha256:source-{j}"),
                "true".to_string(),
            );
            new.target_kind = kind;
            new.target = Some(slot_name(config.slot_of(j)));
            // Project 0's jobs first, then the outsider project's (the model's job order).
            let owner = if j < config.jobs {
                project
            } else {
                outsider_project
            };
            let id = store.submit_job(owner, new).await.map_err(failed)?;
            jobs.push(id);
        }
        let mut targets = Vec::new();
        for s in 0..config.slots() {
            targets.push(
                store
                    .demo_target(kind, &slot_name(s))
                    .await
                    .map_err(failed)?,
            );
        }
        Ok(PgSession {
            store,
            clock,
            project,
            outsider_project,
            runners,
            tokens,
            jobs,
            attempts: Vec::new(),
            leases: BTreeMap::new(),
            targets,
            target_kind: config.target,
            last_observation: 0,
            recorded: Vec::new(),
            model: LeaseModel::new(config.clone()),
            answer: None,
            sent_payload: None,
            payloads: BTreeMap::new(),
            unknown_ids: UnknownIds::fresh(),
            batch_results: sends_batch_results(trace),
            // A walk pruned between its jobs ([`super::prune`]) sends no other job's earlier
            // result beside a result: that item would write into a finished job's ledger at a
            // step of the model that names no such job, and the model's plan of what the prune
            // must delete would not hold.
            batches: if prune::is_prune_walk(trace) {
                ResultBatches::new(conflicting_echo(trace)).without_other_jobs()
            } else {
                ResultBatches::new(conflicting_echo(trace))
            },
            echo_after: None,
            differences: Vec::new(),
            global,
            epoch,
            own_schema,
            replica: 0,
            prune: None,
        })
    }
}

/// A walk pruned between its jobs ([`super::prune`]): its plan, how the audits reach its schema,
/// the watermark the first audit printed (with its witness), and the jobs the prune deleted.
struct PruneRun {
    plan: prune::Plan,
    connect: sqlx::postgres::PgConnectOptions,
    watermark: Option<(
        leasewright_audit::chain::Watermark,
        leasewright_audit::witness::Witness,
    )>,
    pruned: BTreeSet<u8>,
}

/// A trace's own schema and when to take its snapshot ([`super::failover`]); a trace with
/// replica clocks takes none.
struct OwnSchema {
    schema: TraceSchema,
    /// The 0-based steps before which the snapshot is taken.
    snapshot_before: std::collections::BTreeSet<usize>,
    /// The next step's index.
    step: usize,
}

/// Whether the trace named `trace` sends its results through the batch result's statement
/// (`Store::report_results`, one item) rather than the single result's: half of the traces, chosen
/// by a stable hash of the name, so that every suite probes both statements in every state it
/// reaches and a run is reproducible (the server runs both: `/v1/runner/result` and
/// `/v1/runner/results`).
pub fn sends_batch_results(trace: &str) -> bool {
    trace_hash(trace) & 1 == 1
}

/// Whether the echo of the trace's results ([`result_echo`]) is a conflicting result (another
/// digest) rather than a duplicate: half of the traces, by a stable hash of the name.
pub fn conflicting_echo(trace: &str) -> bool {
    trace_hash(trace) & 2 == 2
}

/// A stable hash of a trace's name (FNV-1a: stable across runs and versions, unlike std's
/// hasher), to choose between paths that the suite must all take. A shrunk trace
/// (`NAME-min`) and the candidates tried while shrinking it (`NAME-min-without-I`) hash as
/// `NAME`, so that shrinking a divergence never changes which paths the trace takes.
fn trace_hash(trace: &str) -> u64 {
    base_name(trace)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// `trace` without the suffixes shrinking adds (`-min`, `-without-I`).
fn base_name(mut trace: &str) -> &str {
    loop {
        if let Some(rest) = trace.strip_suffix("-min") {
            trace = rest;
        } else if let Some((rest, index)) = trace.rsplit_once("-without-") {
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return trace;
            }
            trace = rest;
        } else {
            return trace;
        }
    }
}

/// Whether the trace named `trace` runs the model's expiry sweep as the server's background
/// sweeper does: over every project at once (`Store::sweep_expired`), not scoped to the trace's
/// projects. One trace in 32, by a stable hash of the name.
///
/// A sweep over every project would expire the leases of every other trace running at once, each
/// on its own clock, so such a trace runs alone among such traces (it holds the driver's lane for
/// its whole replay) and at a time long before every other trace's ([`global_sweep_epoch`]): no
/// lease of a trace scoped to its projects has expired by then. The jobs of earlier such traces
/// (over) may still be swept; only the trace's own jobs count.
pub fn sweeps_globally(trace: &str) -> bool {
    (trace_hash(trace) >> 8) & 31 == 0
}

/// The server time a trace that sweeps over every project starts at: ten years before
/// [`trace_epoch`].
pub fn global_sweep_epoch() -> DateTime<Utc> {
    trace_epoch() - chrono::Duration::days(3653)
}

/// One trace's namespace in the database.
pub struct PgSession {
    store: imp::Store,
    clock: Arc<imp::ManualClock>,
    project: imp::ProjectId,
    /// The outsider's project (model project 1).
    outsider_project: imp::ProjectId,
    /// Model runner index → runner (the outsider last).
    runners: Vec<imp::RunnerId>,
    /// Model runner index → its bearer token (authenticated before each of its messages).
    tokens: Vec<String>,
    /// Model job index → job.
    jobs: Vec<imp::JobId>,
    /// Model attempt index → attempt.
    attempts: Vec<imp::AttemptId>,
    /// Model lease id → lease id.
    leases: BTreeMap<u8, imp::LeaseId>,
    /// Model slot index → the slot's target.
    targets: Vec<imp::DemoTarget>,
    target_kind: model::TargetKind,
    /// The highest observation id seen so far.
    last_observation: i64,
    /// Observations recorded by the last step.
    recorded: Vec<imp::ObservationView>,
    /// The trace's model (to choose a batch claim's size).
    model: LeaseModel,
    /// The value the last step's rule returned.
    answer: Option<Answer>,
    /// The payload label of the last message sent.
    sent_payload: Option<String>,
    /// Each payload label's digest as first recorded (one payload, one digest).
    payloads: BTreeMap<String, String>,
    /// The trace's base of ids no one created ([`PgSession::unknown`]): random, low 16 bits 0.
    unknown_ids: UnknownIds,
    /// Results go through the batch result's statement ([`sends_batch_results`]).
    batch_results: bool,
    /// The extra items of the result batches ([`ResultBatches`]: the echo of each result and
    /// another job's earlier result), with what the model expects of them.
    batches: ResultBatches,
    /// The model's state after the current step (the extra items are judged in it).
    echo_after: Option<State>,
    /// What the driver found to differ from the model ([`Session::differences`]).
    differences: Vec<String>,
    /// The lane of traces that sweep over every project, held while this one does.
    global: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The epoch of the trace's first fences and slot tokens: a model token `e * EPOCH_BASE + g`
    /// is the implementation's `(epoch + e) * 2^32 + g` ([`PgSession::to_model`]).
    epoch: i64,
    /// A trace with a failover or replica clocks: its own schema (dropped with the session).
    own_schema: Option<OwnSchema>,
    /// The offset (ticks) of the replica clock serving the steps (`Action::ReplicaClock`).
    replica: i8,
    /// A walk pruned between its jobs: what the driver does and found.
    prune: Option<PruneRun>,
}

impl PgSession {
    /// The model's fence or slot token of the implementation's `token`: its epoch counted from
    /// the trace's first ([`model::EPOCH_BASE`] a step), plus its generation.
    fn to_model(&self, token: i64) -> Result<u8, DriverError> {
        crate::driver::token_to_model(self.epoch, token)
    }

    /// The implementation's fence or slot token of the model's `token` ([`PgSession::to_model`]).
    fn to_impl(&self, token: u8) -> i64 {
        crate::driver::token_to_impl(self.epoch, token)
    }

    /// The project whose operator takes an operator step: the job's own project's, or (the
    /// model's `outsider_*` actions) the other project's.
    fn operator_project(&self, action: &Action, job: u8) -> imp::ProjectId {
        let own = usize::from(job) < usize::from(self.model.config.jobs);
        let other = matches!(
            action,
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. }
        );
        if own != other {
            self.project
        } else {
            self.outsider_project
        }
    }

    /// Whether the created runner `runner`'s bearer token authenticates it, as the HTTP layer
    /// asks before any check (docs/protocol.md §6.1 check 1): `false` once an operator revoked
    /// it (`Store::revoke_runner`). A runner no one created (a probe's) is named by its id
    /// alone, and the store's check 1 answers for it.
    /// The implementation's id of the model's runner `runner`.
    fn runner_id(&self, runner: u8) -> Result<imp::RunnerId, DriverError> {
        self.runners
            .get(usize::from(runner))
            .copied()
            .ok_or_else(|| unmappable(format!("runner {runner}")))
    }

    async fn authenticated(&self, runner: u8) -> Result<bool, DriverError> {
        let Some(token) = self.tokens.get(usize::from(runner)) else {
            return Ok(true);
        };
        let found = self.store.authenticate(token).await.map_err(failed)?;
        match found {
            Some(id) if Some(&id) != self.runners.get(usize::from(runner)) => Err(
                DriverError::Implementation("a runner's token authenticates another runner".into()),
            ),
            found => Ok(found.is_some()),
        }
    }

    fn tuple(&self, m: &model::Message) -> Result<imp::Tuple, DriverError> {
        // An index the trace never created (a probe's unknown runner, job or attempt) is an id
        // no one created: the implementation must find nothing under it (§6.1 checks 1, 2, 4).
        fn get(v: &[Uuid], i: u8, unknown: Uuid) -> Uuid {
            v.get(i as usize).copied().unwrap_or(unknown)
        }
        let runners: Vec<Uuid> = self.runners.iter().map(|r| r.0).collect();
        let jobs: Vec<Uuid> = self.jobs.iter().map(|j| j.0).collect();
        let attempts: Vec<Uuid> = self.attempts.iter().map(|a| a.0).collect();
        Ok(imp::Tuple {
            runner: imp::RunnerId(get(&runners, m.sender, self.unknown(RUNNER, m.sender))),
            job: imp::JobId(get(&jobs, m.job, self.unknown(JOB, m.job))),
            attempt: imp::AttemptId(get(&attempts, m.attempt, self.unknown(ATTEMPT, m.attempt))),
            lease_id: if m.lease == model::FORGED_LEASE {
                imp::LeaseId(FORGED_LEASE)
            } else {
                *self
                    .leases
                    .get(&m.lease)
                    .ok_or_else(|| unmappable(format!("lease {}", m.lease)))?
            },
            fence: self.to_impl(m.fence),
        })
    }

    /// The id that stands for the model's never-created runner, job or attempt `index`: unique
    /// to the trace, created by no one.
    fn unknown(&self, what: u8, index: u8) -> Uuid {
        self.unknown_ids.id(what, index)
    }

    /// The model index of a runner, job or attempt id, created or [`PgSession::unknown`].
    fn model_index(&self, what: u8, v: &[Uuid], id: Uuid) -> Result<u8, DriverError> {
        self.unknown_ids.model_index(what, v, id)
    }

    fn index_of<T: PartialEq>(v: &[T], x: &T, what: &str) -> Result<u8, DriverError> {
        v.iter()
            .position(|y| y == x)
            .map(|i| i as u8)
            .ok_or_else(|| {
                DriverError::Implementation(format!("the implementation shows an unknown {what}"))
            })
    }

    async fn deliver(&mut self, m: &model::Message) -> Result<Observed, DriverError> {
        if m.kind != MessageKind::TargetMutation && !self.authenticated(m.sender).await? {
            // Refused before any check, and recorded nowhere (docs/protocol.md §7).
            return Ok(Expected::rejected(model::Reason::UnknownRunner));
        }
        let tuple = self.tuple(m)?;
        let at = Some(runner_time(m.runner_time));
        self.sent_payload = payload_label(m);
        Ok(match m.kind {
            MessageKind::Heartbeat => {
                let verdict = self.store.heartbeat(&tuple, at).await.map_err(failed)?;
                if let imp::Verdict::Accepted(answer) = &verdict {
                    self.answer = Some(Answer::Heartbeat {
                        lease_ticks: self.ticks_from_now(answer.lease_expiry),
                        cancel_requested: answer.cancel_requested,
                    });
                }
                observed(&verdict.without_value())
            }
            MessageKind::Result(outcome) => {
                let o = imp::Outcome::from_code(outcome.as_str())
                    .ok_or_else(|| unmappable(format!("outcome {outcome}")))?;
                let item = imp::ResultReport {
                    tuple,
                    outcome: o,
                    result_digest: result_digest(outcome, m.digest),
                    runner_time: at,
                };
                // Every result is followed by the extra items of its batch ([`ResultBatches`]:
                // the same result again or with another digest, and another job's earlier
                // result), through the batch result's statement, judged as if sent right after
                // the first (docs/protocol.md, "Batch result"), so that the batch route meets
                // every state and failing check the single route does, with items for several
                // jobs. A trace that sends its results as batches sends them all in one batch.
                let extra = self
                    .batches
                    .extra_items(&self.model, self.echo_after.as_ref(), m);
                let mut extra_items = Vec::with_capacity(extra.len());
                for &(e, o) in &extra {
                    extra_items.push(imp::ResultReport {
                        tuple: self.tuple(&e)?,
                        outcome: imp::Outcome::from_code(o.as_str())
                            .ok_or_else(|| unmappable(format!("outcome {o}")))?,
                        result_digest: result_digest(o, e.digest),
                        runner_time: Some(runner_time(e.runner_time)),
                    });
                }
                let (verdict, extra_verdicts) = if self.batch_results {
                    let items: Vec<imp::ResultReport> =
                        std::iter::once(item).chain(extra_items).collect();
                    let mut verdicts = self.store.report_results(&items).await.map_err(failed)?;
                    if verdicts.len() != items.len() {
                        return Err(DriverError::Implementation(format!(
                            "a batch result of {} items answered {} verdicts",
                            items.len(),
                            verdicts.len()
                        )));
                    }
                    let first = verdicts.remove(0);
                    (first, verdicts)
                } else {
                    let verdict = self
                        .store
                        .report_result(&item.tuple, o, &item.result_digest, at)
                        .await
                        .map_err(failed)?;
                    let extra_verdicts = if extra_items.is_empty() {
                        Vec::new()
                    } else {
                        self.store
                            .report_results(&extra_items)
                            .await
                            .map_err(failed)?
                    };
                    (verdict, extra_verdicts)
                };
                let got: Vec<Observed> = extra_verdicts.iter().map(observed).collect();
                self.batches.check_verdicts(&got, self.batch_results);
                observed(&verdict)
            }
            MessageKind::Rejoin => {
                let answer = self.store.rejoin(&tuple, at).await.map_err(failed)?;
                self.answer = Some(Answer::Rejoin {
                    instruction: match answer {
                        imp::RejoinAnswer::Continue => rejoin_instruction(true, false),
                        imp::RejoinAnswer::Cancel => rejoin_instruction(true, true),
                        imp::RejoinAnswer::Stop(_) => rejoin_instruction(false, false),
                    },
                });
                observed(&answer.verdict())
            }
            MessageKind::SideEffect(effect) => self.side_effect(&tuple, effect, at).await?,
            MessageKind::TargetMutation => {
                // The slot token the model's message carries (a stale or forged one included),
                // not the named attempt's own: the target compares what it is sent (§8.4). Model
                // and implementation tokens are the same numbers: both count a fresh slot's
                // reservations from 1, and every claim compares the token it issued
                // (`Answer::Claim`).
                let mutation = imp::TargetMutation {
                    job: tuple.job,
                    attempt: tuple.attempt,
                    slot_token: self.to_impl(m.token),
                    deployment_id: tuple.job.to_string(),
                };
                let slot = self.model.config.slot_of(m.job);
                let target = self
                    .targets
                    .get(slot as usize)
                    .ok_or_else(|| unmappable(format!("slot {slot}")))?;
                observed(&target.mutate(&mutation).await.map_err(failed)?)
            }
        })
    }
}

impl Session for PgSession {
    async fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> Result<Option<Observed>, DriverError> {
        self.answer = None;
        self.sent_payload = None;
        self.batches.clear();
        // Before the step a failover will lose: the snapshot it goes back to.
        if let Some(own) = self.own_schema.as_mut() {
            let i = own.step;
            own.step += 1;
            if own.snapshot_before.contains(&i) {
                own.schema.snapshot(self.store.pool()).await?;
            }
            // A walk pruned between its jobs: the audit, then the prune, as its plan says.
            if let Some(plan) = self.prune.as_ref().map(|p| p.plan.clone()) {
                if i == plan.audit_before {
                    self.audit_for_prune().await?;
                } else if i == plan.prune_before {
                    self.prune_between_jobs(before, &plan).await?;
                }
            }
        }
        self.echo_after =
            matches!(action, Action::Deliver { .. } | Action::Replay { .. }).then(|| after.clone());
        let verdict = match action {
            Action::Failover => {
                self.fail_over().await?;
                None
            }
            // A second server starts only where servers differ in lease ttl
            // (`Config::policy_ttl`), which no suite replays.
            Action::ServerStarts => return Err(unmappable(crate::select::FAILOVER)),
            // The next steps are served by a replica whose clock reads `offset` ticks off the
            // true one: the store's clock moves by the difference (only `tick` moves true time).
            Action::ReplicaClock { offset } if self.own_schema.is_some() => {
                let by = i32::from(*offset) - i32::from(self.replica);
                self.clock.advance(TICK * by);
                self.replica = *offset;
                None
            }
            Action::ReplicaClock { .. } => return Err(unmappable(crate::select::REPLICA_CLOCK)),
            Action::Claim { runner } | Action::ClaimBatch { runner, .. }
                if !self.authenticated(*runner).await? =>
            {
                Some(Expected::rejected(model::Reason::UnknownRunner))
            }
            Action::RunnerRevoke { runner } => {
                let id = self.runner_id(*runner)?;
                let revoked = self
                    .store
                    .revoke_runner(self.project, id)
                    .await
                    .map_err(failed)?;
                if revoked.is_none_or(|r| r.revoked_at.is_none()) {
                    return Err(DriverError::Implementation(format!(
                        "revoking runner {runner} of its own project revoked nothing"
                    )));
                }
                None
            }
            Action::Claim { runner } => {
                let id = self.runner_id(*runner)?;
                // A batch claim of two jobs whenever the model leaves no second job to take
                // (then it takes what one claim takes): the batch's search runs every time.
                let k = if self.model.claimable_job(after, *runner).is_none() {
                    2
                } else {
                    1
                };
                let verdict = self.store.claim_batch(id, k, None).await.map_err(failed)?;
                if let imp::Verdict::Accepted(leases) = &verdict {
                    let index = self.attempts.len();
                    let (Some(created), [lease]) = (after.attempts.get(index), leases.as_slice())
                    else {
                        return Err(DriverError::Implementation(format!(
                            "the implementation accepted a claim of {} jobs where the model \
                             took {}",
                            leases.len(),
                            after.attempts.len() - index
                        )));
                    };
                    self.attempts.push(lease.tuple.attempt);
                    self.leases.insert(created.lease, lease.tuple.lease_id);
                    let job = Self::index_of(&self.jobs, &lease.tuple.job, "job")?;
                    let ticks = self.ticks_from_now(lease.lease_expiry);
                    let claimed = ClaimedJob::of_lease(
                        job,
                        i64::from(self.to_model(lease.tuple.fence)?),
                        ticks,
                        i64::from(self.to_model(lease.slot_token)?),
                    )?;
                    self.answer = Some(claimed.answer());
                }
                Some(observed(&verdict.without_value()))
            }
            Action::ClaimBatch { runner, limit } => {
                let id = self.runner_id(*runner)?;
                let verdict = self
                    .store
                    .claim_batch(id, usize::from(*limit), None)
                    .await
                    .map_err(failed)?;
                if let imp::Verdict::Accepted(leases) = &verdict {
                    let mut taken = Vec::with_capacity(leases.len());
                    for lease in leases {
                        taken.push((Self::index_of(&self.jobs, &lease.tuple.job, "job")?, lease));
                    }
                    // The model's new attempts, mapped by job to the implementation's; a job the
                    // implementation did not take leaves its attempt unmapped (the answer and the
                    // projection then differ from the model's).
                    let created = &after.attempts[self.attempts.len().min(after.attempts.len())..];
                    for a in created {
                        match taken.iter().find(|(job, _)| *job == a.job) {
                            Some((_, lease)) => {
                                self.attempts.push(lease.tuple.attempt);
                                self.leases.insert(a.lease, lease.tuple.lease_id);
                            }
                            None => self.attempts.push(imp::AttemptId(Uuid::nil())),
                        }
                    }
                    let mut answer = Vec::with_capacity(taken.len());
                    for (job, lease) in taken {
                        answer.push(ClaimedJob::of_lease(
                            job,
                            i64::from(self.to_model(lease.tuple.fence)?),
                            self.ticks_from_now(lease.lease_expiry),
                            i64::from(self.to_model(lease.slot_token)?),
                        )?);
                    }
                    self.answer = Some(Answer::ClaimBatch { leases: answer });
                }
                Some(observed(&verdict.without_value()))
            }
            Action::Heartbeat {
                runner,
                runner_time,
                attempt,
            } => Some(
                self.deliver(&heartbeat(before, *runner, *attempt, *runner_time)?)
                    .await?,
            ),
            Action::Deliver { message } => Some(self.deliver(message).await?),
            Action::SideEffect { runner, effect } => Some(
                self.deliver(&side_effect(before, *runner, *effect)?)
                    .await?,
            ),
            Action::Replay {
                runner,
                message,
                forge,
            } => Some(
                self.deliver(&LeaseModel::replayed(before, message, *runner, *forge))
                    .await?,
            ),
            Action::Tick => {
                self.clock.advance(TICK);
                None
            }
            Action::ExpirySweep => {
                // The model's sweep covers the jobs of both projects (the outsider's too); the
                // implementation's is scoped to one project so that concurrent traces do not see
                // each other's leases: one sweep per project of the trace.
                // A trace of the global lane (`sweeps_globally`) sweeps over every project, as the
                // server's background sweeper does, and counts its own jobs only.
                let mut jobs = Vec::new();
                let scopes = if self.global.is_some() {
                    vec![None]
                } else {
                    vec![Some(self.project), Some(self.outsider_project)]
                };
                for project in scopes {
                    let swept = match project {
                        Some(project) => self.store.sweep_expired_in(Some(project)).await,
                        None => self.store.sweep_expired().await,
                    }
                    .map_err(failed)?;
                    if let imp::SweepVerdict::Uncertain(more) = swept {
                        jobs.extend(more.into_iter().filter(|j| self.jobs.contains(j)));
                    }
                }
                let verdict = if jobs.is_empty() {
                    Expected::ACCEPTED
                } else {
                    Expected::UNCERTAIN
                };
                let mut uncertain = jobs
                    .iter()
                    .map(|j| Self::index_of(&self.jobs, j, "job"))
                    .collect::<Result<Vec<u8>, _>>()?;
                uncertain.sort_unstable();
                self.answer = Some(Answer::Sweep { uncertain });
                Some(verdict)
            }
            Action::Cancel { job } | Action::OutsiderCancel { job } => {
                let project = self.operator_project(action, *job);
                let id = self.jobs[*job as usize];
                Some(observed(
                    &self.store.cancel(project, id).await.map_err(failed)?,
                ))
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
                let project = self.operator_project(action, *job);
                let id = self.jobs[*job as usize];
                let finding = imp::Finding::from_code(finding.as_str())
                    .ok_or_else(|| unmappable(format!("finding {finding}")))?;
                let decision = imp::Decision::from_code(decision.as_str())
                    .ok_or_else(|| unmappable(format!("decision {decision}")))?;
                Some(observed(
                    &self
                        .store
                        .reconcile(project, id, finding, decision)
                        .await
                        .map_err(failed)?,
                ))
            }
            // Runner-local steps: sending puts a message in flight (the harness keeps it in the
            // model's state and delivers it later, possibly twice); stopping and disconnecting
            // have no server-side effect.
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
        // What the last step recorded: the observations newer than the mark.
        let recorded: Vec<_> = self
            .records()
            .await?
            .into_iter()
            .filter(|o| o.id > self.last_observation)
            .collect();
        if let Some(max) = recorded.iter().map(|o| o.id).max() {
            self.last_observation = max;
        }
        let mut recorded = recorded;
        // The extra items' records are the step's last (they were judged after its message).
        let mut batches = std::mem::take(&mut self.batches);
        let checked = batches.check_records(&mut recorded, |o| self.observation(o));
        self.batches = batches;
        checked?;
        self.recorded = recorded;
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for (j, id) in self.jobs.iter().enumerate() {
            if self.pruned_jobs().contains(&(j as u8)) {
                // Compared on neither side (`driver::blank_pruned`).
                jobs.push(JobProjection::blank(Vec::new()));
                continue;
            }
            let view = self
                .store
                .job(*id)
                .await
                .map_err(failed)?
                .ok_or_else(|| DriverError::Implementation(format!("job {j} vanished")))?;
            let attempts = self.store.attempts(*id).await.map_err(failed)?;
            let mut ledger = Vec::with_capacity(attempts.len());
            for a in &attempts {
                ledger.push(AttemptProjection {
                    attempt: Self::index_of(&self.attempts, &a.id, "attempt")?,
                    runner: Self::index_of(&self.runners, &a.runner, "runner")?,
                    fence: self.to_model(a.fence)?,
                    state: code(a.state.as_str())?,
                });
            }
            ledger.sort_by_key(|a| a.attempt);
            let state: model::JobState = code(view.state.as_str())?;
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
            jobs.push(JobProjection {
                state,
                current_attempt,
                fence: self.to_model(view.fence)?,
                lease_holder,
                cancel_requested: view.cancel_requested,
                target_reserved: self
                    .store
                    .target_reservation(*id)
                    .await
                    .map_err(failed)?
                    .is_some(),
                ledger,
            });
        }
        let mut targets = Vec::with_capacity(self.targets.len());
        for target in &self.targets {
            let state = target.state().await.map_err(failed)?;
            let cap = i64::from(crate::driver::applied_cap(self.target_kind));
            targets.push(TargetProjection {
                applied: state.applied_count.clamp(0, cap) as u8,
                // A token no claim issued (a forged one) shows as the model's largest.
                highest_fence: match state.highest_slot_token {
                    None => 0,
                    Some(token) => self.to_model(token).unwrap_or(u8::MAX),
                },
            });
        }
        let observation = match self.recorded.as_slice() {
            [] => None,
            [o] => Some(self.observation(o)?),
            many => {
                return Err(DriverError::Implementation(format!(
                    "one step recorded {} observations",
                    many.len()
                )))
            }
        };
        let details = Some(Details {
            observation: match self.recorded.clone().as_slice() {
                [o] => Some(self.observation_details(o)?),
                _ => None,
            },
            answer: self.answer.clone(),
        });
        let stored = if self.model.config.side_effects {
            Some(self.stored().await?)
        } else {
            None
        };
        Ok(Projection {
            jobs,
            targets,
            observation,
            details,
            stored,
            unread: Vec::new(),
            pruned: self.pruned_jobs(),
        })
    }

    fn differences(&mut self) -> Vec<String> {
        let mut all = std::mem::take(&mut self.differences);
        all.extend(self.batches.differences());
        all
    }

    fn batch_results(&mut self) -> BatchResults {
        self.batches.counts()
    }
}

impl PgSession {
    /// The model jobs the prune deleted (none before it, or in a walk not pruned).
    fn pruned_jobs(&self) -> Vec<u8> {
        self.prune
            .as_ref()
            .map(|p| p.pruned.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The audit of a pruned walk's ledger before its prune ([`super::prune`]): a full
    /// `leasewright audit` of the trace's schema, which must be clean, and its watermark recorded
    /// as `prune --audited-through` records it.
    async fn audit_for_prune(&mut self) -> Result<(), DriverError> {
        let Some(run) = self.prune.as_mut() else {
            return Ok(());
        };
        let report = audit_trace(&run.connect, None).await?;
        if let Some(found) = unclean(&report) {
            self.differences
                .push(format!("the audit of the ledger before the prune: {found}"));
            return Ok(());
        }
        let Some(Ok(leasewright_audit::chain::Since::Token(token))) =
            report.since.as_deref().map(str::parse)
        else {
            return Err(DriverError::Implementation(format!(
                "the audit before the prune printed no watermark token ({:?})",
                report.since
            )));
        };
        let witness = report.witness.ok_or_else(|| {
            DriverError::Implementation("the audit before the prune gave no witness".into())
        })?;
        self.store
            .record_audit_watermark(token.position)
            .await
            .map_err(failed)?;
        run.watermark = Some((token, witness));
        Ok(())
    }

    /// The prune between a walk's jobs ([`super::prune`]): every finished job, audited ones
    /// only; then which jobs it deleted, against what the model says it must and may delete, and
    /// `leasewright audit --since` the recorded watermark with its witness, which must be clean.
    async fn prune_between_jobs(
        &mut self,
        before: &State,
        plan: &prune::Plan,
    ) -> Result<(), DriverError> {
        let Some((token, witness)) = self.prune.as_ref().and_then(|p| p.watermark.clone()) else {
            // The audit before it found something (a difference already said).
            return Ok(());
        };
        let finished_before =
            imp::Clock::now(self.clock.as_ref()) + chrono::Duration::milliseconds(1);
        self.store
            .prune_finished_jobs(imp::PrunePolicy {
                finished_before,
                unaudited: false,
                batch: 100,
                max_batches: None,
            })
            .await
            .map_err(failed)?;
        let mut pruned = BTreeSet::new();
        for (j, id) in (0u8..).zip(&self.jobs) {
            if self.store.job(*id).await.map_err(failed)?.is_none() {
                pruned.insert(j);
            }
        }
        // The prune's report of what it kept: the finished jobs it did not delete.
        let kept = self
            .store
            .unaudited_finished_jobs(finished_before)
            .await
            .map_err(failed)?;
        self.differences
            .extend(prune::judge(plan, before, &pruned, kept));
        let Some(run) = self.prune.as_mut() else {
            return Ok(());
        };
        run.pruned = pruned;
        let report = audit_trace(&run.connect, Some((token, witness))).await?;
        if let Some(found) = unclean(&report) {
            self.differences.push(format!(
                "the audit --since the watermark after the prune: {found}"
            ));
        }
        Ok(())
    }
}

/// `leasewright audit` of the trace's schema that `connect` reaches: full, or `--since` a
/// watermark with its witness file.
async fn audit_trace(
    connect: &sqlx::postgres::PgConnectOptions,
    since: Option<(
        leasewright_audit::chain::Watermark,
        leasewright_audit::witness::Witness,
    )>,
) -> Result<leasewright_audit::AuditReport, DriverError> {
    let options = leasewright_audit::AuditOptions::whole(since);
    leasewright_audit::audit_connecting(connect, &options, |_| {})
        .await
        .map(|(report, _)| report)
        .map_err(|e| DriverError::Implementation(format!("the trace's audit: {e}")))
}

/// What an audit report found, if anything ([`leasewright_audit::AuditReport::findings`]).
fn unclean(report: &leasewright_audit::AuditReport) -> Option<String> {
    let found = report.findings();
    (!found.is_empty()).then(|| found.join("; "))
}

impl PgSession {
    /// The model's failover ([`super::failover`]): the database goes back to the snapshot taken
    /// before the transition the failover loses, the epoch advances as after a restore
    /// (`migrate --advance-epoch`), the server records its lease policy on its new connection,
    /// and the new epoch's first claim (which takes nothing) starts the wait.
    async fn fail_over(&mut self) -> Result<(), DriverError> {
        let Some(own) = self.own_schema.as_ref() else {
            return Err(unmappable(
                "a failover in a trace opened without a schema of its own",
            ));
        };
        own.schema.restore(self.store.pool()).await?;
        imp::epoch::advance_epoch(self.store.pool())
            .await
            .map_err(failed)?;
        self.store.record_lease_policy(None).await.map_err(failed)?;
        let first = self
            .runners
            .first()
            .copied()
            .ok_or_else(|| unmappable("a failover in a trace with no runner"))?;
        match self
            .store
            .claim_batch(first, 1, None)
            .await
            .map_err(failed)?
        {
            imp::Verdict::Rejected(imp::Reason::NoQueuedJob) => {}
            other => {
                return Err(DriverError::Implementation(format!(
                    "the first claim of the epoch after a failover was answered {:?}, not \
                     no_queued_job (it must wait)",
                    other.without_value()
                )))
            }
        }
        // What the restored database recorded last is where the next step's records begin.
        self.mark().await
    }

    /// Rule R8 through the Store's side-effect API: the model's bounded payloads as the bytes of
    /// [`crate::side_effects`]; an accepted get's content is the step's answer.
    async fn side_effect(
        &mut self,
        tuple: &imp::Tuple,
        effect: model::SideEffect,
        at: Option<DateTime<Utc>>,
    ) -> Result<Observed, DriverError> {
        use crate::side_effects::{payload_bytes, served_label, ARTIFACT_NAME, CACHE_KEY};
        use model::SideEffect as E;
        let bytes = payload_bytes(effect).unwrap_or_default();
        let store = &self.store;
        let served = match effect {
            E::SourceFetch => {
                let v = store.fetch_source(tuple, at).await.map_err(failed)?;
                return Ok(observed(&v.without_value()));
            }
            E::LogAppend { seq, .. } => {
                let v = store.append_log(tuple, i64::from(seq), &bytes, at);
                return Ok(observed(&v.await.map_err(failed)?));
            }
            E::ArtifactPut { .. } => {
                let v = store.put_artifact(tuple, ARTIFACT_NAME, &bytes, at);
                return Ok(observed(&v.await.map_err(failed)?));
            }
            E::CachePut { .. } => {
                let v = store.cache_put(tuple, CACHE_KEY, &bytes, at);
                return Ok(observed(&v.await.map_err(failed)?));
            }
            E::ArtifactGet => store.get_artifact(tuple, ARTIFACT_NAME, at).await,
            E::CacheGet => store.cache_get(tuple, CACHE_KEY, at).await,
        }
        .map_err(failed)?;
        if let imp::Verdict::Accepted(content) = &served {
            self.answer = Some(Answer::Served {
                content: served_label(effect, content),
            });
        }
        Ok(observed(&served.without_value()))
    }

    /// What the side effects stored: every attempt's log chunks and artifact, both projects'
    /// cache entries with the attempt that stored each.
    async fn stored(&self) -> Result<Stored, DriverError> {
        use crate::side_effects::{ARTIFACT_NAME, CACHE_KEY};
        let mut attempts = Vec::with_capacity(self.attempts.len());
        for id in &self.attempts {
            attempts.push((
                self.store.logs(*id).await.map_err(failed)?,
                self.store
                    .artifact(*id, ARTIFACT_NAME)
                    .await
                    .map_err(failed)?,
            ));
        }
        let mut cache = Vec::new();
        for project in [self.project, self.outsider_project] {
            let entry = self
                .store
                .cache_entry(project, CACHE_KEY)
                .await
                .map_err(failed)?;
            cache.push(match entry {
                Some(e) => Some((
                    e.content,
                    Self::index_of(&self.attempts, &e.stored_by_attempt, "attempt")?,
                )),
                None => None,
            });
        }
        implementation_stored(attempts, cache)
    }

    /// Whole ticks from the clock's now to `at`.
    fn ticks_from_now(&self, at: DateTime<Utc>) -> i64 {
        (at - imp::Clock::now(self.clock.as_ref())).num_milliseconds() / TICK.num_milliseconds()
    }

    /// The fields of `o` the core projection leaves out. The payload digest is checked to be a
    /// function of the payload, one to one, within the trace.
    fn observation_details(
        &mut self,
        o: &imp::ObservationView,
    ) -> Result<ObservationDetails, DriverError> {
        let lease = if o.named.lease_id == imp::LeaseId(FORGED_LEASE) {
            model::FORGED_LEASE
        } else {
            self.leases
                .iter()
                .find(|(_, id)| **id == o.named.lease_id)
                .map(|(m, _)| *m)
                .ok_or_else(|| {
                    DriverError::Implementation("an observation names an unknown lease id".into())
                })?
        };
        let payload = match (&o.payload_sha256, &self.sent_payload) {
            (None, _) => None,
            (Some(digest), None) => Some(format!("a digest ({digest}) of no payload")),
            (Some(digest), Some(label)) => Some(match self.payloads.get(label) {
                Some(first) if first == digest => label.clone(),
                Some(first) => format!("{label}, with a digest other than its first ({first})"),
                None => match self.payloads.iter().find(|(_, d)| *d == digest) {
                    Some((other, _)) => format!("{label}, with the digest of {other}"),
                    None => {
                        self.payloads.insert(label.clone(), digest.clone());
                        label.clone()
                    }
                },
            }),
        };
        Ok(ObservationDetails {
            lease,
            fence: self.to_model(o.named.fence)?,
            outcome: match o.outcome {
                Some(outcome) => Some(code(outcome.as_str())?),
                None => None,
            },
            runner_time: o.runner_time.map(model_runner_time),
            payload,
        })
    }

    /// Every observation naming one of this trace's jobs, oldest first: the jobs' ledgers and
    /// both projects' security logs.
    async fn records(&self) -> Result<Vec<imp::ObservationView>, DriverError> {
        let mut all = Vec::new();
        // The trace's jobs, and the job id a probe's unknown job is sent as (index: the number
        // of jobs, as the model's probes name it).
        let unknown = imp::JobId(self.unknown(JOB, self.jobs.len() as u8));
        for job in self.jobs.iter().chain([&unknown]) {
            all.extend(self.store.observations(*job).await.map_err(failed)?);
        }
        // What a runner sent naming another project's job is its own project's security log,
        // never the job's ledger (protocol §7): the outsider naming the project's jobs, and (with
        // shared slots, where the outsider owns jobs) the project's runners naming the outsider's.
        // The model records it as a message like any other.
        for project in [self.project, self.outsider_project] {
            all.extend(
                self.store
                    .security_log(project, 0, i64::MAX)
                    .await
                    .map_err(failed)?
                    .into_iter()
                    .filter(|o| self.jobs.contains(&o.named.job)),
            );
        }
        all.sort_by_key(|o| o.id);
        Ok(all)
    }

    fn observation(&self, o: &imp::ObservationView) -> Result<ObservationProjection, DriverError> {
        let (verdict, reason) = match o.verdict {
            imp::Verdict::Accepted(()) => (model::Verdict::Accepted, None),
            imp::Verdict::Acknowledged => (model::Verdict::Acknowledged, None),
            imp::Verdict::Rejected(r) => (model::Verdict::Rejected, Some(code(r.as_str())?)),
        };
        let kind = crate::side_effects::kind_name(o.kind.as_str()).ok_or_else(|| {
            DriverError::Implementation(format!(
                "an observation of kind {} in a trace that sends none",
                o.kind.as_str()
            ))
        })?;
        let runners: Vec<Uuid> = self.runners.iter().map(|r| r.0).collect();
        let jobs: Vec<Uuid> = self.jobs.iter().map(|j| j.0).collect();
        let attempts: Vec<Uuid> = self.attempts.iter().map(|a| a.0).collect();
        Ok(ObservationProjection {
            attempt: match o.attempt {
                Some(a) => Some(Self::index_of(&self.attempts, &a, "attempt")?),
                None => None,
            },
            sender: self.model_index(RUNNER, &runners, o.named.runner.0)?,
            kind,
            job: self.model_index(JOB, &jobs, o.named.job.0)?,
            named_attempt: self.model_index(ATTEMPT, &attempts, o.named.attempt.0)?,
            verdict,
            reason,
        })
    }
}

fn observed(verdict: &imp::Verdict<()>) -> Observed {
    match verdict {
        imp::Verdict::Accepted(()) => Expected::ACCEPTED,
        imp::Verdict::Acknowledged => Expected::ACKNOWLEDGED,
        imp::Verdict::Rejected(reason) => match reason.as_str().parse::<model::Reason>() {
            Ok(reason) => Expected::rejected(reason),
            // A reason the spec does not name: shown as a rejection without a known reason, which
            // never equals an expected verdict.
            Err(_) => Expected {
                verdict: model::Verdict::Rejected,
                reason: None,
            },
        },
    }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn failed(error: imp::Error) -> DriverError {
    DriverError::Implementation(error.to_string())
}

fn unmappable(what: impl std::fmt::Display) -> DriverError {
    DriverError::Unmappable(what.to_string())
}
