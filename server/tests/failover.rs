//! The server knows its database, and follows the primary through a failover (issue 26, items 4
//! and 5; docs/reliability.md): two throwaway clusters, a primary and a streaming standby
//! (`pg_basebackup -R`); the server on the multi-host URL of both. The primary's postmaster is
//! killed with SIGKILL, the standby promoted: while there is no primary every request is answered
//! `503 database_unavailable` with `Retry-After` (never a verdict), and after the promotion the
//! same server, not restarted, answers correctly from the new primary, whose epoch is one higher.
//!
//! These tests need the PostgreSQL server binaries (they start clusters of their own whether or
//! not DATABASE_URL is set); without them they say so and pass.

use leasewright_impl::database::{Cluster, HarnessError};
use leasewright_server::app::{self, Server};
use serde_json::Value;
use sqlx::Connection as _;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{fixture, submit_request};

/// A primary with a database `lw`, and a streaming standby of it; `None` without binaries.
async fn primary_and_standby() -> Option<(Arc<Cluster>, Arc<Cluster>)> {
    let primary = match tokio::task::spawn_blocking(Cluster::start_private)
        .await
        .unwrap()
    {
        Ok(cluster) => cluster,
        Err(HarnessError::NoBinaries) => {
            eprintln!("SKIPPED: no PostgreSQL server binaries to start a primary and a standby");
            return None;
        }
        Err(error) => panic!("{error}"),
    };
    let mut admin = sqlx::PgConnection::connect(&primary.url("postgres"))
        .await
        .unwrap();
    sqlx::query("CREATE DATABASE lw")
        .execute(&mut admin)
        .await
        .unwrap();
    let standby = {
        let primary = primary.clone();
        tokio::task::spawn_blocking(move || primary.start_standby())
            .await
            .unwrap()
            .expect("a streaming standby")
    };
    Some((primary, standby))
}

fn config() -> app::ServerConfig {
    let mut config = common::config(false);
    config.database_check_interval = Duration::from_millis(100);
    config.database_connect_timeout = Duration::from_secs(2);
    config
}

async fn start(url: &str) -> anyhow::Result<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    app::start(url, Duration::from_secs(600), listener, config()).await
}

/// GET `path`: status, `Retry-After`, JSON body.
async fn get(server: &Server, path: &str) -> (u16, Option<String>, Value) {
    let response = reqwest::get(format!("{}{path}", server.url()))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

/// POST `body` with a bearer token: status, `Retry-After`, JSON body.
async fn post(
    server: &Server,
    token: &str,
    path: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

/// Wait (bounded) until the standby has replayed everything the primary has written.
async fn caught_up(primary: &Cluster, standby: &Cluster) {
    let mut on_primary = sqlx::PgConnection::connect(&primary.url("lw"))
        .await
        .unwrap();
    let mut on_standby = sqlx::PgConnection::connect(&standby.url("lw"))
        .await
        .unwrap();
    let written: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(&mut on_primary)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let replayed: bool =
                sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn")
                    .bind(&written)
                    .fetch_one(&mut on_standby)
                    .await
                    .unwrap();
            if replayed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the standby replays the primary's WAL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_standby_and_names_it() {
    let Some((primary, standby)) = primary_and_standby().await else {
        return;
    };
    let error = start(&standby.url("lw"))
        .await
        .err()
        .expect("a server on a standby alone is refused");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", standby.port()))
            && message.contains("standby")
            && message.contains("pg_is_in_recovery()"),
        "{message}"
    );
    // A URL that asks for a standby names no host a server can write to.
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/lw?target_session_attrs=read-only",
        primary.port()
    );
    let error = start(&url).await.err().expect("read-only is refused");
    assert!(format!("{error:#}").contains("read-write"), "{error:#}");
    // The standby listed first, the primary second: the server finds the primary.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/lw",
        standby.port(),
        primary.port()
    );
    let server = start(&url).await.expect("the primary among the hosts");
    let (status, _, health) = get(&server, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["database"]["role"], "primary", "{health}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_follows_the_primary_through_a_failover_answering_503_in_the_gap() {
    let Some((primary, standby)) = primary_and_standby().await else {
        return;
    };
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/lw?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let server = start(&url).await.expect("a server on the primary");

    // What the server knows of its database: a primary on the first timeline, its sessions
    // durable although the throwaway cluster's default is synchronous_commit=off, no
    // synchronous standby (the standby streams asynchronously).
    let (status, _, health) = get(&server, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "ok");
    let database = &health["database"];
    assert_eq!(database["role"], "primary", "{health}");
    assert_eq!(database["epoch"], 0, "{health}");
    assert_eq!(database["synchronous_commit"], "on", "{health}");
    assert_eq!(database["synchronous_standbys"], 0, "{health}");
    assert_eq!(database["synchronous_standby_names"], "", "{health}");

    // A job claimed before the failover, its claim replicated.
    let f = fixture(&server).await;
    let job = f
        .operator
        .submit(f.project, &submit_request(None, "unfenced"))
        .await
        .unwrap()
        .job;
    let lease = f.runner.claim(1).await.unwrap().remove(0);
    assert_eq!(lease.job, job);
    let tuple = serde_json::to_value(lease.tuple(None)).unwrap();
    let job_path = format!("/v1/projects/{}/jobs/{job}", f.project);
    caught_up(&primary, &standby).await;

    // The primary dies. Until a primary is found every request is 503 database_unavailable
    // with Retry-After: never a verdict.
    tokio::task::spawn_blocking({
        let primary = primary.clone();
        move || primary.kill()
    })
    .await
    .unwrap()
    .expect("SIGKILL of the primary's postmaster");
    let heartbeat = post(&server, &f.token, "/v1/runner/heartbeat", &tuple).await;
    let health = get(&server, "/healthz").await;
    let project = reqwest::Client::new()
        .post(format!("{}/v1/projects", server.url()))
        .bearer_auth(common::OPERATOR)
        .json(&serde_json::json!({"name": "during the gap"}))
        .send()
        .await
        .unwrap();
    let project = (
        project.status().as_u16(),
        project
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned()),
        project.json::<Value>().await.unwrap_or(Value::Null),
    );
    for (what, (status, retry_after, body)) in [
        ("heartbeat", heartbeat),
        ("healthz", health),
        ("create project", project),
    ] {
        assert_eq!(status, 503, "{what} during the gap: {body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{what}: Retry-After");
        assert_eq!(
            body["error"]["code"], "database_unavailable",
            "{what}: {body}"
        );
        assert!(
            body.get("verdict").is_none(),
            "{what}: a verdict in the gap: {body}"
        );
    }

    // The standby is promoted; the same server, not restarted, finds it.
    tokio::task::spawn_blocking({
        let standby = standby.clone();
        move || standby.promote()
    })
    .await
    .unwrap()
    .expect("pg_ctl promote");
    let health = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (status, _, health) = get(&server, "/healthz").await;
            if status == 200 {
                return health;
            }
            assert_eq!(status, 503, "{health}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the server answers from the promoted standby");
    assert_eq!(health["database"]["role"], "primary", "{health}");
    assert_eq!(
        health["database"]["epoch"], 1,
        "the epoch rises by one at the promotion: {health}"
    );
    assert_eq!(health["database"]["synchronous_commit"], "on", "{health}");

    // Correct answers: the job as claimed, the lease still the current one.
    let (status, _, body) = post(&server, &f.token, "/v1/runner/heartbeat", &tuple).await;
    assert_eq!(status, 200, "heartbeat after the failover: {body}");
    assert_eq!(body["verdict"], "accepted", "{body}");
    let (status, _, body) = {
        let response = reqwest::Client::new()
            .get(format!("{}{job_path}", server.url()))
            .bearer_auth(common::OPERATOR)
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            (),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "running", "{body}");
    assert_eq!(body["fence"], lease.fence, "{body}");
    let created = f.operator.create_project("after the failover").await;
    assert!(created.is_ok(), "a write after the failover: {created:?}");

    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "leasewright_database_primary 1",
        "leasewright_database_epoch 1",
        "leasewright_database_primary_changes_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    server.stop().await.unwrap();
}
