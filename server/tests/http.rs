//! The HTTP control plane in-process, against a fresh database (DATABASE_URL or a throwaway
//! cluster): every runner route's ownership-tuple boundary, authentication, errors, the expiry
//! sweep, reconciliation and the demo targets.

use leasewright_server::client::{CallError, RunnerClient};
use leasewright_server::wire::{LeaseBody, TupleBody};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::time::Duration;
use uuid::Uuid;

mod common;

use common::*;

#[tokio::test]
async fn every_runner_route_rejects_a_wrong_lease_and_a_wrong_fence_and_accepts_the_exact_tuple() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    f.operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(lease.fence, 1);
    // In an order where every exact call is accepted (gets after puts, the result last).
    let routes: Vec<(&str, Value)> = vec![
        ("/v1/runner/heartbeat", json!({})),
        ("/v1/runner/rejoin", json!({})),
        ("/v1/runner/source", json!({})),
        (
            "/v1/runner/logs",
            json!({"seq": 0, "content_base64": b64(b"line\n")}),
        ),
        (
            "/v1/runner/artifacts/put",
            json!({"name": "a.txt", "content_base64": b64(b"artifact")}),
        ),
        ("/v1/runner/artifacts/get", json!({"name": "a.txt"})),
        (
            "/v1/runner/cache/put",
            json!({"name": "k", "content_base64": b64(b"cached")}),
        ),
        ("/v1/runner/cache/get", json!({"name": "k"})),
        (
            "/v1/runner/result",
            json!({"outcome": "passed", "result_digest": "d"}),
        ),
    ];
    for (path, extra) in &routes {
        let wrong_lease = with(tuple_json(&lease, Uuid::new_v4(), lease.fence), extra);
        let (status, body) = post(&server, Some(&f.token), path, &wrong_lease).await;
        assert_eq!(status, 409, "{path}: {body}");
        assert_eq!(body["error"]["code"], "lease_mismatch", "{path}");
        assert_eq!(body["verdict"], "rejected", "{path}");

        let wrong_fence = with(tuple_json(&lease, lease.lease_id, 999), extra);
        let (status, body) = post(&server, Some(&f.token), path, &wrong_fence).await;
        assert_eq!(status, 409, "{path}: {body}");
        assert_eq!(body["error"]["code"], "fence_mismatch", "{path}");

        let exact = with(tuple_json(&lease, lease.lease_id, lease.fence), extra);
        let (status, body) = post(&server, Some(&f.token), path, &exact).await;
        assert_eq!(status, 200, "{path}: {body}");
        if path.ends_with("/source") {
            // The body is the archive, not JSON.
            assert_eq!(body, Value::Null);
        } else {
            assert_eq!(body["verdict"], "accepted", "{path}: {body}");
        }
    }
    let job = f.operator.job(f.project, lease.job).await.unwrap();
    assert_eq!(job.state, "passed");
    let observations = f.operator.observations(f.project, lease.job).await.unwrap();
    assert_eq!(observations.len(), routes.len() * 3);
    let rejected = observations
        .iter()
        .filter(|o| o.verdict == "rejected")
        .count();
    assert_eq!(rejected, routes.len() * 2);
    // The identical result again is acknowledged; the runner's clock was recorded, not trusted.
    let exact = with(
        tuple_json(&lease, lease.lease_id, lease.fence),
        &json!({"outcome": "passed", "result_digest": "d"}),
    );
    let (status, body) = post(&server, Some(&f.token), "/v1/runner/result", &exact).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (200, Some("acknowledged"))
    );
    assert!(
        observations
            .iter()
            .all(|o| o.runner_time.map(|t| t.to_rfc3339())
                == Some("2001-01-01T00:00:00+00:00".into()))
    );
}

#[tokio::test]
async fn a_missing_or_unknown_token_is_401_and_every_error_is_json() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let body = json!({"capacity": 1});
    for token in [None, Some("lw_nope"), Some(OPERATOR)] {
        let (status, answer) = post(&server, token, "/v1/runner/claim", &body).await;
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(answer["error"]["code"], "unauthorized");
    }
    // A runner token is not an operator token.
    let (status, answer) = post(
        &server,
        Some(&f.token),
        "/v1/projects",
        &json!({"name": "x"}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    // No queued job: a rejection with the spec's reason.
    let (status, answer) = post(&server, Some(&f.token), "/v1/runner/claim", &body).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("no_queued_job"))
    );
    // Malformed JSON, unknown routes and wrong methods are JSON errors too.
    let (status, answer) = post(
        &server,
        Some(&f.token),
        "/v1/runner/heartbeat",
        &json!({"job": 1}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (status, answer) = post(&server, None, "/v1/nowhere", &json!({})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, answer) = post(&server, None, "/healthz", &json!({})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    // An unknown project.
    let path = format!("/v1/projects/{}/runners", Uuid::new_v4());
    let (status, answer) = post(&server, Some(OPERATOR), &path, &json!({"name": "r"})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("unknown_project"))
    );
}

#[tokio::test]
async fn an_oversized_body_is_413_with_a_json_error() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let big = json!({"capacity": 1, "padding": "x".repeat(200 * 1024)});
    let (status, answer) = post(&server, Some(&f.token), "/v1/runner/claim", &big).await;
    assert_eq!(status, 413);
    assert_eq!(answer["error"]["code"], "payload_too_large");
    // The payload routes take more, up to the server's payload limit (1 MiB here).
    let mut request = submit_request(None, "unfenced");
    request.source_archive_base64 = "A".repeat(2 * 1024 * 1024);
    let path = format!("/v1/projects/{}/jobs", f.project);
    let (status, answer) = post(
        &server,
        Some(OPERATOR),
        &path,
        &serde_json::to_value(&request).unwrap(),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (413, Some("payload_too_large"))
    );
}

#[tokio::test]
async fn a_source_archive_that_escapes_is_refused_at_submission() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let mut request = submit_request(None, "unfenced");
    request.source_archive_base64 = b64(&leasewright_server::source::hostile_archive(
        b"../../etc/evil",
        tar::EntryType::Regular,
        b"x",
    ));
    let path = format!("/v1/projects/{}/jobs", f.project);
    let (status, answer) = post(
        &server,
        Some(OPERATOR),
        &path,
        &serde_json::to_value(&request).unwrap(),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("invalid_source"))
    );
    assert!(f.operator.jobs(f.project).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_test_clock_exists_only_when_the_server_was_started_with_a_manual_clock() {
    let (_db, server) = start(false).await;
    let (status, answer) = post(
        &server,
        Some(OPERATOR),
        "/v1/test/clock",
        &json!({"advance_ms": 1}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (_db2, manual) = start(true).await;
    let (status, answer) = post(
        &manual,
        Some(OPERATOR),
        "/v1/test/clock",
        &json!({"advance_ms": 1}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // Without the operator token it is refused even there.
    let (status, _) = post(&manual, None, "/v1/test/clock", &json!({"advance_ms": 1})).await;
    assert_eq!(status, 401);
}

/// `Leasewright-Test-Time` gives one request a time of its own on a manual-clock server (the
/// lease it claims expires 30 s after that time, and the shared clock does not move), is a 400
/// when it is not a time, and changes nothing on a server without a manual clock: a client
/// cannot move a production server's time.
#[tokio::test]
async fn a_request_carries_its_own_time_only_on_a_manual_clock_server() {
    use leasewright_server::client::{Http, TestTime};
    use leasewright_server::wire::TEST_TIME_HEADER;
    let at: chrono::DateTime<chrono::Utc> = "2031-05-06T07:08:09Z".parse().unwrap();
    for manual in [true, false] {
        let (_db, server) = start(manual).await;
        let f = fixture(&server).await;
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
        let token = f.token.clone();
        let timed = RunnerClient {
            http: Http::new(&server.url(), &token, Duration::from_secs(10))
                .unwrap()
                .with_test_time(TestTime::new(at)),
        };
        let lease = timed.claim(1).await.unwrap().remove(0);
        let by_header = lease.lease_expiry == at + chrono::Duration::seconds(30);
        assert_eq!(
            by_header, manual,
            "manual clock {manual}: {}",
            lease.lease_expiry
        );
        if !manual {
            continue;
        }
        // The shared clock did not move: the clock route without the header reads it.
        let (status, shared) = post(&server, Some(OPERATOR), "/v1/test/clock", &json!({})).await;
        assert_eq!(status, 200, "{shared}");
        assert_ne!(shared["now"].as_str().unwrap(), "2031-05-06T07:08:09Z");
        // The clock route with the header answers the header's time, and moves nothing.
        let client = reqwest::Client::new();
        let url = format!("{}/v1/test/clock", server.url());
        let answer: Value = client
            .post(&url)
            .bearer_auth(OPERATOR)
            .header(TEST_TIME_HEADER, "2031-05-06T07:08:09Z")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["now"], "2031-05-06T07:08:09Z");
        for (header, body) in [
            ("not a time", json!({})),
            ("10000-01-01T00:00:00Z", json!({})),
            ("2031-05-06T07:08:09Z", json!({"advance_ms": 1})),
        ] {
            let response = client
                .post(&url)
                .bearer_auth(OPERATOR)
                .header(TEST_TIME_HEADER, header)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 400, "{header}");
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["error"]["code"], "bad_request", "{header}");
        }
    }
}

#[tokio::test]
async fn an_expired_lease_makes_the_job_uncertain_and_only_a_reconciliation_requeues_it() {
    let (_db, server) = start(true).await;
    let f = fixture(&server).await;
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    f.operator.advance_clock(31_000).await.unwrap();
    let error = f.runner.heartbeat(&lease.tuple(None)).await.unwrap_err();
    assert_eq!(error.rejection(), Some("lease_expired"));
    let swept = f.operator.sweep().await.unwrap();
    assert_eq!(swept.verdict, "uncertain");
    assert_eq!(swept.jobs, vec![job]);
    assert_eq!(
        f.operator.job(f.project, job).await.unwrap().state,
        "uncertain"
    );
    // No timer requeues it; cancel is refused; a still-running finding decides nothing.
    assert!(f.runner.claim(1).await.unwrap().is_empty());
    let error = f.operator.cancel(f.project, job).await.unwrap_err();
    assert_eq!(error.rejection(), Some("reconcile_required"));
    let error = f
        .operator
        .reconcile(f.project, job, "still_running", "retry")
        .await
        .unwrap_err();
    assert_eq!(error.rejection(), Some("execution_not_stopped"));
    f.operator
        .reconcile(f.project, job, "stopped", "retry")
        .await
        .unwrap();
    let retry = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(retry.fence, 2);
    // The old attempt is told it is not current; the rejoin answers stop.
    let error = f.runner.rejoin(&lease.tuple(None)).await.unwrap_err();
    assert_eq!(error.rejection(), Some("not_current"));
    let error = f
        .runner
        .result(&lease.tuple(None), "passed", "x")
        .await
        .unwrap_err();
    assert_eq!(error.rejection(), Some("not_current"));
    f.runner
        .result(&retry.tuple(None), "passed", "y")
        .await
        .unwrap();
    let attempts = f.operator.attempts(f.project, job).await.unwrap();
    let states: Vec<_> = attempts
        .iter()
        .map(|a| (a.fence, a.state.as_str()))
        .collect();
    assert_eq!(states, vec![(1, "stopped"), (2, "passed")]);
    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("leasewright_lease_expiries_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("reason=\"lease_expired\""), "{metrics}");
}

#[tokio::test]
async fn a_fenced_target_refuses_slot_token_10_after_slot_token_11_and_an_unfenced_target_stays_reserved(
) {
    let (_db, server) = start(true).await;
    let f = fixture(&server).await;
    let deploy = |lease: &LeaseBody, kind: &str| {
        json!({
            "kind": kind,
            "job": lease.job,
            "attempt": lease.attempt,
            "slot_token": lease.slot_token,
            "deployment_id": lease.job.to_string(),
        })
    };
    // Fenced: drive one job to its attempt with fence 11, keeping the attempt with fence 10.
    let job = f
        .operator
        .submit(f.project, &submit_request(Some("prod"), "fenced"))
        .await
        .unwrap()
        .job;
    let mut stale: Option<LeaseBody> = None;
    let current = loop {
        let lease = f.runner.claim(1).await.unwrap().remove(0);
        assert_eq!(
            (lease.target.as_str(), lease.target_kind.as_str()),
            ("prod", "fenced")
        );
        if lease.fence == 11 {
            break lease;
        }
        if lease.fence == 10 {
            // The disconnected worker's deployment is in flight: it never reaches the target
            // before its lease is superseded.
            stale = Some(lease.clone());
        }
        f.operator.advance_clock(31_000).await.unwrap();
        f.operator.sweep().await.unwrap();
        f.operator
            .reconcile(f.project, job, "stopped", "retry")
            .await
            .unwrap();
    };
    let stale = stale.unwrap();
    // Only this job ever reserved `prod`: its slot tokens are its fences.
    assert_eq!((stale.slot_token, current.slot_token), (10, 11));
    let (status, answer) = post(
        &server,
        None,
        "/v1/targets/prod/deploy",
        &deploy(&current, "fenced"),
    )
    .await;
    assert_eq!(
        (status, answer["verdict"].as_str()),
        (200, Some("accepted"))
    );
    let (status, answer) = post(
        &server,
        None,
        "/v1/targets/prod/deploy",
        &deploy(&stale, "fenced"),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("stale_fence"))
    );
    let target = f.operator.target("prod").await.unwrap();
    assert_eq!(
        (target.highest_slot_token, target.applied_count),
        (Some(11), 1)
    );
    // The control plane tells the stale worker the same: it is not current.
    let error = f.runner.heartbeat(&stale.tuple(None)).await.unwrap_err();
    assert_eq!(error.rejection(), Some("not_current"));

    // Unfenced: the uncertain job keeps its target reserved; no claim starts a second deployment.
    let first = f
        .operator
        .submit(f.project, &submit_request(Some("shell"), "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(lease.job, first);
    // The lease names the slot it reserved and the slot's kind (the claim answers them).
    assert_eq!(
        (lease.target.as_str(), lease.target_kind.as_str()),
        ("shell", "unfenced")
    );
    let (status, _) = post(
        &server,
        None,
        "/v1/targets/shell/deploy",
        &deploy(&lease, "unfenced"),
    )
    .await;
    assert_eq!(status, 200);
    f.operator.advance_clock(31_000).await.unwrap();
    f.operator.sweep().await.unwrap();
    let second = f
        .operator
        .submit(f.project, &submit_request(Some("shell"), "unfenced"))
        .await
        .unwrap()
        .job;
    assert!(
        f.runner.claim(1).await.unwrap().is_empty(),
        "the target is reserved"
    );
    let body = f.operator.job(f.project, first).await.unwrap();
    assert_eq!(body.state, "uncertain");
    assert_eq!(body.target_reserved_by, Some(lease.attempt));
    f.operator
        .reconcile(f.project, first, "stopped", "abort")
        .await
        .unwrap();
    let next = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(next.job, second);
    assert_eq!(f.operator.target("shell").await.unwrap().applied_count, 1);
}

#[tokio::test]
async fn a_claim_with_capacity_takes_several_jobs_each_under_its_own_lease() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    for _ in 0..3 {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    let leases = f.runner.claim(2).await.unwrap();
    assert_eq!(leases.len(), 2);
    assert_ne!(leases[0].job, leases[1].job);
    assert_ne!(leases[0].lease_id, leases[1].lease_id);
    assert!(leases
        .iter()
        .all(|l| l.fence == 1 && l.source_blob_sha256.is_some()));
    let rest = f.runner.claim(5).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert!(f.runner.claim(1).await.unwrap().is_empty());
    let jobs = f.operator.jobs(f.project).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(jobs.iter().all(|j| j.state == "running"));
}

#[tokio::test]
async fn log_appends_are_idempotent_per_sequence_number_and_a_conflicting_result_never_replaces_the_outcome(
) {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = lease.tuple(None);
    assert_eq!(
        f.runner
            .log_append(&tuple, 0, b"one\n")
            .await
            .unwrap()
            .verdict,
        "accepted"
    );
    // A retry of the same chunk (a lost answer) is acknowledged; other content is a conflict.
    assert_eq!(
        f.runner
            .log_append(&tuple, 0, b"one\n")
            .await
            .unwrap()
            .verdict,
        "acknowledged"
    );
    let error = f.runner.log_append(&tuple, 0, b"two\n").await.unwrap_err();
    assert_eq!(error.rejection(), Some("sequence_conflict"));
    f.runner.log_append(&tuple, 1, b"two\n").await.unwrap();
    assert_eq!(
        f.operator.logs(f.project, job, None).await.unwrap(),
        b"one\ntwo\n"
    );
    f.runner.result(&tuple, "passed", "d1").await.unwrap();
    assert_eq!(
        f.runner
            .result(&tuple, "passed", "d1")
            .await
            .unwrap()
            .verdict,
        "acknowledged"
    );
    let error = f.runner.result(&tuple, "failed", "d2").await.unwrap_err();
    assert_eq!(error.rejection(), Some("conflicting_result"));
    let body = f.operator.job(f.project, job).await.unwrap();
    assert_eq!(
        (body.state.as_str(), body.result_digest.as_deref()),
        ("passed", Some("d1"))
    );
}

#[tokio::test]
async fn a_runner_of_another_project_is_told_wrong_project_and_cannot_claim_its_jobs() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    f.operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let other_project = f.operator.create_project("other").await.unwrap();
    let other_token = f
        .operator
        .create_runner(other_project, "intruder")
        .await
        .unwrap()
        .token;
    let intruder = RunnerClient::new(&server.url(), &other_token, Duration::from_secs(10)).unwrap();
    assert!(intruder.claim(1).await.unwrap().is_empty());
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    // The exact tuple, copied, from the wrong project's runner.
    let error = intruder.heartbeat(&lease.tuple(None)).await.unwrap_err();
    assert_eq!(error.rejection(), Some("wrong_project"));
    let error = intruder
        .result(&lease.tuple(None), "passed", "x")
        .await
        .unwrap_err();
    assert_eq!(error.rejection(), Some("wrong_project"));
    // And the operator sees the job only under its own project.
    let (status, answer) = post(
        &server,
        Some(OPERATOR),
        &format!("/v1/projects/{other_project}/jobs/{}/cancel", lease.job),
        &json!({}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("wrong_project"))
    );
    let job = f.operator.job(f.project, lease.job).await.unwrap();
    assert_eq!(job.state, "running");
}

#[tokio::test]
async fn a_batch_result_answers_each_item_as_a_single_result_would() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    for _ in 0..2 {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    let leases = f.runner.claim(2).await.unwrap();
    assert_eq!(leases.len(), 2);
    let (a, b) = (leases[0].tuple(None), leases[1].tuple(None));
    let forged = TupleBody {
        lease_id: Uuid::new_v4(),
        ..b
    };
    let item = |tuple: TupleBody, outcome: &str, digest: &str| {
        (tuple, outcome.to_owned(), digest.to_owned())
    };
    let answers = f
        .runner
        .results(&[
            item(a, "passed", "da"),
            item(a, "passed", "da"),
            item(a, "failed", "other"),
            item(forged, "passed", "x"),
            item(b, "failed", "db"),
        ])
        .await
        .unwrap();
    let got: Vec<(&str, Option<&str>)> = answers
        .iter()
        .map(|a| (a.verdict.as_str(), a.reason.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("accepted", None),
            ("acknowledged", None),
            ("rejected", Some("conflicting_result")),
            ("rejected", Some("lease_mismatch")),
            ("accepted", None),
        ]
    );
    for (lease, state) in leases.iter().zip(["passed", "failed"]) {
        let job = f.operator.job(f.project, lease.job).await.unwrap();
        assert_eq!(job.state, state);
    }
    // No items is a bad request, not an empty answer.
    let error = f.runner.results(&[]).await.unwrap_err();
    assert!(
        matches!(error, CallError::Http { status: 400, .. }),
        "{error:?}"
    );
}

/// `GET` `path` with the operator token: the JSON answer, or the error's status and code.
async fn operator_read(f: &Fixture, path: &str) -> Result<Value, (u16, String)> {
    f.operator.http.get(path).await.map_err(|e| match e {
        CallError::Http { status, code, .. } => (status, code),
        other => panic!("{path}: {other}"),
    })
}

#[tokio::test]
async fn a_cache_entry_is_read_with_the_attempt_and_job_that_stored_it_last() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let mut leases = Vec::new();
    for _ in 0..2 {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
        leases.push(f.runner.claim(1).await.unwrap().remove(0));
    }
    for (lease, content) in leases.iter().zip([&b"first"[..], b"second"]) {
        let put = f.runner.cache_put(&lease.tuple(None), "k", content).await;
        assert_eq!(put.unwrap().verdict, "accepted");
    }
    // The second attempt overwrote the entry: it is the storer, with its job.
    let path = format!("/v1/projects/{}/cache/k", f.project);
    let entry = operator_read(&f, &path).await.unwrap();
    let second = &leases[1];
    assert_eq!(entry["key"], "k");
    assert_eq!(entry["content_base64"], b64(b"second"));
    assert_eq!(
        entry["sha256"],
        hex::encode(sha2::Sha256::digest(b"second")).as_str()
    );
    assert_eq!(
        entry["stored_by_attempt"],
        second.attempt.to_string().as_str()
    );
    assert_eq!(entry["stored_by_job"], second.job.to_string().as_str());
    assert!(entry["stored_at"].is_string(), "{entry}");
    // No such key; another project's route; no such project.
    let missing = format!("/v1/projects/{}/cache/other", f.project);
    assert_eq!(
        operator_read(&f, &missing).await.unwrap_err(),
        (404, "not_found".into())
    );
    let other = f.operator.create_project("other").await.unwrap();
    assert_eq!(
        operator_read(&f, &format!("/v1/projects/{other}/cache/k"))
            .await
            .unwrap_err(),
        (404, "not_found".into())
    );
    assert_eq!(
        operator_read(&f, &format!("/v1/projects/{}/cache/k", Uuid::new_v4()))
            .await
            .unwrap_err(),
        (404, "unknown_project".into())
    );
}

#[tokio::test]
async fn an_attempts_log_is_read_chunk_by_chunk_with_each_sequence_number() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = lease.tuple(None);
    // Out of order and with a gap: the chunks come back in sequence order, each with its number.
    f.runner.log_append(&tuple, 2, b"two\n").await.unwrap();
    f.runner.log_append(&tuple, 0, b"zero\n").await.unwrap();
    let base = format!("/v1/projects/{}/jobs/{job}/log-chunks", f.project);
    let chunks = operator_read(&f, &format!("{base}?attempt={}", lease.attempt))
        .await
        .unwrap();
    let expected: Vec<Value> = [(0, &b"zero\n"[..]), (2, b"two\n")]
        .into_iter()
        .map(|(seq, content)| {
            json!({
                "seq": seq,
                "content_base64": b64(content),
                "sha256": hex::encode(sha2::Sha256::digest(content)),
            })
        })
        .collect();
    assert_eq!(chunks, Value::Array(expected));
    // No such attempt of the job; the job under another project's route.
    assert_eq!(
        operator_read(&f, &format!("{base}?attempt={}", Uuid::new_v4()))
            .await
            .unwrap_err(),
        (404, "unknown_attempt".into())
    );
    let other = f.operator.create_project("other").await.unwrap();
    assert_eq!(
        operator_read(&f, &format!("/v1/projects/{other}/jobs/{job}/log-chunks"))
            .await
            .unwrap_err(),
        (404, "unknown_job".into())
    );
}
