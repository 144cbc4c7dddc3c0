//! The OpenAPI 3.1 document of the HTTP API, generated from the handlers' `#[utoipa::path]`
//! annotations: the router registers each handler through `utoipa_axum::routes!`, which takes
//! the method and the path from the annotation, so a handler's route and its entry in the
//! document come from one place. docs/openapi.json is this document; server/tests/openapi.rs
//! fails when the router, the document and that file differ.
//!
//! Every new route is added as `.routes(routes!(module::handler))` with a `#[utoipa::path]` on
//! the handler (method, path, tag, security, params, request body, the route's own answers);
//! the answers every route shares (400, 401, 408, 413, 415, 500, 503) are added here.

use super::error::{ok, ApiResult};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi as _};

/// The document's fixed parts; the paths come from the router.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Leasewright HTTP API",
        description = "The fenced-lease protocol (docs/protocol.md) over HTTP: runner routes, \
                       operator routes, demo targets and the test hook. Every route, body and \
                       error code is described in docs/http.md.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "runner", description = "A runner's messages: each names its ownership tuple; the bearer is a runner token."),
        (name = "operator", description = "Projects, runners, jobs, their ledger, cancel, reconcile and the expiry sweep; the bearer is the operator token."),
        (name = "targets", description = "Demonstration targets (rule R9)."),
        (name = "test", description = "The test hook: only on a server started with `--manual-clock`."),
        (name = "health", description = "Health, metrics and this document; no authentication.")
    ),
    modifiers(&Conventions)
)]
struct Fixed;

/// The base document the router's paths are added to.
pub(super) fn base() -> OpenApi {
    Fixed::openapi()
}

/// The answers and security schemes every route shares (docs/http.md, "Conventions").
struct Conventions;

const ERROR_RESPONSE: &str = "Error";

impl Modify for Conventions {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, description) in [
            (
                "runner_token",
                "A runner's token (`POST /v1/projects/{project}/runners`).",
            ),
            ("operator_token", "The server's operator token."),
        ] {
            let mut scheme = Http::new(HttpAuthScheme::Bearer);
            scheme.description = Some(description.to_owned());
            components
                .security_schemes
                .insert(name.to_owned(), SecurityScheme::Http(scheme));
        }
        components.responses.insert(
            ERROR_RESPONSE.to_owned(),
            RefOr::T(
                ResponseBuilder::new()
                    .description(
                        "`{\"error\": {\"code\", \"message\"}}` with a stable code (docs/http.md, \
                         \"Errors\")",
                    )
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            ),
        );
    }
}

/// Add the shared answers to every operation of `openapi` (after the router's paths are in).
pub(super) fn add_shared_answers(openapi: &mut OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            shared_answers(operation);
        }
    }
}

fn shared_answers(operation: &mut Operation) {
    let authenticated = operation
        .security
        .as_ref()
        .is_some_and(|requirements| !requirements.is_empty());
    let has_body = operation.request_body.is_some();
    let has_params = operation
        .parameters
        .as_ref()
        .is_some_and(|params| !params.is_empty());
    let mut codes = vec!["500", "503"];
    if has_body || has_params {
        codes.push("400");
    }
    if authenticated {
        codes.push("401");
    }
    if has_body {
        codes.extend(["408", "413", "415"]);
    }
    for code in codes {
        operation
            .responses
            .responses
            .entry(code.to_owned())
            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(ERROR_RESPONSE)));
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    responses(
        (status = 200, description = "this OpenAPI 3.1 document", content_type = "application/json")
    )
)]
pub(super) async fn openapi_json() -> ApiResult {
    ok(super::openapi())
}
