//! Traces in the shape of the Informal Trace Format (ITF, Apalache ADR-015). Pure data: this
//! module builds and reads `serde_json::Value`s and strings; it never touches files.
//!
//! ```text
//! { "#meta":  { "format": "ITF", "source": "leasewright", "generator": "check", "seed": "0",
//!               "config": "{..}", "model_hash": "fnv1a64:..", "description": ".." },
//!   "vars":   [ "clock", "jobs", "attempts", "runners", "in_flight", "targets",
//!               "mbt::actionTaken", "mbt::nondetPicks", "leasewright::expected",
//!               "leasewright::action" ],
//!   "states": [ { "#meta": { "index": 0 }, "clock": 0, .., "mbt::actionTaken": "init", .. }, .. ] }
//! ```
//!
//! Values follow ITF in Quint's conventions ([`crate::itf`]): integers are JSON numbers, records
//! are objects, lists are arrays, sets are `{"#set": [..]}`, tuples `{"#tup": [..]}`, every enum a
//! sum type `{"tag": "variant", "value": ..}` (a unit variant's value is `{}`, as Quint writes
//! it), an absent optional value `{"tag": "None", "value": {}}` and a present one
//! `{"tag": "Some", "value": v}`. `#meta` holds strings only (the configuration as a string of
//! JSON), as the `itf` crate requires.
//! State `i > 0` carries the action that led to it: its name as `mbt::actionTaken`, its arguments
//! as `mbt::nondetPicks` (each `{"tag": "Some", "value": ..}`), the verdict the model expects for it
//! (`leasewright::expected`: `Some({"verdict": "..", "reason": ..})` or `None`), and the exact action
//! as an ITF value (`leasewright::action`), from which [`parse`] rebuilds the trace through the model.
//!
//! The same shape is written by the conformance suite (conformance/src/traces.rs), with the same
//! [`model_hash`], so either side reads the other's files.

use crate::model::LeaseModel;
use crate::state::{Action, Config, State};
use crate::types::{Expected, Reason, Verdict};
use serde_json::{json, Map, Value};
use stateright::Model;
use std::fmt;

/// The state variables, in the order of `vars`.
pub const STATE_VARS: [&str; 6] = [
    "clock",
    "jobs",
    "attempts",
    "runners",
    "in_flight",
    "targets",
];

/// What [`parse`] reads back: the configuration, the actions, and each action's expected verdict.
pub type Parsed = (Config, Vec<Action>, Vec<Option<Expected>>);

/// Why a document is not a trace of this model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError(pub String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

fn err<T>(message: impl Into<String>) -> Result<T, TraceError> {
    Err(TraceError(message.into()))
}

/// A stable hash of what decides the model's answers: the model crate's version and the
/// configuration's `Debug` text (FNV-1a, 64 bits). It does not cover the model's code beyond its
/// version number: bump the version when the rules change.
pub fn model_hash(config: &Config) -> String {
    let text = format!("leasewright-model {} {config:?}", env!("CARGO_PKG_VERSION"));
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{hash:016x}")
}

fn none() -> Value {
    crate::itf::to_itf(&None::<()>)
}

fn some(v: Value) -> Value {
    let mut map = Map::new();
    map.insert("tag".into(), json!("Some"));
    map.insert("value".into(), v);
    Value::Object(map)
}

/// The state's variables as ITF values (crate::itf: options and variants tagged as Quint's sum
/// types, tuples as `#tup`), `in_flight` as a set.
pub fn state_vars(state: &State) -> Map<String, Value> {
    let Value::Object(fields) = crate::itf::to_itf(state) else {
        unreachable!("a state is a record")
    };
    let mut out = Map::new();
    for (name, value) in fields {
        let value = match (name.as_str(), value) {
            ("in_flight", Value::Array(items)) => json!({ "#set": items }),
            (_, other) => other,
        };
        out.insert(name, value);
    }
    out
}

/// Every argument name of the model's actions: Quint's `mbt::nondetPicks` names all of them in
/// every state (`None` where the action has no such argument), so that readers see one record
/// type (an empty record would read as Quint's unit).
pub const PICKS: [&str; 8] = [
    "runner",
    "runner_time",
    "outcome",
    "message",
    "forge",
    "job",
    "finding",
    "decision",
];

/// The action's arguments as Quint's `mbt::nondetPicks` (`None` for the initial state).
pub fn nondet_picks(action: Option<&Action>) -> Value {
    let mut picks: Map<String, Value> = PICKS.iter().map(|p| (p.to_string(), none())).collect();
    if let Some(Value::Object(args)) = action
        .map(crate::itf::to_itf)
        .as_ref()
        .and_then(|a| a.get("value"))
    {
        for (k, v) in args {
            picks.insert(k.clone(), some(v.clone()));
        }
    }
    Value::Object(picks)
}

/// The configuration stored in a trace's `#meta.config`: a string of JSON (ITF readers want
/// `#meta` to hold strings only), or, in files written before that, the object itself.
pub fn meta_config(meta: &Value) -> Result<Config, TraceError> {
    let parsed = match meta.get("config") {
        Some(Value::String(text)) => serde_json::from_str(text),
        Some(object) => serde_json::from_value(object.clone()),
        None => return err("no #meta.config"),
    };
    parsed.map_err(|e| TraceError(format!("#meta.config: {e}")))
}

/// The exact action a stored state names in `leasewright::action` (an ITF value, or in files
/// written before that, serde JSON).
pub fn stored_action(stored: &Value, i: usize) -> Result<Action, TraceError> {
    let Some(value) = stored
        .get("leasewright::action")
        .and_then(|a| a.get("value"))
    else {
        return err(format!("state {i} has no leasewright::action"));
    };
    serde_json::from_value(crate::itf::to_serde(value))
        .map_err(|e| TraceError(format!("state {i}: not an action of the model: {e}")))
}

fn expected_value(e: Option<Expected>) -> Value {
    match e {
        Some(e) => some(json!({
            "verdict": e.verdict.as_str(),
            "reason": e.reason.map_or_else(none, |r| some(json!(r.as_str()))),
        })),
        None => none(),
    }
}

/// Builds the ITF document of a path: `path` is the steps after the initial state of `config`'s
/// model, each an action and the state it led to.
pub fn build(
    config: &Config,
    generator: &str,
    seed: u64,
    description: &str,
    path: &[(Action, State)],
) -> Value {
    let model = LeaseModel::new(config.clone());
    let init = model.init_state();
    let mut states = Vec::with_capacity(path.len() + 1);
    let mut first = state_vars(&init);
    first.insert("#meta".into(), json!({"index": 0}));
    first.insert("mbt::actionTaken".into(), json!("init"));
    first.insert("mbt::nondetPicks".into(), nondet_picks(None));
    first.insert("leasewright::expected".into(), none());
    first.insert("leasewright::action".into(), none());
    states.push(Value::Object(first));
    let mut before = &init;
    for (i, (action, after)) in path.iter().enumerate() {
        let mut s = state_vars(after);
        s.insert("#meta".into(), json!({"index": i + 1}));
        s.insert("mbt::actionTaken".into(), json!(action.name()));
        s.insert("mbt::nondetPicks".into(), nondet_picks(Some(action)));
        s.insert(
            "leasewright::expected".into(),
            expected_value(model.expected(before, action)),
        );
        s.insert(
            "leasewright::action".into(),
            some(crate::itf::to_itf(action)),
        );
        states.push(Value::Object(s));
        before = after;
    }
    let mut vars: Vec<&str> = STATE_VARS.to_vec();
    vars.extend([
        "mbt::actionTaken",
        "mbt::nondetPicks",
        "leasewright::expected",
        "leasewright::action",
    ]);
    json!({
        "#meta": {
            "format": "ITF",
            "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
            "source": "leasewright",
            "generator": generator,
            "seed": seed.to_string(),
            "config": serde_json::to_string(config).expect("a configuration serializes"),
            "model_hash": model_hash(config),
            "description": description,
        },
        "vars": vars,
        "states": states,
    })
}

/// The steps of a stateright path (`Path::into_vec()`), as [`build`] takes them.
pub fn steps_of(path: &[(State, Option<Action>)]) -> Vec<(Action, State)> {
    path.windows(2)
        .filter_map(|w| w[0].1.clone().map(|a| (a, w[1].0.clone())))
        .collect()
}

fn parse_expected(v: &Value) -> Result<Option<Expected>, TraceError> {
    // `Some(record)`; in files written before that, the bare record.
    let v = match v.get("tag").and_then(Value::as_str) {
        Some("None") => return Ok(None),
        Some("Some") => v.get("value").unwrap_or(&Value::Null),
        _ => v,
    };
    let verdict: Verdict = match v.get("verdict").and_then(Value::as_str) {
        Some(text) => text.parse().map_err(TraceError)?,
        None => return err("leasewright::expected has no verdict"),
    };
    let reason = match v.get("reason") {
        Some(r) if r.get("tag").and_then(Value::as_str) == Some("Some") => {
            let text = r.get("value").and_then(Value::as_str).unwrap_or_default();
            Some(text.parse::<Reason>().map_err(TraceError)?)
        }
        _ => None,
    };
    Ok(Some(Expected { verdict, reason }))
}

/// Reads a document written by [`build`] (or by the conformance suite): the configuration, the
/// actions, and each step's stored expected verdict. The actions are replayed from the initial
/// state: every one must be enabled, every stored state must equal the replayed one, the model
/// hash must match, and every stored verdict must be the model's; otherwise an error says where.
pub fn parse(doc: &Value) -> Result<Parsed, TraceError> {
    let Some(meta) = doc.get("#meta") else {
        return err("no #meta");
    };
    let config = meta_config(meta)?;
    if let Some(hash) = meta.get("model_hash").and_then(Value::as_str) {
        if hash != model_hash(&config) {
            return err(format!(
                "model hash {hash} is not this model's ({}): the trace was made by another version",
                model_hash(&config)
            ));
        }
    }
    let Some(states) = doc.get("states").and_then(Value::as_array) else {
        return err("no states");
    };
    let model = LeaseModel::new(config.clone());
    let mut state = model.init_state();
    let mut actions = Vec::new();
    let mut expected = Vec::new();
    for (i, stored) in states.iter().enumerate() {
        if i > 0 {
            let action = stored_action(stored, i)?;
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            if !enabled.contains(&action) {
                return err(format!("state {i}: `{}` is not enabled", action.name()));
            }
            let verdict = model.expected(&state, &action);
            let stored_verdict =
                parse_expected(stored.get("leasewright::expected").unwrap_or(&Value::Null))?;
            if stored_verdict != verdict {
                return err(format!(
                    "state {i}: stored verdict {stored_verdict:?} is not the model's {verdict:?}"
                ));
            }
            let Some(next) = model.next_state(&state, action.clone()) else {
                return err(format!("state {i}: `{}` has no successor", action.name()));
            };
            state = next;
            actions.push(action);
            expected.push(verdict);
        }
        let ours = state_vars(&state);
        for var in STATE_VARS {
            if stored.get(var) != ours.get(var) {
                return err(format!("state {i}: `{var}` is not what the model computes"));
            }
        }
    }
    Ok((config, actions, expected))
}

/// [`build`], pretty-printed.
pub fn to_string(
    config: &Config,
    generator: &str,
    seed: u64,
    description: &str,
    path: &[(Action, State)],
) -> String {
    serde_json::to_string_pretty(&build(config, generator, seed, description, path))
        .expect("a trace serializes")
}

/// [`parse`] from text.
pub fn from_str(text: &str) -> Result<Parsed, TraceError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| TraceError(format!("not JSON: {e}")))?;
    parse(&doc)
}
