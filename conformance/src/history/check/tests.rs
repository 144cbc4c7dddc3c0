//! The checker must be able to fail: hand-made histories with one flaw each.
use super::*;
use crate::history::Call;
use chrono::TimeZone;
use imp::{AttemptState, JobState, LeaseId, Outcome, ProjectId, Tuple};

const TTL_MS: i64 = 300;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).single().unwrap()
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + Duration::milliseconds(ms)
}

fn config() -> CheckConfig {
    CheckConfig::new(Duration::milliseconds(TTL_MS))
}

struct World {
    project: ProjectId,
    runner: RunnerId,
    job: JobId,
    ops: Vec<Op>,
}

impl World {
    fn new() -> Self {
        Self {
            project: ProjectId::new_random(),
            runner: RunnerId::new_random(),
            job: JobId::new_random(),
            ops: Vec::new(),
        }
    }

    fn tuple(&self, fence: i64) -> Tuple {
        Tuple {
            runner: self.runner,
            job: self.job,
            attempt: AttemptId(uuid::Uuid::from_u128(fence as u128)),
            lease_id: LeaseId(uuid::Uuid::from_u128(1000 + fence as u128)),
            fence,
        }
    }

    /// An op invoked at `inv` ms and completed at `comp` ms (real-time order follows time).
    fn op(&mut self, call: Call, answer: Option<Answer>, inv: i64, comp: Option<i64>) {
        self.ops.push(Op {
            id: self.ops.len(),
            client: "test".into(),
            call,
            runner_time: None,
            invoked_seq: (inv * 2) as u64,
            invoked_at: at(inv),
            completed_seq: comp.map(|c| (c * 2 + 1) as u64),
            completed_at: comp.map(at),
            answer,
        });
    }

    fn claim(&mut self, fence: i64, inv: i64, comp: i64) {
        let tuple = self.tuple(fence);
        let now = inv + (comp - inv) / 2;
        self.op(
            Call::Claim {
                runner: self.runner,
            },
            Some(Answer::Claimed {
                tuple,
                lease_expiry: at(now + TTL_MS),
            }),
            inv,
            Some(comp),
        );
    }

    fn heartbeat(&mut self, fence: i64, answer: Answer, inv: i64, comp: i64) {
        let tuple = self.tuple(fence);
        self.op(Call::Heartbeat { tuple }, Some(answer), inv, Some(comp));
    }

    fn result(&mut self, fence: i64, outcome: Outcome, answer: Answer, inv: i64, comp: i64) {
        let tuple = self.tuple(fence);
        let call = Call::Result {
            tuple,
            outcome,
            digest: format!("d-{fence}-{outcome}"),
        };
        self.op(call, Some(answer), inv, Some(comp));
    }

    fn sweep(&mut self, inv: i64, comp: i64) {
        self.op(
            Call::Sweep,
            Some(Answer::Swept(vec![self.job])),
            inv,
            Some(comp),
        );
    }

    fn reconcile(&mut self, decision: Decision, inv: i64, comp: i64) {
        let call = Call::Reconcile {
            job: self.job,
            finding: imp::Finding::Stopped,
            decision,
        };
        self.op(call, Some(Answer::Accepted), inv, Some(comp));
    }

    fn attempt(
        &self,
        fence: i64,
        state: AttemptState,
        expiry: i64,
        outcome: Option<Outcome>,
    ) -> imp::AttemptView {
        let tuple = self.tuple(fence);
        imp::AttemptView {
            id: tuple.attempt,
            job: self.job,
            runner: self.runner,
            lease_id: tuple.lease_id,
            fence,
            // The job's own slot: every reservation of it is a claim of this job.
            slot_token: fence,
            state,
            lease_expiry: at(expiry),
            outcome,
            result_digest: outcome.map(|o| format!("d-{fence}-{o}")),
            claimed_at: at(expiry - TTL_MS),
            ended_at: None,
        }
    }

    fn retry_record(&self, fence: i64, ms: i64) -> imp::ReconciliationView {
        imp::ReconciliationView {
            id: fence,
            project: self.project,
            job: self.job,
            attempt: Some(self.tuple(fence).attempt),
            finding: imp::Finding::Stopped,
            decision: Decision::Retry,
            verdict: imp::Verdict::Accepted(()),
            decided_at: at(ms),
        }
    }

    fn ledger(
        &self,
        state: JobState,
        current: Option<i64>,
        attempts: Vec<imp::AttemptView>,
        reconciliations: Vec<imp::ReconciliationView>,
    ) -> Ledger {
        let fence = attempts.iter().map(|a| a.fence).max().unwrap_or(0);
        let job = imp::JobView {
            id: self.job,
            project: self.project,
            state,
            current_attempt: current.map(|f| self.tuple(f).attempt),
            fence,
            cancel_requested: false,
            outcome: state.is_terminal().then_some(state),
            result_digest: None,
            source_revision: "rev".into(),
            source_digest: "digest".into(),
            command: "true".into(),
            target: self.job.to_string(),
            target_kind: imp::TargetKind::Unfenced,
            submitted_at: t0(),
            finished_at: None,
        };
        let mut jobs = BTreeMap::new();
        jobs.insert(
            self.job,
            JobLedger {
                job,
                attempts,
                reconciliations,
                observations: None,
            },
        );
        Ledger {
            jobs,
            final_sweep_at: None,
            sweep_margin: chrono::Duration::zero(),
        }
    }
}

fn kinds(report: &Report) -> Vec<ViolationKind> {
    let mut kinds: Vec<ViolationKind> = report.violations.iter().map(|v| v.kind).collect();
    kinds.dedup();
    kinds
}

#[test]
fn a_correct_history_passes_and_is_linearizable() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.heartbeat(
        1,
        Answer::Extended {
            lease_expiry: at(100 + TTL_MS),
            cancel_requested: false,
        },
        95,
        105,
    );
    // A duplicate of the result, overlapping it: one accepted, one acknowledged.
    w.result(1, Outcome::Passed, Answer::Accepted, 200, 220);
    w.result(1, Outcome::Passed, Answer::Acknowledged, 210, 230);
    // A late heartbeat.
    w.heartbeat(1, Answer::Rejected(imp::Reason::JobFinished), 900, 910);
    let ledger = w.ledger(
        JobState::Passed,
        Some(1),
        vec![w.attempt(1, AttemptState::Passed, 400, Some(Outcome::Passed))],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert!(report.is_clean(), "{}", report.render(10));
    assert_eq!(report.linearizable_jobs, 1);
}

#[test]
fn a_stale_completion_after_a_retry_is_reported() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.sweep(400, 410);
    w.reconcile(Decision::Retry, 420, 430);
    w.claim(2, 440, 450);
    // The old attempt's result, accepted: the flaw.
    w.result(1, Outcome::Passed, Answer::Accepted, 500, 510);
    let ledger = w.ledger(
        JobState::Running,
        Some(2),
        vec![
            w.attempt(1, AttemptState::Stopped, 305, None),
            w.attempt(2, AttemptState::Active, 745, None),
        ],
        vec![w.retry_record(1, 425)],
    );
    let report = check(&w.ops, &ledger, &config());
    assert!(report.stale_acceptances >= 1, "{}", report.render(10));
    assert!(report.count(ViolationKind::NotLinearizable) == 1);
    assert!(
        report.lost_results >= 1,
        "the accepted result is not the outcome"
    );
}

#[test]
fn a_heartbeat_accepted_after_its_lease_ended_is_reported() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    // Invoked at 400 ms, the lease ended at 305 ms at the latest.
    w.heartbeat(
        1,
        Answer::Extended {
            lease_expiry: at(400 + TTL_MS),
            cancel_requested: false,
        },
        400,
        410,
    );
    let ledger = w.ledger(
        JobState::Running,
        Some(1),
        vec![w.attempt(1, AttemptState::Active, 700, None)],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert_eq!(
        kinds(&report),
        vec![
            ViolationKind::StaleAcceptance,
            ViolationKind::NotLinearizable
        ]
    );
}

#[test]
fn a_second_claim_without_a_retry_is_a_double_claim() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.claim(2, 50, 60);
    let ledger = w.ledger(
        JobState::Running,
        Some(2),
        vec![
            w.attempt(1, AttemptState::Stopped, 305, None),
            w.attempt(2, AttemptState::Active, 355, None),
        ],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert_eq!(report.double_claims, 1, "{}", report.render(10));
    assert!(kinds(&report).contains(&ViolationKind::SilentRequeue));
    assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
}

/// A retry whose answer was lost explains the next claim when the ledger recorded it
/// accepted, and only then.
#[test]
fn a_retry_with_a_lost_answer_explains_the_next_claim_only_when_the_ledger_kept_it() {
    let retry_lost = |recorded: Option<imp::Verdict<()>>| {
        let mut w = World::new();
        w.claim(1, 0, 10);
        let call = Call::Reconcile {
            job: w.job,
            finding: imp::Finding::Stopped,
            decision: Decision::Retry,
        };
        w.op(
            call,
            Some(Answer::Unknown("replica killed".into())),
            400,
            Some(410),
        );
        w.claim(2, 450, 460);
        let mut ledger = w.ledger(
            JobState::Running,
            Some(2),
            vec![
                w.attempt(1, AttemptState::Stopped, 305, None),
                w.attempt(2, AttemptState::Active, 755, None),
            ],
            vec![],
        );
        if let Some(verdict) = recorded {
            let jl = ledger.jobs.get_mut(&w.job).expect("the job's ledger");
            jl.reconciliations.push(imp::ReconciliationView {
                id: 1,
                project: jl.job.project,
                job: w.job,
                attempt: Some(w.tuple(1).attempt),
                finding: imp::Finding::Stopped,
                decision: Decision::Retry,
                verdict,
                decided_at: at(405),
            });
        }
        check(&w.ops, &ledger, &config()).double_claims
    };
    assert_eq!(retry_lost(Some(imp::Verdict::Accepted(()))), 0);
    assert_eq!(retry_lost(None), 1);
    assert_eq!(
        retry_lost(Some(imp::Verdict::Rejected(imp::Reason::NotUncertain))),
        1
    );
}

#[test]
fn a_fence_that_goes_down_is_reported() {
    let mut w = World::new();
    // The claim of fence 2 completes before the claim of fence 1 is invoked.
    w.claim(2, 0, 10);
    w.sweep(400, 410);
    w.reconcile(Decision::Retry, 420, 430);
    w.claim(1, 440, 450);
    let ledger = w.ledger(
        JobState::Running,
        Some(1),
        vec![
            w.attempt(1, AttemptState::Active, 745, None),
            w.attempt(2, AttemptState::Stopped, 305, None),
        ],
        vec![w.retry_record(2, 425)],
    );
    let report = check(&w.ops, &ledger, &config());
    assert!(
        kinds(&report).contains(&ViolationKind::FenceOrder),
        "{}",
        report.render(10)
    );
    assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
}

#[test]
fn an_accepted_result_missing_from_the_ledger_is_a_lost_result() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.result(1, Outcome::Passed, Answer::Accepted, 100, 110);
    // The ledger says the job is still running: the commit was lost.
    let ledger = w.ledger(
        JobState::Running,
        Some(1),
        vec![w.attempt(1, AttemptState::Active, 305, None)],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert_eq!(report.lost_results, 1, "{}", report.render(10));
    assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
}

#[test]
fn expiry_that_requeues_without_a_reconciliation_is_a_silent_requeue() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.sweep(400, 410);
    let ledger = w.ledger(
        JobState::Queued,
        None,
        vec![w.attempt(1, AttemptState::Uncertain, 305, None)],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert!(
        kinds(&report).contains(&ViolationKind::SilentRequeue),
        "{}",
        report.render(10)
    );
    assert!(kinds(&report).contains(&ViolationKind::NotLinearizable));
}

#[test]
fn a_rejection_the_model_would_not_give_is_not_linearizable() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    // `lease_expired` while the lease was certainly valid: only the model search sees it.
    w.heartbeat(1, Answer::Rejected(imp::Reason::LeaseExpired), 50, 60);
    let ledger = w.ledger(
        JobState::Running,
        Some(1),
        vec![w.attempt(1, AttemptState::Active, 305, None)],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert_eq!(kinds(&report), vec![ViolationKind::NotLinearizable]);
}

#[test]
fn an_outage_of_failed_sweeps_explains_an_uncertain_job_without_blowing_up_the_search() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    // 200 sweeps fail during an outage; one of them made the job uncertain.
    for k in 0..200 {
        w.op(
            Call::Sweep,
            Some(Answer::Unknown("database unavailable".into())),
            200 + k * 5,
            Some(202 + k * 5),
        );
    }
    w.heartbeat(1, Answer::Rejected(imp::Reason::LeaseExpired), 1300, 1310);
    let ledger = w.ledger(
        JobState::Uncertain,
        Some(1),
        vec![w.attempt(1, AttemptState::Uncertain, 305, None)],
        vec![],
    );
    let started = std::time::Instant::now();
    let report = check(&w.ops, &ledger, &config());
    assert!(report.is_clean(), "{}", report.render(10));
    assert_eq!(report.linearizable_jobs, 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Without any sweep, nothing made the job uncertain.
    w.ops.retain(|op| !matches!(op.call, Call::Sweep));
    for (i, op) in w.ops.iter_mut().enumerate() {
        op.id = i;
    }
    let report = check(&w.ops, &ledger, &config());
    assert_eq!(kinds(&report), vec![ViolationKind::NotLinearizable]);
}

#[test]
fn a_heartbeat_with_an_unknown_outcome_may_have_extended_the_lease() {
    let mut w = World::new();
    w.claim(1, 0, 10);
    w.op(
        Call::Heartbeat { tuple: w.tuple(1) },
        Some(Answer::Unknown("database unavailable".into())),
        100,
        Some(120),
    );
    // Accepted at 350: only valid if the failed heartbeat did extend the lease.
    w.heartbeat(
        1,
        Answer::Extended {
            lease_expiry: at(360 + TTL_MS),
            cancel_requested: false,
        },
        350,
        370,
    );
    let ledger = w.ledger(
        JobState::Running,
        Some(1),
        vec![w.attempt(1, AttemptState::Active, 660, None)],
        vec![],
    );
    let report = check(&w.ops, &ledger, &config());
    assert!(report.is_clean(), "{}", report.render(10));
    // Without the failed heartbeat, the same acceptance is stale.
    w.ops.remove(1);
    for (i, op) in w.ops.iter_mut().enumerate() {
        op.id = i;
    }
    let report = check(&w.ops, &ledger, &config());
    assert!(report.stale_acceptances == 1, "{}", report.render(10));
}
