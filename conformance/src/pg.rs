//! The in-process PostgreSQL driver: the implementation's `Store` API with a manual clock.
//!
//! Every trace gets its own namespace: two fresh projects (the model's project 0 and the
//! outsider's project 1), fresh runners and jobs, and a manual clock of its own, so traces run in
//! parallel on one database with no reset between them.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use leasewright_impl as imp;
use leasewright_impl::TargetAdapter as _;
use leasewright_model as model;
use model::{Action, Expected, LeaseModel, MessageKind, State};
use sqlx::PgPool;
use uuid::Uuid;

use crate::driver::{
    AttemptProjection, Driver, DriverError, JobProjection, ObservationProjection, Observed,
    Projection, Session, TargetProjection,
};

/// One model tick in server time.
pub const TICK: Duration = Duration::seconds(10);

/// A lease id no claim ever issues: what the model's forged lease id maps to.
pub const FORGED_LEASE: Uuid = Uuid::from_u128(0x1ea5_e000_0000_4000_8000_0000_0000_0000);

/// The server time every trace starts at.
pub fn trace_epoch() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
}

/// The runner's observed time for the model's runner time `t`: hours away from the server's time
/// in either direction (0: three hours behind, 1: three hours ahead, ...). Verdicts must not
/// depend on it.
pub fn runner_time(t: u8) -> DateTime<Utc> {
    trace_epoch() + Duration::hours(i64::from(t) * 6 - 3)
}

/// The result digest the driver sends for an outcome: identical results have identical digests.
pub fn result_digest(outcome: model::Outcome) -> String {
    format!("sha256:{}", outcome.as_str())
}

/// The in-process PostgreSQL driver.
#[derive(Clone)]
pub struct PgDriver {
    /// The store every trace's store is derived from (its migrations applied once).
    store: imp::Store,
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
        Ok(Self {
            store,
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
        let config = &model.config;
        let clock = Arc::new(imp::ManualClock::new(trace_epoch()));
        let lease_ttl = TICK * i32::from(config.lease_ttl);
        let store = self
            .store
            .with_clock(clock.clone(), lease_ttl.to_std().map_err(unmappable)?)
            .map_err(failed)?;
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
        for r in 0..config.runners {
            let (id, _token) = store
                .create_runner(project, &format!("runner-{r}"))
                .await
                .map_err(failed)?;
            runners.push(id);
        }
        if let Some(_outsider) = model.outsider() {
            let (id, _token) = store
                .create_runner(outsider_project, "outsider")
                .await
                .map_err(failed)?;
            runners.push(id);
        }
        let kind = imp::TargetKind::from_code(config.target.as_str())
            .ok_or_else(|| unmappable(format!("target kind {}", config.target)))?;
        let mut jobs = Vec::new();
        let mut targets = Vec::new();
        for j in 0..config.jobs {
            let mut new = imp::NewJob::new(
                format!("rev-{j}"),
                format!("sha256:source-{j}"),
                "true".to_string(),
            );
            new.target_kind = kind;
            let id = store.submit_job(project, new).await.map_err(failed)?;
            let view = store.job(id).await.map_err(failed)?.ok_or_else(|| {
                DriverError::Implementation("a submitted job cannot be read back".into())
            })?;
            targets.push(
                store
                    .demo_target(kind, &view.target)
                    .await
                    .map_err(failed)?,
            );
            jobs.push(id);
        }
        Ok(PgSession {
            store,
            clock,
            project,
            outsider_project,
            runners,
            jobs,
            attempts: Vec::new(),
            slot_tokens: Vec::new(),
            leases: BTreeMap::new(),
            targets,
            target_kind: config.target,
            last_observation: 0,
            recorded: Vec::new(),
        })
    }
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
    /// Model job index → job.
    jobs: Vec<imp::JobId>,
    /// Model attempt index → attempt.
    attempts: Vec<imp::AttemptId>,
    /// Model attempt index → the slot token its claim issued, which its target mutations carry
    /// (docs/protocol.md §8.3), as a runner carries the one of its lease.
    slot_tokens: Vec<i64>,
    /// Model lease id → lease id.
    leases: BTreeMap<u8, imp::LeaseId>,
    targets: Vec<imp::DemoTarget>,
    target_kind: model::TargetKind,
    /// The highest observation id seen so far.
    last_observation: i64,
    /// Observations recorded by the last step.
    recorded: Vec<imp::ObservationView>,
}

impl PgSession {
    /// The project whose operator takes an operator step: project 0's, or the outsider's.
    fn operator_project(&self, action: &Action) -> imp::ProjectId {
        match action {
            Action::OutsiderCancel { .. } | Action::OutsiderReconcile { .. } => {
                self.outsider_project
            }
            _ => self.project,
        }
    }

    fn tuple(&self, m: &model::Message) -> Result<imp::Tuple, DriverError> {
        fn get<T: Copy>(v: &[T], i: u8, what: &str) -> Result<T, DriverError> {
            v.get(i as usize)
                .copied()
                .ok_or_else(|| unmappable(format!("{what} {i}")))
        }
        Ok(imp::Tuple {
            runner: get(&self.runners, m.sender, "runner")?,
            job: get(&self.jobs, m.job, "job")?,
            attempt: get(&self.attempts, m.attempt, "attempt")?,
            lease_id: if m.lease == model::FORGED_LEASE {
                imp::LeaseId(FORGED_LEASE)
            } else {
                *self
                    .leases
                    .get(&m.lease)
                    .ok_or_else(|| unmappable(format!("lease {}", m.lease)))?
            },
            fence: i64::from(m.fence),
        })
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
        let tuple = self.tuple(m)?;
        let at = Some(runner_time(m.runner_time));
        Ok(match m.kind {
            MessageKind::Heartbeat => observed(
                &self
                    .store
                    .heartbeat(&tuple, at)
                    .await
                    .map_err(failed)?
                    .without_value(),
            ),
            MessageKind::Result(outcome) => {
                let o = imp::Outcome::from_code(outcome.as_str())
                    .ok_or_else(|| unmappable(format!("outcome {outcome}")))?;
                observed(
                    &self
                        .store
                        .report_result(&tuple, o, &result_digest(outcome), at)
                        .await
                        .map_err(failed)?,
                )
            }
            MessageKind::Rejoin => observed(
                &self
                    .store
                    .rejoin(&tuple, at)
                    .await
                    .map_err(failed)?
                    .verdict(),
            ),
            MessageKind::TargetMutation => {
                let slot_token = *self
                    .slot_tokens
                    .get(m.attempt as usize)
                    .ok_or_else(|| unmappable(format!("attempt {}", m.attempt)))?;
                let mutation = imp::TargetMutation {
                    job: tuple.job,
                    attempt: tuple.attempt,
                    slot_token,
                    deployment_id: tuple.job.to_string(),
                };
                let target = &self.targets[m.job as usize];
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
        let verdict = match action {
            Action::Claim { runner } => {
                let id = *self
                    .runners
                    .get(*runner as usize)
                    .ok_or_else(|| unmappable(format!("runner {runner}")))?;
                let verdict = self.store.claim(id, None).await.map_err(failed)?;
                if let imp::Verdict::Accepted(lease) = &verdict {
                    let index = self.attempts.len();
                    let Some(created) = after.attempts.get(index) else {
                        return Err(DriverError::Implementation(
                            "the implementation accepted a claim the model rejected".into(),
                        ));
                    };
                    self.attempts.push(lease.tuple.attempt);
                    self.slot_tokens.push(lease.slot_token);
                    self.leases.insert(created.lease, lease.tuple.lease_id);
                }
                Some(observed(&verdict.without_value()))
            }
            Action::Heartbeat {
                runner,
                runner_time,
            } => Some(
                self.deliver(&heartbeat(before, *runner, *runner_time)?)
                    .await?,
            ),
            Action::Deliver { message } => Some(self.deliver(message).await?),
            Action::Replay {
                runner,
                message,
                forge,
            } => Some(
                self.deliver(&LeaseModel::replayed(message, *runner, *forge))
                    .await?,
            ),
            Action::Tick => {
                self.clock.advance(TICK);
                None
            }
            Action::ExpirySweep => Some(
                match self
                    .store
                    .sweep_expired_in(Some(self.project))
                    .await
                    .map_err(failed)?
                {
                    imp::SweepVerdict::Uncertain(_) => Expected::UNCERTAIN,
                    imp::SweepVerdict::Accepted => Expected::ACCEPTED,
                },
            ),
            Action::Cancel { job } | Action::OutsiderCancel { job } => {
                let project = self.operator_project(action);
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
                let project = self.operator_project(action);
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
        self.recorded = recorded;
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for (j, id) in self.jobs.iter().enumerate() {
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
                    fence: u8::try_from(a.fence).map_err(|_| {
                        DriverError::Implementation(format!("fence {} out of range", a.fence))
                    })?,
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
                fence: u8::try_from(view.fence).map_err(|_| {
                    DriverError::Implementation(format!("fence {} out of range", view.fence))
                })?,
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
                highest_fence: state.highest_slot_token.unwrap_or(0).clamp(0, 255) as u8,
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
        Ok(Projection {
            jobs,
            targets,
            observation,
        })
    }
}

impl PgSession {
    /// Every observation naming one of this trace's jobs, oldest first.
    async fn records(&self) -> Result<Vec<imp::ObservationView>, DriverError> {
        let mut all = Vec::new();
        for job in &self.jobs {
            all.extend(self.store.observations(*job).await.map_err(failed)?);
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
            sender: Self::index_of(&self.runners, &o.named.runner, "runner")?,
            kind,
            job: Self::index_of(&self.jobs, &o.named.job, "job")?,
            named_attempt: Self::index_of(&self.attempts, &o.named.attempt, "attempt")?,
            verdict,
            reason,
        })
    }
}

/// Parses one of the spec's stable names into the model's type: the two sides share only names.
pub(crate) fn code<T: std::str::FromStr>(name: &str) -> Result<T, DriverError> {
    name.parse().map_err(|_| {
        DriverError::Implementation(format!(
            "the implementation answered `{name}`, not a name of the spec"
        ))
    })
}

/// The heartbeat `runner` sends in the model's state `before` (a request the server answers at
/// once; the model keeps no heartbeats in flight).
pub fn heartbeat(
    before: &State,
    runner: model::RunnerId,
    runner_time: u8,
) -> Result<model::Message, DriverError> {
    LeaseModel::message(before, runner, MessageKind::Heartbeat, runner_time).ok_or_else(|| {
        unmappable(format!(
            "a heartbeat from runner {runner}, which holds no attempt"
        ))
    })
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
