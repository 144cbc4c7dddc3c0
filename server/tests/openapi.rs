//! The OpenAPI document (docs/openapi.json, `GET /openapi.json`) against the router: every
//! method and path the router serves is in the document and every operation of the document is
//! routed, and the checked-in file is exactly what the code generates.
//!
//! `LEASEWRIGHT_UPDATE_OPENAPI=1 cargo test -p leasewright-server --test openapi` rewrites
//! docs/openapi.json after a deliberate change of the API.

use leasewright_server::app;
use std::collections::BTreeSet;
use std::path::PathBuf;

mod common;

use common::*;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

fn generated() -> String {
    let mut text = serde_json::to_string_pretty(&app::openapi()).unwrap();
    text.push('\n');
    text
}

/// Every (method, path) of the document.
fn documented() -> BTreeSet<(String, String)> {
    let document = serde_json::to_value(app::openapi()).unwrap();
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            assert!(METHODS.contains(&method.as_str()), "{method} {path}");
            operations.insert((method.clone(), path.clone()));
        }
    }
    operations
}

/// The paths the router matches, read from its `Debug` form (axum has no other way to list
/// them): the quoted strings starting with `/` between `path_router` and `fallback_router`.
fn routed_paths(router: &axum::Router) -> BTreeSet<String> {
    let text = format!("{router:?}");
    let start = text
        .find("path_router")
        .expect("axum's Router Debug names path_router");
    let end = text.find("fallback_router").expect("and fallback_router");
    let mut paths = BTreeSet::new();
    let mut rest = &text[start..end];
    while let Some(at) = rest.find("\"/") {
        let tail = &rest[at + 1..];
        let close = tail.find('"').unwrap();
        paths.insert(tail[..close].to_owned());
        rest = &tail[close + 1..];
    }
    paths
}

/// Every (method, path) the router routes: each path of the router (parameters filled in),
/// asked with each method; the method is routed unless the answer is the router's own
/// `405 method_not_allowed` (no handler answers 405).
async fn routed_operations(server: &app::Server) -> BTreeSet<(String, String)> {
    let router = app::router(server.state.clone(), 1024 * 1024);
    let paths = routed_paths(&router);
    assert!(paths.len() >= 25, "too few routes read: {paths:?}");
    let http = reqwest::Client::new();
    let mut operations = BTreeSet::new();
    for path in paths {
        let concrete: String = path
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "00000000-0000-4000-8000-000000000000"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        for method in METHODS {
            let request = http.request(
                method.to_uppercase().parse().unwrap(),
                format!("{}{concrete}", server.url()),
            );
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            if status == 405 {
                assert_eq!(
                    body["error"]["code"], "method_not_allowed",
                    "{method} {path}"
                );
                continue;
            }
            operations.insert((method.to_owned(), path.clone()));
        }
    }
    operations
}

#[tokio::test]
async fn every_route_of_the_router_is_in_the_document_with_its_method_and_path() {
    let documented = documented();
    // A manual-clock server routes everything the document describes.
    let (_db, server) = start(true).await;
    let routed = routed_operations(&server).await;
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routed, not in the document: {undocumented:?}; in the document, not routed: {unrouted:?} \
         (add a route as `.routes(routes!(handler))` with `#[utoipa::path]` on the handler)"
    );
    server.stop().await.unwrap();

    // A normal server routes the same, less the test hooks (which answer 404).
    let (_db, server) = start(false).await;
    let routed = routed_operations(&server).await;
    let missing: Vec<_> = documented.difference(&routed).collect();
    let hook = |path: &str| ("post".to_owned(), path.to_owned());
    assert_eq!(
        missing,
        vec![
            &hook("/v1/test/audit"),
            &hook("/v1/test/clock"),
            &hook("/v1/test/failover"),
            &hook("/v1/test/prune"),
            &hook("/v1/test/replicate")
        ]
    );
    assert!(routed.is_subset(&documented));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_served_document_is_the_generated_one() {
    let (_db, server) = start(false).await;
    let served: serde_json::Value = reqwest::get(format!("{}/openapi.json", server.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, serde_json::to_value(app::openapi()).unwrap());
    assert_eq!(served["openapi"], "3.1.0");
    server.stop().await.unwrap();
}

#[test]
fn docs_openapi_json_is_what_the_code_generates() {
    let generated = generated();
    if std::env::var_os("LEASEWRIGHT_UPDATE_OPENAPI").is_some() {
        std::fs::write(checked_in(), &generated).unwrap();
    }
    let file = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        file == generated,
        "docs/openapi.json differs from the generated document: run \
         LEASEWRIGHT_UPDATE_OPENAPI=1 cargo test -p leasewright-server --test openapi"
    );
}

#[test]
fn every_operation_names_its_answers_and_every_schema_it_references_exists() {
    let document = serde_json::to_value(app::openapi()).unwrap();
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let text = document.to_string();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#/components/schemas/") {
        let tail = &rest[at + "#/components/schemas/".len()..];
        let name = &tail[..tail.find('"').unwrap()];
        assert!(schemas.contains_key(name), "missing schema {name}");
        rest = tail;
    }
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|code| code.starts_with('2')),
                "{method} {path}: no success answer"
            );
            assert!(responses.contains_key("503"), "{method} {path}");
        }
    }
}
