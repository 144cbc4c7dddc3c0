//! A replica's clock against the database's (docs/protocol.md §3.1, app/clock_skew.rs): a
//! replica whose measured offset does not prove it within `max_clock_skew` answers every request
//! but `/healthz` and `/metrics` `503 clock_skew_exceeded` with `Retry-After`, and shows the
//! offset there; one within the bound serves. The measurement is injected (no clock is moved and
//! nothing sleeps); the server records its bound in the database either way.

mod common;

use common::*;
use leasewright_server::app::{ClockOffset, MeasureClockOffset, Server, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A measurement that always finds `offset` with a 2 ms round trip.
fn measured(offset: chrono::Duration) -> MeasureClockOffset {
    Arc::new(move |_pool| {
        Box::pin(async move {
            Ok(ClockOffset {
                offset,
                round_trip: Duration::from_millis(2),
            })
        })
    })
}

fn config_measuring(offset: chrono::Duration) -> ServerConfig {
    ServerConfig {
        max_clock_skew: Duration::from_millis(500),
        measure_clock_offset: Some(measured(offset)),
        ..config(false)
    }
}

async fn get(server: &Server, path: &str) -> (u16, Option<String>, String) {
    let response = reqwest::get(format!("{}{path}", server.url()))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.text().await.unwrap())
}

async fn recorded_max_clock_skew_ms(server: &Server) -> f64 {
    sqlx::query_scalar(
        "SELECT (extract(epoch FROM max_clock_skew) * 1000)::float8 FROM lease_policy WHERE id",
    )
    .fetch_one(server.store().pool())
    .await
    .expect("lease_policy")
}

#[tokio::test]
async fn a_replica_whose_clock_is_outside_the_bound_answers_503_clock_skew_exceeded() {
    // The database's clock is 2 s ahead of this replica's: outside a 500 ms bound.
    let (_db, server) = start_with(config_measuring(chrono::Duration::seconds(2))).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/projects", server.url()))
        .bearer_auth(OPERATOR)
        .json(&json!({"name": "p"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "clock_skew_exceeded", "{body}");
    // A runner's message gets the same answer: no verdict at all.
    let (status, body) = post(
        &server,
        Some("lwrt_unknown"),
        "/v1/runner/claim",
        &json!({}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("clock_skew_exceeded"))
    );
    // /healthz and /metrics still answer, and show why.
    let (status, _, health) = get(&server, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["clock"]["within_bound"], false, "{health}");
    assert_eq!(health["clock"]["offset_ms"], 2000.0, "{health}");
    assert_eq!(health["clock"]["max_clock_skew_ms"], 500.0, "{health}");
    let (status, _, metrics) = get(&server, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("leasewright_clock_within_bound 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leasewright_clock_offset_seconds 2.0"),
        "{metrics}"
    );
    assert_eq!(recorded_max_clock_skew_ms(&server).await, 500.0);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_replica_whose_clock_is_within_the_bound_serves() {
    // 300 ms behind the database, 1 ms of uncertainty: within 500 ms.
    let (_db, server) = start_with(config_measuring(chrono::Duration::milliseconds(-300))).await;
    let f = fixture(&server).await;
    let (status, body) = post(&server, Some(&f.token), "/v1/runner/claim", &json!({})).await;
    // A verdict: the replica decides (an empty queue).
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("no_queued_job")),
        "{body}"
    );
    let (_, _, health) = get(&server, "/healthz").await;
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["clock"]["within_bound"], true, "{health}");
    assert_eq!(health["clock"]["offset_ms"], -300.0, "{health}");
    let (_, _, metrics) = get(&server, "/metrics").await;
    assert!(
        metrics.contains("leasewright_clock_within_bound 1"),
        "{metrics}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_replica_on_a_manual_clock_measures_nothing() {
    let (_db, server) = start_with(ServerConfig {
        measure_clock_offset: Some(measured(chrono::Duration::hours(1))),
        ..config(true)
    })
    .await;
    let f = fixture(&server).await;
    let (status, body) = post(&server, Some(&f.token), "/v1/runner/claim", &json!({})).await;
    // A verdict: the replica decides (an empty queue).
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("no_queued_job")),
        "{body}"
    );
    let (_, _, health) = get(&server, "/healthz").await;
    let health: Value = serde_json::from_str(&health).unwrap();
    assert!(health.get("clock").is_none(), "{health}");
    assert_eq!(recorded_max_clock_skew_ms(&server).await, 0.0);
    server.stop().await.unwrap();
}
