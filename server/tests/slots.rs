//! Global target slots over HTTP (docs/protocol.md §8, scenario §10.5): the three observations of
//! issue 13, replayed against `serve` on a fresh database as a user with two projects would.
//! Slot names are one namespace across projects, reservations are global, and targets compare the
//! slot token a lease carries, never a job fence.

use leasewright_server::app::Server;
use leasewright_server::client::CallError;
use leasewright_server::wire::LeaseBody;
use serde_json::json;
use uuid::Uuid;

mod common;

use common::*;

/// Deploys `lease`'s job to its slot; the status and the verdict or error code.
async fn deploy(server: &Server, lease: &LeaseBody) -> (u16, String) {
    let (status, answer) = post(
        server,
        None,
        &format!("/v1/targets/{}/deploy", lease.target),
        &deployment(lease),
    )
    .await;
    let said = answer["verdict"]
        .as_str()
        .filter(|_| status == 200)
        .or_else(|| answer["error"]["code"].as_str())
        .unwrap_or_default();
    (status, said.to_owned())
}

/// A claim over the wire: the status and the error code of its answer (`None` when accepted).
async fn claim_answer(server: &Server, f: &Fixture, capacity: u32) -> (u16, Option<String>) {
    let (status, answer) = post(
        server,
        Some(&f.token),
        "/v1/runner/claim",
        &json!({"capacity": capacity}),
    )
    .await;
    (status, answer["error"]["code"].as_str().map(str::to_owned))
}

/// Submits a job of `f`'s project naming the target slot `slot` of `kind`; its id.
async fn submit(f: &Fixture, slot: &str, kind: &str) -> Uuid {
    f.operator
        .submit(f.project, &submit_request(Some(slot), kind))
        .await
        .unwrap()
        .job
}

/// The lease's job loses its lease (the worker is cut off); the sweep makes the job `uncertain`.
async fn cut_off(f: &Fixture) {
    f.operator.advance_clock(31_000).await.unwrap();
    f.operator.sweep().await.unwrap();
}

/// Claims `job` of `f`'s project until its attempt holds slot token `token`; every earlier
/// attempt is cut off and reconciled `stopped` + `retry`.
async fn claim_until_token(f: &Fixture, job: Uuid, token: i64) -> LeaseBody {
    loop {
        let lease = f.runner.claim(1).await.unwrap().remove(0);
        assert_eq!(lease.job, job);
        if lease.slot_token == token {
            return lease;
        }
        cut_off(f).await;
        f.operator
            .reconcile(f.project, job, "stopped", "retry")
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_slot_held_by_an_uncertain_job_of_one_project_is_never_claimed_by_another_project() {
    let (_db, server) = start(true).await;
    let p1 = fixture_named(&server, "p1").await;
    let p2 = fixture_named(&server, "p2").await;
    let p1_job = submit(&p1, "prod", "unfenced").await;
    let p2_job = submit(&p2, "prod", "unfenced").await;
    let held = p1.runner.claim(1).await.unwrap().remove(0);
    assert_eq!((held.job, held.slot_token), (p1_job, 1));
    assert_eq!(
        claim_answer(&server, &p2, 1).await,
        (409, Some("no_queued_job".into())),
        "P2 while P1 runs on prod"
    );
    cut_off(&p1).await;
    let job = p1.operator.job(p1.project, p1_job).await.unwrap();
    assert_eq!(job.state, "uncertain");
    assert_eq!(job.target_reserved_by, Some(held.attempt));
    assert_eq!(
        claim_answer(&server, &p2, 4).await,
        (409, Some("no_queued_job".into())),
        "P2 while P1's job on prod is uncertain: no second deployment can start"
    );
    assert_eq!(
        p2.operator.job(p2.project, p2_job).await.unwrap().state,
        "queued"
    );
    // Only an operator who established that P1's execution stopped releases the slot.
    p1.operator
        .reconcile(p1.project, p1_job, "stopped", "abort")
        .await
        .unwrap();
    let next = p2.runner.claim(1).await.unwrap().remove(0);
    assert_eq!((next.job, next.fence, next.slot_token), (p2_job, 1, 2));
}

#[tokio::test]
async fn a_cut_off_workers_token_3_deployment_is_refused_once_another_projects_job_deployed() {
    let (_db, server) = start(true).await;
    let p1 = fixture_named(&server, "p1").await;
    let p2 = fixture_named(&server, "p2").await;
    let p1_job = submit(&p1, "prod", "fenced").await;
    let stale = claim_until_token(&p1, p1_job, 3).await;
    assert_eq!(stale.fence, 3);
    // P1's fence-3 worker is cut off; the operator establishes it stopped (wrongly: its
    // deployment is still on its way) and retries.
    cut_off(&p1).await;
    p1.operator
        .reconcile(p1.project, p1_job, "stopped", "retry")
        .await
        .unwrap();
    let p2_job = submit(&p2, "prod", "fenced").await;
    let next = p2.runner.claim(1).await.unwrap().remove(0);
    assert_eq!((next.job, next.fence, next.slot_token), (p2_job, 1, 4));
    assert_eq!(
        claim_answer(&server, &p1, 1).await,
        (409, Some("no_queued_job".into())),
        "P1's requeued job waits for the slot"
    );
    assert_eq!(deploy(&server, &next).await, (200, "accepted".into()));
    // The cut-off worker's late deployment: token 3 < 4, although its job fence (3) is higher
    // than P2's (1).
    assert_eq!(deploy(&server, &stale).await, (409, "stale_fence".into()));
    let target = p1.operator.target("prod").await.unwrap();
    assert_eq!(
        (target.highest_slot_token, target.applied_count),
        (Some(4), 1)
    );
}

#[tokio::test]
async fn a_job_deploys_to_a_fenced_slot_after_another_job_reached_fence_3_there_and_passed() {
    let (_db, server) = start(true).await;
    let f = fixture(&server).await;
    let a_job = submit(&f, "prod", "fenced").await;
    let b_job = submit(&f, "prod", "fenced").await;
    let a = claim_until_token(&f, a_job, 3).await;
    assert_eq!(a.fence, 3);
    assert_eq!(deploy(&server, &a).await, (200, "accepted".into()));
    f.runner
        .result(&a.tuple(None), "passed", "d")
        .await
        .unwrap();
    let b = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!((b.job, b.fence, b.slot_token), (b_job, 1, 4));
    assert_eq!(deploy(&server, &b).await, (200, "accepted".into()));
    let target = f.operator.target("prod").await.unwrap();
    assert_eq!(
        (target.highest_slot_token, target.applied_count),
        (Some(4), 2)
    );
}

#[tokio::test]
async fn a_job_naming_a_slot_of_another_kind_is_refused_at_submission_from_any_project() {
    let (_db, server) = start(false).await;
    let p1 = fixture_named(&server, "p1").await;
    let p2 = fixture_named(&server, "p2").await;
    submit(&p1, "prod", "fenced").await;
    for (f, kind) in [(&p1, "unfenced"), (&p2, "idempotent")] {
        let error = f
            .operator
            .submit(f.project, &submit_request(Some("prod"), kind))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, CallError::Http { status: 409, code, .. } if code == "target_kind_mismatch"),
            "{kind}: {error:?}"
        );
    }
    submit(&p2, "prod", "fenced").await;
    assert_eq!(p1.operator.jobs(p1.project).await.unwrap().len(), 1);
    assert_eq!(p2.operator.jobs(p2.project).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_batch_claim_over_http_takes_one_job_per_slot() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let mut first_of_slot = Vec::new();
    for slot in ["a", "a", "b", "b", "c"] {
        let job = submit(&f, slot, "fenced").await;
        if !first_of_slot.iter().any(|(s, _)| *s == slot) {
            first_of_slot.push((slot, job));
        }
    }
    let leases = f.runner.claim(5).await.unwrap();
    let claimed: Vec<(&str, Uuid, i64)> = leases
        .iter()
        .map(|l| (l.target.as_str(), l.job, l.slot_token))
        .collect();
    let expected: Vec<(&str, Uuid, i64)> = first_of_slot
        .iter()
        .map(|(slot, job)| (*slot, *job, 1))
        .collect();
    assert_eq!(claimed, expected);
}
