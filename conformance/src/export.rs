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
