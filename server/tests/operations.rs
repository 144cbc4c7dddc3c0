//! What an operator runs the service by (issue 30): the metrics a scrape shows (queue depth per
//! project and state, claim latency, job duration), the payload budget shared fairly between
//! projects, and the retention's prune taking the server's rows (specs, idempotency keys, source
//! snapshots) along with its jobs.

use leasewright_server::app::Retention;
use leasewright_server::source::{build_snapshot, SourceFile};
use leasewright_server::wire::SubmitJobRequest;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::*;

/// The samples of a scrape: `name{labels}` to value.
async fn scrape(server: &leasewright_server::app::Server) -> BTreeMap<String, f64> {
    let text = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn sample(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

fn depth(project: &str, state: &str) -> String {
    format!("leasewright_queue_depth{{project=\"{project}\",state=\"{state}\"}}")
}

/// A one-file source whose content is `content`.
fn submission(content: &str) -> SubmitJobRequest {
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: content.as_bytes().to_vec(),
    }])
    .unwrap();
    SubmitJobRequest {
        source_archive_base64: b64(&snapshot.archive),
        ..submit_request(None, "unfenced")
    }
}

#[tokio::test]
async fn a_scrape_shows_the_queue_depth_per_project_the_claim_latency_and_job_durations() {
    let (_db, server) = start(true).await;
    let alpha = fixture_named(&server, "alpha").await;
    let beta = fixture_named(&server, "beta").await;
    for _ in 0..3 {
        alpha
            .operator
            .submit(alpha.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    beta.operator
        .submit(beta.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let before = scrape(&server).await;
    assert_eq!(sample(&before, &depth("alpha", "queued")), 3.0);
    assert_eq!(sample(&before, &depth("beta", "queued")), 1.0);
    assert_eq!(sample(&before, &depth("alpha", "running")), 0.0);

    let lease = alpha.runner.claim(2).await.unwrap();
    assert_eq!(lease.len(), 2);
    beta.runner.claim(1).await.unwrap();
    // beta has nothing left to claim: a claim answered `no_queued_job`.
    assert!(beta.runner.claim(1).await.unwrap().is_empty());
    // Ninety seconds of server time later (within the lease: a heartbeat renews it) one passes.
    let clock = server.manual_clock.clone().expect("a manual clock");
    let tuple = lease[0].tuple(None);
    clock.advance(chrono::Duration::seconds(20));
    alpha.runner.heartbeat(&tuple).await.unwrap();
    clock.advance(chrono::Duration::seconds(20));
    let verdict = alpha
        .runner
        .result(&tuple, "passed", "sha256:r")
        .await
        .unwrap();
    assert_eq!(verdict.verdict, "accepted");
    // A repeat is acknowledged: not a second run.
    alpha
        .runner
        .result(&tuple, "passed", "sha256:r")
        .await
        .unwrap();

    let after = scrape(&server).await;
    assert_eq!(sample(&after, &depth("alpha", "queued")), 1.0);
    assert_eq!(sample(&after, &depth("alpha", "running")), 1.0);
    assert_eq!(sample(&after, &depth("beta", "running")), 1.0);
    assert!(
        !after.contains_key(&depth("beta", "queued")),
        "a state with no jobs has no series: {after:?}"
    );
    let claims = "leasewright_claim_duration_seconds_count";
    assert_eq!(
        sample(&after, &format!("{claims}{{outcome=\"leased\"}}")),
        2.0
    );
    assert_eq!(
        sample(&after, &format!("{claims}{{outcome=\"none\"}}")),
        1.0
    );
    let jobs = "leasewright_job_duration_seconds";
    assert_eq!(
        sample(&after, &format!("{jobs}_count{{outcome=\"passed\"}}")),
        1.0
    );
    assert_eq!(
        sample(&after, &format!("{jobs}_sum{{outcome=\"passed\"}}")),
        40.0,
        "claim to result, by the server's clock"
    );
    let bucket = |le: &str| {
        let series = format!("{jobs}_bucket{{outcome=\"passed\",le=\"{le}\"}}");
        *after
            .get(&series)
            .unwrap_or_else(|| panic!("{series} in {after:?}"))
    };
    assert_eq!((bucket("30"), bucket("60")), (0.0, 1.0));
    assert_eq!(sample(&after, "leasewright_uncertain_jobs"), 0.0);
}

/// A payload upload that sends its headers and 10 bytes of `length`, then nothing.
async fn stalled_upload(
    server: &leasewright_server::app::Server,
    token: &str,
    length: usize,
) -> TcpStream {
    let mut stalled = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v1/runner/logs HTTP/1.1\r\nHost: leasewright\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{\"runner_id"
    );
    stalled.write_all(head.as_bytes()).await.expect("write");
    stalled
}

/// The payload bytes in flight, by a scrape.
async fn in_flight(server: &leasewright_server::app::Server) -> f64 {
    sample(&scrape(server).await, "leasewright_payload_in_flight_bytes")
}

/// Finding 8: one project's runner could hold the whole payload budget (stalled uploads until
/// their timeouts) and every project was answered 503. With a 256 KiB budget and each project's
/// share half of it, a flooding project's stalled 60 KiB uploads are admitted until it holds
/// 120 KiB, the next ones are refused `503 payload_budget_exhausted`, and a normal project's
/// upload of the same size is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_flooding_the_payload_routes_leaves_the_other_projects_served() {
    let mut config = config(false);
    config.payload_in_flight_bytes = 256 * 1024;
    config.payload_project_share = 0.5;
    // The stalled uploads are held until the test ends.
    config.connections.body_read_timeout = Duration::from_secs(600);
    config.connections.request_timeout = Duration::from_secs(600);
    let (_db, server) = start_with(config).await;
    let flood = fixture_named(&server, "flood").await;
    let normal = fixture_named(&server, "normal").await;
    for f in [&flood, &normal] {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    flood.runner.claim(1).await.unwrap();
    let lease = normal.runner.claim(1).await.unwrap().remove(0);
    let upload = 60 * 1024;
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..4 {
        let before = in_flight(&server).await;
        let mut stalled = stalled_upload(&server, &flood.token, upload).await;
        // Either it is admitted (it holds its bytes) or it is answered at once.
        let mut answer = [0u8; 64];
        let admitted = loop {
            tokio::select! {
                read = stalled.read(&mut answer) => {
                    let n = read.expect("read");
                    let text = String::from_utf8_lossy(&answer[..n]).to_string();
                    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
                    break false;
                }
                now = in_flight(&server) => {
                    if now >= before + upload as f64 {
                        break true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        if admitted {
            held.push(stalled);
        } else {
            refused += 1;
        }
    }
    assert_eq!(
        (held.len(), refused),
        (2, 2),
        "the flooding project holds its share, 120 of 256 KiB, and no more"
    );
    assert_eq!(in_flight(&server).await, 2.0 * upload as f64);
    // The normal project's upload of the same size is served.
    let tuple = serde_json::to_value(lease.tuple(None)).unwrap();
    let content = vec![b'a'; 40 * 1024];
    let (status, body) = post(
        &server,
        Some(&normal.token),
        "/v1/runner/logs",
        &with(
            tuple,
            &serde_json::json!({"seq": 0, "content_base64": b64(&content)}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    drop(held);
}

/// The retention's prune takes the server's rows along with a job: its spec, its idempotency key,
/// and its source snapshot once no other job uses it.
#[tokio::test]
async fn a_prune_takes_the_jobs_specs_keys_and_unused_sources_along() {
    let (_db, server) = start(true).await;
    let f = fixture(&server).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/projects/{}/jobs", server.url(), f.project);
    let shared = submission("echo shared\n");
    let mut jobs = Vec::new();
    for (key, request) in [
        ("first", &shared),
        ("second", &shared),
        ("alone", &submission("echo alone\n")),
    ] {
        let answer: serde_json::Value = http
            .post(&url)
            .bearer_auth(OPERATOR)
            .header("idempotency-key", key)
            .json(request)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        jobs.push(answer["job"].as_str().unwrap().to_owned());
    }
    let count = |table: &'static str| {
        let pool = server.store().pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        (
            count("server_job_specs").await,
            count("server_submissions").await,
            count("server_source_blobs").await
        ),
        (3, 3, 2)
    );
    // The first and the third pass; the second (sharing the first's source) stays queued.
    let clock = server.manual_clock.clone().unwrap();
    let first = f.runner.claim(1).await.unwrap().remove(0);
    f.runner
        .result(&first.tuple(None), "passed", "sha256:r")
        .await
        .unwrap();
    let retention = Retention {
        finished_jobs: Duration::from_secs(86_400),
        unaudited: true,
        interval: Duration::from_secs(3_600),
        batch: 100,
    };
    clock.advance(chrono::Duration::days(2));
    let second = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(second.job.to_string(), jobs[1]);
    f.runner
        .result(&second.tuple(None), "failed", "sha256:r")
        .await
        .unwrap();
    let third = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(third.job.to_string(), jobs[2]);
    // Only the first finished more than a day ago: its spec and key go, the shared source stays.
    let report = server.state.prune(&retention).await.expect("prune");
    assert_eq!((report.jobs, report.unaudited), (1, 1), "{report:?}");
    assert_eq!(
        (
            count("server_job_specs").await,
            count("server_submissions").await,
            count("server_source_blobs").await
        ),
        (2, 2, 2)
    );
    f.runner
        .result(&third.tuple(None), "passed", "sha256:r")
        .await
        .unwrap();
    clock.advance(chrono::Duration::days(2));
    // Now both go, and both sources with them.
    let report = server.state.prune(&retention).await.expect("prune");
    assert_eq!(report.jobs, 2, "{report:?}");
    assert_eq!(
        (
            count("server_job_specs").await,
            count("server_submissions").await,
            count("server_source_blobs").await
        ),
        (0, 0, 0)
    );
    let pruned = scrape(&server).await;
    assert_eq!(sample(&pruned, "leasewright_pruned_jobs_total"), 3.0);
    assert_eq!(
        sample(&pruned, "leasewright_pruned_unaudited_jobs_total"),
        3.0
    );
    // The same source submitted again after its snapshot went is stored again.
    let answer = http
        .post(&url)
        .bearer_auth(OPERATOR)
        .json(&shared)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
    assert_eq!(count("server_source_blobs").await, 1);
}

/// GET `path` with `token`; the status and the JSON answer (Null when not JSON).
async fn get(
    server: &leasewright_server::app::Server,
    token: &str,
    path: &str,
) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", server.url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

/// Issue 30 item 4: a revoked runner's token is refused `401` at once by the replica that revoked
/// it and, within the documented recheck (5 s by the server's clock), by another replica on the
/// same database that had authenticated it before; nothing is reassigned by the revocation: its
/// lease runs out and the sweep makes the job `uncertain`. The listing shows the revocation; the
/// revoke route of another project does not find the runner.
#[tokio::test]
async fn a_revoked_runner_is_refused_by_every_replica_within_the_recheck_and_its_lease_runs_out() {
    let (db, primary) = start(true).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let replica =
        leasewright_server::app::start(db.url(), Duration::from_secs(30), listener, config(true))
            .await
            .expect("a second replica");
    let f = fixture(&primary).await;
    let other = fixture_named(&primary, "other").await;
    for _ in 0..2 {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = serde_json::to_value(lease.tuple(None)).unwrap();
    let claim = serde_json::json!({"capacity": 1});
    // The replica authenticates the runner (and keeps its token's hash).
    let (status, body) = post(&replica, Some(&f.token), "/v1/runner/heartbeat", &tuple).await;
    assert_eq!(status, 200, "{body}");

    // Another project's revoke route does not find it; a runner token is no operator.
    let foreign = format!(
        "/v1/projects/{}/runners/{}/revoke",
        other.project, f.runner_id
    );
    let (status, body) = post(&primary, Some(OPERATOR), &foreign, &serde_json::json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_runner")),
        "{body}"
    );
    let revoke = format!("/v1/projects/{}/runners/{}/revoke", f.project, f.runner_id);
    let (status, _) = post(
        &primary,
        Some(&other.token),
        &revoke,
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = post(&primary, Some(&f.token), "/v1/runner/heartbeat", &tuple).await;
    assert_eq!(status, 200, "still authenticated: {body}");

    let (status, revoked) = post(&primary, Some(OPERATOR), &revoke, &serde_json::json!({})).await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["runner"], serde_json::json!(f.runner_id));
    let revoked_at = revoked["revoked_at"]
        .as_str()
        .expect("revoked_at")
        .to_owned();
    // Again: the first revocation's time.
    let (status, again) = post(&primary, Some(OPERATOR), &revoke, &serde_json::json!({})).await;
    assert_eq!(
        (status, again["revoked_at"].as_str()),
        (200, Some(revoked_at.as_str()))
    );

    // The revoking replica refuses the token at once, on every runner route.
    for (path, body) in [
        ("/v1/runner/heartbeat", &tuple),
        ("/v1/runner/claim", &claim),
    ] {
        let (status, answer) = post(&primary, Some(&f.token), path, body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (401, Some("unauthorized")),
            "{path}: {answer}"
        );
    }
    // The other replica kept the hash it read: within the recheck it still authenticates...
    let (status, body) = post(&replica, Some(&f.token), "/v1/runner/heartbeat", &tuple).await;
    assert_eq!(status, 200, "within the recheck: {body}");
    // ...and once the recheck has passed by its clock it reads the revocation.
    let clock = replica.manual_clock.clone().expect("a manual clock");
    clock.advance(chrono::Duration::from_std(leasewright_impl::DEFAULT_TOKEN_RECHECK).unwrap());
    for (path, body) in [
        ("/v1/runner/heartbeat", &tuple),
        ("/v1/runner/claim", &claim),
    ] {
        let (status, answer) = post(&replica, Some(&f.token), path, body).await;
        assert_eq!(status, 401, "{path} on the other replica: {answer}");
    }
    // The other project's runner is untouched.
    assert!(other.runner.claim(1).await.unwrap().is_empty());

    // The listing shows it revoked; a runner made afterwards is not; pages of one.
    let second = f.operator.create_runner(f.project, "second").await.unwrap();
    let (status, page) = get(
        &primary,
        OPERATOR,
        &format!("/v1/projects/{}/runners?limit=1", f.project),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let runners = page["runners"].as_array().unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0]["runner"], serde_json::json!(f.runner_id));
    assert_eq!(runners[0]["name"], "r");
    assert_eq!(runners[0]["revoked_at"].as_str(), Some(revoked_at.as_str()));
    assert!(runners[0]["created_at"].is_string());
    let next = page["next"].as_i64().expect("a next page");
    let (_, rest) = get(
        &primary,
        OPERATOR,
        &format!("/v1/projects/{}/runners?limit=1&after={next}", f.project),
    )
    .await;
    let rest_runners = rest["runners"].as_array().unwrap();
    assert_eq!(rest_runners.len(), 1);
    assert_eq!(rest_runners[0]["runner"], serde_json::json!(second.runner));
    assert!(rest_runners[0].get("revoked_at").is_none(), "{rest}");
    assert!(rest.get("next").is_none(), "{rest}");
    // Another project lists only its own runner.
    let (_, theirs) = get(
        &primary,
        OPERATOR,
        &format!("/v1/projects/{}/runners", other.project),
    )
    .await;
    assert_eq!(theirs["runners"].as_array().unwrap().len(), 1);

    // Nothing was reassigned: the job is still running under the revoked runner's lease, until
    // the lease runs out and the sweep makes it uncertain.
    let job = format!("/v1/projects/{}/jobs/{}", f.project, lease.job);
    let (_, view) = get(&primary, OPERATOR, &job).await;
    assert_eq!(view["state"], "running", "{view}");
    let clock = primary.manual_clock.clone().expect("a manual clock");
    // (Past the lease the other replica's heartbeat granted by its own clock, which started a
    // little later than this one's.)
    clock.advance(chrono::Duration::seconds(120));
    let (status, swept) = post(
        &primary,
        Some(OPERATOR),
        "/v1/sweep",
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(
        (status, swept["verdict"].as_str()),
        (200, Some("uncertain")),
        "{swept}"
    );
    let (_, view) = get(&primary, OPERATOR, &job).await;
    assert_eq!(view["state"], "uncertain", "{view}");
    // The second runner takes the other queued job: the revoked one's is not requeued.
    let second_runner = leasewright_server::client::RunnerClient::new(
        &primary.url(),
        &second.token,
        Duration::from_secs(10),
    )
    .unwrap();
    let taken = second_runner.claim(2).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_ne!(taken[0].job, lease.job);
    replica.stop().await.unwrap();
}

/// Issue 30 item 5: one project's runners could hold every request the server serves at once (and
/// the database connections with them). With 4 request slots and each project's share half of
/// them, a flooding project's stalled heartbeats are admitted until it holds 2, the next one is
/// refused at once `503 request_slots_exhausted` with `Retry-After`, and a normal project's
/// heartbeat and claim, and the operator's read, are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_flooding_the_routes_with_requests_leaves_the_other_projects_served() {
    let mut config = config(false);
    config.max_requests_in_flight = 4;
    config.request_project_share = 0.5;
    // The stalled requests are held until the test ends.
    config.connections.body_read_timeout = Duration::from_secs(600);
    config.connections.request_timeout = Duration::from_secs(600);
    let (_db, server) = start_with(config).await;
    let flood = fixture_named(&server, "flood").await;
    let normal = fixture_named(&server, "normal").await;
    for f in [&flood, &normal] {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    flood.runner.claim(1).await.unwrap();
    let lease = normal.runner.claim(1).await.unwrap().remove(0);
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..3 {
        // A heartbeat that sends its headers and the start of its body, then nothing.
        let head = format!(
            "POST /v1/runner/heartbeat HTTP/1.1\r\nHost: leasewright\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"job",
            flood.token
        );
        match stall_request(&server, head.as_bytes()).await {
            Ok(stalled) => held.push(stalled),
            Err(answer) => refused.push(answer),
        }
    }
    assert_eq!(
        (held.len(), refused.len()),
        (2, 1),
        "the flooding project holds its share, 2 of 4 slots, and no more: {refused:?}"
    );
    let text = &refused[0];
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("request_slots_exhausted"), "{text}");
    assert!(text.to_lowercase().contains("retry-after: 1"), "{text}");
    assert_eq!(requests_in_flight(&server).await, 2.0);
    // The normal project is served: a heartbeat, a claim (nothing left), the operator's read.
    let tuple = serde_json::to_value(lease.tuple(None)).unwrap();
    let (status, body) = post(&server, Some(&normal.token), "/v1/runner/heartbeat", &tuple).await;
    assert_eq!(status, 200, "{body}");
    assert!(normal.runner.claim(1).await.unwrap().is_empty());
    let view = normal
        .operator
        .job(normal.project, lease.job)
        .await
        .unwrap();
    assert_eq!(view.state, "running");
    // Once the flood's requests end, its slots are given back.
    drop(held);
    let mut waited = 0;
    while requests_in_flight(&server).await > 0.0 {
        waited += 1;
        assert!(waited < 1000, "the slots were given back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = post(
        &server,
        Some(&flood.token),
        "/v1/runner/claim",
        &serde_json::json!({"capacity": 1}),
    )
    .await;
    // Served (its one job is leased already): a verdict, not a 503.
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("no_queued_job")),
        "{body}"
    );
}
