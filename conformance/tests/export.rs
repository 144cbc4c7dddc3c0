//! `conform --export`: the corpus is read back by the Informal Systems `itf` crate, into types
//! written the way another team would write them from the trace format alone (every enum a Quint
//! sum type, options as `itf::de::Option`), and the manifest counts what is on disk.

use itf::de::{self, As};
use leasewright_conformance::export::{self, Suite};
use leasewright_conformance::generate::{random_walks, transition_cover};
use leasewright_conformance::scenarios;
use leasewright_conformance::traces;
use leasewright_model::{trace::model_hash, Config, LeaseModel};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum JobState {
    Queued,
    Running,
    Cancelling,
    Uncertain,
    Passed,
    Failed,
    Cancelled,
    Aborted,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum AttemptState {
    Active,
    Uncertain,
    Passed,
    Failed,
    Cancelled,
    Stopped,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Outcome {
    Passed,
    Failed,
    Cancelled,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Execution {
    Executing,
    Stopped,
    Finished(Outcome),
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum MessageKind {
    Heartbeat,
    Result(Outcome),
    Rejoin,
    TargetMutation,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Finding {
    Stopped,
    StillRunning,
    ObservedPassed,
    ObservedFailed,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Decision {
    Retry,
    Abort,
    Adopt,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Forge {
    AsIs,
    WrongLease,
    WrongFence,
    OtherAttempt { attempt: u8 },
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)] // read to prove the fields load; only some are compared
struct Job {
    project: u8,
    state: JobState,
    slot: u8,
    fence: u8,
    #[serde(with = "As::<de::Option<_>>")]
    current: Option<u8>,
    cancel_requested: bool,
    #[serde(with = "As::<de::Option<_>>")]
    committed: Option<JobState>,
    #[serde(with = "As::<de::Option<_>>")]
    completed_by: Option<(u8, u8)>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Attempt {
    job: u8,
    runner: u8,
    lease: u8,
    fence: u8,
    lease_expiry: u8,
    state: AttemptState,
    token: u8,
    execution: Execution,
    expired: bool,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Runner {
    project: u8,
    connected: bool,
    #[serde(with = "As::<de::Option<_>>")]
    holding: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Message {
    kind: MessageKind,
    sender: u8,
    job: u8,
    attempt: u8,
    lease: u8,
    fence: u8,
    runner_time: u8,
    digest: u8,
    token: u8,
}

/// One entry of the server's ledger: what was received, the record written, and the ground
/// truth the model compares it with.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct LedgerEntry {
    received: Message,
    #[serde(with = "As::<de::Option<_>>")]
    record: Option<Observation>,
    #[serde(with = "As::<de::Option<_>>")]
    sent_by: Option<u8>,
    late_or_conflicting: bool,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Observation {
    #[serde(with = "As::<de::Option<_>>")]
    attempt: Option<u8>,
    sender: u8,
    kind: MessageKind,
    job: u8,
    named_attempt: u8,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Target {
    #[serde(with = "As::<de::Option<_>>")]
    holder: Option<u8>,
    applied: u8,
    highest_token: u8,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "tag", content = "value", rename_all = "snake_case")]
enum Action {
    Claim {
        runner: u8,
    },
    Heartbeat {
        runner: u8,
        runner_time: u8,
    },
    Result {
        runner: u8,
        outcome: Outcome,
        runner_time: u8,
        digest: u8,
    },
    TargetMutation {
        runner: u8,
    },
    StopExecuting {
        runner: u8,
    },
    Disconnect {
        runner: u8,
    },
    Rejoin {
        runner: u8,
        runner_time: u8,
    },
    Replay {
        runner: u8,
        message: Message,
        forge: Forge,
    },
    Deliver {
        message: Message,
    },
    Tick,
    ExpirySweep,
    Cancel {
        job: u8,
    },
    Reconcile {
        job: u8,
        finding: Finding,
        decision: Decision,
    },
    OutsiderCancel {
        job: u8,
    },
    OutsiderReconcile {
        job: u8,
        finding: Finding,
        decision: Decision,
    },
}

#[derive(Debug, Deserialize)]
struct Expected {
    verdict: String,
    #[serde(with = "As::<de::Option<_>>")]
    reason: Option<String>,
}

/// Quint's `mbt::nondetPicks`: the arguments of the step's action (absent ones are `None`).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Picks {
    #[serde(default, with = "As::<de::Option<_>>")]
    runner: Option<u8>,
    #[serde(default, with = "As::<de::Option<_>>")]
    runner_time: Option<u8>,
    #[serde(default, with = "As::<de::Option<_>>")]
    outcome: Option<Outcome>,
    #[serde(default, with = "As::<de::Option<_>>")]
    message: Option<Message>,
    #[serde(default, with = "As::<de::Option<_>>")]
    forge: Option<Forge>,
    #[serde(default, with = "As::<de::Option<_>>")]
    job: Option<u8>,
    #[serde(default, with = "As::<de::Option<_>>")]
    finding: Option<Finding>,
    #[serde(default, with = "As::<de::Option<_>>")]
    decision: Option<Decision>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Step {
    clock: u8,
    jobs: Vec<Job>,
    attempts: Vec<Attempt>,
    runners: Vec<Runner>,
    in_flight: Vec<Message>,
    targets: Vec<Target>,
    /// The server's ledger (empty unless the configuration keeps it).
    #[serde(default)]
    ledger: Vec<LedgerEntry>,
    #[serde(rename = "mbt::actionTaken")]
    action_taken: String,
    #[serde(rename = "mbt::nondetPicks")]
    nondet_picks: Picks,
    #[serde(rename = "leasewright::expected", with = "As::<de::Option<_>>")]
    expected: Option<Expected>,
    #[serde(rename = "leasewright::action", with = "As::<de::Option<_>>")]
    action: Option<Action>,
}

#[test]
fn the_exported_corpus_is_read_back_by_the_itf_crate() {
    let scenario_list = scenarios::all().expect("the scenarios");
    let walks_model = LeaseModel::new(Config::one_job());
    let walks = random_walks(&walks_model, 3, 600, 40);
    let small = Config {
        runners: 1,
        attempts_per_job: 1,
        disconnects: false,
        ..Config::one_job()
    };
    let cover_model = LeaseModel::new(small);
    let cover = transition_cover(
        cover_model.clone(),
        Some(leasewright_model::State::representative_keeping_outcomes),
    );
    assert!(cover.len() > 20, "{} cover traces", cover.len());
    let mut suites: Vec<Suite<'_>> = scenario_list
        .iter()
        .map(|(model, trace)| Suite {
            model,
            traces: std::slice::from_ref(trace),
        })
        .collect();
    suites.push(Suite {
        model: &walks_model,
        traces: &walks,
    });
    suites.push(Suite {
        model: &cover_model,
        traces: &cover,
    });
    let dir = tempfile::tempdir().unwrap();
    let manifest = export::write(dir.path(), &suites).expect("the corpus is written");

    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(on_disk, manifest);
    assert_eq!(manifest["schema_version"], 1);
    assert_eq!(manifest["model"]["version"], env!("CARGO_PKG_VERSION"));
    let expected_traces = scenario_list.len() + walks.len() + cover.len();
    assert_eq!(manifest["traces"], expected_traces);
    assert_eq!(manifest["suites"]["random"]["steps"], 600);
    assert_eq!(manifest["suites"]["random"]["seeds"][0], 3);
    assert_eq!(manifest["suites"]["cover"]["traces"], cover.len());
    assert_eq!(
        manifest["suites"]["cover"]["model_hashes"][0],
        model_hash(&cover_model.config)
    );

    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), expected_traces);
    let mut steps_read = 0;
    for file in files {
        let text = std::fs::read_to_string(dir.path().join(file["path"].as_str().unwrap()))
            .expect("the file the manifest names");
        let trace = itf::trace_from_str::<Step>(&text)
            .unwrap_or_else(|e| panic!("{}: the itf crate refuses it: {e}", file["path"]));
        assert_eq!(
            trace.states.len(),
            file["steps"].as_u64().unwrap() as usize + 1
        );
        assert_eq!(trace.meta.other["model_hash"], file["model_hash"]);
        let config: Config = serde_json::from_str(&trace.meta.other["config"]).unwrap();
        assert_eq!(model_hash(&config), file["model_hash"]);
        let first = &trace.states[0].value;
        assert_eq!(first.action_taken, "init");
        assert!(first.action.is_none() && first.expected.is_none());
        assert!(first.jobs.iter().all(|j| j.state == JobState::Queued));
        for state in &trace.states[1..] {
            let step = &state.value;
            let action = step.action.as_ref().expect("every step names its action");
            let name = format!("{action:?}");
            let name = name.split([' ', '{']).next().unwrap();
            let snake: String = name
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    if c.is_ascii_uppercase() && i > 0 {
                        vec!['_', lower]
                    } else {
                        vec![lower]
                    }
                })
                .collect();
            assert_eq!(step.action_taken, snake);
            // The picks are the action's arguments.
            match action {
                Action::Claim { runner } | Action::TargetMutation { runner, .. } => {
                    assert_eq!(step.nondet_picks.runner, Some(*runner))
                }
                Action::Cancel { job } => assert_eq!(step.nondet_picks.job, Some(*job)),
                Action::Deliver { .. } => assert!(step.nondet_picks.message.is_some()),
                Action::Tick | Action::ExpirySweep => {
                    assert!(step.nondet_picks.runner.is_none() && step.nondet_picks.job.is_none())
                }
                _ => {}
            }
            if let Some(e) = &step.expected {
                assert_eq!(e.reason.is_some(), e.verdict == "rejected", "{e:?}");
            }
            steps_read += 1;
        }
        // And our own reader agrees that it is a trace of the model.
        traces::from_itf(&text).unwrap_or_else(|e| panic!("{}: {e}", file["path"]));
    }
    assert_eq!(steps_read, manifest["steps"].as_u64().unwrap());
}

/// The replay form (`--export-format jsonl-gz`): a header, then one line per trace holding the
/// `open` request and, per step, the request the harness sends over the driver protocol, the
/// model's verdict, and the projection where the harness compares one (every step of a walk or
/// scenario; the last step of a cover trace, after a `mark`), so that a checker needs no model.
#[test]
fn the_replay_form_holds_each_steps_request_verdict_and_projection() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let model = LeaseModel::new(Config::one_job());
    let walks = random_walks(&model, 3, 200, 20);
    let cover_model = LeaseModel::new(Config {
        runners: 1,
        attempts_per_job: 1,
        disconnects: false,
        ..Config::one_job()
    });
    let cover: Vec<_> = transition_cover(cover_model.clone(), None)
        .into_iter()
        .take(30)
        .collect();
    let manifest = export::write_replay(
        dir.path(),
        &[
            Suite {
                model: &model,
                traces: &walks,
            },
            Suite {
                model: &cover_model,
                traces: &cover,
            },
        ],
        true,
    )
    .unwrap();
    assert_eq!(manifest["file"], "traces.jsonl.gz");
    assert_eq!(manifest["traces"], (walks.len() + cover.len()) as u64);
    let file = std::fs::File::open(dir.path().join("traces.jsonl.gz")).unwrap();
    let lines: Vec<Value> = std::io::BufReader::new(flate2::read::GzDecoder::new(file))
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines[0]["format"], "leasewright-replay");
    assert_eq!(lines[0]["driver_protocol"], 5);
    assert_eq!(lines[0]["version"], 2);
    assert!(lines[0]["reasons"]
        .as_array()
        .unwrap()
        .contains(&"stale_fence".into()));
    let traces = &lines[1..];
    assert_eq!(traces.len(), walks.len() + cover.len());
    let all = walks
        .iter()
        .map(|t| (&model, t))
        .chain(cover.iter().map(|t| (&cover_model, t)));
    for ((m, trace), record) in all.zip(traces) {
        assert_eq!(record["trace"], trace.name.as_str());
        assert_eq!(record["open"]["type"], "open");
        // One job, one project, a slot of its own: any driver protocol version says it.
        assert_eq!(record["driver_protocol"], 1);
        let steps = record["steps"].as_array().unwrap();
        assert_eq!(steps.len(), trace.steps.len());
        let mut before = trace.init.clone();
        for (i, ((action, after), step)) in trace.steps.iter().zip(steps).enumerate() {
            assert_eq!(
                step["expected"],
                serde_json::to_value(m.expected(&before, action)).unwrap()
            );
            let last = i + 1 == steps.len();
            let walk = trace.generator == "random";
            assert_eq!(step.get("projection").is_some(), walk || last, "{step}");
            assert_eq!(step.get("mark").is_some(), !walk && last && i > 0, "{step}");
            if let Some(p) = step.get("projection") {
                let want =
                    leasewright_conformance::driver::project_model(m, &before, action, after);
                assert_eq!(p, &serde_json::to_value(&want).unwrap());
            }
            // A step sent nothing has no verdict (a tick is sent and has none).
            if step["request"].is_null() {
                assert!(m.expected(&before, action).is_none(), "{step}");
            }
            before = after.clone();
        }
    }
}

/// Since version 2 of the replay form, the walks through a failover are in it: each record names
/// driver protocol version 5, and the steps before which the harness brings the standby up to date
/// (`replicate`) are the transitions the failover loses, each before a failover step.
#[test]
fn the_replay_form_holds_the_failovers_with_their_replicate_steps() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let model = LeaseModel::new(leasewright_conformance::select::failover_config(
        &Config::one_job(),
    ));
    let walks: Vec<_> = random_walks(&model, 5, 3_000, 30)
        .into_iter()
        .filter(leasewright_conformance::drivers::failover::has_failover)
        .collect();
    assert!(!walks.is_empty(), "no walk through a failover");
    let manifest = export::write_replay(
        dir.path(),
        &[Suite {
            model: &model,
            traces: &walks,
        }],
        false,
    )
    .unwrap();
    assert_eq!(manifest["traces"], walks.len() as u64);
    let text = std::fs::read_to_string(dir.path().join("traces.jsonl")).unwrap();
    let records: Vec<Value> = text
        .as_bytes()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(records.len(), walks.len());
    for (walk, record) in walks.iter().zip(&records) {
        assert_eq!(record["driver_protocol"], 5, "{}", walk.name);
        let steps = record["steps"].as_array().unwrap();
        let replicated: Vec<usize> = (0..steps.len())
            .filter(|&i| steps[i].get("replicate") == Some(&Value::Bool(true)))
            .collect();
        let failovers: Vec<usize> = (0..steps.len())
            .filter(|&i| steps[i]["request"]["action"] == "failover")
            .collect();
        assert_eq!(replicated.len(), failovers.len(), "{}", walk.name);
        for (r, f) in replicated.iter().zip(&failovers) {
            assert!(r < f, "{}: replicate at {r}, failover at {f}", walk.name);
        }
    }
}
