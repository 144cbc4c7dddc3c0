//! Trace files: the model's ITF shape (leasewright_model::trace, Apalache ADR-015), written and
//! read for the conformance suite's traces.
//!
//! Writing is the model's [`trace::build`], with the trace's name added to `#meta`. Reading rebuilds
//! the actions through the model with [`rebuild`], which, unlike the model's own parser, also
//! accepts the claims a scenario appends that the model's server rejects (`no_queued_job`: the
//! model never offers them, but they are real messages with a defined verdict). Every stored state
//! must equal the rebuilt one, so a trace edited into something the model cannot do is refused.

use leasewright_model::trace::{self, STATE_VARS};
use leasewright_model::{Config, LeaseModel};
use serde_json::Value;

use crate::generate::Generated;
use crate::minimize::rebuild;

/// Renders `trace` (of `model`) as an ITF document.
pub fn to_itf(model: &LeaseModel, trace: &Generated<LeaseModel>) -> String {
    let mut doc = trace::build(
        &model.config,
        trace.generator,
        trace.seed.unwrap_or(0),
        &format!(
            "{}: {} steps of the fenced-lease model",
            trace.name,
            trace.steps.len()
        ),
        &trace.steps,
    );
    doc["#meta"]["name"] = Value::String(trace.name.clone());
    serde_json::to_string_pretty(&doc).expect("a trace serializes")
}

/// Saves `trace` (of `model`) as `DIR/NAME.itf.json`, creating `dir`; returns the file's path.
pub fn save(
    dir: &std::path::Path,
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> Result<std::path::PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.itf.json", trace.name));
    std::fs::write(&path, to_itf(model, trace))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// Reads an ITF document written by [`to_itf`] or by `leasewright check`.
pub fn from_itf(text: &str) -> Result<(LeaseModel, Generated<LeaseModel>), String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let meta = doc.get("#meta").ok_or("no #meta")?;
    let config: Config = trace::meta_config(meta).map_err(|e| e.to_string())?;
    if let Some(hash) = meta.get("model_hash").and_then(Value::as_str) {
        if hash != trace::model_hash(&config) {
            return Err(format!(
                "model hash {hash} is not this model's ({}): the trace was made by another version",
                trace::model_hash(&config)
            ));
        }
    }
    let states = doc
        .get("states")
        .and_then(Value::as_array)
        .ok_or("no states")?;
    let mut actions = Vec::new();
    for (i, s) in states.iter().enumerate().skip(1) {
        actions.push(trace::stored_action(s, i).map_err(|e| e.to_string())?);
    }
    let model = LeaseModel::new(config);
    let init = model.init_state();
    let steps = rebuild(&model, &init, &actions)
        .ok_or("the actions are not a path of the model from its initial state")?;
    for (i, stored) in states.iter().enumerate() {
        let ours = trace::state_vars(if i == 0 { &init } else { &steps[i - 1].1 });
        for var in STATE_VARS {
            if stored.get(var) != ours.get(var) {
                return Err(format!("state {i}: `{var}` is not what the model computes"));
            }
        }
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("trace")
        .to_string();
    let trace = Generated {
        name,
        generator: "file",
        seed: meta.get("seed").and_then(|s| match s {
            Value::String(text) => text.parse().ok(),
            other => other.as_u64(),
        }),
        init,
        steps,
    };
    Ok((model, trace))
}

#[cfg(test)]
mod tests {
    use super::{from_itf, to_itf};
    use crate::scenarios;

    #[test]
    fn a_trace_survives_the_round_trip_through_itf() {
        let (model, trace) = scenarios::stale_completion().expect("the scenario");
        let text = to_itf(&model, &trace);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["#meta"]["format"], "ITF");
        assert_eq!(
            doc["states"].as_array().unwrap().len(),
            trace.steps.len() + 1
        );
        assert_eq!(
            doc["states"][1]["mbt::actionTaken"],
            trace.steps[0].0.name()
        );
        // The model's own reader (what `leasewright check` uses) reads it too.
        leasewright_model::trace::from_str(&text).expect("the model reads the suite's traces");
        let (model2, trace2) = from_itf(&text).expect("reads back");
        assert_eq!(model2.config, model.config);
        let actions = |t: &crate::generate::Generated<_>| {
            t.steps
                .iter()
                .map(|(a, _): &(leasewright_model::Action, _)| a.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(actions(&trace2), actions(&trace));
    }

    #[test]
    fn a_trace_edited_into_something_the_model_cannot_do_is_refused() {
        let (model, trace) = scenarios::stale_completion().expect("the scenario");
        let mut doc: serde_json::Value = serde_json::from_str(&to_itf(&model, &trace)).unwrap();
        doc["states"][1]["clock"] = serde_json::json!(3);
        let err = from_itf(&doc.to_string()).unwrap_err();
        assert!(
            err.contains("`clock` is not what the model computes"),
            "{err}"
        );
    }
}
