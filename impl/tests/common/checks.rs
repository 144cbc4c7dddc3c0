//! The scenario checks of docs/protocol.md §10 and the tables of §6, each against a fresh world.

use super::{send, Check, CheckFn, Fail, Op, World, LEASE_TTL_SECS};
use crate::{ensure, ensure_eq};
use chrono::Duration;
use leasewright_impl::*;

/// Every check, by name (the mutants test runs them all against each mutant).
pub const ALL: &[(&str, CheckFn)] = &[
    ("stale_completion", |w| Box::pin(stale_completion(w))),
    ("ownership_tuple", |w| Box::pin(ownership_tuple(w))),
    ("heartbeat_after_expiry", |w| {
        Box::pin(heartbeat_after_expiry(w))
    }),
    ("duplicate_result", |w| Box::pin(duplicate_result(w))),
    ("conflicting_result", |w| Box::pin(conflicting_result(w))),
    ("runner_clock_skew", |w| Box::pin(runner_clock_skew(w))),
    ("cross_project", |w| Box::pin(cross_project(w))),
    ("cross_project_reconcile", |w| {
        Box::pin(cross_project_reconcile(w))
    }),
    ("expiry_makes_uncertain", |w| {
        Box::pin(expiry_makes_uncertain(w))
    }),
    ("retry_after_reconciliation", |w| {
        Box::pin(retry_after_reconciliation(w))
    }),
    ("tuple_precedence", |w| Box::pin(tuple_precedence(w))),
    ("standing_precedence", |w| Box::pin(standing_precedence(w))),
    ("cancel_table", |w| Box::pin(cancel_table(w))),
    ("reconcile_table", |w| Box::pin(reconcile_table(w))),
    ("rejoin_answers", |w| Box::pin(rejoin_answers(w))),
    ("reconnect", |w| Box::pin(reconnect(w))),
    ("target_boundary", |w| Box::pin(target_boundary(w))),
    ("side_effect_rules", |w| Box::pin(side_effect_rules(w))),
    ("shared_slot_reserved", |w| {
        Box::pin(shared_slot_reserved(w))
    }),
    ("shared_slot_stale_token", |w| {
        Box::pin(shared_slot_stale_token(w))
    }),
    ("shared_slot_next_job", |w| {
        Box::pin(shared_slot_next_job(w))
    }),
    ("slot_kind_mismatch", |w| Box::pin(slot_kind_mismatch(w))),
    ("batch_claim_one_per_slot", |w| {
        Box::pin(batch_claim_one_per_slot(w))
    }),
];

fn rejected<T>(reason: Reason) -> Verdict<T> {
    Verdict::Rejected(reason)
}

/// §10.1: A1 (fence 7) is superseded by A2 (fence 8); A1's late `passed` is `not_current`, kept in
/// A1's ledger; A2 stays current and `active`, the job `running`.
pub async fn stale_completion(w: World) -> Check {
    let job = w.submit().await?;
    for fence in 1..=6 {
        let lease = w.claim().await?;
        ensure_eq!(lease.tuple.fence, fence, "fence of retry {fence}");
        w.lose_and_retry(job).await?;
    }
    let a1 = w.claim().await?;
    ensure_eq!(a1.tuple.fence, 7, "A1's fence");
    w.advance_secs(LEASE_TTL_SECS);
    ensure_eq!(
        w.store.sweep_expired().await?,
        SweepVerdict::Uncertain(vec![job]),
        "the sweep makes the job uncertain"
    );
    ensure_eq!(
        w.job(job).await?.state,
        JobState::Uncertain,
        "job after the sweep"
    );
    let verdict = w
        .store
        .reconcile(w.project, job, Finding::Stopped, Decision::Retry)
        .await?;
    ensure_eq!(verdict, Verdict::Accepted(()), "reconcile stopped + retry");
    ensure_eq!(
        w.attempt(job, a1.tuple.attempt).await?.state,
        AttemptState::Stopped,
        "A1"
    );
    let a2 = w.claim().await?;
    ensure_eq!(a2.tuple.fence, 8, "A2's fence");
    let late = w
        .store
        .report_result(&a1.tuple, Outcome::Passed, "sha256:a1", None)
        .await?;
    ensure_eq!(late, rejected(Reason::NotCurrent), "A1's late result");
    let ledger = w.store.attempt_observations(a1.tuple.attempt).await?;
    let kept = ledger.iter().any(|o| {
        o.kind == MessageKind::Result
            && o.verdict == rejected(Reason::NotCurrent)
            && o.outcome == Some(Outcome::Passed)
    });
    ensure!(kept, "A1's late result is kept in A1's ledger: {ledger:?}");
    let a2_ledger = w.store.attempt_observations(a2.tuple.attempt).await?;
    ensure!(
        a2_ledger.is_empty(),
        "nothing of A1's is in A2's ledger: {a2_ledger:?}"
    );
    let view = w.job(job).await?;
    ensure_eq!(view.state, JobState::Running, "the job");
    ensure_eq!(
        view.current_attempt,
        Some(a2.tuple.attempt),
        "the current attempt"
    );
    ensure_eq!(view.fence, 8, "the job's fence");
    ensure_eq!(
        w.attempt(job, a2.tuple.attempt).await?.state,
        AttemptState::Active,
        "A2"
    );
    let fences: Vec<i64> = w
        .store
        .attempts(job)
        .await?
        .iter()
        .map(|a| a.fence)
        .collect();
    ensure_eq!(
        fences,
        (1..=8).collect::<Vec<i64>>(),
        "the fences of the ledger"
    );
    Ok(())
}

/// §10.2: (A, wrong lease, 1) → `lease_mismatch`; (A, L, 999) → `fence_mismatch`; (A, L, 1) →
/// accepted, for every message that carries the tuple.
pub async fn ownership_tuple(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    let exact = lease.tuple;
    ensure_eq!(exact.fence, 1, "the first fence");
    let wrong_lease = Tuple {
        lease_id: LeaseId::new_random(),
        ..exact
    };
    let wrong_fence = Tuple {
        fence: 999,
        ..exact
    };
    for op in Op::ALL {
        if op == Op::Result {
            continue;
        }
        ensure_eq!(
            send(&w.store, op, &wrong_lease, None).await?,
            rejected(Reason::LeaseMismatch),
            "{op:?} with a wrong lease"
        );
        ensure_eq!(
            send(&w.store, op, &wrong_fence, None).await?,
            rejected(Reason::FenceMismatch),
            "{op:?} with fence 999"
        );
        // Gets find what the puts (earlier in Op::ALL order for artifacts) stored.
        if op == Op::CacheGet {
            w.store.cache_put(&exact, "deps", b"cached", None).await?;
        }
        ensure_eq!(
            send(&w.store, op, &exact, None).await?,
            Verdict::Accepted(()),
            "{op:?} with the exact tuple"
        );
    }
    ensure_eq!(
        w.store.get_artifact(&exact, "out.tar", None).await?,
        Verdict::Accepted(b"bits".to_vec()),
        "the artifact put"
    );
    ensure_eq!(
        w.store.cache_get(&exact, "deps", None).await?,
        Verdict::Accepted(b"cached".to_vec()),
        "the cache entry put"
    );
    let result = |tuple: Tuple| {
        let store = w.store.clone();
        async move {
            store
                .report_result(&tuple, Outcome::Passed, "sha256:r", None)
                .await
        }
    };
    ensure_eq!(
        result(wrong_lease).await?,
        rejected(Reason::LeaseMismatch),
        "result with a wrong lease"
    );
    ensure_eq!(
        result(wrong_fence).await?,
        rejected(Reason::FenceMismatch),
        "result with fence 999"
    );
    ensure_eq!(
        w.job(job).await?.state,
        JobState::Running,
        "the job after forged results"
    );
    ensure_eq!(
        result(exact).await?,
        Verdict::Accepted(()),
        "result with the exact tuple"
    );
    let view = w.job(job).await?;
    ensure_eq!(view.state, JobState::Passed, "the job");
    ensure_eq!(
        view.outcome,
        Some(JobState::Passed),
        "the committed outcome"
    );
    ensure_eq!(
        w.store.target_reservation(job).await?,
        None,
        "the outcome releases the target"
    );
    // Every message was recorded, attributed to the attempt (checks 1-5 passed for all).
    let ledger = w.store.attempt_observations(exact.attempt).await?;
    ensure_eq!(
        ledger.len(),
        8 * 3 + 3 + 3,
        "observations in the attempt's ledger"
    );
    Ok(())
}

/// A heartbeat after expiry (swept or not) is `lease_expired` and the lease is unchanged.
pub async fn heartbeat_after_expiry(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    w.advance_secs(10);
    let answer = w.store.heartbeat(&lease.tuple, None).await?;
    let renewed = lease.lease_expiry + Duration::seconds(10);
    ensure_eq!(
        answer,
        Verdict::Accepted(HeartbeatAnswer {
            lease_expiry: renewed,
            cancel_requested: false
        }),
        "a heartbeat of a valid lease"
    );
    w.advance_secs(LEASE_TTL_SECS); // now == lease_expiry exactly: expired (not swept)
    ensure_eq!(
        w.store.heartbeat(&lease.tuple, None).await?,
        rejected(Reason::LeaseExpired),
        "a heartbeat at expiry"
    );
    ensure_eq!(
        w.attempt(job, lease.tuple.attempt).await?.lease_expiry,
        renewed,
        "the lease expiry"
    );
    ensure_eq!(
        w.attempt(job, lease.tuple.attempt).await?.state,
        AttemptState::Active,
        "unswept"
    );
    w.store.sweep_expired().await?;
    ensure_eq!(
        w.store.heartbeat(&lease.tuple, None).await?,
        rejected(Reason::LeaseExpired),
        "a heartbeat after the sweep"
    );
    ensure_eq!(
        w.attempt(job, lease.tuple.attempt).await?.lease_expiry,
        renewed,
        "the lease expiry"
    );
    ensure_eq!(w.job(job).await?.state, JobState::Uncertain, "the job");
    Ok(())
}

/// An identical duplicate result is `acknowledged` after the lease time, renewing nothing.
pub async fn duplicate_result(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    let first = w
        .store
        .report_result(&lease.tuple, Outcome::Passed, "sha256:r", None)
        .await?;
    ensure_eq!(first, Verdict::Accepted(()), "the result");
    let before = w.attempt(job, lease.tuple.attempt).await?;
    w.advance_secs(LEASE_TTL_SECS * 10);
    let again = w
        .store
        .report_result(&lease.tuple, Outcome::Passed, "sha256:r", None)
        .await?;
    ensure_eq!(
        again,
        Verdict::Acknowledged,
        "the identical duplicate after the lease time"
    );
    ensure_eq!(
        w.attempt(job, lease.tuple.attempt).await?,
        before.clone(),
        "the attempt"
    );
    ensure_eq!(
        w.store.heartbeat(&lease.tuple, None).await?,
        rejected(Reason::JobFinished),
        "no right renewed"
    );
    ensure_eq!(
        w.store.append_log(&lease.tuple, 0, b"x", None).await?,
        rejected(Reason::JobFinished),
        "no right renewed"
    );
    ensure_eq!(
        w.attempt(job, lease.tuple.attempt).await?,
        before,
        "the attempt"
    );
    ensure_eq!(w.job(job).await?.state, JobState::Passed, "the job");
    Ok(())
}

/// A conflicting result is recorded as a conflict; the committed outcome is unchanged.
pub async fn conflicting_result(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    let first = w
        .store
        .report_result(&lease.tuple, Outcome::Failed, "sha256:f", None)
        .await?;
    ensure_eq!(first, Verdict::Accepted(()), "the result");
    let other = w
        .store
        .report_result(&lease.tuple, Outcome::Passed, "sha256:p", None)
        .await?;
    ensure_eq!(
        other,
        rejected(Reason::ConflictingResult),
        "another outcome"
    );
    let digest = w
        .store
        .report_result(&lease.tuple, Outcome::Failed, "sha256:other", None)
        .await?;
    ensure_eq!(
        digest,
        rejected(Reason::ConflictingResult),
        "the same outcome, another digest"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.outcome, view.result_digest.as_deref()),
        (JobState::Failed, Some(JobState::Failed), Some("sha256:f")),
        "the committed outcome"
    );
    let attempt = w.attempt(job, lease.tuple.attempt).await?;
    ensure_eq!(
        (attempt.outcome, attempt.result_digest.as_deref()),
        (Some(Outcome::Failed), Some("sha256:f")),
        "the attempt's outcome"
    );
    let conflicts = w
        .store
        .attempt_observations(lease.tuple.attempt)
        .await?
        .into_iter()
        .filter(|o| o.verdict == rejected(Reason::ConflictingResult))
        .count();
    ensure_eq!(conflicts, 2, "conflicts recorded in the attempt's ledger");
    Ok(())
}

/// The same script with the runner's clock hours behind, exact, or hours ahead gives the same
/// verdicts (the runner's time is stored, never decisive).
pub async fn runner_clock_skew(w: World) -> Check {
    let mut runs = Vec::new();
    for skew_hours in [-5i64, 0, 5] {
        let skewed = |w: &World| Some(w.clock.now() + Duration::hours(skew_hours));
        let job = w.submit().await?;
        let lease = w.claim().await?;
        let t = lease.tuple;
        let mut verdicts = Vec::new();
        w.advance_secs(20);
        verdicts.push(w.store.heartbeat(&t, skewed(&w)).await?.without_value());
        verdicts.push(w.store.append_log(&t, 0, b"a", skewed(&w)).await?);
        w.advance_secs(LEASE_TTL_SECS - 1);
        verdicts.push(w.store.rejoin(&t, skewed(&w)).await?.verdict());
        w.advance_secs(1); // exactly at expiry
        verdicts.push(w.store.heartbeat(&t, skewed(&w)).await?.without_value());
        verdicts.push(w.store.append_log(&t, 1, b"b", skewed(&w)).await?);
        verdicts.push(w.store.rejoin(&t, skewed(&w)).await?.verdict());
        verdicts.push(
            w.store
                .report_result(&t, Outcome::Passed, "d", skewed(&w))
                .await?,
        );
        verdicts.push(w.store.sweep_expired().await.map(|v| match v {
            SweepVerdict::Uncertain(jobs) if jobs == vec![job] => Verdict::Accepted(()),
            _ => rejected(Reason::NotFound),
        })?);
        verdicts.push(
            w.store
                .report_result(&t, Outcome::Passed, "d", skewed(&w))
                .await?,
        );
        let observed = w.store.attempt_observations(t.attempt).await?;
        ensure!(
            observed
                .iter()
                .all(|o| o.runner_time.map(|r| r - o.received_at)
                    == Some(Duration::hours(skew_hours))),
            "the runner's time is stored beside the server's"
        );
        runs.push(verdicts);
    }
    let ok = Verdict::Accepted(());
    let expected = vec![
        ok,
        ok,
        ok,
        rejected(Reason::LeaseExpired),
        rejected(Reason::LeaseExpired),
        rejected(Reason::LeaseExpired),
        rejected(Reason::LeaseExpired),
        ok,
        rejected(Reason::LeaseExpired),
    ];
    for (run, skew) in runs.iter().zip(["-5h", "0", "+5h"]) {
        ensure_eq!(run, &expected, "verdicts with runner clock skew {skew}");
    }
    Ok(())
}

/// A runner or operator of another project is rejected `wrong_project` on every operation, and
/// can never write into this project's ledger.
pub async fn cross_project(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    ensure_eq!(
        w.store.claim(w.other_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "claim by the other project's runner"
    );
    let forged = Tuple {
        runner: w.other_runner,
        ..lease.tuple
    };
    for op in Op::ALL {
        ensure_eq!(
            send(&w.store, op, &forged, None).await?,
            rejected(Reason::WrongProject),
            "{op:?} from another project"
        );
    }
    ensure_eq!(
        w.store.cancel(w.other_project, job).await?,
        rejected(Reason::WrongProject),
        "cancel from another project"
    );
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    for (finding, decision) in [
        (Finding::Stopped, Decision::Retry),
        (Finding::Stopped, Decision::Abort),
        (Finding::ObservedPassed, Decision::Adopt),
    ] {
        ensure_eq!(
            w.store
                .reconcile(w.other_project, job, finding, decision)
                .await?,
            rejected(Reason::WrongProject),
            "reconcile {finding} + {decision} from another project"
        );
    }
    ensure_eq!(
        w.store.cancel(w.other_project, job).await?,
        rejected(Reason::WrongProject),
        "cancel from another project"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.cancel_requested),
        (JobState::Uncertain, false),
        "the job"
    );
    ensure!(
        w.store
            .attempt_observations(lease.tuple.attempt)
            .await?
            .is_empty(),
        "nothing in the ledger"
    );
    // A queued job of this project cannot be cancelled from the other project either.
    let queued = w.submit().await?;
    ensure_eq!(
        w.store.cancel(w.other_project, queued).await?,
        rejected(Reason::WrongProject),
        "cancel of a queued job from another project"
    );
    ensure_eq!(
        w.job(queued).await?.state,
        JobState::Queued,
        "the queued job"
    );
    Ok(())
}

/// An operator of another project cannot reconcile an uncertain job, whatever it decides.
pub async fn cross_project_reconcile(w: World) -> Check {
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    for (finding, decision) in [
        (Finding::ObservedPassed, Decision::Adopt),
        (Finding::Stopped, Decision::Abort),
        (Finding::Stopped, Decision::Retry),
    ] {
        let verdict = w
            .store
            .reconcile(w.other_project, job, finding, decision)
            .await?;
        ensure_eq!(
            verdict,
            rejected(Reason::WrongProject),
            "{finding} + {decision} from another project"
        );
    }
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.current_attempt),
        (JobState::Uncertain, Some(t.attempt)),
        "the job"
    );
    ensure!(
        w.store.target_reservation(job).await?.is_some(),
        "the target stays reserved"
    );
    let records = w.store.reconciliations(job).await?;
    ensure_eq!(records.len(), 3, "rejected reconciliations are recorded");
    ensure!(
        records
            .iter()
            .all(|r| r.attempt.is_none() && r.project == w.other_project),
        "records: {records:?}"
    );
    Ok(())
}

/// Expiry makes `running` and `cancelling` work `uncertain`, never `queued`; a queued job is
/// untouched; the target stays reserved.
pub async fn expiry_makes_uncertain(w: World) -> Check {
    let running = w.submit().await?;
    let cancelling = w.submit().await?;
    let queued = w.submit().await?;
    let a = w.claim().await?;
    let b = w.claim().await?;
    ensure_eq!(
        (a.tuple.job, b.tuple.job),
        (running, cancelling),
        "claims in submission order"
    );
    ensure_eq!(
        w.store.cancel(w.project, cancelling).await?,
        Verdict::Accepted(()),
        "cancel"
    );
    w.advance_secs(LEASE_TTL_SECS - 1);
    ensure_eq!(
        w.store.sweep_expired().await?,
        SweepVerdict::Accepted,
        "a sweep before expiry"
    );
    w.advance_secs(1);
    let mut expected = vec![running, cancelling];
    expected.sort();
    ensure_eq!(
        w.store.sweep_expired().await?,
        SweepVerdict::Uncertain(expected),
        "the sweep"
    );
    for job in [running, cancelling] {
        let view = w.job(job).await?;
        ensure_eq!(view.state, JobState::Uncertain, "an expired job");
        let attempt = w
            .attempt(job, view.current_attempt.ok_or(Fail("no attempt".into()))?)
            .await?;
        ensure_eq!(attempt.state, AttemptState::Uncertain, "its attempt");
        ensure!(
            w.store.target_reservation(job).await?.is_some(),
            "its target stays reserved"
        );
    }
    ensure_eq!(
        w.job(queued).await?.state,
        JobState::Queued,
        "the queued job"
    );
    ensure_eq!(
        w.store.sweep_expired().await?,
        SweepVerdict::Accepted,
        "a second sweep"
    );
    w.advance_secs(LEASE_TTL_SECS * 100);
    ensure_eq!(
        w.store.sweep_expired().await?,
        SweepVerdict::Accepted,
        "much later"
    );
    ensure_eq!(
        w.job(running).await?.state,
        JobState::Uncertain,
        "much later"
    );
    let next = w.claim().await?;
    ensure_eq!(next.tuple.job, queued, "the only claimable job");
    ensure_eq!(
        w.store.claim(w.runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "nothing else to claim"
    );
    Ok(())
}

/// A retry after reconciliation gets a larger fence; the old attempt's late reports stay in its
/// own ledger and change nothing.
pub async fn retry_after_reconciliation(w: World) -> Check {
    let job = w.submit().await?;
    let old = w.claim().await?;
    w.store.append_log(&old.tuple, 0, b"old 0", None).await?;
    w.lose_and_retry(job).await?;
    let new = w.claim_by(w.second_runner).await?;
    ensure!(new.tuple.fence > old.tuple.fence, "a larger fence");
    ensure!(new.tuple.lease_id != old.tuple.lease_id, "a fresh lease id");
    ensure_eq!(
        w.store.heartbeat(&old.tuple, None).await?,
        rejected(Reason::NotCurrent),
        "old heartbeat"
    );
    ensure_eq!(
        w.store.append_log(&old.tuple, 1, b"old 1", None).await?,
        rejected(Reason::NotCurrent),
        "old log"
    );
    ensure_eq!(
        w.store
            .report_result(&old.tuple, Outcome::Failed, "x", None)
            .await?,
        rejected(Reason::NotCurrent),
        "old result"
    );
    ensure_eq!(
        w.store.rejoin(&old.tuple, None).await?,
        RejoinAnswer::Stop(Reason::NotCurrent),
        "old rejoin"
    );
    let old_ledger = w.store.attempt_observations(old.tuple.attempt).await?;
    let late: Vec<_> = old_ledger
        .iter()
        .filter(|o| o.verdict == rejected(Reason::NotCurrent))
        .collect();
    ensure_eq!(
        late.len(),
        4,
        "late reports kept in the old attempt's ledger"
    );
    ensure!(
        w.store
            .attempt_observations(new.tuple.attempt)
            .await?
            .is_empty(),
        "the new ledger is clean"
    );
    ensure_eq!(
        w.store.logs(old.tuple.attempt).await?,
        vec![(0, b"old 0".to_vec())],
        "old logs"
    );
    ensure_eq!(
        w.store
            .report_result(&new.tuple, Outcome::Passed, "y", None)
            .await?,
        Verdict::Accepted(()),
        "new result"
    );
    ensure_eq!(
        w.job(job).await?.outcome,
        Some(JobState::Passed),
        "the outcome"
    );
    Ok(())
}

/// §6.1 checks 1-8: a tuple wrong in two ways gets the first reason; attribution follows 1-5.
pub async fn tuple_precedence(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    let t = lease.tuple;
    let other_job = w.submit().await?;
    let cases = [
        (
            "unknown runner and unknown job",
            Tuple {
                runner: RunnerId::new_random(),
                job: JobId::new_random(),
                ..t
            },
            Reason::UnknownRunner,
        ),
        (
            "unknown job and wrong fence",
            Tuple {
                job: JobId::new_random(),
                fence: 2,
                ..t
            },
            Reason::UnknownJob,
        ),
        (
            "wrong project and unknown attempt",
            Tuple {
                runner: w.other_runner,
                attempt: AttemptId::new_random(),
                ..t
            },
            Reason::WrongProject,
        ),
        (
            "attempt of another job and wrong runner",
            Tuple {
                job: other_job,
                runner: w.second_runner,
                ..t
            },
            Reason::UnknownAttempt,
        ),
        (
            "wrong runner and wrong lease",
            Tuple {
                runner: w.second_runner,
                lease_id: LeaseId::new_random(),
                ..t
            },
            Reason::RunnerMismatch,
        ),
        (
            "wrong lease and wrong fence",
            Tuple {
                lease_id: LeaseId::new_random(),
                fence: 999,
                ..t
            },
            Reason::LeaseMismatch,
        ),
        (
            "wrong fence",
            Tuple { fence: 0, ..t },
            Reason::FenceMismatch,
        ),
    ];
    for (what, tuple, reason) in cases {
        for op in Op::ALL {
            ensure_eq!(
                send(&w.store, op, &tuple, None).await?,
                rejected(reason),
                "{op:?}: {what}"
            );
        }
    }
    // Identity before standing: after expiry a forged fence is still fence_mismatch.
    w.advance_secs(LEASE_TTL_SECS);
    ensure_eq!(
        w.store.heartbeat(&Tuple { fence: 5, ..t }, None).await?,
        rejected(Reason::FenceMismatch),
        "a wrong fence on an expired lease"
    );
    // A late report that is also expired is not_current.
    w.lose_and_retry(job).await?;
    ensure_eq!(
        w.store.heartbeat(&t, None).await?,
        rejected(Reason::NotCurrent),
        "late and expired"
    );
    // Attribution: unattributed until check 5 passes, attributed from check 6 on.
    let observations = w.store.observations(job).await?;
    for o in &observations {
        let attributable = !matches!(
            o.verdict.reason(),
            Some(
                Reason::UnknownRunner
                    | Reason::UnknownJob
                    | Reason::WrongProject
                    | Reason::UnknownAttempt
                    | Reason::RunnerMismatch
            )
        );
        let expected = attributable.then_some(t.attempt);
        ensure_eq!(
            o.attempt,
            expected,
            "attribution of {:?} {:?}",
            o.kind,
            o.verdict
        );
    }
    ensure!(!observations.is_empty(), "observations were recorded");
    Ok(())
}

/// §6.1 checks 9-13: committed outcome, job_finished, lease_expired, cancel_requested,
/// cancel_not_requested.
pub async fn standing_precedence(w: World) -> Check {
    // job_finished for non-result messages after the committed outcome, even after expiry.
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    w.store
        .report_result(&t, Outcome::Passed, "sha256:r", None)
        .await?;
    w.advance_secs(LEASE_TTL_SECS);
    for op in Op::ALL {
        let expected = if op == Op::Result {
            Verdict::Acknowledged
        } else {
            rejected(Reason::JobFinished)
        };
        ensure_eq!(
            send(&w.store, op, &t, None).await?,
            expected,
            "{op:?} after the outcome"
        );
    }
    ensure_eq!(w.job(job).await?.state, JobState::Passed, "the job");
    // cancel_not_requested: a cancelled result while running.
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Cancelled, "d", None)
            .await?,
        rejected(Reason::CancelNotRequested),
        "cancelled while running"
    );
    // cancel_requested: anything but heartbeat, rejoin or result(cancelled) while cancelling.
    ensure_eq!(
        w.store.cancel(w.project, job).await?,
        Verdict::Accepted(()),
        "cancel"
    );
    for op in Op::ALL {
        let expected = match op {
            Op::Heartbeat | Op::Rejoin => Verdict::Accepted(()),
            _ => rejected(Reason::CancelRequested),
        };
        ensure_eq!(
            send(&w.store, op, &t, None).await?,
            expected,
            "{op:?} while cancelling"
        );
    }
    let answer = w.store.heartbeat(&t, None).await?;
    ensure!(
        matches!(
            answer,
            Verdict::Accepted(HeartbeatAnswer {
                cancel_requested: true,
                ..
            })
        ),
        "the heartbeat tells of the cancel: {answer:?}"
    );
    ensure_eq!(
        w.store.rejoin(&t, None).await?,
        RejoinAnswer::Cancel,
        "rejoin while cancelling"
    );
    // lease_expired comes before cancel_requested.
    w.advance_secs(LEASE_TTL_SECS);
    ensure_eq!(
        w.store.append_log(&t, 0, b"x", None).await?,
        rejected(Reason::LeaseExpired),
        "expired and cancelling"
    );
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Cancelled, "d", None)
            .await?,
        rejected(Reason::LeaseExpired),
        "cancelled after expiry"
    );
    // A cancelled result while cancelling commits `cancelled`.
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    w.store.cancel(w.project, job).await?;
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Cancelled, "d", None)
            .await?,
        Verdict::Accepted(()),
        "cancelled while cancelling"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.cancel_requested),
        (JobState::Cancelled, true),
        "the job"
    );
    ensure_eq!(
        w.attempt(job, t.attempt).await?.state,
        AttemptState::Cancelled,
        "the attempt"
    );
    Ok(())
}

/// Log append idempotence, sequence conflicts, and not_found.
pub async fn side_effect_rules(w: World) -> Check {
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    ensure_eq!(
        w.store.append_log(&t, 0, b"a", None).await?,
        Verdict::Accepted(()),
        "append 0"
    );
    ensure_eq!(
        w.store.append_log(&t, 0, b"a", None).await?,
        Verdict::Acknowledged,
        "append 0 again"
    );
    ensure_eq!(
        w.store.append_log(&t, 0, b"b", None).await?,
        rejected(Reason::SequenceConflict),
        "append 0 with other content"
    );
    ensure_eq!(
        w.store.append_log(&t, 1, b"b", None).await?,
        Verdict::Accepted(()),
        "append 1"
    );
    ensure_eq!(
        w.store.logs(t.attempt).await?,
        vec![(0, b"a".to_vec()), (1, b"b".to_vec())],
        "the log"
    );
    ensure_eq!(
        w.store.get_artifact(&t, "nothing", None).await?,
        rejected(Reason::NotFound),
        "artifact get"
    );
    ensure_eq!(
        w.store.cache_get(&t, "nothing", None).await?,
        rejected(Reason::NotFound),
        "cache get"
    );
    let source = w.store.fetch_source(&t, None).await?;
    ensure_eq!(
        source,
        Verdict::Accepted(SourceIdentity {
            source_revision: "abc123".into(),
            source_digest: "sha256:src".into(),
            command: "make".into()
        }),
        "source fetch"
    );
    ensure_eq!(w.job(job).await?.state, JobState::Running, "the job");
    Ok(())
}

/// §6.3 cancel table.
pub async fn cancel_table(w: World) -> Check {
    ensure_eq!(
        w.store.cancel(w.project, JobId::new_random()).await?,
        rejected(Reason::UnknownJob),
        "unknown job"
    );
    let queued = w.submit().await?;
    ensure_eq!(
        w.store.cancel(w.other_project, queued).await?,
        rejected(Reason::WrongProject),
        "wrong project"
    );
    ensure_eq!(
        w.store.cancel(w.project, queued).await?,
        Verdict::Accepted(()),
        "queued"
    );
    let view = w.job(queued).await?;
    ensure_eq!(
        (view.state, view.current_attempt),
        (JobState::Cancelled, None),
        "queued → cancelled"
    );
    ensure_eq!(
        w.store.cancel(w.project, queued).await?,
        rejected(Reason::JobFinished),
        "cancelled"
    );
    ensure_eq!(
        w.store.cancel(w.other_project, queued).await?,
        rejected(Reason::WrongProject),
        "wrong project before finished"
    );
    let running = w.submit().await?;
    w.claim().await?;
    ensure_eq!(
        w.store.cancel(w.project, running).await?,
        Verdict::Accepted(()),
        "running"
    );
    let view = w.job(running).await?;
    ensure_eq!(
        (view.state, view.cancel_requested),
        (JobState::Cancelling, true),
        "running → cancelling"
    );
    ensure_eq!(
        w.store.cancel(w.project, running).await?,
        Verdict::Acknowledged,
        "cancelling"
    );
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        w.store.cancel(w.project, running).await?,
        rejected(Reason::ReconcileRequired),
        "uncertain"
    );
    ensure_eq!(
        w.job(running).await?.state,
        JobState::Uncertain,
        "the uncertain job"
    );
    Ok(())
}

/// §6.3 reconcile table and rule R7's effects.
pub async fn reconcile_table(w: World) -> Check {
    let r = |job, finding, decision| {
        let store = w.store.clone();
        let project = w.project;
        async move { store.reconcile(project, job, finding, decision).await }
    };
    ensure_eq!(
        r(JobId::new_random(), Finding::Stopped, Decision::Retry).await?,
        rejected(Reason::UnknownJob),
        "unknown job"
    );
    let job = w.submit().await?;
    ensure_eq!(
        w.store
            .reconcile(w.other_project, job, Finding::StillRunning, Decision::Retry)
            .await?,
        rejected(Reason::WrongProject),
        "wrong project"
    );
    ensure_eq!(
        r(job, Finding::StillRunning, Decision::Adopt).await?,
        rejected(Reason::NotUncertain),
        "queued"
    );
    let t = w.claim().await?.tuple;
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Retry).await?,
        rejected(Reason::NotUncertain),
        "running"
    );
    w.advance_secs(LEASE_TTL_SECS);
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Retry).await?,
        rejected(Reason::NotUncertain),
        "expired but not swept"
    );
    w.store.sweep_expired().await?;
    ensure_eq!(
        r(job, Finding::StillRunning, Decision::Retry).await?,
        rejected(Reason::ExecutionNotStopped),
        "still running + retry"
    );
    ensure_eq!(
        r(job, Finding::StillRunning, Decision::Adopt).await?,
        rejected(Reason::ExecutionNotStopped),
        "still running + adopt"
    );
    ensure_eq!(
        r(job, Finding::StillRunning, Decision::Abort).await?,
        rejected(Reason::ExecutionNotStopped),
        "still running + abort"
    );
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Adopt).await?,
        rejected(Reason::NothingToAdopt),
        "stopped + adopt"
    );
    ensure_eq!(
        w.job(job).await?.state,
        JobState::Uncertain,
        "rejections change nothing"
    );
    // retry
    ensure_eq!(
        r(job, Finding::ObservedFailed, Decision::Retry).await?,
        Verdict::Accepted(()),
        "observed + retry"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.current_attempt),
        (JobState::Queued, None),
        "retry → queued"
    );
    ensure_eq!(
        w.attempt(job, t.attempt).await?.state,
        AttemptState::Stopped,
        "the attempt"
    );
    ensure_eq!(
        w.store.target_reservation(job).await?,
        None,
        "the target is released"
    );
    // abort
    let t = w.claim().await?.tuple;
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Abort).await?,
        Verdict::Accepted(()),
        "stopped + abort"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.outcome, view.current_attempt),
        (JobState::Aborted, Some(JobState::Aborted), None),
        "abort → aborted"
    );
    ensure_eq!(
        w.attempt(job, t.attempt).await?.state,
        AttemptState::Stopped,
        "the attempt"
    );
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Abort).await?,
        rejected(Reason::NotUncertain),
        "aborted"
    );
    // adopt
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        r(job, Finding::ObservedPassed, Decision::Adopt).await?,
        Verdict::Accepted(()),
        "observed passed + adopt"
    );
    let view = w.job(job).await?;
    ensure_eq!(
        (view.state, view.current_attempt),
        (JobState::Passed, Some(t.attempt)),
        "adopt → passed"
    );
    ensure_eq!(
        w.attempt(job, t.attempt).await?.state,
        AttemptState::Passed,
        "the attempt"
    );
    ensure_eq!(
        w.store.target_reservation(job).await?,
        None,
        "the target is released"
    );
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Failed, "late", None)
            .await?,
        rejected(Reason::ConflictingResult),
        "a late other result"
    );
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Passed, "late", None)
            .await?,
        Verdict::Acknowledged,
        "the adopted outcome reported late"
    );
    // cancel requested: retry refused, abort → cancelled
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    w.store.cancel(w.project, job).await?;
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Retry).await?,
        rejected(Reason::CancelRequested),
        "retry after a cancel request"
    );
    ensure_eq!(
        r(job, Finding::ObservedFailed, Decision::Adopt).await?,
        Verdict::Accepted(()),
        "adopt after a cancel request"
    );
    ensure_eq!(w.job(job).await?.state, JobState::Failed, "adopt → failed");
    let _ = t;
    let job = w.submit().await?;
    w.claim().await?;
    w.store.cancel(w.project, job).await?;
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        r(job, Finding::Stopped, Decision::Abort).await?,
        Verdict::Accepted(()),
        "abort after a cancel request"
    );
    ensure_eq!(
        w.job(job).await?.state,
        JobState::Cancelled,
        "abort after cancel → cancelled"
    );
    let records = w.store.reconciliations(job).await?;
    ensure_eq!(records.len(), 1, "the reconciliation is recorded");
    Ok(())
}

/// Rule R5: rejoin answers continue / cancel / stop, and never extends the lease.
pub async fn rejoin_answers(w: World) -> Check {
    let job = w.submit().await?;
    let t = w.claim().await?.tuple;
    let expiry = w.attempt(job, t.attempt).await?.lease_expiry;
    w.advance_secs(LEASE_TTL_SECS - 1);
    ensure_eq!(
        w.store.rejoin(&t, None).await?,
        RejoinAnswer::Continue,
        "a valid lease"
    );
    ensure_eq!(
        w.attempt(job, t.attempt).await?.lease_expiry,
        expiry,
        "not extended"
    );
    w.advance_secs(1);
    ensure_eq!(
        w.store.rejoin(&t, None).await?,
        RejoinAnswer::Stop(Reason::LeaseExpired),
        "expired"
    );
    ensure_eq!(
        w.store.rejoin(&Tuple { fence: 3, ..t }, None).await?,
        RejoinAnswer::Stop(Reason::FenceMismatch),
        "forged"
    );
    let kinds: Vec<_> = w
        .store
        .attempt_observations(t.attempt)
        .await?
        .iter()
        .map(|o| o.kind)
        .collect();
    ensure_eq!(kinds, vec![MessageKind::Rejoin; 3], "rejoins are recorded");
    Ok(())
}

/// §10.4: a runner disconnects while its target mutation is in flight; its lease expires; it
/// reconnects with its original tuple: `stop`, its result is a late observation, and no second
/// attempt has started.
pub async fn reconnect(w: World) -> Check {
    let job = w.submit().await?;
    let lease = w.claim().await?;
    let t = lease.tuple;
    let target = w
        .store
        .demo_target(TargetKind::Unfenced, &job.to_string())
        .await?;
    let mutation = TargetMutation {
        job,
        attempt: t.attempt,
        slot_token: lease.slot_token,
        deployment_id: job.to_string(),
    };
    ensure_eq!(
        target.mutate(&mutation).await?,
        Verdict::Accepted(()),
        "the in-flight mutation"
    );
    w.advance_secs(LEASE_TTL_SECS * 4);
    w.store.sweep_expired().await?;
    ensure_eq!(
        w.store.rejoin(&t, None).await?,
        RejoinAnswer::Stop(Reason::LeaseExpired),
        "rejoin"
    );
    ensure_eq!(
        w.store
            .report_result(&t, Outcome::Passed, "d", None)
            .await?,
        rejected(Reason::LeaseExpired),
        "its result"
    );
    let ledger = w.store.attempt_observations(t.attempt).await?;
    ensure!(
        ledger
            .iter()
            .any(|o| o.kind == MessageKind::Result && o.outcome == Some(Outcome::Passed)),
        "kept as a late observation"
    );
    ensure_eq!(w.store.attempts(job).await?.len(), 1, "no second attempt");
    ensure_eq!(
        w.store.claim(w.second_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "no claim"
    );
    ensure_eq!(w.job(job).await?.state, JobState::Uncertain, "the job");
    Ok(())
}

/// §10.3 and §8: a fenced target refuses a stale fence; an idempotent one applies a deployment
/// once; an unfenced one applies everything, so the reservation is the only protection: no
/// second job on the same target starts until reconciliation.
pub async fn target_boundary(w: World) -> Check {
    // The scenario as the spec tells it: A11 mutated the fenced target, A10 comes back.
    let job = w
        .store
        .submit_job(
            w.project,
            NewJob {
                target_kind: TargetKind::Fenced,
                ..NewJob::new("r", "d", "deploy")
            },
        )
        .await?;
    for _ in 1..=9 {
        w.claim().await?;
        w.lose_and_retry(job).await?;
    }
    let a10 = w.claim().await?;
    w.lose_and_retry(job).await?;
    let a11 = w.claim_by(w.second_runner).await?;
    ensure_eq!((a10.tuple.fence, a11.tuple.fence), (10, 11), "the fences");
    // The job's own slot was reserved by its attempts only: its tokens are its reservations.
    ensure_eq!(
        (a10.slot_token, a11.slot_token),
        (10, 11),
        "the slot tokens"
    );
    let slot = w.job(job).await?.target;
    let target = w.store.demo_target(TargetKind::Fenced, &slot).await?;
    let deploy = |lease: &Lease| TargetMutation {
        job,
        attempt: lease.tuple.attempt,
        slot_token: lease.slot_token,
        deployment_id: job.to_string(),
    };
    ensure_eq!(
        target.mutate(&deploy(&a11)).await?,
        Verdict::Accepted(()),
        "A11's mutation"
    );
    ensure_eq!(
        target.mutate(&deploy(&a10)).await?,
        rejected(Reason::StaleFence),
        "A10's mutation"
    );
    ensure_eq!(
        target.state().await?.highest_slot_token,
        Some(11),
        "the target's slot token"
    );
    ensure_eq!(target.state().await?.applied_count, 1, "applied once");
    let job = JobId::new_random();
    let fenced = w
        .store
        .demo_target(TargetKind::Fenced, "fenced-slot")
        .await?;
    let m = |slot_token| TargetMutation {
        job,
        attempt: AttemptId::new_random(),
        slot_token,
        deployment_id: "d".into(),
    };
    ensure_eq!(
        fenced.mutate(&m(11)).await?,
        Verdict::Accepted(()),
        "slot token 11"
    );
    ensure_eq!(
        fenced.mutate(&m(10)).await?,
        rejected(Reason::StaleFence),
        "slot token 10 afterwards"
    );
    ensure_eq!(
        fenced.mutate(&m(11)).await?,
        Verdict::Accepted(()),
        "slot token 11 again"
    );
    ensure_eq!(
        fenced.state().await?.highest_slot_token,
        Some(11),
        "the highest slot token"
    );
    let idempotent = w
        .store
        .demo_target(TargetKind::Idempotent, "idempotent-slot")
        .await?;
    ensure_eq!(
        idempotent.mutate(&m(1)).await?,
        Verdict::Accepted(()),
        "first"
    );
    ensure_eq!(
        idempotent.mutate(&m(2)).await?,
        Verdict::Acknowledged,
        "a repeat"
    );
    ensure_eq!(idempotent.state().await?.applied_count, 1, "applied once");
    let unfenced = w
        .store
        .demo_target(TargetKind::Unfenced, "unfenced-slot")
        .await?;
    ensure_eq!(
        unfenced.mutate(&m(2)).await?,
        Verdict::Accepted(()),
        "unfenced"
    );
    ensure_eq!(
        unfenced.mutate(&m(1)).await?,
        Verdict::Accepted(()),
        "unfenced, stale"
    );
    ensure_eq!(unfenced.state().await?.applied_count, 2, "applied twice");
    // Two jobs deploying to one shared unfenced target.
    let shared = |_| NewJob {
        target: Some("production".into()),
        ..NewJob::new("r", "d", "deploy")
    };
    let first = w.store.submit_job(w.project, shared(())).await?;
    let second = w.store.submit_job(w.project, shared(())).await?;
    let lease = w.claim().await?;
    ensure_eq!(lease.tuple.job, first, "the first deployment");
    ensure_eq!(
        w.store.claim(w.second_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "the target is reserved"
    );
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        w.store.claim(w.second_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "still reserved while uncertain"
    );
    ensure_eq!(
        w.store
            .reconcile(w.project, first, Finding::Stopped, Decision::Abort)
            .await?,
        Verdict::Accepted(()),
        "reconcile"
    );
    ensure_eq!(
        w.claim_by(w.second_runner).await?.tuple.job,
        second,
        "the second deployment after reconciliation"
    );
    Ok(())
}

/// A job of `project` naming the target slot `slot` of `kind`.
async fn submit_to_slot(
    w: &World,
    project: ProjectId,
    slot: &str,
    kind: TargetKind,
) -> Result<JobId, Fail> {
    Ok(w.store
        .submit_job(
            project,
            NewJob {
                target: Some(slot.into()),
                target_kind: kind,
                ..NewJob::new("r", "d", "deploy")
            },
        )
        .await?)
}

/// The mutation an attempt's runner sends to its slot's target: it carries the lease's slot token.
fn deployment(lease: &Lease) -> TargetMutation {
    TargetMutation {
        job: lease.tuple.job,
        attempt: lease.tuple.attempt,
        slot_token: lease.slot_token,
        deployment_id: lease.tuple.job.to_string(),
    }
}

/// Claims `job` of `project` by `runner` until its attempt holds slot token `token` (every
/// earlier attempt's lease expires and is reconciled `stopped` + `retry`); the last lease.
async fn claim_until_token(
    w: &World,
    project: ProjectId,
    runner: RunnerId,
    job: JobId,
    token: i64,
) -> Result<Lease, Fail> {
    loop {
        let lease = w.claim_by(runner).await?;
        ensure_eq!(lease.tuple.job, job, "the claimed job");
        if lease.slot_token >= token {
            ensure_eq!(lease.slot_token, token, "the slot token");
            return Ok(lease);
        }
        w.advance_secs(LEASE_TTL_SECS);
        w.store.sweep_expired().await?;
        ensure_eq!(
            w.store
                .reconcile(project, job, Finding::Stopped, Decision::Retry)
                .await?,
            Verdict::Accepted(()),
            "reconcile stopped + retry"
        );
    }
}

/// §10.5 (a): slots are global. While project P1's job on `prod` is `uncertain` (its slot
/// reserved), project P2's runner cannot claim P2's job naming `prod`; after the reconciliation it
/// can, with the slot's next token.
pub async fn shared_slot_reserved(w: World) -> Check {
    let p1_job = submit_to_slot(&w, w.project, "prod", TargetKind::Unfenced).await?;
    let p2_job = submit_to_slot(&w, w.other_project, "prod", TargetKind::Unfenced).await?;
    let p1 = w.claim().await?;
    ensure_eq!((p1.tuple.job, p1.slot_token), (p1_job, 1), "P1's claim");
    ensure_eq!(
        w.store.claim(w.other_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "P2 while P1 holds prod"
    );
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(w.job(p1_job).await?.state, JobState::Uncertain, "P1's job");
    ensure_eq!(
        w.store.claim(w.other_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "P2 while P1's job is uncertain"
    );
    ensure_eq!(
        w.store.target_reservation(p1_job).await?,
        Some(("prod".to_owned(), p1.tuple.attempt)),
        "the reservation stays with P1's uncertain attempt"
    );
    ensure_eq!(
        w.store
            .reconcile(w.project, p1_job, Finding::Stopped, Decision::Abort)
            .await?,
        Verdict::Accepted(()),
        "reconcile"
    );
    let p2 = w.claim_by(w.other_runner).await?;
    ensure_eq!((p2.tuple.job, p2.slot_token), (p2_job, 2), "P2's claim");
    ensure_eq!(p2.tuple.fence, 1, "P2's job fence is its own");
    Ok(())
}

/// §10.5 (b): P1's job reached slot token 3 on a fenced `prod` and was cut off; after the
/// reconciliation P2's job is claimed with token 4 and deploys; the cut-off worker's token-3
/// mutation is refused, although P2's job fence (1) is lower than P1's (3).
pub async fn shared_slot_stale_token(w: World) -> Check {
    let p1_job = submit_to_slot(&w, w.project, "prod", TargetKind::Fenced).await?;
    let p1 = claim_until_token(&w, w.project, w.runner, p1_job, 3).await?;
    ensure_eq!(p1.tuple.fence, 3, "P1's fence");
    let p2_job = submit_to_slot(&w, w.other_project, "prod", TargetKind::Fenced).await?;
    // P1's worker is cut off: its lease expires, the operator reconciles it as stopped.
    w.advance_secs(LEASE_TTL_SECS);
    w.store.sweep_expired().await?;
    ensure_eq!(
        w.store.claim(w.other_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "P2 while P1's job is uncertain"
    );
    ensure_eq!(
        w.store
            .reconcile(w.project, p1_job, Finding::Stopped, Decision::Retry)
            .await?,
        Verdict::Accepted(()),
        "reconcile"
    );
    let p2 = w.claim_by(w.other_runner).await?;
    ensure_eq!((p2.tuple.job, p2.tuple.fence), (p2_job, 1), "P2's claim");
    ensure_eq!(p2.slot_token, 4, "the slot's next token");
    ensure_eq!(
        w.store.claim(w.runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "P1's requeued job waits for the slot"
    );
    let target = w.store.demo_target(TargetKind::Fenced, "prod").await?;
    ensure_eq!(
        target.mutate(&deployment(&p2)).await?,
        Verdict::Accepted(()),
        "P2's deployment"
    );
    ensure_eq!(
        target.mutate(&deployment(&p1)).await?,
        rejected(Reason::StaleFence),
        "the cut-off worker's token-3 deployment"
    );
    let state = target.state().await?;
    ensure_eq!(
        (state.highest_slot_token, state.applied_count),
        (Some(4), 1),
        "the target"
    );
    Ok(())
}

/// §10.5 (c): job A of P1 reached fence 3 on a fenced `prod`, deployed and passed; job B (fence 1)
/// is claimed with the next slot token and its deployment is accepted.
pub async fn shared_slot_next_job(w: World) -> Check {
    let a_job = submit_to_slot(&w, w.project, "prod", TargetKind::Fenced).await?;
    let b_job = submit_to_slot(&w, w.project, "prod", TargetKind::Fenced).await?;
    let target = w.store.demo_target(TargetKind::Fenced, "prod").await?;
    let a = claim_until_token(&w, w.project, w.runner, a_job, 3).await?;
    ensure_eq!(a.tuple.fence, 3, "A's fence");
    ensure_eq!(
        target.mutate(&deployment(&a)).await?,
        Verdict::Accepted(()),
        "A's deployment"
    );
    ensure_eq!(
        w.store
            .report_result(&a.tuple, Outcome::Passed, "d", None)
            .await?,
        Verdict::Accepted(()),
        "A passed"
    );
    let b = w.claim().await?;
    ensure_eq!((b.tuple.job, b.tuple.fence), (b_job, 1), "B's claim");
    ensure_eq!(b.slot_token, 4, "B's slot token");
    ensure_eq!(
        target.mutate(&deployment(&b)).await?,
        Verdict::Accepted(()),
        "B's deployment"
    );
    ensure_eq!(
        target.state().await?.highest_slot_token,
        Some(4),
        "the target"
    );
    Ok(())
}

/// §8.1: a slot has one kind. A job naming a slot registered with another kind is refused at
/// submission (`target_kind_mismatch`), from any project; the same kind is accepted.
pub async fn slot_kind_mismatch(w: World) -> Check {
    submit_to_slot(&w, w.project, "prod", TargetKind::Fenced).await?;
    for (project, kind) in [
        (w.project, TargetKind::Unfenced),
        (w.other_project, TargetKind::Idempotent),
    ] {
        let refused = w
            .store
            .submit_job(
                project,
                NewJob {
                    target: Some("prod".into()),
                    target_kind: kind,
                    ..NewJob::new("r", "d", "deploy")
                },
            )
            .await;
        ensure!(
            matches!(refused, Err(Error::TargetKindMismatch)),
            "a {kind} job on the fenced prod: {refused:?}"
        );
    }
    submit_to_slot(&w, w.other_project, "prod", TargetKind::Fenced).await?;
    let p1 = w.claim().await?;
    ensure_eq!(p1.slot_token, 1, "the refused jobs took no token");
    Ok(())
}

/// R1: a batch claim takes at most one job per slot, and skips to the next free slot.
pub async fn batch_claim_one_per_slot(w: World) -> Check {
    let mut expected = Vec::new();
    for slot in ["a", "a", "b", "a", "b", "c"] {
        let job = submit_to_slot(&w, w.project, slot, TargetKind::Unfenced).await?;
        if !expected.iter().any(|(s, _)| *s == slot) {
            expected.push((slot, job));
        }
    }
    let claimed = match w.store.claim_batch(w.runner, 6, None).await? {
        Verdict::Accepted(leases) => leases,
        other => return Err(Fail(format!("batch claim: {other:?}"))),
    };
    let jobs: Vec<JobId> = claimed.iter().map(|lease| lease.tuple.job).collect();
    let want: Vec<JobId> = expected.iter().map(|(_, job)| *job).collect();
    ensure_eq!(jobs, want, "the earliest job of each slot");
    ensure!(
        claimed.iter().all(|lease| lease.slot_token == 1),
        "each slot's first token"
    );
    ensure_eq!(
        w.store.claim(w.second_runner, None).await?,
        rejected(Reason::NoQueuedJob),
        "every slot is reserved"
    );
    Ok(())
}
