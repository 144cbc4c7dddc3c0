//! The HTTP driver against the server in-process (on a manual clock, ephemeral port): the named
//! scenarios and seeded random walks agree with the model over HTTP, and the in-process driver
//! gives the same verdict and the same projected state at every step of the same traces.

use std::sync::Arc;
use std::time::Duration;

use leasewright_conformance::driver::Driver;
use leasewright_conformance::driver::{Answer, DriverError, Observed, Part, Projection, Session};
use leasewright_conformance::drivers::http::{HttpDriver, SetupError};
use leasewright_conformance::drivers::pg::PgDriver;
use leasewright_conformance::generate::{random_walks, Generated};
use leasewright_conformance::replay::{replay, Tally};
use leasewright_conformance::{scenarios, select};
use leasewright_impl::database::TestDatabase;
use leasewright_model::{Action, Config, LeaseModel, State};
use leasewright_server::app::{self, Server, ServerConfig};
use leasewright_server::client::{OperatorClient, RunnerClient};
use leasewright_server::wire::ClockRequest;

const OPERATOR: &str = "conform-operator";

async fn server(db: &TestDatabase, manual_clock: bool) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        operator_token: Some(OPERATOR.into()),
        manual_clock,
        sweep_interval: None,
        ..ServerConfig::default()
    };
    app::start(db.url(), Duration::from_secs(30), listener, config)
        .await
        .expect("server")
}

/// Two manual-clock servers, each on a test database of its own.
async fn two_servers() -> (TestDatabase, TestDatabase, Server, Server) {
    let (db_a, db_b) = (
        TestDatabase::create().await.expect("a test database"),
        TestDatabase::create().await.expect("a test database"),
    );
    let (a, b) = (server(&db_a, true).await, server(&db_b, true).await);
    (db_a, db_b, a, b)
}

/// The HTTP driver on both servers, two traces at once on each.
async fn both_servers(a: &Server, b: &Server) -> Arc<HttpDriver> {
    Arc::new(
        HttpDriver::connect_all(&[a.url(), b.url()], OPERATOR, None)
            .await
            .expect("the HTTP driver connects to both")
            .with_traces_per_server(2),
    )
}

/// A manual-clock server on `db`, the HTTP driver against it and the in-process driver on the
/// same database.
async fn both_drivers(db: &TestDatabase) -> (Server, HttpDriver, PgDriver) {
    let server = server(db, true).await;
    let http = HttpDriver::connect(&server.url(), OPERATOR)
        .await
        .expect("the HTTP driver connects");
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    let pg = PgDriver::new(pool).await.expect("migrations");
    (server, http, pg)
}

/// What one step showed: its verdict, and the projected state when the replay asked for it.
#[derive(Debug, PartialEq)]
enum Seen {
    Step(Option<Observed>),
    State(Box<Projection>),
}

/// A session that records what every step showed.
struct Recording<S> {
    inner: S,
    seen: Vec<Seen>,
}

impl<S: Session> Session for Recording<S> {
    async fn step(
        &mut self,
        before: &State,
        action: &Action,
        after: &State,
    ) -> Result<Option<Observed>, DriverError> {
        let observed = self.inner.step(before, action, after).await?;
        self.seen.push(Seen::Step(observed));
        Ok(observed)
    }

    async fn project(&mut self) -> Result<Projection, DriverError> {
        let projection = self.inner.project().await?;
        // Everything, the rules' return values, the observations' details and what the side
        // effects stored (who stored a cache entry included): both drivers read all of it
        // from this server.
        self.seen.push(Seen::State(Box::new(projection.clone())));
        Ok(projection)
    }

    async fn mark(&mut self) -> Result<(), DriverError> {
        self.inner.mark().await
    }

    fn differences(&mut self) -> Vec<String> {
        self.inner.differences()
    }
}

/// Replays `trace` on `driver`: it must agree with the model; returns what every step showed.
async fn record<D: Driver>(
    driver: &D,
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> (Tally, Vec<Seen>) {
    let inner = driver.open(model, &trace.name).await.expect("a namespace");
    let mut session = Recording {
        inner,
        seen: Vec::new(),
    };
    match replay(model, &mut session, trace).await {
        Ok(tally) => (tally, session.seen),
        Err(divergence) => panic!("{} driver:\n{}", driver.name(), divergence.render()),
    }
}

/// `walks` walks of `len` steps of `model` from `seed` that take one of the enabled side effects
/// (R8) at every other step where there is one, otherwise any enabled step.
fn side_effect_walks(
    model: &LeaseModel,
    seed: u64,
    walks: usize,
    len: usize,
) -> Vec<Generated<LeaseModel>> {
    use stateright::Model as _;
    // splitmix64, as the suite's walks.
    let mut x = seed;
    let mut below = move |n: usize| {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    let init = model.init_states().remove(0);
    (0..walks)
        .map(|w| {
            let mut state = init.clone();
            let mut steps = Vec::new();
            for i in 0..len {
                let mut next = model.next_steps(&state);
                let effects: Vec<usize> = (0..next.len())
                    .filter(|&k| matches!(next[k].0, Action::SideEffect { .. }))
                    .collect();
                let pick = if i % 2 == 1 && !effects.is_empty() {
                    effects[below(effects.len())]
                } else if next.is_empty() {
                    break;
                } else {
                    below(next.len())
                };
                let (action, after) = next.swap_remove(pick);
                state = after.clone();
                steps.push((action, after));
            }
            Generated {
                name: format!("side-effects-{seed}-{w}"),
                generator: "random",
                seed: Some(seed),
                init: init.clone(),
                steps,
            }
        })
        .collect()
}

/// Whether a step of `trace` overwrites a cache entry that one attempt stored with another
/// attempt's `cache put` (the storer then changes).
fn overwrites_cache(trace: &Generated<LeaseModel>) -> bool {
    let mut before = trace.init.cache;
    trace.steps.iter().any(|(_, after)| {
        let changed = before
            .iter()
            .zip(&after.cache)
            .any(|(b, a)| matches!((b, a), (Some(b), Some(a)) if b.stored_by != a.stored_by));
        before = after.cache;
        changed
    })
}

/// `count` side-effect walks (seeded, as [`side_effect_walks`]) in which a later attempt
/// overwrites a cache entry an earlier one stored: the storer compared over HTTP must change.
fn cache_overwrite_walks(model: &LeaseModel, count: usize) -> Vec<Generated<LeaseModel>> {
    let found: Vec<_> = (100..200)
        .flat_map(|seed| side_effect_walks(model, seed, 20, 40))
        .filter(overwrites_cache)
        .take(count)
        .collect();
    assert_eq!(found.len(), count, "walks overwriting a cache entry");
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_and_random_walks_agree_over_http_and_in_process_step_by_step() {
    let db = TestDatabase::create().await.expect("a test database");
    let (server, http, pg) = both_drivers(&db).await;
    assert_eq!(http.lease_ttl_ms(), 30_000);

    let mut traces: Vec<(Arc<LeaseModel>, Generated<LeaseModel>)> = scenarios::all()
        .expect("scenarios")
        .into_iter()
        // Traces naming identities no one created are compared step by step below
        // (`probes_naming_ids_no_one_created_agree_over_http_and_in_process`): there a message
        // from a runner no one created is recorded in-process only.
        .filter(|(_, t)| !leasewright_conformance::suite::names_unknown_identity(t))
        .map(|(model, trace)| (Arc::new(model), trace))
        .collect();
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    for trace in random_walks(model.as_ref(), 1, 300, 30) {
        traces.push((Arc::clone(&model), trace));
    }
    // The default suite's configurations the HTTP driver used to leave out (issue 16 item 4):
    // one job of each project on one slot, two jobs on one slot, and the side effects of R8.
    let base = Config::one_job();
    let mut configs: Vec<Config> = select::shared_slot_configs(&base)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    configs.push(select::side_effect_config(&base));
    for config in configs {
        let model = Arc::new(LeaseModel::new(config));
        let mut walks = random_walks(model.as_ref(), 2, 200, 30);
        if model.config.side_effects {
            // Uniform walks send few side effects from an executing attempt (9 in these 200
            // steps, 1 accepted): walks that prefer them too.
            walks.extend(side_effect_walks(&model, 5, 8, 30));
            walks.extend(cache_overwrite_walks(&model, 2));
        }
        for trace in walks {
            if !leasewright_conformance::suite::names_unknown_identity(&trace) {
                traces.push((Arc::clone(&model), trace));
            }
        }
    }
    let mut steps = 0;
    let mut verdicts = 0;
    // What the drivers compared in the configurations above: steps on a shared slot, the
    // outsider project's jobs at work, side effects answered and contents served.
    let (mut shared_slot_steps, mut outsider_job_claims) = (0, 0);
    let (mut side_effect_verdicts, mut served) = (0, 0);
    // Steps after which a cache entry with its storer, and a log chunk, were compared.
    let (mut cache_storers, mut log_chunks) = (0, 0);
    for (model, trace) in &traces {
        let (over_http, seen_http) = record(&http, model, trace).await;
        let (in_process, seen_pg) = record(&pg, model, trace).await;
        assert_eq!(
            seen_http, seen_pg,
            "{}: the two drivers saw different steps",
            trace.name
        );
        assert_eq!(over_http.steps, in_process.steps, "{}", trace.name);
        assert_eq!(over_http.verdicts, in_process.verdicts, "{}", trace.name);
        steps += over_http.steps;
        verdicts += seen_http
            .iter()
            .filter(|s| matches!(s, Seen::Step(Some(_))))
            .count();
        let c = &model.config;
        if c.shared_slot {
            shared_slot_steps += over_http.steps;
        }
        for seen in &seen_http {
            let Seen::State(p) = seen else { continue };
            let answer = p.details.as_ref().and_then(|d| d.answer.as_ref());
            if let Some(Answer::Claim { job, .. }) = answer {
                outsider_job_claims += usize::from(*job >= c.jobs);
            }
            if matches!(answer, Some(Answer::Served { .. })) {
                served += 1;
            }
            if let Some(stored) = &p.stored {
                cache_storers += stored.cache.iter().flatten().count();
                log_chunks += stored.attempts.iter().map(|a| a.log.len()).sum::<usize>();
            }
            if p.observation.as_ref().is_some_and(|o| {
                !matches!(o.kind, "heartbeat" | "result" | "rejoin") && o.reason.is_none()
            }) {
                side_effect_verdicts += 1;
            }
        }
    }
    assert!(steps >= 300 + 40 + 3 * 200, "steps replayed: {steps}");
    assert!(verdicts >= 100, "verdicts compared: {verdicts}");
    assert!(
        shared_slot_steps >= 400,
        "shared-slot steps: {shared_slot_steps}"
    );
    assert!(
        outsider_job_claims >= 1,
        "no claim of the outsider project's job was compared"
    );
    assert!(
        side_effect_verdicts >= 8,
        "side effects accepted: {side_effect_verdicts}"
    );
    assert!(served >= 1, "no served content was compared");
    assert!(
        cache_storers >= 1 && log_chunks >= 1,
        "what the side effects stored was not compared over HTTP: {cache_storers} cache \
         entries, {log_chunks} log chunks"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_manual_clock_or_with_another_token_is_refused_with_the_reason() {
    let db = TestDatabase::create().await.expect("a test database");
    let plain = server(&db, false).await;
    let error = HttpDriver::connect(&plain.url(), OPERATOR)
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, SetupError::NoManualClock { .. }), "{error}");
    assert!(error.to_string().contains("--manual-clock"), "{error}");
    let error = HttpDriver::connect(&plain.url(), "not-the-token")
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, SetupError::Unauthorized { .. }), "{error}");
    assert!(error.to_string().contains("--operator-token"), "{error}");
    plain.stop().await.unwrap();

    let manual = server(&db, true).await;
    let error = HttpDriver::connect(&manual.url(), "not-the-token")
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, SetupError::Unauthorized { .. }), "{error}");
    manual.stop().await.unwrap();
}

/// The server's project-scoped sweep (the driver no longer needs it: it sweeps every project and
/// counts its own jobs) leaves another project's expired lease alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_of_one_project_leaves_expired_leases_of_other_projects_alone() {
    let db = TestDatabase::create().await.expect("a test database");
    let server = server(&db, true).await;
    let operator = OperatorClient::new(&server.url(), OPERATOR).unwrap();
    let mut projects = Vec::new();
    for name in ["expired", "quiet"] {
        let project = operator.create_project(name).await.unwrap();
        let token = operator.create_runner(project, "r").await.unwrap().token;
        projects.push((project, token));
    }
    let (expired, token) = &projects[0];
    let snapshot =
        leasewright_server::source::build_snapshot(vec![leasewright_server::source::SourceFile {
            path: "f".into(),
            mode: 0o644,
            content: b"x".to_vec(),
        }])
        .unwrap();
    use base64::Engine as _;
    let request = leasewright_server::wire::SubmitJobRequest {
        command: "true".into(),
        source_revision: "r".into(),
        source_archive_base64: base64::engine::general_purpose::STANDARD.encode(&snapshot.archive),
        artifacts: Vec::new(),
        target: None,
        target_kind: None,
    };
    let job = operator.submit(*expired, &request).await.unwrap().job;
    let runner = RunnerClient::new(&server.url(), token, Duration::from_secs(10)).unwrap();
    assert_eq!(runner.claim(1).await.unwrap().len(), 1);
    operator
        .clock(&ClockRequest {
            set: None,
            advance_ms: Some(31_000),
        })
        .await
        .unwrap();
    let quiet = operator.sweep_project(projects[1].0).await.unwrap();
    assert_eq!(quiet.verdict, "accepted");
    assert_eq!(operator.job(*expired, job).await.unwrap().state, "running");
    let swept = operator.sweep_project(*expired).await.unwrap();
    assert_eq!(
        (swept.verdict.as_str(), swept.jobs),
        ("uncertain", vec![job])
    );
    let unknown = operator
        .sweep_project(uuid::Uuid::from_u128(1))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("unknown_project"), "{unknown}");
    server.stop().await.unwrap();
}

/// A proxy to `upstream` that drops the `Leasewright-Test-Time` header: a manual-clock server as
/// one without a time per request (only a shared clock, as another implementation may offer)
/// looks to the driver.
async fn without_own_time(upstream: String) -> String {
    use leasewright_server::wire::TEST_TIME_HEADER;
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (client, upstream) = (client.clone(), upstream.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut forwarded = client.request(parts.method.clone(), format!("{upstream}{path}"));
            for (name, value) in &parts.headers {
                if name != TEST_TIME_HEADER && name != "host" {
                    forwarded = forwarded.header(name, value);
                }
            }
            let answer = forwarded.body(body).send().await.unwrap();
            let status = answer.status();
            let mut response = axum::response::Response::new(axum::body::Body::from(
                answer.bytes().await.unwrap_or_default(),
            ));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Replays 400 random-walk steps on `http`, `parallel` traces at once: they must agree with the
/// model.
async fn replay_at_once(http: HttpDriver, parallel: usize, seed: u64) {
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let traces = random_walks(model.as_ref(), seed, 400, 20);
    let outcome = leasewright_conformance::suite::run(
        Arc::new(http),
        Arc::clone(&model),
        traces,
        &leasewright_conformance::suite::RunOptions {
            parallel,
            stop_at_first: false,
        },
        |_| {},
    )
    .await;
    assert!(
        outcome.divergences.is_empty(),
        "{}",
        outcome.divergences[0].render()
    );
    assert!(outcome.tally.steps >= 400, "{}", outcome.tally.steps);
}

/// Our server takes a time per request (`Leasewright-Test-Time`), so several traces replay on one
/// server at once, each at its own time, and agree with the model; so do servers that share a
/// database (each trace sweeps its own projects at its own time). A server with only a shared
/// clock runs one trace at a time, and two such servers on one database are refused (their
/// sweeps, over every project at their own clocks, would expire each other's leases).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_run_several_at_once_per_server_with_a_time_per_request_else_one_per_server() {
    let (db_a, _db_b, a, b) = two_servers().await;
    let http = HttpDriver::connect(&a.url(), OPERATOR)
        .await
        .expect("the HTTP driver connects")
        .with_traces_per_server(4);
    assert!(http.own_time());
    assert_eq!((http.servers(), http.places()), (1, 4));
    replay_at_once(http, 4, 7).await;

    let http = HttpDriver::connect_all(&[a.url(), b.url()], OPERATOR, None)
        .await
        .expect("the HTTP driver connects to both")
        .with_traces_per_server(2);
    assert_eq!(http.places(), 4);
    // Everything is read, what the side effects stored included.
    assert_eq!(http.unread(), [], "{:?}", http.unread());
    replay_at_once(http, 4, 8).await;

    // A second server on a's database: with a time per request, accepted.
    let c = server(&db_a, true).await;
    let http = HttpDriver::connect_all(&[a.url(), c.url()], OPERATOR, None)
        .await
        .expect("servers sharing a database, each request at its trace's time")
        .with_traces_per_server(2);
    replay_at_once(http, 4, 9).await;

    // The same servers without a time per request: one trace per server, and a shared database
    // refused.
    let (pa, pb, pc) = (
        without_own_time(a.url()).await,
        without_own_time(b.url()).await,
        without_own_time(c.url()).await,
    );
    let http = HttpDriver::connect_all(&[pa.clone(), pb], OPERATOR, None)
        .await
        .expect("the HTTP driver connects through the proxies")
        .with_traces_per_server(4);
    assert!(!http.own_time());
    assert_eq!((http.traces_per_server(), http.places()), (1, 2));
    replay_at_once(http, 4, 10).await;
    let error = HttpDriver::connect_all(&[pa, pc], OPERATOR, None)
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(error, SetupError::SharedDatabase { .. }),
        "{error}"
    );
    for s in [a, b, c] {
        s.stop().await.unwrap();
    }
}

/// The driver reads every page of a list: with one item per page, every job whose ledger holds
/// two attempts or whose observations number two or more is read over several pages, and the
/// named scenarios still agree with the model and with the in-process driver at every step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_driver_reads_every_page_of_a_list() {
    let db = TestDatabase::create().await.expect("a test database");
    let (server, http, pg) = both_drivers(&db).await;
    let http = http.with_page_limit(1);
    let mut longest_ledger = 0;
    let mut most_observations = 0;
    for (model, trace) in scenarios::all()
        .expect("scenarios")
        .into_iter()
        .filter(|(_, t)| !leasewright_conformance::suite::names_unknown_identity(t))
        .filter(|(m, _)| m.config.jobs == 1)
    {
        let (_, seen_http) = record(&http, &model, &trace).await;
        let (_, seen_pg) = record(&pg, &model, &trace).await;
        assert_eq!(seen_http, seen_pg, "{}", trace.name);
        for seen in &seen_http {
            if let Seen::State(projection) = seen {
                longest_ledger = longest_ledger.max(projection.jobs[0].ledger.len());
            }
        }
        let observations = seen_http
            .iter()
            .filter(|s| matches!(s, Seen::State(p) if p.observation.is_some()))
            .count();
        most_observations = most_observations.max(observations);
    }
    assert!(longest_ledger >= 2, "no ledger spanned two pages");
    assert!(
        most_observations >= 2,
        "no job's observations spanned two pages"
    );
    server.stop().await.unwrap();
}

/// Probes naming a runner, job or attempt no one created (docs/protocol.md §6.1 checks 1, 2 and
/// 4) replay over HTTP with no divergence, and agree with the in-process driver at every step but
/// one part: the record of a message from a runner no one created. Over HTTP its token
/// authenticates nobody, it is refused 401 before any check and nothing is recorded (the HTTP
/// driver checks that the step recorded nothing); in-process the message names the runner and is
/// recorded `unknown_runner`. A message naming a job no one created is read from the sender's
/// project's security log and compared like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_naming_ids_no_one_created_agree_over_http_and_in_process() {
    use leasewright_conformance::driver::blank;
    use leasewright_model::Reason;
    let db = TestDatabase::create().await.expect("a test database");
    let (server, http, pg) = both_drivers(&db).await;
    let base = Config::one_job();
    // One job (the outsider project has a runner) and one job of each project on one slot (the
    // outsider's runner holds attempts, so it names unknown ids too).
    let mut configs = vec![base.clone()];
    configs.extend(
        select::shared_slot_configs(&base)
            .into_iter()
            .map(|(_, c)| c),
    );
    let mut traces = Vec::new();
    for config in configs {
        let model = Arc::new(LeaseModel::new(config));
        // Every probe naming an unknown id, in the states of a few walks' prefixes.
        let mut kept = 0;
        'walks: for walk in random_walks(model.as_ref(), 11, 240, 12) {
            for n in 1..=walk.steps.len() {
                let state = &walk.steps[n - 1].1;
                for action in leasewright_conformance::probe::candidates(&model, state) {
                    let Some(after) = leasewright_conformance::probe::apply(&model, state, &action)
                    else {
                        continue;
                    };
                    let mut steps = walk.steps[..n].to_vec();
                    steps.push((action, after));
                    let trace = Generated {
                        name: format!("unknown-ids-{}-{n}-{kept}", walk.name),
                        generator: "probe",
                        seed: walk.seed,
                        init: walk.init.clone(),
                        steps,
                    };
                    if leasewright_conformance::suite::names_unknown_identity(&trace) {
                        traces.push((Arc::clone(&model), trace));
                        kept += 1;
                        if kept == 24 {
                            break 'walks;
                        }
                    }
                }
            }
        }
    }
    assert!(
        traces.len() >= 30,
        "probes naming unknown ids: {}",
        traces.len()
    );
    let mut verdicts: std::collections::BTreeMap<Reason, usize> = Default::default();
    let mut records: std::collections::BTreeMap<Reason, usize> = Default::default();
    let mut unrecorded = 0;
    for (model, trace) in &traces {
        let (over_http, mut seen_http) = record(&http, model, trace).await;
        let (in_process, mut seen_pg) = record(&pg, model, trace).await;
        assert_eq!(over_http.steps, in_process.steps, "{}", trace.name);
        assert_eq!(seen_http.len(), seen_pg.len(), "{}", trace.name);
        for (h, p) in seen_http.iter_mut().zip(&mut seen_pg) {
            match (h, p) {
                (Seen::Step(Some(v)), _) => {
                    if let Some(reason) = v.reason {
                        *verdicts.entry(reason).or_default() += 1;
                    }
                }
                (Seen::State(h), Seen::State(p)) => {
                    if let Some(o) = &h.observation {
                        if let Some(reason) = o.reason {
                            *records.entry(reason).or_default() += 1;
                        }
                    }
                    if h.unread.contains(&Part::Observation) {
                        // Only the step of a runner no one created: recorded in-process.
                        assert_eq!(
                            p.observation.as_ref().and_then(|o| o.reason),
                            Some(Reason::UnknownRunner),
                            "{}: an observation not compared over HTTP",
                            trace.name
                        );
                        unrecorded += 1;
                        blank(p, &[Part::Observation]);
                        blank(h, &[Part::Observation]);
                        p.unread.clone_from(&h.unread);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(
            seen_http, seen_pg,
            "{}: the two drivers saw different steps",
            trace.name
        );
    }
    for reason in [
        Reason::UnknownRunner,
        Reason::UnknownJob,
        Reason::UnknownAttempt,
    ] {
        assert!(
            verdicts.get(&reason).is_some_and(|n| *n >= 2),
            "{reason:?}: verdicts {verdicts:?}"
        );
    }
    // The records of messages naming an unknown job (security log) or attempt (the job's
    // ledger) were compared; those of an unknown runner were checked to be nothing.
    for reason in [Reason::UnknownJob, Reason::UnknownAttempt] {
        assert!(
            records.get(&reason).is_some_and(|n| *n >= 2),
            "{reason:?}: records {records:?}"
        );
    }
    assert!(unrecorded >= 2, "unknown-runner steps: {unrecorded}");
    server.stop().await.unwrap();
}

/// Issue 39 item 7: replica clocks over HTTP. A trace with replica clocks runs on a server whose
/// database records its δ (one model tick, set as an operator sets it: `migrate
/// --set-max-clock-skew-ms`), each step at the clock of the replica serving it; the other traces
/// on a server whose database records none. The replica-clock walks and the sweep probes (a
/// sweep where a lease has expired by less than 2δ must take nothing) agree with the model; with
/// the δ lowered to 0 under the driver (so the server sweeps at the lease's end), the sweep
/// probes diverge: they see the margin. Without such a server the traces are left out, and a
/// driver whose every server records a δ is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_clocks_replay_over_http_on_a_server_whose_database_records_their_skew() {
    use leasewright_conformance::suite::{self, LeftOut, RunOptions, SuiteDriver as _};
    let (_db_a, db_b, a, b) = two_servers().await;
    let model = Arc::new(LeaseModel::new(select::replica_clock_config(
        &Config::one_job(),
    )));
    let alone = HttpDriver::connect(&a.url(), OPERATOR)
        .await
        .expect("the HTTP driver connects");
    let tick = alone.tick_ms(model.config.lease_ttl).expect("a whole tick");
    let walks = random_walks(model.as_ref(), 7, 4_000, 40);
    let probes = select::replica_sweep_probes(model.as_ref(), &walks);
    assert!(!probes.is_empty(), "no lease expired within the margin");
    let mut traces = probes.clone();
    traces.extend(walks.into_iter().take(16));
    for t in &traces {
        assert_eq!(
            alone.leaves_out(&model, t),
            Some(LeftOut::ReplicaClocks),
            "{}",
            t.name
        );
    }
    let pool = sqlx::PgPool::connect(db_b.url()).await.expect("connect");
    let recorded = |ms: i64| {
        let pool = pool.clone();
        async move {
            leasewright_server::app::set_recorded_max_clock_skew(
                &pool,
                Duration::from_millis(u64::try_from(ms).unwrap()),
            )
            .await
            .expect("records the skew")
        }
    };
    assert!(
        recorded(tick).await.is_some(),
        "the server recorded its policy"
    );
    let error = HttpDriver::connect(&b.url(), OPERATOR)
        .await
        .err()
        .expect("refused: no server for the traces without replica clocks");
    assert!(matches!(error, SetupError::Mismatch(_)), "{error}");
    let both = || both_servers(&a, &b);
    let http = both().await;
    assert_eq!(http.clock_skews_ms(), vec![0, tick]);
    for t in &traces {
        assert_eq!(http.leaves_out(&model, t), None, "{}", t.name);
    }
    // The traces without replica clocks still run (on a's database).
    let plain = Arc::new(LeaseModel::new(Config::one_job()));
    let plain_walks = random_walks(plain.as_ref(), 7, 300, 20);
    let options = RunOptions {
        parallel: 4,
        stop_at_first: true,
    };
    let outcome = suite::run(Arc::clone(&http), plain, plain_walks, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    let outcome = suite::run(http, Arc::clone(&model), traces, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    // The margin is what the probes see: with δ 0 recorded under the driver, they diverge.
    let http = both().await;
    recorded(0).await;
    let outcome = suite::run(http, model, probes, &options, |_| {}).await;
    let d = outcome
        .divergences
        .first()
        .expect("a sweep at the lease's end diverges");
    assert!(
        d.trace.starts_with("probe-replica-sweep-"),
        "{}",
        d.render()
    );
    for s in [a, b] {
        s.stop().await.unwrap();
    }
}

/// Issue 39 items 6 and 7: the model's failovers replay over HTTP through a manual-clock
/// server's test hooks (`POST /v1/test/replicate` before the step a failover loses,
/// `POST /v1/test/failover` at it: the database goes back to the copy, the epoch advances), the
/// walks with a failover among walks without one, two at once per server, and the claims at both
/// edges of the wait on a server whose database records the wait's δ. The wait a failover begins
/// holds every claim received before its end, so every later trace runs after it, and so do the
/// traces of a driver connecting later to the same servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_replay_over_http_through_the_servers_test_hooks() {
    use leasewright_conformance::drivers::failover::has_failover;
    use leasewright_conformance::suite::{self, RunOptions, SuiteDriver as _};
    let (db_a, db_b, a, b) = two_servers().await;
    let model = Arc::new(LeaseModel::new(select::failover_config(&Config::one_job())));
    let walks = random_walks(model.as_ref(), 7, 20_000, 40);
    let (with, without): (Vec<_>, Vec<_>) = walks.into_iter().partition(has_failover);
    let mut traces: Vec<_> = with
        .into_iter()
        .filter(|w| !leasewright_conformance::drivers::http::judged_otherwise_by_a_demo_target(w))
        .take(6)
        .collect();
    assert_eq!(traces.len(), 6, "too few walks with a failover");
    traces.extend(without.into_iter().take(10));
    let wait_model = Arc::new(LeaseModel::new(select::failover_wait_config(
        &Config::one_job(),
    )));
    let wait_walks = random_walks(wait_model.as_ref(), 7, 20_000, 40);
    let probes = select::failover_wait_probes(wait_model.as_ref(), &wait_walks);
    assert!(
        probes
            .iter()
            .any(|p| p.name.starts_with("probe-failover-wait-end-")),
        "no claim at the wait's end"
    );
    // δ = one model tick in b's database, for the wait probes.
    let tick = HttpDriver::connect(&a.url(), OPERATOR)
        .await
        .expect("the HTTP driver connects")
        .tick_ms(model.config.lease_ttl)
        .expect("a whole tick");
    let pool = sqlx::PgPool::connect(db_b.url()).await.expect("connect");
    leasewright_server::app::set_recorded_max_clock_skew(
        &pool,
        Duration::from_millis(u64::try_from(tick).unwrap()),
    )
    .await
    .expect("records the skew");
    let both = || both_servers(&a, &b);
    let http = both().await;
    assert!(http.replays_failovers());
    // A demonstration target keeps its state in the server's database, which a failover takes
    // back: a trace whose target mutation a failover reaches is left out over HTTP against it.
    let (lost, probes): (Vec<_>, Vec<_>) = probes
        .into_iter()
        .partition(leasewright_conformance::drivers::http::judged_otherwise_by_a_demo_target);
    for t in &lost {
        assert_eq!(
            http.leaves_out(&wait_model, t),
            Some(leasewright_conformance::suite::LeftOut::DemoTarget)
        );
    }
    assert!(probes.len() >= 12, "{} probes left", probes.len());
    for t in traces.iter().chain(&probes) {
        let m = if t.name.starts_with("probe-failover-wait") {
            &wait_model
        } else {
            &model
        };
        assert_eq!(http.leaves_out(m, t), None, "{}", t.name);
    }
    let options = RunOptions {
        parallel: 4,
        stop_at_first: true,
    };
    let outcome = suite::run(
        Arc::clone(&http),
        Arc::clone(&model),
        traces,
        &options,
        |_| {},
    )
    .await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    let outcome = suite::run(http, wait_model, probes, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    // What the failovers left is a ledger an audit finds whole: the restores put every row back
    // as it was (no chain trigger drew a new position or hash for it). On b's database the
    // replica clocks, one tick (δ) apart, put receipt times up to 2δ out of commit order, which
    // the audit's tolerance allows there (2δ, read from the δ the database records).
    for db in [&db_a, &db_b] {
        let connect: sqlx::postgres::PgConnectOptions = db.url().parse().expect("a URL");
        let (report, _) = leasewright_audit::audit_connecting(
            &connect,
            &leasewright_audit::AuditOptions::whole(None),
            |_| {},
        )
        .await
        .expect("the audit runs");
        assert!(report.jobs > 0);
        assert_eq!(report.findings(), Vec::<String>::new(), "{}", db.url());
    }
    // Both databases are in a later epoch now, and a driver connecting afresh runs after the
    // last wait: the walks without a failover agree again.
    for pool in [
        &pool,
        &sqlx::PgPool::connect(db_a.url()).await.expect("connect"),
    ] {
        let epoch = leasewright_impl::epoch::current_epoch(pool).await.unwrap();
        assert!(epoch >= 1, "no failover advanced the epoch");
    }
    let plain = Arc::new(LeaseModel::new(Config::one_job()));
    let plain_walks = random_walks(plain.as_ref(), 9, 300, 20);
    let outcome = suite::run(both().await, plain, plain_walks, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    for s in [a, b] {
        s.stop().await.unwrap();
    }
}

/// The walks the random suite prunes between their jobs (`random-prune-*`), replayed over HTTP
/// through a manual-clock server's test hooks (`POST /v1/test/audit`, `POST /v1/test/prune`):
/// a whole audit of the server's ledger before the step the plan says (clean, its watermark
/// recorded), the audited finished jobs pruned before the next, which jobs went compared with
/// the model's plan, and the audit since the watermark (clean). Among walks without a prune,
/// two traces at once; each prune walk runs alone (the audit and the prune are the database's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_pruned_between_their_jobs_replay_over_http_through_the_servers_test_hooks() {
    use leasewright_conformance::suite::{self, RunOptions};
    let db = TestDatabase::create().await.expect("a test database");
    let server = server(&db, true).await;
    let (model, pruned) = select::random_prune_walks(3)
        .expect("generates")
        .map(|b| (b.model, b.traces))
        .expect("the random suite prunes between jobs");
    let mut traces = pruned.clone();
    traces.extend(random_walks(model.as_ref(), 11, 400, 20));
    let http = Arc::new(
        HttpDriver::connect(&server.url(), OPERATOR)
            .await
            .expect("the HTTP driver connects")
            .with_traces_per_server(2),
    );
    assert!(http.prunes_between_jobs());
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let outcome = suite::run(http, model, traces, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    // The prunes ran: a watermark is recorded, and jobs of the pruned walks are gone.
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    let watermark: i64 = sqlx::query_scalar("SELECT watermark FROM ledger_audit_watermark")
        .fetch_one(&pool)
        .await
        .expect("a recorded watermark");
    assert!(watermark > 0);
    server.stop().await.unwrap();
}
