//! The language-neutral driver protocol against a foreign implementation: the in-memory Python
//! control plane of examples/python (written from docs/protocol.md, sharing no code with impl/)
//! agrees with the model on the named scenarios, seeded random walks and the property suite; its
//! seeded bug (one wrong reason precedence) is caught by the property suite and shrunk; and a
//! command that does not speak the protocol is refused at setup.
//!
//! Needs `python3` (standard library only).

use std::sync::Arc;

use leasewright_conformance::driver::Driver;
use leasewright_conformance::drivers::cmd::{python_example, CmdDriver, SetupError};
use leasewright_conformance::generate::random_walks;
use leasewright_conformance::property::{self, PropertyOptions};
use leasewright_conformance::replay::replay;
use leasewright_conformance::suite::{self, LeftOut, RunOptions};
use leasewright_conformance::{probe, scenarios, select, traces};
use leasewright_model::{Config, LeaseModel, Reason, Verdict};

fn example() -> String {
    python_example()
}

/// The example with its seeded bug switched on.
fn buggy_example() -> String {
    format!(
        "LEASEWRIGHT_EXAMPLE_BUG=expired-before-not-current {}",
        example()
    )
}

async fn connect(command: &str) -> Arc<CmdDriver> {
    Arc::new(
        CmdDriver::connect(command)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_agrees_on_the_scenarios_and_random_walks() {
    let driver = connect(&example()).await;
    assert_eq!(driver.name(), "driver-cmd (python-example)");
    let mut steps = 0;
    // Every scenario, the shared-slot ones included (version 3 of the driver protocol).
    for (model, trace) in scenarios::all().expect("the scenarios") {
        let mut session = driver.open(&model, &trace.name).await.expect("open");
        match replay(&model, &mut session, &trace).await {
            Ok(tally) => steps += tally.steps,
            Err(divergence) => panic!("{}", divergence.render()),
        }
    }
    assert!(steps >= 40, "{steps} scenario steps");
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let walks = random_walks(model.as_ref(), 1, 3_000, 40);
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let outcome = suite::run(driver, Arc::clone(&model), walks, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    assert_eq!(outcome.tally.steps, 3_000);
    // The walks reached the rules that matter, not only claims.
    for key in [
        "rejected:not_current",
        "rejected:lease_expired",
        "uncertain",
    ] {
        assert!(
            outcome.tally.verdicts.contains_key(key),
            "{key} never seen: {:?}",
            outcome.tally.verdicts
        );
    }
}

/// The Python example's batch claim (the claim step with `limit`) agrees with the model on the
/// default suite's batch configuration that the protocol of version 2 can say (a slot per job):
/// batches of K = 2 and 3 that take several jobs. The other one (two jobs on one slot) is left
/// out with the shared slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_agrees_on_batch_claims() {
    let driver = connect(&example()).await;
    let configs = leasewright_conformance::select::batch_claim_configs(&Config::one_job());
    for (name, config) in &configs {
        let model = Arc::new(LeaseModel::new(config.clone()));
        let walks = random_walks(model.as_ref(), 3, 1_000, 30);
        let left_out = walks
            .iter()
            .filter(|t| leasewright_conformance::suite::driver_cmd_leaves_out(&model, t).is_some())
            .count();
        if *name == "batch-claims" {
            assert_eq!(left_out, walks.len(), "{name}: shared slots are left out");
            continue;
        }
        assert_eq!(left_out, 0, "{name}");
        let options = RunOptions {
            parallel: 2,
            stop_at_first: true,
        };
        let outcome = suite::run(Arc::clone(&driver), model, walks, &options, |_| {}).await;
        if let Some(d) = outcome.divergences.first() {
            panic!("{}", d.render());
        }
        let b = outcome.tally.batch_claims;
        assert!(b.k_above_1 > 0 && b.took_several > 0, "{}", b.describe());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_agrees_on_the_property_suite() {
    let driver = connect(&example()).await;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let outcome = property::run(driver, model, PropertyOptions::default(), |_| {}).await;
    if let Some(failure) = &outcome.failure {
        panic!("{}", failure.divergence.render());
    }
    assert_eq!(outcome.aborted, None);
    assert_eq!(outcome.cases, 256);
}

/// The seeded bug answers a late report of a reconciled attempt `lease_expired` instead of
/// `not_current`: the property suite finds it, proptest shrinks it, and the minimal trace, saved
/// and read back, diverges the same way on the buggy example and agrees on the correct one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeded_bug_is_caught_and_shrunk() {
    let driver = connect(&buggy_example()).await;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let outcome = property::run(
        Arc::clone(&driver),
        Arc::clone(&model),
        PropertyOptions::default(),
        |_| {},
    )
    .await;
    let failure = outcome
        .failure
        .expect("the property suite misses the seeded bug");
    eprintln!(
        "shrunk from {} to {} steps in {} replays\n{}",
        failure.original.steps.len(),
        failure.minimal.steps.len(),
        failure.shrink_replays,
        failure.divergence.render()
    );
    let d = &failure.divergence;
    assert_eq!(d.kind, "verdict");
    assert_eq!(
        d.differences,
        vec![format!(
            "verdict: expected {} ({}), observed {} ({})",
            Verdict::Rejected,
            Reason::NotCurrent,
            Verdict::Rejected,
            Reason::LeaseExpired
        )]
    );
    assert!(failure.minimal.steps.len() < failure.original.steps.len());
    assert_eq!(d.step, failure.minimal.steps.len());
    // The shortest way there: claim, the lease's two ticks, the sweep, a reconciliation
    // ending the attempt, and the late report; the runner must also have sent it (a result or a
    // rejoin after a disconnect) before it stopped.
    assert!(failure.minimal.steps.len() <= 9, "{}", d.render());
    let text = traces::to_itf(&model, &failure.minimal);
    let (read_model, read) = traces::from_itf(&text).expect("the saved trace reads back");
    let mut session = driver.open(&read_model, &read.name).await.expect("open");
    let again = replay(&read_model, &mut session, &read)
        .await
        .expect_err("the saved trace diverges again");
    assert_eq!(again.differences, d.differences);
    let correct = connect(&example()).await;
    let mut session = correct.open(&read_model, &read.name).await.expect("open");
    if let Err(divergence) = replay(&read_model, &mut session, &read).await {
        panic!("the correct example diverges: {}", divergence.render());
    }
}

#[tokio::test]
async fn a_command_that_does_not_speak_the_protocol_is_refused_at_setup() {
    let missing = CmdDriver::connect("/nonexistent/leasewright-driver").await;
    assert!(
        matches!(missing, Err(SetupError::Handshake { .. })),
        "{:?}",
        missing.err()
    );
    // Reads the hello and closes its output without answering.
    let silent = CmdDriver::connect("exec >/dev/null; cat").await;
    let error = silent.err().expect("it answers nothing").to_string();
    assert!(error.contains("closed its output"), "{error}");
    let other_version = CmdDriver::connect(
        r#"read line; echo '{"type":"hello_ok","protocol":"leasewright-driver","version":6,"implementation":"x","in_reply_to":1}'"#,
    )
    .await;
    assert!(
        matches!(other_version, Err(SetupError::Version { theirs: 6, .. })),
        "{:?}",
        other_version.err()
    );
}

/// The subset of JSON Schema 2020-12 that docs/conformance-driver/ uses: `type`, `const`, `enum`,
/// `required`, `properties`, `items`, `oneOf`, `minimum`, `maximum`. Returns the first violation.
fn violation(schema: &serde_json::Value, v: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    let fail = |what: String| Some(format!("{at}: {what} (value {v})"));
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let is = |t: &str| match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        };
        if !types.iter().any(|t| is(t)) {
            return fail(format!("not of type {types:?}"));
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            return fail(format!("not {c}"));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(v) {
            return fail("not one of the enum".into());
        }
    }
    if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_i64), v.as_i64()) {
        if n < min {
            return fail(format!("below {min}"));
        }
    }
    if let (Some(max), Some(n)) = (schema.get("maximum").and_then(Value::as_i64), v.as_i64()) {
        if n > max {
            return fail(format!("above {max}"));
        }
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for r in required.iter().filter_map(Value::as_str) {
            if v.get(r).is_none() {
                return fail(format!("no `{r}`"));
            }
        }
    }
    if let (Some(Value::Object(props)), Some(obj)) = (schema.get("properties"), v.as_object()) {
        for (k, s) in props {
            if let Some(x) = obj.get(k) {
                if let Some(e) = violation(s, x, &format!("{at}.{k}")) {
                    return Some(e);
                }
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), v.as_array()) {
        for (i, x) in list.iter().enumerate() {
            if let Some(e) = violation(items, x, &format!("{at}[{i}]")) {
                return Some(e);
            }
        }
    }
    if let Some(Value::Array(options)) = schema.get("oneOf") {
        let matching = options
            .iter()
            .filter(|s| violation(s, v, at).is_none())
            .count();
        if matching != 1 {
            return fail(format!("matches {matching} of oneOf, not exactly 1"));
        }
    }
    None
}

fn schema(kind: &str) -> serde_json::Value {
    let path = format!(
        "{}/../docs/conformance-driver/{kind}.schema.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every message of a real conversation (the scenarios and some random walks, recorded by `tee`
/// around the example's driver) is valid against its JSON Schema, and a message that breaks its
/// schema is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_of_a_conversation_matches_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let answers = dir.path().join("answers.jsonl");
    let command = format!(
        "tee {} | {} | tee {}",
        requests.display(),
        example(),
        answers.display()
    );
    let driver = connect(&command).await;
    let mut traces = scenarios::all().expect("the scenarios");
    let model = LeaseModel::new(Config::one_job());
    for walk in random_walks(&model, 5, 300, 40) {
        traces.push((model.clone(), walk));
    }
    // Version 3: the side effects of R8 and the outsider project's jobs on a shared slot.
    for config in [
        select::side_effect_config(&Config::one_job()),
        select::shared_slot_configs(&Config::one_job())[0].1.clone(),
    ] {
        let model = LeaseModel::new(config);
        for walk in random_walks(&model, 5, 1_500, 40) {
            traces.push((model.clone(), walk));
        }
    }
    // A runner revoked mid-lease (`runner_revoke`), and version 4's replica clocks (`open`'s
    // `max_clock_skew`, the `replica_clock` step).
    for config in [
        select::revocation_config(&Config::one_job()),
        select::replica_clock_config(&Config::one_job()),
    ] {
        let model = LeaseModel::new(config);
        for walk in random_walks(&model, 5, 400, 40) {
            traces.push((model.clone(), walk));
        }
    }
    // Version 4's prune between jobs (`audit_mark`, `prune`, answered `prune`): the walks the
    // random suite prunes.
    let (model, pruned) = prune_walks();
    for walk in pruned.into_iter().take(4) {
        traces.push((model.as_ref().clone(), walk));
    }
    // Version 5's failovers (`replicate`, `failover`): walks through one.
    let failover = LeaseModel::new(select::failover_config(&Config::one_job()));
    for walk in random_walks(&failover, 5, 3_000, 30)
        .into_iter()
        .filter(leasewright_conformance::drivers::failover::has_failover)
        .take(4)
    {
        traces.push((failover.clone(), walk));
    }
    // Batch claims (the claim step with `limit`, answered `claim_batch`): on a shared slot and on
    // slots of their own.
    for (_, config) in select::batch_claim_configs(&Config::one_job()) {
        let batch = LeaseModel::new(config);
        for walk in random_walks(&batch, 5, 200, 30) {
            traces.push((batch.clone(), walk));
        }
    }
    for (model, trace) in &traces {
        let mut session = driver.open_trace(model, trace).await.expect("open");
        if let Err(d) = replay(model, &mut session, trace).await {
            panic!("{}", d.render());
        }
    }
    drop(driver);
    let read = |path: &std::path::Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (sent, answered) = (read(&requests), read(&answers));
    assert_eq!(sent.len(), answered.len());
    let mut kinds = std::collections::BTreeSet::new();
    let mut actions = std::collections::BTreeSet::new();
    for message in sent.iter().chain(&answered) {
        let kind = message["type"].as_str().expect("a type");
        kinds.insert(kind.to_owned());
        if let Some(a) = message["step"]["action"].as_str() {
            actions.insert(a.to_owned());
        }
        if let Some(e) = violation(&schema(kind), message, kind) {
            panic!("{e}");
        }
    }
    for kind in [
        "hello",
        "hello_ok",
        "open",
        "opened",
        "step",
        "verdict",
        "project",
        "projection",
    ] {
        assert!(kinds.contains(kind), "no `{kind}` in {kinds:?}");
    }
    assert!(actions.len() >= 8, "{actions:?}");
    for action in [
        "source_fetch",
        "log_append",
        "artifact_put",
        "artifact_get",
        "cache_put",
        "cache_get",
        "runner_revoke",
        "replica_clock",
        "audit_mark",
        "prune",
        "replicate",
        "failover",
    ] {
        assert!(actions.contains(action), "no `{action}` in {actions:?}");
    }
    assert!(
        sent.iter().any(|m| m["config"]["max_clock_skew"] == 1),
        "no trace with replica clocks"
    );
    assert!(
        sent.iter().any(|m| m["config"]["jobs"]
            .as_array()
            .is_some_and(|jobs| jobs.iter().any(|j| j["project"] == 1))),
        "no job of the outsider's project"
    );
    // The checker catches a broken message.
    let mut broken = sent.iter().find(|m| m["type"] == "step").unwrap().clone();
    broken["step"]["action"] = serde_json::json!("teleport");
    assert!(violation(&schema("step"), &broken, "step").is_some());
    let mut broken = answered
        .iter()
        .find(|m| m["type"] == "verdict")
        .unwrap()
        .clone();
    broken["reason"] = serde_json::json!("because");
    assert!(violation(&schema("verdict"), &broken, "verdict").is_some());
    // Version 2: the rule details are there, and checked (version 3: a get's content).
    for answer in ["claim", "heartbeat", "rejoin", "sweep", "served", "prune"] {
        assert!(
            answered.iter().any(|m| m["answer"].get(answer).is_some()),
            "no `{answer}` answer"
        );
    }
    let mut broken = answered
        .iter()
        .find(|m| m["answer"].get("rejoin").is_some())
        .unwrap()
        .clone();
    broken["answer"]["rejoin"]["instruction"] = serde_json::json!("carry on");
    assert!(violation(&schema("verdict"), &broken, "verdict").is_some());
    let mut broken = answered
        .iter()
        .find(|m| m["observations"].as_array().is_some_and(|o| !o.is_empty()))
        .unwrap()
        .clone();
    broken["observations"][0]["runner_time"] = serde_json::json!("noon");
    assert!(violation(&schema("projection"), &broken, "projection").is_some());
}

/// Class 5 over the driver protocol: a rule's returned value is compared, not only its verdict.
/// The example's second seeded bug answers a rejoin `continue` while a cancel is requested (the
/// verdict is right): the random walks catch it on the instruction. A version 1 driver reports no
/// details: they are not compared (the buggy example passes), and the driver says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_rule_answer_is_caught_over_version_2_and_not_compared_over_version_1() {
    use leasewright_conformance::driver::Part;
    use leasewright_conformance::suite::SuiteDriver as _;
    let model = Arc::new(LeaseModel::new(Config::one_job()));
    let walks = random_walks(model.as_ref(), 1, 3_000, 40);
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let bug = format!("LEASEWRIGHT_EXAMPLE_BUG=rejoin-misses-cancel {}", example());
    let driver = connect(&bug).await;
    assert_eq!(driver.version(), 5);
    assert!(driver.not_compared().is_empty());
    let outcome = suite::run(driver, Arc::clone(&model), walks.clone(), &options, |_| {}).await;
    let d = outcome
        .divergences
        .first()
        .expect("the wrong instruction is caught");
    assert_eq!(
        d.differences,
        vec![
            r#"state.details.answer.rejoin.instruction: expected "cancel", observed "continue""#
                .to_owned()
        ],
        "{}",
        d.render()
    );
    let old = connect(&format!("LEASEWRIGHT_EXAMPLE_VERSION=1 {bug}")).await;
    assert_eq!(old.version(), 1);
    assert_eq!(
        old.not_compared(),
        vec![Part::ObservationDetails, Part::Answers]
    );
    let outcome = suite::run(old, model, walks, &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
}

/// Version 3 of the driver protocol says every trace but those with replica clocks and
/// failovers, version 4 the replica clocks too, version 5 the failovers too: the Python example
/// agrees with the model on random walks and probes of each class versions 1 and 2 leave out (a
/// slot shared by jobs of one project and of two, the outsider project's jobs, the side effects
/// of R8, messages naming ids no one created), of replica clocks (`open`'s `max_clock_skew`, the
/// `replica_clock` step) and of failovers (the `replicate` and `failover` steps); over a version
/// 2 driver the same traces are left out, each for its first class, over a version 3 driver the
/// replica clocks and failovers, over a version 4 driver the failovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_5_replays_every_class() {
    use leasewright_conformance::suite::SuiteDriver as _;
    let base = Config::one_job();
    let [shared_projects, shared_jobs] = select::shared_slot_configs(&base);
    let configs = [
        shared_projects.1,
        shared_jobs.1,
        select::side_effect_config(&base),
        select::replica_clock_config(&base),
        select::failover_config(&base),
        base.clone(),
    ];
    let driver = connect(&example()).await;
    let v4 = connect(&format!("LEASEWRIGHT_EXAMPLE_VERSION=4 {}", example())).await;
    let v3 = connect(&format!("LEASEWRIGHT_EXAMPLE_VERSION=3 {}", example())).await;
    let old = connect(&format!("LEASEWRIGHT_EXAMPLE_VERSION=2 {}", example())).await;
    assert_eq!(
        (driver.version(), v4.version(), v3.version(), old.version()),
        (5, 4, 3, 2)
    );
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let mut seen = std::collections::BTreeSet::new();
    for config in configs {
        let model = Arc::new(LeaseModel::new(config));
        let mut walks = random_walks(model.as_ref(), 3, 400, 20);
        if model.config.failover {
            // Walks through a failover, and claims held by its wait.
            let pool = random_walks(model.as_ref(), 3, 4_000, 20);
            walks = pool
                .iter()
                .filter(|w| leasewright_conformance::drivers::failover::has_failover(w))
                .take(6)
                .cloned()
                .collect();
            let probes = select::failover_wait_probes(model.as_ref(), &pool);
            assert!(!probes.is_empty(), "no claim waits after a failover");
            walks.extend(probes.into_iter().take(6));
        }
        let paths: Vec<_> = walks
            .iter()
            .flat_map(|w| (1..=w.steps.len()).map(|n| (w.init.clone(), w.steps[..n].to_vec())))
            .take(40)
            .collect();
        let mut traces = walks.clone();
        traces.extend(probe::probes(model.as_ref(), &paths, 1, 40, "probe", "probe").traces);
        for trace in &traces {
            let classes = suite::classes(&model, trace);
            assert_eq!(driver.leaves_out(&model, trace), None, "{}", trace.name);
            let failover = leasewright_conformance::drivers::failover::has_failover(trace);
            assert_eq!(
                v4.leaves_out(&model, trace),
                failover.then_some(LeftOut::Failover),
                "{}",
                trace.name
            );
            assert_eq!(
                v3.leaves_out(&model, trace),
                suite::in_process_only(&model, trace),
                "{}",
                trace.name
            );
            assert_eq!(
                old.leaves_out(&model, trace),
                classes.first().copied(),
                "{}",
                trace.name
            );
            seen.extend(classes);
        }
        let outcome = suite::run(Arc::clone(&driver), model, traces, &options, |_| {}).await;
        if let Some(d) = outcome.divergences.first() {
            panic!("{}", d.render());
        }
    }
    // Every class a trace can be in (`LeftOut::DemoTarget` is the HTTP driver's alone).
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        LeftOut::ALL
            .into_iter()
            .filter(|c| *c != LeftOut::DemoTarget)
            .collect::<Vec<_>>(),
        "a class never generated"
    );
}

/// Version 5's failovers catch an implementation whose tokens do not carry the epoch, one whose
/// claims do not wait after a failover, and one whose wait leaves out its 2δ: over the Python
/// example with its seeded bugs (`LEASEWRIGHT_EXAMPLE_BUG=failover-without-epoch`,
/// `failover-without-wait`, `failover-wait-without-skew`) the walks through a failover (with
/// replica clocks one tick apart, as the probe suite's) diverge on the new epoch's fence, the
/// claims held by the wait on their verdict, where the unmodified example agrees with the model
/// on all of them and on the claims at the wait's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_without_epoch_or_wait_is_caught_over_the_driver_protocol() {
    let model = Arc::new(LeaseModel::new(select::failover_wait_config(
        &Config::one_job(),
    )));
    let pool = random_walks(model.as_ref(), 5, 6_000, 30);
    // Walks that claim in the new epoch (after the wait), cut after that claim.
    let walks: Vec<_> = pool
        .iter()
        .filter_map(|w| {
            let mut w = w.clone();
            let mut before = &w.init;
            let claim = w.steps.iter().position(|(a, after)| {
                let hit = select::claims_in_new_epoch(before, a, after);
                before = after;
                hit
            })?;
            w.steps.truncate(claim + 1);
            Some(w)
        })
        .take(6)
        .collect();
    assert!(!walks.is_empty(), "no walk claims after a failover");
    let probes = select::failover_wait_probes(model.as_ref(), &pool);
    assert!(!probes.is_empty(), "no claim waits after a failover");
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let both: Vec<_> = walks.iter().chain(&probes).cloned().collect();
    let sound = connect(&example()).await;
    let outcome = suite::run(sound, Arc::clone(&model), both.clone(), &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    for (bug, wanted) in [
        ("failover-without-epoch", "fence: expected 33"),
        ("failover-without-wait", "expected rejected (no_queued_job)"),
        (
            "failover-wait-without-skew",
            "expected rejected (no_queued_job)",
        ),
    ] {
        let command = format!("LEASEWRIGHT_EXAMPLE_BUG={bug} {}", example());
        let outcome = suite::run(
            connect(&command).await,
            Arc::clone(&model),
            both.clone(),
            &options,
            |_| {},
        )
        .await;
        let d = outcome
            .divergences
            .first()
            .unwrap_or_else(|| panic!("{bug} is not caught"));
        assert!(d.render().contains(wanted), "{bug}: {}", d.render());
    }
}

/// Version 4's replica clocks catch a sweep margin slip in a foreign implementation: the
/// Python example sweeping δ (not 2δ) past a lease (`LEASEWRIGHT_EXAMPLE_BUG=
/// sweep-without-skew-margin`) diverges on the replica-clock sweep probes, where the unmodified
/// example agrees with the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_at_delta_is_caught_over_the_driver_protocol() {
    let model = Arc::new(LeaseModel::new(select::replica_clock_config(
        &Config::one_job(),
    )));
    let walks = random_walks(model.as_ref(), 7, 4_000, 40);
    let probes = select::replica_sweep_probes(model.as_ref(), &walks);
    assert!(
        !probes.is_empty(),
        "no lease expired within the sweep's margin"
    );
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    let sound = connect(&example()).await;
    let outcome = suite::run(sound, Arc::clone(&model), probes.clone(), &options, |_| {}).await;
    if let Some(d) = outcome.divergences.first() {
        panic!("{}", d.render());
    }
    let bug = format!(
        "LEASEWRIGHT_EXAMPLE_BUG=sweep-without-skew-margin {}",
        example()
    );
    let outcome = suite::run(connect(&bug).await, model, probes, &options, |_| {}).await;
    let d = outcome
        .divergences
        .first()
        .expect("the sweep at δ diverges");
    assert!(
        d.trace.starts_with("probe-replica-sweep-"),
        "{}",
        d.render()
    );
    assert!(d.render().contains("uncertain"), "{}", d.render());
}

/// Version 4 prunes the walks the suite prunes between their jobs: the Python example agrees with
/// the model's plan of what the prune must delete and keep, and a prune that ignores the audit
/// (`LEASEWRIGHT_EXAMPLE_BUG=prune-ignores-audit`: every finished job deleted, the one that
/// finished after the audit too) diverges; over a version 3 driver the same walks replay without
/// the prune, and pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_of_unaudited_jobs_is_caught_over_the_driver_protocol() {
    let (model, walks) = prune_walks();
    let options = RunOptions {
        parallel: 2,
        stop_at_first: true,
    };
    for command in [
        example(),
        format!("LEASEWRIGHT_EXAMPLE_VERSION=3 {}", example()),
    ] {
        let outcome = suite::run(
            connect(&command).await,
            Arc::clone(&model),
            walks.clone(),
            &options,
            |_| {},
        )
        .await;
        if let Some(d) = outcome.divergences.first() {
            panic!("{command}: {}", d.render());
        }
    }
    let bug = format!("LEASEWRIGHT_EXAMPLE_BUG=prune-ignores-audit {}", example());
    let outcome = suite::run(connect(&bug).await, model, walks, &options, |_| {}).await;
    let d = outcome
        .divergences
        .first()
        .expect("a prune of an unaudited job diverges");
    assert!(
        d.render().contains("finished after the audit"),
        "{}",
        d.render()
    );
}

/// The walks a random suite (of the one-job configuration, seed 3) prunes between their jobs,
/// with their model.
fn prune_walks() -> (
    Arc<LeaseModel>,
    Vec<leasewright_conformance::generate::Generated<LeaseModel>>,
) {
    select::random_prune_walks(3)
        .expect("generates")
        .map(|b| (b.model, b.traces))
        .expect("the random suite prunes between jobs")
}
