//! The trace corpus on disk (`leasewright conform --export DIR`): every trace of the chosen suites
//! as an ITF file that ITF readers load (Quint's conventions, the Informal Systems `itf` crate),
//! and a manifest, so that a team can replay the corpus with its own tooling.
//!
//! ```text
//! DIR/manifest.json                       what is in the corpus (below)
//! DIR/<generator>/<trace name>.itf.json   one trace (cover/, scenarios/, random/, proptest/)
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use leasewright_model::trace::model_hash;
use leasewright_model::LeaseModel;
use serde_json::{json, Value};

use crate::generate::Generated;
use crate::traces;

/// The manifest's format version: bumped when its meaning changes.
pub const MANIFEST_VERSION: u64 = 1;

/// One suite's traces, all of one model.
pub struct Suite<'a> {
    /// The model they are paths of.
    pub model: &'a LeaseModel,
    /// The traces.
    pub traces: &'a [Generated<LeaseModel>],
}

/// What the manifest says of one generator's traces.
#[derive(Default, serde::Serialize)]
struct Counts {
    traces: u64,
    steps: u64,
    /// The seeds of the traces that have one (random walks, property cases).
    seeds: Vec<u64>,
    /// The models the traces are paths of (configurations in `model.configs`).
    model_hashes: Vec<String>,
}

/// Writes every trace of `suites` under `dir` (created if missing) and `dir/manifest.json`;
/// returns the manifest. File names are the traces' names, which are unique within a generator.
pub fn write(dir: &Path, suites: &[Suite<'_>]) -> std::io::Result<Value> {
    std::fs::create_dir_all(dir)?;
    let mut generators: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut configs: BTreeMap<String, Value> = BTreeMap::new();
    let mut files = Vec::new();
    for suite in suites {
        let hash = model_hash(&suite.model.config);
        configs.insert(
            hash.clone(),
            serde_json::to_value(&suite.model.config).expect("a configuration serializes"),
        );
        for trace in suite.traces {
            let sub = dir.join(trace.generator);
            std::fs::create_dir_all(&sub)?;
            let name = format!("{}.itf.json", trace.name);
            std::fs::write(sub.join(&name), traces::to_itf(suite.model, trace))?;
            let entry = generators.entry(trace.generator).or_default();
            entry.traces += 1;
            entry.steps += trace.steps.len() as u64;
            entry.seeds.extend(trace.seed);
            if !entry.model_hashes.contains(&hash) {
                entry.model_hashes.push(hash.clone());
            }
            files.push(json!({
                "path": format!("{}/{name}", trace.generator),
                "generator": trace.generator,
                "seed": trace.seed,
                "steps": trace.steps.len(),
                "model_hash": hash,
            }));
        }
    }
    let steps: u64 = generators.values().map(|g| g.steps).sum();
    let manifest = json!({
        "schema_version": MANIFEST_VERSION,
        "format": "ITF",
        "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
        "model": {
            "crate": "leasewright-model",
            "version": env!("CARGO_PKG_VERSION"),
            "configs": configs,
        },
        "traces": files.len(),
        "steps": steps,
        "suites": generators,
        "files": files,
    });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).expect("a manifest serializes"),
    )?;
    Ok(manifest)
}

/// The replay form's format name and version (the header line of `traces.jsonl`): bumped when
/// the meaning of a record changes.
pub const REPLAY_FORMAT: &str = "leasewright-replay";
/// See [`REPLAY_FORMAT`].
pub const REPLAY_VERSION: u64 = 2;

/// The compact form of the corpus (`conform --export DIR --export-format jsonl|jsonl-gz`): what a
/// checker needs to replay the suite against a driver-protocol command and judge it without the
/// model (examples/python/replay.py does, with Python's standard library alone).
///
/// `DIR/traces.jsonl` (or `traces.jsonl.gz`) holds one JSON object per line: first a header
/// (`format`, `version`, the driver protocol version the requests are in, every rejection reason
/// the spec names), then one record per trace of every class (failovers and replica clocks
/// included since version 2 of the form): its name and generator, the oldest driver protocol
/// version that says it, the `open` request, and each step's request as the harness sends it over
/// the driver protocol (`null`: a step the server does not see), whether a `mark` or (a
/// failover's) `replicate` comes before it, with the verdict and the projection the model expects
/// (the harness's comparison form, docs/conformance.md "The replay form"). A walk the suite
/// prunes between its jobs replays unpruned here.
pub fn write_replay(dir: &Path, suites: &[Suite<'_>], gzip: bool) -> std::io::Result<Value> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let name = if gzip {
        "traces.jsonl.gz"
    } else {
        "traces.jsonl"
    };
    let file = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
    let mut out: Box<dyn std::io::Write> = if gzip {
        Box::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::default(),
        ))
    } else {
        Box::new(file)
    };
    let header = json!({
        "format": REPLAY_FORMAT,
        "version": REPLAY_VERSION,
        "driver_protocol": crate::drivers::cmd::VERSION,
        "reasons": leasewright_model::Reason::ALL
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>(),
    });
    writeln!(out, "{header}")?;
    let mut generators: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut configs: BTreeMap<String, Value> = BTreeMap::new();
    let mut traces = 0u64;
    for suite in suites {
        let hash = model_hash(&suite.model.config);
        configs.insert(
            hash.clone(),
            serde_json::to_value(&suite.model.config).expect("a configuration serializes"),
        );
        for trace in suite.traces {
            let record = replay_record(suite.model, trace)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            serde_json::to_writer(&mut out, &record)?;
            out.write_all(b"\n")?;
            traces += 1;
            let entry = generators.entry(trace.generator).or_default();
            entry.traces += 1;
            entry.steps += trace.steps.len() as u64;
            entry.seeds.extend(trace.seed);
            if !entry.model_hashes.contains(&hash) {
                entry.model_hashes.push(hash.clone());
            }
        }
    }
    out.flush()?;
    drop(out);
    let steps: u64 = generators.values().map(|g| g.steps).sum();
    let manifest = json!({
        "schema_version": MANIFEST_VERSION,
        "format": REPLAY_FORMAT,
        "format_version": REPLAY_VERSION,
        "file": name,
        "model": {
            "crate": "leasewright-model",
            "version": env!("CARGO_PKG_VERSION"),
            "configs": configs,
        },
        "traces": traces,
        "steps": steps,
        "suites": generators,
    });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).expect("a manifest serializes"),
    )?;
    Ok(manifest)
}

/// One trace of the replay form: the requests the harness sends over the driver protocol for it
/// and what the model expects back, step by step, as [`crate::replay::replay`] compares them.
pub fn replay_record(
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> Result<Value, crate::driver::DriverError> {
    use crate::drivers::cmd::{open_request, step_request};
    use crate::replay::Compare;
    let compare = Compare::for_generator(trace.generator);
    let failover = crate::drivers::failover::has_failover(trace);
    // Before each transition a failover loses, the standby is brought up to date (`replicate`).
    let replicate = if failover {
        crate::drivers::failover::snapshot_steps(trace).ok_or_else(|| {
            crate::driver::DriverError::Unmappable(
                "a failover whose lost transition is not one of the trace's steps".into(),
            )
        })?
    } else {
        std::collections::BTreeSet::new()
    };
    // The oldest driver protocol version that says every request of the trace.
    let needs = if failover {
        crate::drivers::cmd::VERSION_5
    } else if model.config.replica_skew > 0 {
        crate::drivers::cmd::VERSION_4
    } else if crate::suite::driver_cmd_leaves_out(model, trace).is_some() {
        crate::drivers::cmd::VERSION_WITH_EVERY_TRACE
    } else {
        1
    };
    let mut before = &trace.init;
    let mut steps = Vec::with_capacity(trace.steps.len());
    let last = trace.steps.len();
    for (i, (action, after)) in trace.steps.iter().enumerate() {
        let request = step_request(before, action, after)?.map(|r| r["step"].clone());
        let expected = model.expected(before, action);
        let compared = compare == Compare::EveryStep || i + 1 == last;
        let mut step = serde_json::Map::new();
        step.insert(
            "describe".into(),
            json!(leasewright_model::describe::action(action)),
        );
        step.insert("request".into(), request.unwrap_or(Value::Null));
        step.insert(
            "expected".into(),
            serde_json::to_value(expected).expect("a verdict serializes"),
        );
        if compare == Compare::LastStep && i + 1 == last && i > 0 {
            // The harness marks before the last step of a trace compared at its last step only.
            step.insert("mark".into(), json!(true));
        }
        if replicate.contains(&i) {
            // Sent after the mark, before the step's own request (version 5).
            step.insert("replicate".into(), json!(true));
        }
        if let Some(payload) = crate::coverage::delivered(before, action)
            .and_then(|m| crate::driver::payload_label(&m))
        {
            step.insert("payload".into(), json!(payload));
        }
        if compared {
            let want = crate::driver::project_model(model, before, action, after);
            step.insert(
                "projection".into(),
                serde_json::to_value(&want).expect("a projection serializes"),
            );
        }
        steps.push(Value::Object(step));
        before = after;
    }
    let open = open_request(model, &trace.name);
    Ok(json!({
        "trace": trace.name,
        "generator": trace.generator,
        "driver_protocol": needs,
        "open": open,
        "steps": steps,
    }))
}
