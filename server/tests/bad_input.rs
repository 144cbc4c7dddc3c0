//! Bad input on every HTTP route (issue 7, item 3), generated with proptest.
//!
//! [`ROUTES`] (server/tests/common/mod.rs) is every route of the router; the first test checks it
//! against the router's OpenAPI document (equal to the router: server/tests/openapi.rs) and docs/http.md, so a route added without a row here
//! fails. Every other test builds a [`World`] (two projects, jobs in every interesting state, on a
//! manual clock that never moves) and sends, for every route a family applies to, one request of
//! each family and then `CASES` generated ones (default 64, `PROPTEST_CASES` overrides) drawn over
//! the routes, from a fixed seed (`LEASEWRIGHT_PROPTEST_SEED` overrides; no regression files are
//! written: a failure prints its seed and shrunk case). Every answer must be:
//!
//! - an HTTP answer at all (a closed connection is a panic in the server), with a 4xx status,
//!   never a 5xx; the exact status and code the case expects; a JSON body
//!   `{"error": {"code", "message"}}` with a documented code;
//! - without effect: the snapshot of the world (every operator read of jobs, attempts, logs,
//!   artifacts and targets, and a digest of every database table) is unchanged, and the ledgers
//!   (observations, reconciliations, target mutations) grew by exactly what the protocol records
//!   for that request: one observation, attributed per protocol §7, for a runner message that
//!   carries a well-formed ownership tuple and is rejected by the Store (a 409); one
//!   reconciliation for a rejected reconcile; nothing for anything refused before the Store
//!   (400, 401, 404, 405, 413, 422);
//! - and `/healthz` answers 200 after each case, and no server thread panicked.

mod common;

use common::*;
use leasewright_server::source::{hostile_archive, raw_archive, RawEntry};
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use uuid::Uuid;

/// The payload routes' limit on the test server (the control routes' is 64 KiB).
const PAYLOAD_LIMIT: usize = 256 * 1024;
const CONTROL_LIMIT: usize = 64 * 1024;
/// The source limits of the test server (small, so that bombs are cheap to build).
const MAX_FILES: usize = 32;
const MAX_SOURCE_BYTES: u64 = 1024 * 1024;
/// The longest name, key, slot or deployment id the server takes.
const MAX_IDENT_BYTES: usize = leasewright_server::app::MAX_IDENTIFIER_BYTES;

// -------------------------------------------------------------------------------------------
// The route table is the router's and the docs'.

/// `METHOD path` of every operation of the OpenAPI document, which is the router's routes
/// (server/tests/openapi.rs checks that against the router itself).
fn router_routes() -> BTreeSet<String> {
    let document = serde_json::to_value(leasewright_server::app::openapi()).unwrap();
    let mut routes = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            routes.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    routes
}

/// `METHOD path` of every route docs/http.md documents (`{p}`, `{j}` spelled as the router does,
/// query strings dropped).
fn documented_routes() -> BTreeSet<String> {
    let docs = include_str!("../../docs/http.md");
    let normalize = |path: &str| {
        let path = path.split(['[', '?']).next().unwrap_or_default();
        path.replace("{p}", "{project}").replace("{j}", "{job}")
    };
    let mut routes = BTreeSet::new();
    for line in docs.lines() {
        // The runner routes' table: "| `/v1/runner/...` | ...", all POST.
        if let Some(rest) = line.strip_prefix("| `/v1/runner/") {
            let path = rest.split('`').next().unwrap_or_default();
            routes.insert(format!("POST /v1/runner/{path}"));
        }
        // Everywhere else: "`GET /path`" or "`POST /path`".
        for span in line.split('`').skip(1).step_by(2) {
            for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
                if let Some(path) = span.strip_prefix(&format!("{method} /")) {
                    if !path.contains(' ') {
                        routes.insert(format!("{method} {}", normalize(&format!("/{path}"))));
                    }
                }
            }
        }
    }
    routes
}

#[test]
fn the_route_table_is_exactly_the_routers_routes_and_the_documented_routes() {
    let table: BTreeSet<String> = ROUTES.iter().map(Route::name).collect();
    assert_eq!(table.len(), ROUTES.len(), "a route appears twice in ROUTES");
    let router = router_routes();
    assert!(
        router.len() >= 20,
        "the router's routes were not found: {router:?}"
    );
    assert_eq!(
        table, router,
        "ROUTES (server/tests/common/mod.rs) must list every route of server/src/app/mod.rs's router, \
         with its bad-input cases"
    );
    assert_eq!(
        table,
        documented_routes(),
        "docs/http.md must document exactly the router's routes"
    );
}

// -------------------------------------------------------------------------------------------
// Running cases.

/// Panics on the server's threads (a handler that panics closes its connection; the hook sees it).
fn server_panics() -> &'static Mutex<Vec<String>> {
    static PANICS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    PANICS.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread
                .name()
                .is_some_and(|n| n.starts_with("tokio-runtime"))
            {
                if let Some(panics) = PANICS.get() {
                    panics
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(info.to_string());
                }
            }
            previous(info);
        }));
        Mutex::new(Vec::new())
    })
}

fn assert_no_server_panic() {
    let panics = server_panics().lock().unwrap().clone();
    assert!(panics.is_empty(), "the server panicked: {panics:#?}");
}

/// One request and what it must get.
#[derive(Clone, Debug)]
struct Case {
    family: &'static str,
    route: &'static Route,
    raw: Raw,
    status: u16,
    code: &'static str,
    effect: LedgerEffect,
}

/// A server and its world, and a runtime to drive them from proptest's synchronous runner.
struct Harness {
    runtime: tokio::runtime::Runtime,
    world: Arc<World>,
    last: Mutex<Snapshot>,
    _server: leasewright_server::app::Server,
    _db: leasewright_impl::database::TestDatabase,
    cases: Mutex<usize>,
}

fn server_config() -> leasewright_server::app::ServerConfig {
    let mut config = config(true);
    config.max_payload_bytes = PAYLOAD_LIMIT;
    config.source_limits = leasewright_server::source::Limits {
        max_files: MAX_FILES,
        max_total_bytes: MAX_SOURCE_BYTES,
        ..leasewright_server::source::Limits::submission()
    };
    config
}

impl Harness {
    fn new(with_queued_job: bool) -> Harness {
        server_panics();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (db, server, world) = runtime.block_on(async {
            let (db, server) = start_with(server_config()).await;
            let world = World::build(&server, with_queued_job).await;
            (db, server, world)
        });
        let last = runtime.block_on(world.database_snapshot());
        Harness {
            runtime,
            world: Arc::new(world),
            last: Mutex::new(last),
            _server: server,
            _db: db,
            cases: Mutex::new(0),
        }
    }

    /// Send the case; check its answer and that nothing but its ledger effect happened.
    fn run(&self, case: &Case) -> Result<(), TestCaseError> {
        let mut last = self.last.lock().unwrap();
        *self.cases.lock().unwrap() += 1;
        let world = &self.world;
        let outcome: Result<Snapshot, String> = self.runtime.block_on(async {
            let answer = world.send(&case.raw).await?;
            let code = check_error_format(&answer)?;
            if (answer.status, code.as_str()) != (case.status, case.code) {
                return Err(format!(
                    "answered {} {code}, expected {} {}: {}",
                    answer.status,
                    case.status,
                    case.code,
                    String::from_utf8_lossy(&answer.body)
                ));
            }
            let rejected = answer.json()["verdict"] == json!("rejected");
            if rejected != (answer.status == 409) {
                return Err(format!(
                    "\"verdict\": \"rejected\" iff 409: {}",
                    answer.json()
                ));
            }
            let after = world.check_unchanged(&last, &case.effect).await?;
            if !world.healthy().await {
                return Err("/healthz no longer answers 200".into());
            }
            Ok(after)
        });
        match outcome {
            Ok(after) => {
                *last = after;
                Ok(())
            }
            Err(message) => {
                // Later cases compare with the state as it is now.
                *last = self.runtime.block_on(world.database_snapshot());
                Err(TestCaseError::fail(format!(
                    "[{}] {}: {message}\nrequest: {} {} token={:?} body={}",
                    case.family,
                    case.route.name(),
                    case.raw.method,
                    case.raw.path,
                    case.raw.token.as_deref().map(|t| &t[..t.len().min(12)]),
                    case.raw
                        .body
                        .as_deref()
                        .map(|b| String::from_utf8_lossy(&b[..b.len().min(400)]).into_owned())
                        .unwrap_or_default()
                )))
            }
        }
    }
}

/// A family of bad input: for a route, `None` when it does not apply (and why, in docs), else the
/// strategy of its cases.
type Family = fn(&Arc<World>, &'static Route) -> Option<BoxedStrategy<Case>>;

fn seed() -> u64 {
    std::env::var("LEASEWRIGHT_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

fn runner_for(family: &str) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed().to_le_bytes());
    bytes[8..8 + family.len().min(24)].copy_from_slice(&family.as_bytes()[..family.len().min(24)]);
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// For every route the family applies to, one case (every failure reported); then `cases()`
/// generated cases over those routes. Returns the routes it applied to, or the failures.
fn run_family(
    harness: &Harness,
    name: &'static str,
    family: Family,
) -> Result<Vec<String>, String> {
    let started = Instant::now();
    let mut applied = Vec::new();
    let mut strategies: Vec<BoxedStrategy<Case>> = Vec::new();
    for route in ROUTES {
        if let Some(strategy) = family(&harness.world, route) {
            applied.push(route.name());
            strategies.push(strategy);
        }
    }
    if strategies.is_empty() {
        return Err(format!("{name} applies to no route"));
    }
    // The operator's reads before and after the family; the database after every case.
    let before = harness.runtime.block_on(harness.world.snapshot());
    let mut runner = runner_for(name);
    let mut failures = Vec::new();
    for strategy in &strategies {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        if let Err(error) = harness.run(&case) {
            failures.push(error.to_string());
        }
    }
    if !failures.is_empty() {
        return Err(format!("{name}:\n{}", failures.join("\n")));
    }
    let routes = strategies.len();
    let seed = seed();
    runner
        .run(&Union::new(strategies), |case| harness.run(&case))
        .map_err(|error| format!("{name} (seed {seed}): {error}"))?;
    let after = harness.runtime.block_on(harness.world.snapshot());
    let diff = before.state_diff(&after);
    if !diff.is_empty() {
        return Err(format!(
            "{name}: the operator's reads changed:\n  {}",
            diff.join("\n  ")
        ));
    }
    eprintln!(
        "{name}: {routes} routes, {} cases so far, {:.1} s",
        harness.cases.lock().unwrap(),
        started.elapsed().as_secs_f64()
    );
    Ok(applied)
}

// -------------------------------------------------------------------------------------------
// Requests the bad ones are made from: each is accepted as it is.

fn tuple_of(lease: &leasewright_server::wire::LeaseBody) -> Value {
    json!({
        "job": lease.job,
        "attempt": lease.attempt,
        "lease_id": lease.lease_id,
        "fence": lease.fence,
        "runner_time": "2001-01-01T00:00:00Z",
    })
}

fn fill(path: &str, project: &str, job: &str, slot: &str, name: &str) -> String {
    path.replace("{project}", project)
        .replace("{job}", job)
        .replace("{slot}", slot)
        .replace("{name}", name)
        .replace("{key}", name)
        // No runner of the world has this id: a revoke that gets past every check is
        // `404 unknown_runner` and revokes nothing.
        .replace("{runner}", "00000000-0000-4000-8000-00000000abcd")
}

/// The path a route's valid request uses.
fn valid_path(w: &World, route: &Route) -> String {
    let job = if route.path.ends_with("/reconcile") {
        w.l4.job
    } else if route.path.ends_with("/cancel") {
        w.a3.unwrap_or(w.l1.job)
    } else {
        w.l1.job
    };
    let slot = if route.method == "POST" {
        "idem-slot"
    } else {
        "fenced-slot"
    };
    // The world's artifact, or its cache entry (`World::build`).
    let name = if route.path.contains("{key}") {
        WORLD_CACHE_KEY
    } else {
        "out.txt"
    };
    fill(route.path, &w.a.to_string(), &job.to_string(), slot, name)
}

/// The key of the cache entry A's first job stores (`World::build`).
const WORLD_CACHE_KEY: &str = "k";

/// The token a route's valid request carries.
fn valid_token(w: &World, route: &Route) -> Option<String> {
    match route.auth {
        Auth::None => None,
        Auth::Runner => Some(w.ra1.token.clone()),
        Auth::Operator => Some(OPERATOR.into()),
    }
}

/// A valid body of the route: accepted as it is (see the next test).
fn valid_body(w: &World, route: &Route) -> Value {
    let t1 = tuple_of(&w.l1);
    match route.body {
        BodyKind::None => Value::Null,
        BodyKind::Claim => json!({"capacity": 1}),
        BodyKind::Tuple => t1,
        BodyKind::Logs => with(t1, &json!({"seq": 1, "content_base64": b64(b"more\n")})),
        BodyKind::Put => with(
            t1,
            &json!({"name": "new.txt", "content_base64": b64(b"new")}),
        ),
        BodyKind::Get if route.path.contains("cache") => with(t1, &json!({"name": "k"})),
        BodyKind::Get => with(t1, &json!({"name": "out.txt"})),
        BodyKind::Result => with(t1, &json!({"outcome": "passed", "result_digest": "d"})),
        BodyKind::Results => json!({"results": [
            with(t1, &json!({"outcome": "passed", "result_digest": "d"}))
        ]}),
        BodyKind::Deploy => json!({"kind": "idempotent", "job": w.l2.job, "attempt": w.l2.attempt,
                                   "slot_token": w.l2.slot_token, "deployment_id": "fresh"}),
        BodyKind::Name => json!({"name": "fresh"}),
        BodyKind::Submit => serde_json::to_value(submit_request(None, "unfenced")).unwrap(),
        BodyKind::Empty | BodyKind::Sweep => json!({}),
        BodyKind::Reconcile => json!({"finding": "stopped", "decision": "abort"}),
        BodyKind::Clock => json!({"advance_ms": 0}),
    }
}

fn valid_raw(w: &World, route: &Route) -> Raw {
    Raw {
        method: route.method,
        path: valid_path(w, route),
        token: valid_token(w, route),
        body: route
            .has_body()
            .then(|| serde_json::to_vec(&valid_body(w, route)).unwrap()),
    }
}

#[test]
fn the_requests_the_bad_ones_are_made_from_are_accepted_as_they_are() {
    let harness = Harness::new(true);
    let w = &harness.world;
    harness.runtime.block_on(async {
        // In the table's order: the claim takes a3, the result ends a1, the cancel is a3's.
        for route in ROUTES {
            let answer = w.send(&valid_raw(w, route)).await.unwrap();
            // The revoke names a runner the world does not have (`fill`): a real revoke would
            // change the world every later case is built on. It gets past every input check.
            if route.path.ends_with("/revoke") {
                assert_eq!(
                    answer.status,
                    404,
                    "{}",
                    String::from_utf8_lossy(&answer.body)
                );
                assert!(String::from_utf8_lossy(&answer.body).contains("unknown_runner"));
                continue;
            }
            assert!(
                (200..300).contains(&answer.status),
                "{}: {} {}",
                route.name(),
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
    });
    assert_no_server_panic();
}

// -------------------------------------------------------------------------------------------
// Fields and their wrong values.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Uuid,
    Int,
    UInt,
    /// Free text.
    Text,
    /// Free text that must not be empty (the command).
    Command,
    /// A name, key, slot or deployment id: at most 1024 bytes.
    Ident,
    /// A project or runner name: an identifier that must not be empty.
    Name,
    Enum(&'static [&'static str]),
    Time,
    Base64,
    List,
}

#[derive(Clone, Copy, Debug)]
struct Spec {
    name: &'static str,
    field: Field,
    required: bool,
}

const fn spec(name: &'static str, field: Field, required: bool) -> Spec {
    Spec {
        name,
        field,
        required,
    }
}

const OUTCOMES: &[&str] = &["passed", "failed", "cancelled"];
const KINDS: &[&str] = &["fenced", "idempotent", "unfenced"];
const FINDINGS: &[&str] = &[
    "stopped",
    "still_running",
    "observed_passed",
    "observed_failed",
];
const DECISIONS: &[&str] = &["retry", "abort", "adopt"];

const TUPLE: &[Spec] = &[
    spec("job", Field::Uuid, true),
    spec("attempt", Field::Uuid, true),
    spec("lease_id", Field::Uuid, true),
    spec("fence", Field::Int, true),
    spec("runner_time", Field::Time, false),
];

/// The fields of a route's body.
fn specs(route: &Route) -> Vec<Spec> {
    let tuple_and = |extra: &[Spec]| TUPLE.iter().chain(extra).copied().collect();
    match route.body {
        BodyKind::None | BodyKind::Empty => vec![],
        BodyKind::Claim => vec![
            spec("capacity", Field::UInt, false),
            spec("runner_time", Field::Time, false),
        ],
        BodyKind::Tuple => TUPLE.to_vec(),
        BodyKind::Logs => tuple_and(&[
            spec("seq", Field::Int, true),
            spec("content_base64", Field::Base64, true),
        ]),
        BodyKind::Put => tuple_and(&[
            spec("name", Field::Ident, true),
            spec("content_base64", Field::Base64, true),
        ]),
        BodyKind::Get => tuple_and(&[spec("name", Field::Ident, true)]),
        BodyKind::Result => tuple_and(&[
            spec("outcome", Field::Enum(OUTCOMES), true),
            spec("result_digest", Field::Text, true),
        ]),
        BodyKind::Results => vec![spec("results", Field::List, true)],
        BodyKind::Deploy => vec![
            spec("kind", Field::Enum(KINDS), true),
            spec("job", Field::Uuid, true),
            spec("attempt", Field::Uuid, true),
            spec("slot_token", Field::Int, true),
            spec("deployment_id", Field::Ident, true),
        ],
        BodyKind::Name => vec![spec("name", Field::Name, true)],
        BodyKind::Submit => vec![
            spec("command", Field::Command, true),
            spec("source_revision", Field::Text, true),
            spec("source_archive_base64", Field::Base64, true),
            spec("artifacts", Field::List, false),
            spec("target", Field::Ident, false),
            spec("target_kind", Field::Enum(KINDS), false),
        ],
        BodyKind::Reconcile => vec![
            spec("finding", Field::Enum(FINDINGS), true),
            spec("decision", Field::Enum(DECISIONS), true),
        ],
        BodyKind::Sweep => vec![spec("project", Field::Uuid, false)],
        BodyKind::Clock => vec![
            spec("set", Field::Time, false),
            spec("advance_ms", Field::Int, false),
        ],
    }
}

/// Values of the wrong JSON type, or outside the field's set, for a field.
fn wrong_values(spec: &Spec) -> Vec<Value> {
    let mut values = vec![json!(true), json!([]), json!({})];
    if spec.required {
        values.push(Value::Null);
    }
    match spec.field {
        Field::Uuid => values.extend([
            json!(1),
            json!("not-a-uuid"),
            json!(""),
            json!("0000"),
            json!("6f0b8f8e-3c4b-4f2a-9d6e-0b2a5c1e7f3"),
        ]),
        Field::Int => values.extend([json!("1"), json!(1.5), json!(1e3), json!([1])]),
        Field::UInt => values.extend([json!("1"), json!(1.5), json!(-1), json!([1])]),
        Field::Text | Field::Ident | Field::Base64 => values.extend([json!(1), json!(1.5)]),
        Field::Command | Field::Name => values.extend([json!(1), json!("")]),
        Field::Enum(set) => values.extend([
            json!(1),
            json!("sideways"),
            json!(""),
            json!(set[0].to_uppercase()),
            json!(format!(" {}", set[0])),
        ]),
        Field::Time => values.extend([
            json!(1),
            json!("yesterday"),
            json!("2020-13-45T00:00:00Z"),
            json!("2020-01-01"),
        ]),
        Field::List => {
            values.extend([json!("x"), json!(1), json!([1]), json!([null]), json!([[]])])
        }
    }
    values
}

/// Whole bodies that are not a JSON object.
fn not_objects() -> Vec<Value> {
    vec![
        Value::Null,
        json!(1),
        json!("x"),
        json!(true),
        json!([]),
        json!([1]),
        json!([{}]),
    ]
}

/// A placeholder replaced by raw JSON text after serialization (for numbers serde_json cannot
/// hold, such as integers beyond 64 bits).
const RAW: &str = "\u{1}raw\u{1}";

fn with_raw(body: &Value, raw: &str) -> Vec<u8> {
    let text = serde_json::to_string(body).unwrap();
    text.replace("\"\\u0001raw\\u0001\"", raw).into_bytes()
}

fn set(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}

/// A case on `route` with the valid path and token and `body`, refused before the Store.
fn refused(
    family: &'static str,
    w: &World,
    route: &'static Route,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        family,
        route,
        raw: Raw {
            body: Some(body),
            ..valid_raw(w, route)
        },
        status,
        code,
        effect: LedgerEffect::default(),
    }
}

fn bad_request(family: &'static str, w: &World, route: &'static Route, body: Vec<u8>) -> Case {
    refused(family, w, route, body, 400, "bad_request")
}

// -------------------------------------------------------------------------------------------
// Families.

/// Bytes that are not JSON: truncated, with a stray byte, garbage, trailing junk.
fn malformed(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    if !route.has_body() {
        return None; // GET routes read no body.
    }
    let valid = serde_json::to_vec(&valid_body(w, route)).unwrap();
    let len = valid.len();
    let w = w.clone();
    let bytes = prop_oneof![
        (1..len).prop_map({
            let valid = valid.clone();
            move |cut| valid[..cut].to_vec()
        }),
        (
            0..=len,
            prop::sample::select(b"{}[],:\"\\x\x00\xff\n".to_vec())
        )
            .prop_map({
                let valid = valid.clone();
                move |(at, byte)| {
                    let mut bytes = valid.clone();
                    bytes.insert(at, byte);
                    bytes
                }
            }),
        prop::collection::vec(any::<u8>(), 1..64),
        prop::sample::select(vec![",", "}", "]", "x", "{}", "\u{0}"]).prop_map({
            let valid = valid.clone();
            move |tail| [valid.as_slice(), tail.as_bytes()].concat()
        }),
    ];
    Some(
        bytes
            .prop_filter("not JSON", |b| {
                serde_json::from_slice::<Value>(b).is_err()
                    && !b.iter().all(u8::is_ascii_whitespace)
            })
            .prop_map(move |body| bad_request("malformed", &w, route, body))
            .boxed(),
    )
}

/// JSON of the wrong type: a field of the wrong type or outside its set, a required field
/// missing, a body that is not an object.
fn wrong_types(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    if !route.has_body() {
        return None;
    }
    let valid = valid_body(w, route);
    let mut bodies: Vec<Value> = not_objects();
    for spec in specs(route) {
        for value in wrong_values(&spec) {
            bodies.push(set(valid.clone(), spec.name, value));
        }
        if spec.required {
            let mut missing = valid.clone();
            missing.as_object_mut().unwrap().remove(spec.name);
            bodies.push(missing);
        }
    }
    let w = w.clone();
    Some(
        prop::sample::select(bodies)
            .prop_map(move |body| {
                bad_request("wrong_types", &w, route, serde_json::to_vec(&body).unwrap())
            })
            .boxed(),
    )
}

/// A valid body padded past the route's limit.
fn oversized(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let limit = match route.limit {
        Limit::NoBody => return None, // reads no body: nothing to exceed
        Limit::Control => CONTROL_LIMIT,
        Limit::Payload => PAYLOAD_LIMIT,
    };
    let valid = valid_body(w, route);
    let w = w.clone();
    Some(
        (1usize..8192)
            .prop_map(move |extra| {
                let body = set(valid.clone(), "padding", json!("x".repeat(limit + extra)));
                refused(
                    "oversized",
                    &w,
                    route,
                    serde_json::to_vec(&body).unwrap(),
                    413,
                    "payload_too_large",
                )
            })
            .boxed(),
    )
}

/// A string field with a NUL character (PostgreSQL text cannot hold one), or an identifier
/// longer than the server takes.
fn bad_strings(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let valid = valid_body(w, route);
    let mut fields: Vec<(&'static str, bool)> = Vec::new();
    for spec in specs(route) {
        match spec.field {
            Field::Text | Field::Command | Field::Enum(_) | Field::Base64 => {
                fields.push((spec.name, false));
            }
            Field::Ident | Field::Name => {
                fields.push((spec.name, false));
                fields.push((spec.name, true));
            }
            Field::List => fields.push((spec.name, false)),
            _ => {}
        }
    }
    if fields.is_empty() {
        return None; // no string field
    }
    let w = w.clone();
    Some(
        (
            prop::sample::select(fields),
            "[a-z0-9]{0,8}",
            "[a-z0-9]{0,8}",
            (MAX_IDENT_BYTES + 1)..(MAX_IDENT_BYTES * 3),
            any::<u64>(),
        )
            .prop_map(move |((field, long), before, after, length, seed)| {
                let text = if long {
                    // Random hex: incompressible, so an index entry cannot shrink it.
                    let mut text = String::new();
                    let mut x = seed | 1;
                    while text.len() < length {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        text.push_str(&format!("{x:016x}"));
                    }
                    text.truncate(length);
                    text
                } else {
                    format!("{before}\u{0}{after}")
                };
                let value = if field == "artifacts" {
                    json!([text])
                } else {
                    json!(text)
                };
                let body = set(valid.clone(), field, value);
                bad_request("bad_strings", &w, route, serde_json::to_vec(&body).unwrap())
            })
            .boxed(),
    )
}

/// Base64 that is not standard padded base64.
fn bad_base64(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let field = specs(route)
        .into_iter()
        .find(|s| s.field == Field::Base64)?
        .name;
    let valid = valid_body(w, route);
    let w = w.clone();
    let text = (
        prop::collection::vec(any::<u8>(), 0..48),
        any::<prop::sample::Index>(),
        prop::sample::select(vec!["!", "*", "-", "_", ".", " ", "\n", "é", "=", "==="]),
        0..3u8,
    )
        .prop_map(|(bytes, at, junk, how)| {
            let good = b64(&bytes);
            match how {
                0 => {
                    let mut chars: Vec<char> = good.chars().collect();
                    chars.insert(at.index(chars.len() + 1), junk.chars().next().unwrap());
                    chars.into_iter().collect::<String>()
                }
                1 => format!("{good}{junk}"),
                _ => good.trim_end_matches('=').to_owned() + "A",
            }
        })
        .prop_filter("not valid base64", |text| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
        });
    Some(
        text.prop_map(move |text| {
            let body = set(valid.clone(), field, json!(text));
            bad_request("bad_base64", &w, route, serde_json::to_vec(&body).unwrap())
        })
        .boxed(),
    )
}

/// The observation a tuple message leaves when the Store rejects it with `reason`.
fn observed(route: &Route, sender: &RunnerRef, body: &Value, reason: &str) -> LedgerEffect {
    LedgerEffect {
        observation: Some(ExpectedObservation::of(
            route,
            sender.id,
            body,
            "rejected",
            Some(reason),
        )),
        ..LedgerEffect::default()
    }
}

/// A runner message from `sender` with `body`, rejected by the Store with `reason` (409).
fn rejected_message(
    family: &'static str,
    route: &'static Route,
    sender: &RunnerRef,
    body: &Value,
    reason: &'static str,
) -> Case {
    Case {
        family,
        route,
        raw: Raw {
            method: route.method,
            path: route.path.to_owned(),
            token: Some(sender.token.clone()),
            body: Some(serde_json::to_vec(body).unwrap()),
        },
        status: 409,
        code: reason,
        effect: observed(route, sender, body, reason),
    }
}

/// An operator GET of `path`, refused with `status` `code`.
fn operator_get(
    family: &'static str,
    route: &'static Route,
    path: String,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        family,
        route,
        raw: Raw {
            method: route.method,
            path,
            token: Some(OPERATOR.into()),
            body: None,
        },
        status,
        code,
        effect: LedgerEffect::default(),
    }
}

fn uuid_strategy() -> BoxedStrategy<Uuid> {
    any::<u128>().prop_map(Uuid::from_u128).boxed()
}

/// Ids that exist nowhere, or that name another job's attempt.
fn unknown_ids(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let wc = w.clone();
    if route.has_tuple() {
        let valid = valid_body(w, route);
        return Some(
            (0..4u8, uuid_strategy(), uuid_strategy(), uuid_strategy())
                .prop_map(move |(how, job, attempt, lease)| {
                    let w = &wc;
                    let (job, attempt, lease, reason) = match how {
                        0 => (job, attempt, lease, "unknown_job"),
                        1 => (w.l1.job, attempt, lease, "unknown_attempt"),
                        2 => (w.l1.job, w.l1.attempt, lease, "lease_mismatch"),
                        // a4's attempt, also ra1's, is not an attempt of a1.
                        _ => (w.l1.job, w.l4.attempt, w.l4.lease_id, "unknown_attempt"),
                    };
                    let body = with(
                        valid.clone(),
                        &json!({"job": job, "attempt": attempt, "lease_id": lease}),
                    );
                    rejected_message("unknown_ids", route, &w.ra1, &body, reason)
                })
                .boxed(),
        );
    }
    let a = w.a.to_string();
    let a1 = w.l1.job.to_string();
    match route.path {
        // Ids in the path: an unknown project, job, attempt, artifact or slot.
        "/v1/targets/{slot}" => Some(
            "[a-z0-9-]{1,40}"
                .prop_map(move |slot| {
                    operator_get(
                        "unknown_ids",
                        route,
                        format!("/v1/targets/unknown-{slot}"),
                        404,
                        "unknown_target",
                    )
                })
                .boxed(),
        ),
        "/v1/projects/{project}/runners" | "/v1/projects/{project}/jobs" => Some(
            uuid_strategy()
                .prop_map(move |project| {
                    let raw = Raw {
                        path: fill(route.path, &project.to_string(), "", "", ""),
                        ..valid_raw(&wc, route)
                    };
                    Case {
                        family: "unknown_ids",
                        route,
                        raw,
                        status: 404,
                        code: "unknown_project",
                        effect: LedgerEffect::default(),
                    }
                })
                .boxed(),
        ),
        // An unknown project, or a key with no entry.
        "/v1/projects/{project}/cache/{key}" => Some(
            (any::<bool>(), uuid_strategy(), "[a-z0-9.]{1,20}")
                .prop_map(move |(unknown_project, id, key)| {
                    let (path, code) = if unknown_project {
                        (
                            fill(route.path, &id.to_string(), "", "", "out.txt"),
                            "unknown_project",
                        )
                    } else {
                        (
                            fill(route.path, &a, "", "", &format!("missing-{key}")),
                            "not_found",
                        )
                    };
                    operator_get("unknown_ids", route, path, 404, code)
                })
                .boxed(),
        ),
        path if path.starts_with("/v1/projects/{project}/jobs/{job}") && route.method == "GET" => {
            let names_attempt = (route.path.ends_with("/logs")
                || route.path.ends_with("/log-chunks"))
                || route.path.contains("/artifacts/");
            let names_artifact = route.path.contains("/artifacts/");
            Some(
                (0..4u8, uuid_strategy(), "[a-z0-9.]{1,20}")
                    .prop_map(move |(how, id, name)| {
                        let id = id.to_string();
                        let (path, code) = match how {
                            // An unknown project, or an unknown job.
                            0 => (fill(route.path, &id, &a1, "", "out.txt"), "unknown_job"),
                            // An unknown attempt of a real job.
                            2 if names_attempt => (
                                fill(route.path, &a, &a1, "", "out.txt") + "?attempt=" + &id,
                                "unknown_attempt",
                            ),
                            // An artifact the attempt does not have.
                            3 if names_artifact => (
                                fill(route.path, &a, &a1, "", &format!("missing-{name}")),
                                "not_found",
                            ),
                            _ => (fill(route.path, &a, &id, "", "out.txt"), "unknown_job"),
                        };
                        operator_get("unknown_ids", route, path, 404, code)
                    })
                    .boxed(),
            )
        }
        "/v1/projects/{project}/jobs/{job}/cancel"
        | "/v1/projects/{project}/jobs/{job}/reconcile" => {
            let is_reconcile = route.path.ends_with("/reconcile");
            Some(
                (any::<bool>(), uuid_strategy())
                    .prop_map(move |(unknown_job, id)| {
                        let w = &wc;
                        let (project, job, reason) = if unknown_job {
                            (w.a, id, "unknown_job")
                        } else {
                            // An unknown project naming a real job: the job is another's.
                            (id, w.l4.job, "wrong_project")
                        };
                        let raw = Raw {
                            path: fill(route.path, &project.to_string(), &job.to_string(), "", ""),
                            ..valid_raw(w, route)
                        };
                        let record = (project, job, "rejected".to_owned(), Some(reason.to_owned()));
                        let effect = LedgerEffect {
                            cancel: (!is_reconcile).then(|| record.clone()),
                            reconciliation: is_reconcile.then_some(record),
                            ..LedgerEffect::default()
                        };
                        Case {
                            family: "unknown_ids",
                            route,
                            raw,
                            status: 409,
                            code: reason,
                            effect,
                        }
                    })
                    .boxed(),
            )
        }
        "/v1/sweep" => Some(
            uuid_strategy()
                .prop_map(move |project| {
                    let body = json!({ "project": project });
                    refused(
                        "unknown_ids",
                        &wc,
                        route,
                        serde_json::to_vec(&body).unwrap(),
                        404,
                        "unknown_project",
                    )
                })
                .boxed(),
        ),
        // Claim names no id; a target checks no job (protocol §8); the rest name nothing.
        _ => None,
    }
}

/// Another project's (or another runner's) jobs, attempts and leases.
fn other_project(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let wc = w.clone();
    if route.has_tuple() {
        let valid = valid_body(w, route);
        return Some(
            (0..5u8)
                .prop_map(move |how| {
                    let w = &wc;
                    let exact = |lease| with(valid.clone(), &tuple_of(lease));
                    let (sender, body, reason) = match how {
                        // B's runner copying A's exact tuples.
                        0 => (&w.rb, exact(&w.l1), "wrong_project"),
                        1 => (&w.rb, exact(&w.l2), "wrong_project"),
                        // A's other runner copying ra1's exact tuple.
                        2 => (&w.ra2, exact(&w.l1), "runner_mismatch"),
                        // B's own job with A's attempt and lease.
                        3 => (
                            &w.rb,
                            with(exact(&w.l1), &json!({"job": w.lb.job})),
                            "unknown_attempt",
                        ),
                        // A's job with B's attempt.
                        _ => (
                            &w.ra1,
                            with(exact(&w.lb), &json!({"job": w.l1.job})),
                            "unknown_attempt",
                        ),
                    };
                    rejected_message("other_project", route, sender, &body, reason)
                })
                .boxed(),
        );
    }
    let (a, b) = (w.a.to_string(), w.b.to_string());
    let (a1, b1) = (w.l1.job.to_string(), w.lb.job.to_string());
    match route.path {
        // B's runner claims: A's queued job is not B's; B has none queued.
        "/v1/runner/claim" => Some(
            prop::option::of(1..=64u32)
                .prop_map(move |capacity| Case {
                    family: "other_project",
                    route,
                    raw: Raw {
                        token: Some(wc.rb.token.clone()),
                        body: Some(serde_json::to_vec(&json!({ "capacity": capacity })).unwrap()),
                        ..valid_raw(&wc, route)
                    },
                    status: 409,
                    code: "no_queued_job",
                    effect: LedgerEffect::default(),
                })
                .boxed(),
        ),
        // A's entry is not B's: under B's path, no such entry.
        "/v1/projects/{project}/cache/{key}" => Some(
            Just(())
                .prop_map(move |()| {
                    let path = fill(route.path, &b, "", "", WORLD_CACHE_KEY);
                    operator_get("other_project", route, path, 404, "not_found")
                })
                .boxed(),
        ),
        path if path.starts_with("/v1/projects/{project}/jobs/{job}") && route.method == "GET" => {
            let l1_attempt = w.l1.attempt;
            Some(
                (0..3u8)
                    .prop_map(move |how| {
                        let (path, code) = match how {
                            0 => (fill(route.path, &b, &a1, "", "out.txt"), "unknown_job"),
                            1 => (fill(route.path, &a, &b1, "", "out.txt"), "unknown_job"),
                            _ if (route.path.ends_with("/logs")
                                || route.path.ends_with("/log-chunks"))
                                || route.path.contains("/artifacts/") =>
                            {
                                (
                                    fill(route.path, &b, &b1, "", "out.txt")
                                        + &format!("?attempt={l1_attempt}"),
                                    "unknown_attempt",
                                )
                            }
                            _ => (fill(route.path, &b, &a1, "", "out.txt"), "unknown_job"),
                        };
                        operator_get("other_project", route, path, 404, code)
                    })
                    .boxed(),
            )
        }
        "/v1/projects/{project}/jobs/{job}/cancel"
        | "/v1/projects/{project}/jobs/{job}/reconcile" => {
            let is_reconcile = route.path.ends_with("/reconcile");
            Some(
                any::<bool>()
                    .prop_map(move |a_job| {
                        let w = &wc;
                        // Under B's path: A's job (a1 running, a4 uncertain).
                        let job = if a_job { w.l4.job } else { w.l1.job };
                        let raw = Raw {
                            path: fill(route.path, &w.b.to_string(), &job.to_string(), "", ""),
                            ..valid_raw(w, route)
                        };
                        Case {
                            family: "other_project",
                            route,
                            raw,
                            status: 409,
                            code: "wrong_project",
                            effect: {
                                let record =
                                    (w.b, job, "rejected".into(), Some("wrong_project".into()));
                                LedgerEffect {
                                    cancel: (!is_reconcile).then(|| record.clone()),
                                    reconciliation: is_reconcile.then_some(record),
                                    ..LedgerEffect::default()
                                }
                            },
                        }
                    })
                    .boxed(),
            )
        }
        // Routes of one project only (create, submit, list) name no other project's ids;
        // targets belong to no project (protocol §8).
        _ => None,
    }
}

/// Integer literals beyond 64 bits (or out of f64's range).
fn overflowing() -> BoxedStrategy<String> {
    prop_oneof![
        Just("9223372036854775808".to_owned()),
        Just("-9223372036854775809".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("1e400".to_owned()),
        "-?[1-9][0-9]{20,40}",
    ]
    .boxed()
}

/// Negative, zero and overflowing fences, sequence numbers, capacities and clock moves.
fn numbers(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let valid = valid_body(w, route);
    let wc = w.clone();
    match route.body {
        BodyKind::Tuple | BodyKind::Logs | BodyKind::Put | BodyKind::Get | BodyKind::Result => {
            let is_logs = route.body == BodyKind::Logs;
            Some(
                (0..4u8, i64::MIN..=0i64, overflowing())
                    .prop_map(move |(how, negative, big)| {
                        let w = &wc;
                        match how {
                            // A well-formed tuple with a fence no attempt has: the Store's.
                            0 => {
                                let body = set(valid.clone(), "fence", json!(negative));
                                rejected_message("numbers", route, &w.ra1, &body, "fence_mismatch")
                            }
                            1 => bad_request(
                                "numbers",
                                w,
                                route,
                                with_raw(&set(valid.clone(), "fence", json!(RAW)), &big),
                            ),
                            2 if is_logs => {
                                let seq = negative.min(-1);
                                bad_request(
                                    "numbers",
                                    w,
                                    route,
                                    serde_json::to_vec(&set(valid.clone(), "seq", json!(seq)))
                                        .unwrap(),
                                )
                            }
                            3 if is_logs => bad_request(
                                "numbers",
                                w,
                                route,
                                with_raw(&set(valid.clone(), "seq", json!(RAW)), &big),
                            ),
                            _ => bad_request(
                                "numbers",
                                w,
                                route,
                                with_raw(&set(valid.clone(), "fence", json!(RAW)), &big),
                            ),
                        }
                    })
                    .boxed(),
            )
        }
        BodyKind::Claim => Some(
            (
                any::<bool>(),
                i64::MIN..0i64,
                (u64::from(u32::MAX) + 1)..=u64::MAX,
            )
                .prop_map(move |(negative, n, big)| {
                    let value = if negative {
                        n.to_string()
                    } else {
                        big.to_string()
                    };
                    bad_request(
                        "numbers",
                        &wc,
                        route,
                        with_raw(&set(valid.clone(), "capacity", json!(RAW)), &value),
                    )
                })
                .boxed(),
        ),
        // A slot token is at least 1: the demo target refuses the rest.
        BodyKind::Deploy => Some(
            (any::<bool>(), i64::MIN..=0i64, overflowing())
                .prop_map(move |(small, n, big)| {
                    let value = if small { n.to_string() } else { big };
                    bad_request(
                        "numbers",
                        &wc,
                        route,
                        with_raw(&set(valid.clone(), "slot_token", json!(RAW)), &value),
                    )
                })
                .boxed(),
        ),
        // The test clock stays within RFC 3339's years 1..=9999.
        BodyKind::Clock => Some(
            (
                0..3u8,
                400_000_000_000_000i64..=i64::MAX,
                i64::MIN..=-100_000_000_000_000i64,
                overflowing(),
            )
                .prop_map(move |(how, ahead, behind, big)| {
                    let value = match how {
                        0 => ahead.to_string(),
                        1 => behind.to_string(),
                        _ => big,
                    };
                    bad_request(
                        "numbers",
                        &wc,
                        route,
                        with_raw(&set(valid.clone(), "advance_ms", json!(RAW)), &value),
                    )
                })
                .boxed(),
        ),
        // No other route takes a number.
        _ => None,
    }
}

/// Missing, malformed, unknown and other roles' tokens.
fn bad_tokens(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    if route.auth == Auth::None {
        return None; // no token to get wrong
    }
    let wc = w.clone();
    Some(
        (0..5u8, "[ -~]{0,80}", uuid_strategy(), "[0-9a-f]{64}")
            .prop_map(move |(how, garbage, id, secret)| {
                let w = &wc;
                let token = match how {
                    0 => None,
                    1 => Some(garbage),
                    // A runner token's shape with an unknown secret: of ra1, or of nobody.
                    2 => Some(format!("lw_{}_{secret}", w.ra1.id.simple())),
                    3 => Some(format!("lw_{}_{secret}", id.simple())),
                    // The other role's token.
                    _ => Some(match route.auth {
                        Auth::Runner => OPERATOR.to_owned(),
                        _ => w.ra1.token.clone(),
                    }),
                };
                Case {
                    family: "bad_tokens",
                    route,
                    raw: Raw {
                        token,
                        ..valid_raw(w, route)
                    },
                    status: 401,
                    code: "unauthorized",
                    effect: LedgerEffect::default(),
                }
            })
            .boxed(),
    )
}

/// Path segments that are not UUIDs, not UTF-8, hold a NUL or are too long; a malformed query.
fn bad_paths(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    if !route.path.contains('{') {
        return None; // no path parameter
    }
    let wc = w.clone();
    let segment = prop_oneof![
        "[a-z0-9]{1,20}".prop_map(|s| format!("x{s}")),
        Just("%FF%FE".to_owned()),
        Just("%00".to_owned()),
        Just("a%2Fb".to_owned()),
        "[a-z]{0,4}".prop_map(|s| format!("{s}%00{s}")),
        "[a-z]{0,4}".prop_map(|s| format!("{s}%C3%28")),
    ];
    let uuid_params = route.path.contains("{project}") || route.path.contains("{job}");
    let string_params = route.path.contains("{slot}")
        || route.path.contains("{name}")
        || route.path.contains("{key}");
    let has_attempt_query = (route.path.ends_with("/logs") || route.path.ends_with("/log-chunks"))
        || route.path.contains("/artifacts/");
    Some(
        (
            0..4u8,
            segment,
            (MAX_IDENT_BYTES + 1)..(2 * MAX_IDENT_BYTES),
        )
            .prop_filter(
                "applies to this route",
                move |(how, segment, _)| match how {
                    // A UUID parameter that is not a UUID.
                    0 => uuid_params,
                    // A string parameter that is not UTF-8 or holds a NUL, or is too long.
                    1 => string_params && segment.contains('%') && segment != "a%2Fb",
                    2 => string_params,
                    _ => has_attempt_query,
                },
            )
            .prop_map(move |(how, segment, long)| {
                let w = &wc;
                let valid = valid_raw(w, route);
                let (a, job) = (w.a.to_string(), valid_job(w, route));
                let (slot, name) = (slot_of(route), "out.txt");
                let path = match how {
                    0 if route.path.contains("{job}") => fill(route.path, &a, &segment, slot, name),
                    0 => fill(route.path, &segment, &job, slot, name),
                    1 | 2 => {
                        let value = if how == 1 { segment } else { "s".repeat(long) };
                        if route.path.contains("{slot}") {
                            fill(route.path, &a, &job, &value, name)
                        } else {
                            fill(route.path, &a, &job, slot, &value)
                        }
                    }
                    _ => fill(route.path, &a, &job, slot, name) + "?attempt=" + &segment,
                };
                Case {
                    family: "bad_paths",
                    route,
                    raw: Raw { path, ..valid },
                    status: 400,
                    code: "bad_request",
                    effect: LedgerEffect::default(),
                }
            })
            .boxed(),
    )
}

fn valid_job(w: &World, route: &Route) -> String {
    if route.path.ends_with("/reconcile") {
        w.l4.job.to_string()
    } else {
        w.l1.job.to_string()
    }
}

fn slot_of(route: &Route) -> &'static str {
    if route.method == "POST" {
        "idem-slot"
    } else {
        "fenced-slot"
    }
}

/// A method the route's path does not take.
fn wrong_methods(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    let taken: Vec<&str> = ROUTES
        .iter()
        .filter(|r| r.path == route.path)
        .map(|r| r.method)
        .collect();
    let others: Vec<&'static str> = ["GET", "POST", "PUT", "DELETE", "PATCH"]
        .into_iter()
        .filter(|m| !taken.contains(m))
        .collect();
    let wc = w.clone();
    Some(
        prop::sample::select(others)
            .prop_map(move |method| Case {
                family: "wrong_methods",
                route,
                raw: Raw {
                    method,
                    ..valid_raw(&wc, route)
                },
                status: 405,
                code: "method_not_allowed",
                effect: LedgerEffect::default(),
            })
            .boxed(),
    )
}

/// Hostile source archives in a submission: refused with `invalid_source` before anything is
/// stored.
fn hostile_sources(w: &Arc<World>, route: &'static Route) -> Option<BoxedStrategy<Case>> {
    if route.body != BodyKind::Submit {
        return None; // only a submission carries an archive
    }
    let valid = valid_body(w, route);
    let wc = w.clone();
    Some(
        (
            0..15u8,
            "[a-z]{1,12}",
            prop::collection::vec(any::<u8>(), 1..600),
        )
            .prop_map(move |(how, name, bytes)| {
                let archive = hostile(how, &name, &bytes);
                let body = set(valid.clone(), "source_archive_base64", json!(b64(&archive)));
                refused(
                    "hostile_sources",
                    &wc,
                    route,
                    serde_json::to_vec(&body).unwrap(),
                    422,
                    "invalid_source",
                )
            })
            .boxed(),
    )
}

/// The `how`-th kind of hostile archive.
fn hostile(how: u8, name: &str, bytes: &[u8]) -> Vec<u8> {
    let regular = tar::EntryType::Regular;
    match how {
        0 => hostile_archive(format!("../{name}").as_bytes(), regular, bytes),
        1 => hostile_archive(format!("a/../../{name}").as_bytes(), regular, bytes),
        2 => hostile_archive(format!("/tmp/{name}").as_bytes(), regular, bytes),
        3 => hostile_archive(name.as_bytes(), tar::EntryType::Symlink, b""),
        4 => hostile_archive(name.as_bytes(), tar::EntryType::Link, b""),
        5 => hostile_archive(name.as_bytes(), tar::EntryType::Char, b""),
        6 => hostile_archive(name.as_bytes(), tar::EntryType::Block, b""),
        7 => hostile_archive(name.as_bytes(), tar::EntryType::Fifo, b""),
        // A file-count bomb: one file more than the limit.
        8 => {
            let names: Vec<String> = (0..=MAX_FILES).map(|i| format!("{name}-{i}")).collect();
            let entries: Vec<RawEntry<'_>> = names
                .iter()
                .map(|n| (n.as_bytes(), regular, &b"x"[..], None))
                .collect();
            raw_archive(&entries)
        }
        // A size bomb: a header announcing a byte over the limit.
        9 => raw_archive(&[(name.as_bytes(), regular, b"", Some(MAX_SOURCE_BYTES + 1))]),
        // The same path twice.
        10 => raw_archive(&[
            (name.as_bytes(), regular, b"x", None),
            (name.as_bytes(), regular, b"y", None),
        ]),
        // Not gzip at all; gzip of something that is not a tar (a header of random bytes).
        11 => [b"not gzip: ".as_slice(), bytes].concat(),
        12 => hostile_gzip(&bytes.iter().map(|b| b | 1).collect::<Vec<u8>>()),
        // A traversal in a PAX header, behind an innocent name.
        13 => raw_archive(&[
            (
                b"pax",
                tar::EntryType::XHeader,
                pax_record("path", &format!("../{name}")).as_bytes(),
                None,
            ),
            (b"innocent", regular, bytes, None),
        ]),
        // A header announcing more content than the archive holds.
        _ => raw_archive(&[(name.as_bytes(), regular, b"short", Some(4096))]),
    }
}

/// One PAX extended-header record: `<length> <key>=<value>\n`, the length counting itself.
fn pax_record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut length = body.len();
    while length != body.len() + length.to_string().len() {
        length = body.len() + length.to_string().len();
    }
    format!("{length}{body}")
}

/// Gzip of `bytes`.
fn hostile_gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

// -------------------------------------------------------------------------------------------
// The tests: each family over every route it applies to.

const FAMILIES_OF_SYNTAX: &[(&str, Family)] = &[
    ("malformed", malformed),
    ("wrong_types", wrong_types),
    ("oversized", oversized),
    ("bad_strings", bad_strings),
    ("bad_base64", bad_base64),
    ("hostile_sources", hostile_sources),
];

const FAMILIES_OF_IDENTITY: &[(&str, Family)] = &[
    ("unknown_ids", unknown_ids),
    ("other_project", other_project),
    ("numbers", numbers),
    ("bad_tokens", bad_tokens),
    ("bad_paths", bad_paths),
    ("wrong_methods", wrong_methods),
];

/// Run `families` on a fresh world; then check that every route got every family its row calls
/// for (a new route's row decides its cases: this is where a missing one shows).
fn run_families(families: &[(&'static str, Family)]) {
    let harness = Harness::new(true);
    let mut applied = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    for (name, family) in families {
        match run_family(&harness, name, *family) {
            Ok(routes) => {
                applied.insert(*name, routes);
            }
            Err(failure) => failures.push(failure),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_no_server_panic();
    let names: Vec<&str> = families.iter().map(|(n, _)| *n).collect();
    for route in ROUTES {
        let got = |family: &str| {
            applied
                .get(family)
                .is_some_and(|r| r.contains(&route.name()))
        };
        let mut required = vec!["wrong_methods"];
        if route.has_body() {
            required.extend(["malformed", "wrong_types", "oversized"]);
        }
        if route.auth != Auth::None {
            required.push("bad_tokens");
        }
        if route.path.contains('{') {
            required.push("bad_paths");
        }
        if route.has_tuple() {
            required.extend(["unknown_ids", "other_project", "numbers"]);
        }
        if specs(route).iter().any(|s| {
            !matches!(
                s.field,
                Field::Uuid | Field::Int | Field::UInt | Field::Time
            )
        }) {
            required.push("bad_strings");
        }
        for family in required {
            if names.contains(&family) {
                assert!(got(family), "{}: no {family} case", route.name());
            }
        }
    }
    let mut table = String::new();
    for route in ROUTES {
        let families: Vec<&str> = names
            .iter()
            .copied()
            .filter(|f| applied[f].contains(&route.name()))
            .collect();
        table.push_str(&format!("{}: {}\n", route.name(), families.join(", ")));
    }
    eprintln!("{table}");
}

#[test]
fn malformed_wrong_typed_oversized_and_hostile_bodies_get_a_4xx_and_change_nothing() {
    run_families(FAMILIES_OF_SYNTAX);
}

#[test]
fn unknown_and_foreign_ids_bad_numbers_tokens_paths_and_methods_get_a_4xx_and_change_nothing() {
    run_families(FAMILIES_OF_IDENTITY);
}

// -------------------------------------------------------------------------------------------
// Replays.

/// One accepted request and what its replay (the same bytes again) must get: the status, the
/// verdict (2xx) or code (4xx), and exactly what it may add to the ledgers. Nothing else changes.
struct Replay {
    route: &'static Route,
    raw: Raw,
    status: u16,
    answer: &'static str,
    effect: LedgerEffect,
}

fn route_named(method: &str, path: &str) -> &'static Route {
    ROUTES
        .iter()
        .find(|r| r.method == method && r.path == path)
        .unwrap_or_else(|| panic!("no route {method} {path}"))
}

/// A replay of a runner message from `sender` answered 200 with `verdict`, recorded as an
/// attributed observation.
fn runner_replay(
    route: &'static Route,
    sender: &RunnerRef,
    body: &Value,
    verdict: &'static str,
) -> Replay {
    Replay {
        route,
        raw: Raw {
            method: route.method,
            path: route.path.to_owned(),
            token: Some(sender.token.clone()),
            body: Some(serde_json::to_vec(body).unwrap()),
        },
        status: 200,
        answer: verdict,
        effect: LedgerEffect {
            observation: route
                .has_tuple()
                .then(|| ExpectedObservation::of(route, sender.id, body, verdict, None)),
            ..LedgerEffect::default()
        },
    }
}

fn operator_replay(
    route: &'static Route,
    path: String,
    body: Option<Value>,
    status: u16,
    answer: &'static str,
) -> Replay {
    Replay {
        route,
        raw: Raw {
            method: route.method,
            path,
            token: Some(OPERATOR.into()),
            body: body.map(|b| serde_json::to_vec(&b).unwrap()),
        },
        status,
        answer,
        effect: LedgerEffect::default(),
    }
}

async fn replay(w: &World, replay: Replay) {
    let name = replay.route.name();
    let first = w.send(&replay.raw).await.unwrap();
    assert!(
        (200..300).contains(&first.status),
        "{name}: the original request must be accepted: {} {}",
        first.status,
        String::from_utf8_lossy(&first.body)
    );
    let before = w.snapshot().await;
    let again = w.send(&replay.raw).await.unwrap();
    assert_eq!(
        again.status,
        replay.status,
        "{name}: replay answered {}",
        String::from_utf8_lossy(&again.body)
    );
    let body = again.json();
    if (200..300).contains(&again.status) {
        if replay.route.method == "GET" || !body.is_object() {
            // A read, the source archive: the same bytes.
            assert_eq!(again.body, first.body, "{name}");
        } else {
            assert_eq!(body["verdict"], json!(replay.answer), "{name}: {body}");
        }
    } else {
        assert_eq!(check_error_format(&again).unwrap(), replay.answer, "{name}");
    }
    if let Err(error) = w.check_unchanged(&before, &replay.effect).await {
        panic!("{name}: the replay changed something: {error}");
    }
}

#[test]
fn a_replayed_request_is_acknowledged_or_refused_and_changes_nothing() {
    let harness = Harness::new(false);
    let w = harness.world.clone();
    harness.runtime.block_on(async move {
        let w = &*w;
        let post = |path| route_named("POST", path);
        let t1 = tuple_of(&w.l1);
        let t2 = tuple_of(&w.l2);
        // A claim asks for new work each time: its replay finds none left.
        w.operator
            .submit(w.a, &submit_request(None, "unfenced"))
            .await
            .unwrap();
        let claim = post("/v1/runner/claim");
        let mut replays = vec![Replay {
            status: 409,
            answer: "no_queued_job",
            effect: LedgerEffect::default(),
            ..runner_replay(claim, &w.ra1, &json!({"capacity": 1}), "")
        }];
        // Runner messages: idempotent per protocol §6.1.
        replays.extend([
            runner_replay(post("/v1/runner/heartbeat"), &w.ra1, &t1, "accepted"),
            runner_replay(post("/v1/runner/rejoin"), &w.ra1, &t1, "accepted"),
            runner_replay(post("/v1/runner/source"), &w.ra1, &t1, "accepted"),
            runner_replay(
                post("/v1/runner/logs"),
                &w.ra1,
                &with(
                    t1.clone(),
                    &json!({"seq": 1, "content_base64": b64(b"more\n")}),
                ),
                "acknowledged",
            ),
            runner_replay(
                post("/v1/runner/artifacts/put"),
                &w.ra1,
                &with(
                    t1.clone(),
                    &json!({"name": "second.txt", "content_base64": b64(b"2")}),
                ),
                "accepted",
            ),
            runner_replay(
                post("/v1/runner/artifacts/get"),
                &w.ra1,
                &with(t1.clone(), &json!({"name": "second.txt"})),
                "accepted",
            ),
            runner_replay(
                post("/v1/runner/cache/put"),
                &w.ra1,
                &with(
                    t1.clone(),
                    &json!({"name": "k2", "content_base64": b64(b"c2")}),
                ),
                "accepted",
            ),
            runner_replay(
                post("/v1/runner/cache/get"),
                &w.ra1,
                &with(t1.clone(), &json!({"name": "k2"})),
                "accepted",
            ),
            runner_replay(
                post("/v1/runner/result"),
                &w.ra2,
                &with(
                    t2.clone(),
                    &json!({"outcome": "passed", "result_digest": "d"}),
                ),
                "acknowledged",
            ),
        ]);
        // The idempotent target applies a deployment id once (fenced and unfenced targets
        // apply their own rules, protocol §8: not replay-safe by design).
        let deploy = route_named("POST", "/v1/targets/{slot}/deploy");
        replays.push(Replay {
            route: deploy,
            raw: Raw {
                method: "POST",
                path: "/v1/targets/idem-slot/deploy".into(),
                token: None,
                body: Some(
                    serde_json::to_vec(&json!({"kind": "idempotent", "job": w.l2.job,
                        "attempt": w.l2.attempt, "slot_token": w.l2.slot_token, "deployment_id": "d2"}))
                    .unwrap(),
                ),
            },
            status: 200,
            answer: "acknowledged",
            effect: LedgerEffect {
                target_mutation: Some(("idem-slot".into(), "acknowledged".into(), None)),
                ..LedgerEffect::default()
            },
        });
        // Operator commands.
        let (a, a1, a4) = (w.a, w.l1.job, w.l4.job);
        replays.extend([
            operator_replay(
                post("/v1/projects"),
                "/v1/projects".into(),
                Some(json!({"name": "c"})),
                409,
                "project_name_taken",
            ),
            operator_replay(
                post("/v1/projects/{project}/runners"),
                format!("/v1/projects/{a}/runners"),
                Some(json!({"name": "r3"})),
                409,
                "runner_name_taken",
            ),
            Replay {
                effect: LedgerEffect {
                    cancel: Some((a, a1, "acknowledged".into(), None)),
                    ..LedgerEffect::default()
                },
                ..operator_replay(
                    post("/v1/projects/{project}/jobs/{job}/cancel"),
                    format!("/v1/projects/{a}/jobs/{a1}/cancel"),
                    Some(json!({})),
                    200,
                    "acknowledged",
                )
            },
            Replay {
                effect: LedgerEffect {
                    reconciliation: Some((a, a4, "rejected".into(), Some("not_uncertain".into()))),
                    ..LedgerEffect::default()
                },
                ..operator_replay(
                    post("/v1/projects/{project}/jobs/{job}/reconcile"),
                    format!("/v1/projects/{a}/jobs/{a4}/reconcile"),
                    Some(json!({"finding": "stopped", "decision": "abort"})),
                    409,
                    "not_uncertain",
                )
            },
            operator_replay(
                post("/v1/test/clock"),
                "/v1/test/clock".into(),
                Some(json!({"advance_ms": 0})),
                200,
                "",
            ),
        ]);
        for step in replays {
            if step.route.path == "/v1/test/clock" {
                // `{"now"}`: no verdict; the same time again.
                let first = w.send(&step.raw).await.unwrap();
                let before = w.snapshot().await;
                let again = w.send(&step.raw).await.unwrap();
                assert_eq!((first.status, again.json()), (200, first.json()));
                w.check_unchanged(&before, &LedgerEffect::default())
                    .await
                    .unwrap();
                continue;
            }
            replay(w, step).await;
        }
        // The sweep: what expired became uncertain once; the replay finds nothing.
        w.operator.advance_clock(31_000).await.unwrap();
        replay(
            w,
            operator_replay(
                post("/v1/sweep"),
                "/v1/sweep".into(),
                Some(json!({})),
                200,
                "accepted",
            ),
        )
        .await;
        // Reads: the same answer again.
        for route in ROUTES
            .iter()
            .filter(|r| r.method == "GET" && r.path != "/metrics")
        {
            let path = valid_path(w, route);
            let step = Replay {
                route,
                raw: Raw {
                    method: "GET",
                    path,
                    token: valid_token(w, route),
                    body: None,
                },
                status: 200,
                answer: "",
                effect: LedgerEffect::default(),
            };
            replay(w, step).await;
        }
    });
    assert_no_server_panic();
}
