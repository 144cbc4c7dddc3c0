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
    while let Some(joined) = waits.join_next().await {
        let (stall, open_for, received) = joined.expect("task");
        let Ok(received) = received else {
            still_open += 1;
            continue;
        };
        if open_for < read_timeout {
            closed_early.push((stall, open_for));
        }
        if stall == Stall::Body {
            body_answers.push(String::from_utf8_lossy(&received).into_owned());
        }
    }
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
