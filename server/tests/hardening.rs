//! The service around the protocol, tried as a hostile client, a flaky database or a careless
//! user would (issue 15, docs/reliability.md "Hardening"): slow clients, unbounded metric labels,
//! content types, bounds on numbers and quotas. Each test is named after the finding it pins.

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::*;

/// How a stalled connection stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stall {
    /// Headers that never finish.
    Headers,
    /// A body that stops after 10 of its 100 declared bytes, on the unauthenticated deploy route.
    Body,
    /// One complete request answered, then nothing more on the kept-alive connection.
    KeptAlive,
}

async fn open_stalled(addr: std::net::SocketAddr, stall: Stall) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request: &[u8] = match stall {
        Stall::Headers => b"GET /healthz HTTP/1.1\r\nHost: leasewright\r\nX-Slow: ",
        Stall::Body => {
            b"POST /v1/targets/slot/deploy HTTP/1.1\r\nHost: leasewright\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\": \""
        }
        Stall::KeptAlive => b"GET /healthz HTTP/1.1\r\nHost: leasewright\r\n\r\n",
    };
    stream.write_all(request).await.expect("write");
    if stall == Stall::KeptAlive {
        // Read the whole answer (its JSON body ends with `}`), leaving the connection idle.
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        while !answer.ends_with(b"}") {
            let n = stream.read(&mut buffer).await.expect("read");
            assert!(n > 0, "the kept-alive request got no answer");
            answer.extend_from_slice(&buffer[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
    stream
}

/// Read until the server closes the connection (EOF or a reset); what it sent.
async fn read_until_closed(mut stream: TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

/// Finding 1: connections whose headers never finish, or whose body stops, stayed open forever
/// (1,100 of them exhausted the file descriptors and `/healthz` got no answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_stalled_connections_leave_healthz_answering_and_are_closed_after_the_read_timeout(
) {
    const STALLED: usize = 2000;
    let read_timeout = Duration::from_secs(2);
    let mut config = config(false);
    config.connections.header_read_timeout = read_timeout;
    config.connections.body_read_timeout = read_timeout;
    let (_db, server) = start_with(config).await;
    let addr = server.addr;
    let stalls = [Stall::Headers, Stall::Body, Stall::KeptAlive];
    let mut stalled = Vec::with_capacity(STALLED);
    for i in 0..STALLED {
        let stall = stalls[i % stalls.len()];
        let opened = Instant::now();
        stalled.push((stall, opened, open_stalled(addr, stall).await));
    }

    // With every stalled connection open, a new /healthz answers within 2 s.
    let health = tokio::time::timeout(Duration::from_secs(2), async {
        reqwest::get(format!("{}/healthz", server.url()))
            .await
            .map(|r| r.status().as_u16())
    })
    .await;
    assert!(
        matches!(health, Ok(Ok(200))),
        "/healthz with {STALLED} stalled connections open: {health:?}"
    );

    // Every stalled connection is closed by the server, and not before the read timeout.
    let mut waits = tokio::task::JoinSet::new();
    for (stall, opened, stream) in stalled {
        waits.spawn(async move {
            let bound = read_timeout + Duration::from_secs(30);
            let received = tokio::time::timeout(bound, read_until_closed(stream)).await;
            (stall, opened.elapsed(), received)
        });
    }
    let mut still_open = 0;
    let mut closed_early = Vec::new();
    let mut body_answers = Vec::new();
    let mut shed = 0;
    while let Some(joined) = waits.join_next().await {
        let (stall, open_for, received) = joined.expect("task");
        let Ok(received) = received else {
            still_open += 1;
            continue;
        };
        let answer = String::from_utf8_lossy(&received).into_owned();
        // A request past the request slots' bound (docs/http.md, "Request slots") is answered
        // `503 request_slots_exhausted` at once instead of holding a slot: shed, not stalled.
        if answer.starts_with("HTTP/1.1 503") && answer.contains("\"request_slots_exhausted\"") {
            shed += 1;
            continue;
        }
        if open_for < read_timeout {
            closed_early.push((stall, open_for));
        }
        if stall == Stall::Body {
            body_answers.push(answer);
        }
    }
    // The stalled bodies beyond the slots' bound were shed; the rest waited for the timeout.
    assert!(
        shed < STALLED / stalls.len(),
        "every stalled body was shed ({shed}): none reached the read timeout"
    );
    assert_eq!(
        still_open, 0,
        "stalled connections still open 30 s after the read timeout"
    );
    assert!(
        closed_early.is_empty(),
        "closed before the timeout: {closed_early:?}"
    );
    // A stalled body is answered `408 request_timeout` before its connection closes.
    for answer in &body_answers {
        assert!(
            answer.starts_with("HTTP/1.1 408") && answer.contains("\"request_timeout\""),
            "a stalled body's answer: {answer:?}"
        );
    }
}

/// Finding 1 (keep-alive limits): a connection carries at most `max_requests_per_connection`
/// requests; the last answer says `Connection: close` and the server closes it.
#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_its_request_limit() {
    let mut config = config(false);
    config.connections.max_requests_per_connection = 3;
    let (_db, server) = start_with(config).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..3 {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: leasewright\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        while !answer.ends_with(b"}") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "closed before the limit: {answers:?}");
            answer.extend_from_slice(&buffer[..n]);
        }
        answers.push(String::from_utf8_lossy(&answer).to_lowercase());
    }
    assert!(!answers[0].contains("connection: close"), "{answers:?}");
    assert!(!answers[1].contains("connection: close"), "{answers:?}");
    assert!(answers[2].contains("connection: close"), "{answers:?}");
    let rest = tokio::time::timeout(Duration::from_secs(30), read_until_closed(stream))
        .await
        .expect("the server closes the connection after its last request");
    assert!(rest.is_empty(), "{rest:?}");
}

/// Finding 2: every distinct HTTP method was a new `/metrics` series (600 made-up 32 KiB methods
/// grew it from 2 KiB to 19 MiB). Label values come from bounded sets: unknown methods are
/// `other`, unmatched paths `unmatched`.
#[tokio::test]
async fn made_up_methods_and_paths_add_no_metric_series() {
    let (_db, server) = start(false).await;
    let http = reqwest::Client::new();
    let metrics = || async {
        http.get(format!("{}/metrics", server.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let series = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_owned()))
            .collect()
    };
    // Every kind of request once first, so that the series of its method, route and status
    // exist; then 200 more of each kind, each with a new method and a new path.
    let made_up = |i: usize| {
        let name = format!("M{i:04}{}", "X".repeat(8 * 1024));
        reqwest::Method::from_bytes(name.as_bytes()).unwrap()
    };
    let round = |i: usize| {
        let http = http.clone();
        let url = server.url();
        async move {
            for (method, path) in [
                (made_up(i), format!("/no/such/route/{i}")),
                (made_up(i), format!("/healthz?n={i}")),
                (reqwest::Method::GET, format!("/no/such/route/{i}")),
            ] {
                let answer = http.request(method, format!("{url}{path}")).send().await;
                let status = answer.unwrap().status();
                assert!(status.is_client_error(), "{path}: {status}");
            }
        }
    };
    round(0).await;
    metrics().await;
    let before = series(&metrics().await);
    for i in 1..=200 {
        round(i).await;
    }
    let text = metrics().await;
    let after = series(&text);
    assert!(!text.contains("XXXX"), "a made-up method is a label value");
    assert!(
        !text.contains("/no/such/route"),
        "an unknown path is a label value"
    );
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(new.is_empty(), "{} new series: {new:#?}", new.len());
    for line in text.lines().filter(|l| l.contains("method=\"")) {
        let method = line
            .split("method=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(
            ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "other"].contains(&method),
            "{line}"
        );
    }
}

/// Finding 3: a 3-second database outage lost a passed job's result, artifact and log chunks
/// (the runner took each `503 database_unavailable` as final). Now it retries them with backoff
/// and jitter, rejoins, and the job passes with its artifact and a gapless log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_mid_job_loses_no_log_chunk_artifact_or_result() {
    use leasewright_server::agent::{self, AgentConfig};
    use leasewright_server::source::{build_snapshot, SourceFile};
    let db = leasewright_impl::database::TestDatabase::create()
        .await
        .unwrap();
    let unused: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    let (upstream, _) = proxied_url(db.url(), unused);
    let proxy = DatabaseProxy::start(upstream).await;
    let (_, proxied) = proxied_url(db.url(), proxy.addr);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server =
        leasewright_server::app::start(&proxied, Duration::from_secs(30), listener, config(false))
            .await
            .unwrap();
    let direct = sqlx::PgPool::connect(db.url()).await.unwrap();
    let f = fixture(&server).await;
    // 60 numbered lines over about 6 s, then the artifact: the outage starts after the first
    // lines are stored and lasts past the command's end, so log appends, the artifact upload
    // and the result all meet it.
    let script = "i=1; while [ $i -le 60 ]; do echo line $i; i=$((i+1)); sleep 0.1; done\n\
                  echo report > out.txt\n";
    let snapshot = build_snapshot(vec![SourceFile {
        path: "run.sh".into(),
        mode: 0o755,
        content: script.as_bytes().to_vec(),
    }])
    .unwrap();
    let mut request = submit_request(None, "unfenced");
    request.source_archive_base64 = b64(&snapshot.archive);
    request.artifacts = vec!["out.txt".into()];
    let job = f.operator.submit(f.project, &request).await.unwrap().job;
    let workdir = tempfile::tempdir().unwrap();
    let mut agent_config = AgentConfig::new(&server.url(), &f.token, workdir.path().to_owned());
    agent_config.max_jobs = Some(1);
    let runner = tokio::spawn(agent::run(agent_config));

    // Wait (bounded) for the first log chunks, then take the database away for 8 s.
    let stored_chunks = |direct: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM logs")
            .fetch_one(&direct)
            .await
            .unwrap()
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        while stored_chunks(direct.clone()).await < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the job's first log chunks");
    proxy.down();
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.up();

    tokio::time::timeout(Duration::from_secs(120), runner)
        .await
        .expect("the runner finishes its job")
        .unwrap()
        .unwrap();
    let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_one(&direct)
        .await
        .unwrap();
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM logs ORDER BY seq")
        .fetch_all(&direct)
        .await
        .unwrap();
    let artifact = f.operator.artifact(f.project, job, "out.txt").await;
    let log = String::from_utf8(f.operator.logs(f.project, job, None).await.unwrap()).unwrap();
    // The runner met the outage: runner routes were answered 503.
    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let unavailable: Vec<&str> = metrics
        .lines()
        .filter(|l| l.contains("route=\"/v1/runner/") && l.contains("status=\"503\""))
        .collect();
    assert!(
        !unavailable.is_empty(),
        "no runner call met the outage:\n{metrics}"
    );
    assert_eq!(state, "passed", "the job after the outage; log:\n{log}");
    assert_eq!(
        seqs,
        (0..seqs.len() as i64).collect::<Vec<_>>(),
        "the log's sequence numbers have a gap"
    );
    for i in 1..=60 {
        assert!(
            log.contains(&format!("line {i}\n")),
            "line {i} is missing:\n{log}"
        );
    }
    assert_eq!(artifact.unwrap(), b"report\n");
    server.stop().await.unwrap();
}

/// Finding 8: `op artifact` sent the name unencoded: `out/report.txt` got 404, `../attempts`
/// printed the attempts JSON. The name is one percent-encoded path segment now.
#[tokio::test]
async fn an_artifact_name_with_a_slash_or_dots_is_one_path_segment() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    for (name, content) in [("out/report.txt", &b"report"[..]), ("a b%2F?#", b"odd")] {
        f.runner
            .artifact_put(&lease.tuple(None), name, content)
            .await
            .unwrap();
        let read = f.operator.artifact(f.project, job, name).await;
        assert_eq!(read.unwrap(), content, "{name}");
    }
    for name in ["../attempts", "..%2Fattempts", "x/../../attempts"] {
        let read = f.operator.artifact(f.project, job, name).await;
        assert!(
            matches!(
                &read,
                Err(leasewright_server::client::CallError::Http { status: 404, .. })
            ),
            "{name}: {read:?}"
        );
    }
}

/// Finding 8: claim capacities 0, 65 and 4294967295 were clamped; docs/http.md says 1..64.
#[tokio::test]
async fn a_claim_capacity_outside_1_to_64_is_a_400() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    for capacity in [0u64, 65, 4_294_967_295] {
        let (status, body) = post(
            &server,
            Some(&f.token),
            "/v1/runner/claim",
            &serde_json::json!({ "capacity": capacity }),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{capacity}"
        );
    }
    for capacity in [1u64, 64] {
        let (status, body) = post(
            &server,
            Some(&f.token),
            "/v1/runner/claim",
            &serde_json::json!({ "capacity": capacity }),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("no_queued_job")),
            "{capacity}"
        );
    }
}

/// Finding 8: no Content-Type was checked (a browser page can POST `text/plain` to the
/// unauthenticated deploy route without asking), and non-UTF-8 bytes in an unknown field were
/// accepted.
#[tokio::test]
async fn a_body_that_is_not_declared_json_is_a_415_and_one_that_is_not_utf8_a_400() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let http = reqwest::Client::new();
    // A mutation the demo target records: one naming a claimed attempt with its slot token.
    f.operator
        .submit(f.project, &submit_request(Some("slot"), "idempotent"))
        .await
        .unwrap();
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let deploy = format!("{}/v1/targets/slot/deploy", server.url());
    let body = serde_json::json!({
        "kind": "idempotent",
        "job": lease.job,
        "attempt": lease.attempt,
        "slot_token": lease.slot_token,
        "deployment_id": "d",
    })
    .to_string();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = http.post(&deploy).body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        let json: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(
            (status, json["error"]["code"].as_str()),
            (415, Some("unsupported_media_type")),
            "{content_type:?}"
        );
    }
    let (status, _) = post(
        &server,
        None,
        "/v1/targets/slot/deploy",
        &serde_json::from_str(&body).unwrap(),
    )
    .await;
    assert_eq!(status, 200, "the same body as JSON is applied");
    // Nothing was applied by the refused ones: the target saw one mutation.
    let target = f.operator.target("slot").await.unwrap();
    assert_eq!(target.applied_count, 1);

    let mut not_utf8 = body.trim_end_matches('}').as_bytes().to_vec();
    not_utf8.extend_from_slice(b", \"unknown\": \"\xff\xfe\"}");
    let answer = http
        .post(&deploy)
        .header("content-type", "application/json")
        .body(not_utf8)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    // An empty body on a route that takes one still needs no Content-Type.
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let cancel = http
        .post(format!(
            "{}/v1/projects/{}/jobs/{job}/cancel",
            server.url(),
            f.project
        ))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status().as_u16(), 200);
}

/// Finding 4: a submission was two commits (the job, then its source spec): a claim in between
/// got a lease without a source. A reader polling for jobs without a spec while 40 submissions
/// run never finds one now (one transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_job_is_never_seen_without_its_source_spec() {
    let (db, server) = start(false).await;
    let f = fixture(&server).await;
    let direct = sqlx::PgPool::connect(db.url()).await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (direct, done) = (direct.clone(), done.clone());
        tokio::spawn(async move {
            let (mut polls, mut seen) = (0u64, 0i64);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let without: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM jobs j LEFT JOIN server_job_specs s ON s.job_id = j.id \
                     WHERE s.job_id IS NULL",
                )
                .fetch_one(&direct)
                .await
                .unwrap();
                seen = seen.max(without);
                polls += 1;
            }
            (polls, seen)
        })
    };
    for _ in 0..40 {
        f.operator
            .submit(f.project, &submit_request(None, "unfenced"))
            .await
            .unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (polls, seen) = poller.await.unwrap();
    assert!(polls > 0);
    assert_eq!(
        seen, 0,
        "a job without its source spec was visible ({polls} polls)"
    );
}

/// Finding 4: a submitter that lost the answer and sent again created a second job. With the
/// same `Idempotency-Key` it gets the first job back; the key with another request is a 409.
#[tokio::test]
async fn a_submission_sent_again_with_its_idempotency_key_creates_one_job() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/projects/{}/jobs", server.url(), f.project);
    let request = submit_request(None, "unfenced");
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = http
            .post(&url)
            .bearer_auth(OPERATOR)
            .header("idempotency-key", "build-42")
            .json(&request)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let body: serde_json::Value = answer.json().await.unwrap();
        answers.push((status, body["job"].clone()));
    }
    assert_eq!(answers[0].0, 201);
    assert!(
        answers.iter().all(|(_, job)| *job == answers[0].1),
        "{answers:?}"
    );
    assert_eq!(f.operator.jobs(f.project).await.unwrap().len(), 1);
    let mut other = request.clone();
    other.command = "sh other.sh".into();
    let answer = http
        .post(&url)
        .bearer_auth(OPERATOR)
        .header("idempotency-key", "build-42")
        .json(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 409);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    // Without a key every submission is a job of its own, as before.
    http.post(&url)
        .bearer_auth(OPERATOR)
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(f.operator.jobs(f.project).await.unwrap().len(), 2);
}

/// Finding 5: messages naming P1's job sent by P2's runner were refused `wrong_project` but listed
/// in P1's job ledger (`op ledger`) with a forged outcome and runner time, and the list was one
/// unbounded answer. Now they are P2's security log, and every list is paginated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_projects_forgeries_stay_out_of_the_jobs_ledger_and_every_list_is_paginated() {
    const FORGED: usize = 1000;
    let (_db, server) = start(false).await;
    let p1 = fixture_named(&server, "p1").await;
    let p2 = fixture_named(&server, "p2").await;
    let submitted = p1
        .operator
        .submit(p1.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let lease = p1.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(lease.job, submitted.job);
    // P1's own runner: one heartbeat, in its job's ledger.
    let own = tuple_json(&lease, lease.lease_id, lease.fence);
    let (status, _) = post(&server, Some(&p1.token), "/v1/runner/heartbeat", &own).await;
    assert_eq!(status, 200);
    // P2's runner forges P1's exact tuple: heartbeats and results with a forged outcome.
    let http = reqwest::Client::new();
    let forged = |i: usize| {
        let tuple = tuple_json(&lease, lease.lease_id, lease.fence);
        if i.is_multiple_of(2) {
            ("/v1/runner/heartbeat", tuple)
        } else {
            (
                "/v1/runner/result",
                with(
                    tuple,
                    &serde_json::json!({"outcome": "failed", "result_digest": "forged"}),
                ),
            )
        }
    };
    // 1,000 forgeries, 50 at a time.
    let mut answers = Vec::new();
    for batch in 0..FORGED / 50 {
        let mut set = tokio::task::JoinSet::new();
        for i in batch * 50..(batch + 1) * 50 {
            let (path, body) = forged(i);
            let request = http
                .post(format!("{}{path}", server.url()))
                .bearer_auth(&p2.token)
                .json(&body);
            set.spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let body: serde_json::Value = response.json().await.unwrap();
                (status, body)
            });
        }
        while let Some(answer) = set.join_next().await {
            answers.push(answer.unwrap());
        }
    }
    assert_eq!(answers.len(), FORGED);
    for (status, body) in &answers {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"]["code"], "wrong_project", "{body}");
    }
    // P1's job ledger, every page: its own runner's heartbeat only, nothing P2 sent.
    let ledger = p1
        .operator
        .observations(p1.project, lease.job)
        .await
        .unwrap();
    let p2_runner = p2.runner_id;
    assert!(
        ledger.iter().all(|o| o.runner != p2_runner),
        "{} of P2's forgeries in P1's job ledger",
        ledger.iter().filter(|o| o.runner == p2_runner).count()
    );
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].verdict, "accepted");
    // P2's security log holds every forgery, as sent, unattributed.
    let log = p2.operator.security_log(p2.project).await.unwrap();
    assert_eq!(log.len(), FORGED);
    assert!(log.iter().all(|o| o.runner == p2_runner
        && o.named_job == lease.job
        && o.attempt.is_none()
        && o.reason.as_deref() == Some("wrong_project")));
    assert_eq!(
        log.iter()
            .filter(|o| o.outcome.as_deref() == Some("failed"))
            .count(),
        FORGED / 2
    );
    // P1's security log is empty; the job's state is untouched.
    assert!(p1
        .operator
        .security_log(p1.project)
        .await
        .unwrap()
        .is_empty());
    let job = p1.operator.job(p1.project, lease.job).await.unwrap();
    assert_eq!(
        (job.state.as_str(), job.outcome.as_deref()),
        ("running", None)
    );
    // Pages are bounded: 100 by default, at most 1000, cursors in order without overlap.
    let path = format!("/v1/projects/{}/security-log", p2.project);
    let first = p2
        .operator
        .observation_page(&path, None, None)
        .await
        .unwrap();
    assert_eq!(first.observations.len(), 100);
    let next = first.next.expect("a next page");
    assert_eq!(next, first.observations.last().unwrap().id);
    let second = p2
        .operator
        .observation_page(&path, Some(next), Some(1000))
        .await
        .unwrap();
    assert_eq!(second.observations.len(), FORGED - 100);
    assert!(second.next.is_none());
    assert!(second.observations[0].id > next);
    for (limit, after) in [
        ("0", "0"),
        ("1001", "0"),
        ("-1", "0"),
        ("10", "-1"),
        ("x", "0"),
    ] {
        let response = http
            .get(format!(
                "{}{path}?limit={limit}&after={after}",
                server.url()
            ))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status().as_u16(),
            400,
            "limit={limit} after={after}"
        );
    }
    for route in [
        "jobs",
        &format!("jobs/{}/attempts", lease.job),
        &format!("jobs/{}/observations", lease.job),
        &format!("jobs/{}/reconciliations", lease.job),
    ] {
        let response = http
            .get(format!(
                "{}/v1/projects/{}/{route}?limit=1001",
                server.url(),
                p1.project
            ))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{route}");
    }
}

/// Finding 8, quotas: nothing bounded what one attempt stored (four concurrent 64 MiB log appends
/// took the server to 576 MiB). Now an attempt holds at most its quota in logs, artifacts and the
/// cache entries it stored, checked in the write's transaction: concurrent appends past it are
/// refused `413 quota_exceeded`, never overshoot, and an identical retry is still acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_past_the_attempt_quota_are_refused_and_never_overshoot_it() {
    const QUOTA: u64 = 1024 * 1024;
    const CHUNK: usize = 100 * 1024;
    let mut config = config(false);
    config.attempt_quota_bytes = Some(QUOTA);
    let (_db, server) = start_with(config).await;
    let f = fixture(&server).await;
    f.operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = tuple_json(&lease, lease.lease_id, lease.fence);
    let chunk = |seq: usize| vec![b'a' + (seq % 26) as u8; CHUNK];
    // 16 appends of 100 KiB at once, each its own sequence number: room for 10.
    let mut set = tokio::task::JoinSet::new();
    for seq in 0..16usize {
        let body = with(
            tuple.clone(),
            &serde_json::json!({"seq": seq, "content_base64": b64(&chunk(seq))}),
        );
        let (url, token) = (server.url(), f.token.clone());
        set.spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{url}/v1/runner/logs"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap();
            (seq, status, body)
        });
    }
    let mut accepted = Vec::new();
    let mut refused = 0;
    while let Some(answer) = set.join_next().await {
        let (seq, status, body) = answer.unwrap();
        match status {
            200 => accepted.push(seq),
            413 => {
                assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
                refused += 1;
            }
            other => panic!("seq {seq}: {other} {body}"),
        }
    }
    assert_eq!((accepted.len(), refused), (10, 6), "accepted {accepted:?}");
    let stored: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(octet_length(content)), 0)::bigint FROM logs WHERE attempt_id = $1",
    )
    .bind(lease.attempt)
    .fetch_one(server.store().pool())
    .await
    .unwrap();
    assert_eq!(stored, 10 * CHUNK as i64);
    assert!(stored as u64 <= QUOTA);
    // An accepted chunk sent again is still acknowledged at the quota.
    let again = with(
        tuple.clone(),
        &serde_json::json!({"seq": accepted[0], "content_base64": b64(&chunk(accepted[0]))}),
    );
    let (status, body) = post(&server, Some(&f.token), "/v1/runner/logs", &again).await;
    assert_eq!(
        (status, body["verdict"].as_str()),
        (200, Some("acknowledged"))
    );
    // Artifacts and the cache count too (24 KiB are left); replacing an artifact counts only
    // its new size.
    let put = |path: &'static str, name: &str, bytes: usize, status: u16| {
        let body = with(
            tuple.clone(),
            &serde_json::json!({"name": name, "content_base64": b64(&vec![b'x'; bytes])}),
        );
        (path, body, status)
    };
    for (path, body, want) in [
        put("/v1/runner/artifacts/put", "out.txt", 24 * 1024, 200),
        put("/v1/runner/artifacts/put", "out.txt", 24 * 1024, 200),
        put("/v1/runner/artifacts/put", "big.bin", 1, 413),
        put("/v1/runner/cache/put", "key", 1, 413),
    ] {
        let (status, answer) = post(&server, Some(&f.token), path, &body).await;
        assert_eq!(status, want, "{path} {answer}");
        if want == 413 {
            assert_eq!(answer["error"]["code"], "quota_exceeded", "{answer}");
        }
    }
}

/// Finding 8 (memory): four concurrent 64 MiB log appends took the server to 576 MiB; the quota
/// bounds what an attempt stores, not what the server holds while reading bodies. Every payload
/// request takes its declared length from one budget before its body is read: with a 256 KiB
/// budget, a stalled 200 KiB upload holds it and a second 200 KiB upload is answered
/// `503 payload_budget_exhausted` (retryable) without its body being read; once the stalled upload
/// is gone the same request is admitted. Control routes (a claim) never wait for the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bytes_in_flight_are_bounded_and_a_request_past_the_bound_is_a_retryable_503() {
    let mut config = config(false);
    config.payload_in_flight_bytes = 256 * 1024;
    let (_db, server) = start_with(config).await;
    let f = fixture(&server).await;
    f.operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap();
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    let tuple = tuple_json(&lease, lease.lease_id, lease.fence);
    let append = |seq: usize| {
        with(
            tuple.clone(),
            &serde_json::json!({"seq": seq, "content_base64": b64(&vec![b'a'; 150 * 1024])}),
        )
    };
    // A 200 KiB upload that sends its headers and 10 bytes, then nothing.
    let mut stalled = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v1/runner/logs HTTP/1.1\r\nHost: leasewright\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"runner_id",
        f.token,
        200 * 1024
    );
    stalled.write_all(head.as_bytes()).await.expect("write");
    // The stalled upload is admitted once its headers are read; wait until it holds the budget.
    let mut refused = None;
    for _ in 0..100 {
        let (status, body) = post(&server, Some(&f.token), "/v1/runner/logs", &append(0)).await;
        if status == 503 {
            refused = Some(body);
            break;
        }
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = refused.expect("a payload request past the budget is refused");
    assert_eq!(
        refused["error"]["code"], "payload_budget_exhausted",
        "{refused}"
    );
    // A control route is not held up by the payload budget.
    let (status, body) = post(
        &server,
        Some(&f.token),
        "/v1/runner/heartbeat",
        &with(tuple.clone(), &serde_json::json!({})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    drop(stalled);
    // The stalled upload's bytes come back when its connection is gone.
    let mut admitted = false;
    for _ in 0..200 {
        let (status, _) = post(&server, Some(&f.token), "/v1/runner/logs", &append(1)).await;
        if status == 200 {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        admitted,
        "the budget is given back when the stalled upload ends"
    );
}
