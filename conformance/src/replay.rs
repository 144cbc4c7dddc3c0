//! Replaying one trace against a driver, comparing after every step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use leasewright_model::{describe, Action, Expected, JobState, LeaseModel, State};
use serde_json::Value;

use crate::driver::{project_model, Driver, DriverError, Session};
use crate::generate::Generated;

/// What a trace exercised, for the suite's summary and coverage.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Steps replayed.
    pub steps: u64,
    /// Verdicts seen, keyed `accepted`, `acknowledged`, `uncertain` or `rejected:<reason>`.
    pub verdicts: BTreeMap<String, u64>,
    /// Model transitions exercised, keyed by action kind (`claim`, `deliver:result`, ...).
    pub actions: BTreeMap<String, u64>,
    /// The batch claims replayed (docs/protocol.md "Batch claim").
    pub batch_claims: BatchClaims,
    /// The result batches the driver sent beside the steps ([`crate::driver::ResultBatches`]).
    pub batch_results: crate::driver::BatchResults,
}

/// The batch claims a run replayed, by what they exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchClaims {
    /// Batch claims replayed (every verdict).
    pub replayed: u64,
    /// Of those, with K > 1.
    pub k_above_1: u64,
    /// Accepted taking two jobs or more.
    pub took_several: u64,
    /// Accepted taking fewer than K while K jobs or more were claimable (two of the K earliest
    /// name one slot).
    pub fewer_than_k: u64,
    /// Accepted past a queued job of the runner's project waiting on a busy slot.
    pub walked_past_busy_slot: u64,
    /// Rejected (`no_queued_job`, `unknown_runner`).
    pub rejected: u64,
}

impl BatchClaims {
    /// Counts the batch claim `action` from `before` to `after`, if it is one.
    pub fn record(&mut self, before: &State, action: &Action, after: &State) {
        let Action::ClaimBatch { runner, limit } = action else {
            return;
        };
        self.replayed += 1;
        if *limit > 1 {
            self.k_above_1 += 1;
        }
        let taken: Vec<u8> = after.attempts[before.attempts.len().min(after.attempts.len())..]
            .iter()
            .map(|a| a.job)
            .collect();
        if taken.is_empty() {
            self.rejected += 1;
            return;
        }
        if taken.len() > 1 {
            self.took_several += 1;
        }
        let Some(project) = before.runners.get(*runner as usize).map(|r| r.project) else {
            return;
        };
        let claimable = |j: &leasewright_model::Job| {
            j.project == project && j.state == JobState::Queued && j.attempts_left > 0
        };
        let free = before
            .jobs
            .iter()
            .filter(|j| claimable(j) && before.targets[j.slot as usize].holder.is_none())
            .count();
        if taken.len() < usize::from(*limit) && free >= usize::from(*limit) {
            self.fewer_than_k += 1;
        }
        let last = taken.iter().copied().max().unwrap_or(0);
        if before.jobs[..last as usize]
            .iter()
            .any(|j| claimable(j) && before.targets[j.slot as usize].holder.is_some())
        {
            self.walked_past_busy_slot += 1;
        }
    }

    fn absorb(&mut self, other: &BatchClaims) {
        self.replayed += other.replayed;
        self.k_above_1 += other.k_above_1;
        self.took_several += other.took_several;
        self.fewer_than_k += other.fewer_than_k;
        self.walked_past_busy_slot += other.walked_past_busy_slot;
        self.rejected += other.rejected;
    }

    /// One line for the summary.
    pub fn describe(&self) -> String {
        format!(
            "{} (K>1: {}; took 2+ jobs: {}; fewer than K, two jobs on one slot: {}; walked past \
             a job waiting on a busy slot: {}; rejected: {})",
            self.replayed,
            self.k_above_1,
            self.took_several,
            self.fewer_than_k,
            self.walked_past_busy_slot,
            self.rejected
        )
    }
}

impl Tally {
    /// Adds another tally into this one.
    pub fn absorb(&mut self, other: &Tally) {
        self.steps += other.steps;
        for (k, v) in &other.verdicts {
            *self.verdicts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.actions {
            *self.actions.entry(k.clone()).or_default() += v;
        }
        self.batch_claims.absorb(&other.batch_claims);
        self.batch_results.absorb(&other.batch_results);
    }
}

/// The key of a verdict in [`Tally::verdicts`].
pub fn verdict_key(v: &Expected) -> String {
    match v.reason {
        Some(reason) => format!("rejected:{reason}"),
        None => v.verdict.as_str().to_string(),
    }
}

/// The key of an action in [`Tally::actions`]: its name, and for a delivery the message kind.
pub fn action_key(a: &Action) -> String {
    match a {
        Action::Deliver { message } => format!("deliver:{}", message.kind.name().replace(' ', "_")),
        other => other.name().to_string(),
    }
}

/// The first step where the implementation and the model disagree.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// The trace's name.
    pub trace: String,
    /// The 1-based index of the step that diverged.
    pub step: usize,
    /// The steps up to and including the divergent one, as a person reads them.
    pub prefix: Vec<String>,
    /// What disagreed: `verdict`, `state` or `driver`.
    pub kind: &'static str,
    /// Expected (the model) against observed (the implementation), one line per difference.
    pub differences: Vec<String>,
}

impl Divergence {
    /// A report a person can follow.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "divergence in {} at step {} ({}):",
            self.trace, self.step, self.kind
        );
        for d in &self.differences {
            let _ = writeln!(out, "  {d}");
        }
        let _ = writeln!(out, "trace prefix:");
        for (i, line) in self.prefix.iter().enumerate() {
            let marker = if i + 1 == self.step { ">>" } else { "  " };
            let _ = writeln!(out, "  {marker} {:>3}. {line}", i + 1);
        }
        out
    }
}

/// When the projected state is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// After every step.
    EveryStep,
    /// After the last step only (verdicts are still compared at every step). Sound for the
    /// transition cover: every step of a cover trace's prefix is the last step of its own, shorter
    /// cover trace, where it is compared in full.
    LastStep,
}

impl Compare {
    /// The comparison a generator's traces need: the cover's and the probes' last step (a probe's
    /// prefix is a cover path, or a prefix of a random walk of the same run, compared there),
    /// everyone else's every step.
    pub fn for_generator(generator: &str) -> Compare {
        if generator == "cover" || generator == "probe" {
            Compare::LastStep
        } else {
            Compare::EveryStep
        }
    }
}

/// Replays `trace` in a fresh namespace of `driver`: a namespace that cannot be opened is a
/// divergence at step 0 (kind `driver`), so that every suite reports it the same way.
pub async fn replay_fresh<D: Driver>(
    driver: &D,
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> Result<Tally, Divergence> {
    match driver.open_trace(model, trace).await {
        Ok(mut session) => replay(model, &mut session, trace).await,
        Err(error) => Err(Divergence {
            trace: trace.name.clone(),
            step: 0,
            prefix: Vec::new(),
            kind: "driver",
            differences: vec![format!("the driver could not open a namespace: {error}")],
        }),
    }
}

/// Replays `trace` on `session`: after every step the verdict, and (as `compare` says) the
/// projected state, must equal the model's. Returns what the trace exercised, or the first
/// divergence.
pub async fn replay<S: Session>(
    model: &LeaseModel,
    session: &mut S,
    trace: &Generated<LeaseModel>,
) -> Result<Tally, Divergence> {
    replay_comparing(
        model,
        session,
        trace,
        Compare::for_generator(trace.generator),
    )
    .await
}

/// [`replay`] with an explicit comparison schedule.
pub async fn replay_comparing<S: Session>(
    model: &LeaseModel,
    session: &mut S,
    trace: &Generated<LeaseModel>,
    compare: Compare,
) -> Result<Tally, Divergence> {
    let mut tally = Tally::default();
    let mut before = trace.init.clone();
    let mut prefix = Vec::with_capacity(trace.steps.len());
    for (i, (action, after)) in trace.steps.iter().enumerate() {
        let expected = model.expected(&before, action);
        prefix.push(match &expected {
            Some(v) => format!("{}  => {v}", describe::action(action)),
            None => describe::action(action),
        });
        let diverge =
            |kind: &'static str, differences: Vec<String>, prefix: &Vec<String>| Divergence {
                trace: trace.name.clone(),
                step: i + 1,
                prefix: prefix.clone(),
                kind,
                differences,
            };
        if compare == Compare::LastStep && i + 1 == trace.steps.len() && i > 0 {
            if let Err(error) = session.mark().await {
                return Err(diverge("driver", vec![driver_error(&error)], &prefix));
            }
        }
        let observed = match session.step(&before, action, after).await {
            Ok(observed) => observed,
            Err(error) => return Err(diverge("driver", vec![driver_error(&error)], &prefix)),
        };
        if observed != expected {
            return Err(diverge(
                "verdict",
                vec![format!(
                    "verdict: expected {}, observed {}",
                    show(&expected),
                    show(&observed)
                )],
                &prefix,
            ));
        }
        let extra = session.differences();
        if !extra.is_empty() {
            return Err(diverge("verdict", extra, &prefix));
        }
        tally.steps += 1;
        *tally.actions.entry(action_key(action)).or_default() += 1;
        tally.batch_claims.record(&before, action, after);
        tally.batch_results.absorb(&session.batch_results());
        if let Some(v) = &expected {
            *tally.verdicts.entry(verdict_key(v)).or_default() += 1;
        }
        if compare == Compare::LastStep && i + 1 != trace.steps.len() {
            before = after.clone();
            continue;
        }
        let mut want = project_model(model, &before, action, after);
        let mut got = match session.project().await {
            Ok(got) => got,
            Err(error) => return Err(diverge("driver", vec![driver_error(&error)], &prefix)),
        };
        let extra = session.differences();
        if !extra.is_empty() {
            return Err(diverge("state", extra, &prefix));
        }
        if got.details.is_none() {
            // A driver that does not read the details (a version 1 driver command).
            want.details = None;
        }
        if got.stored.is_none() {
            // A driver that does not read what the side effects stored.
            want.stored = None;
        }
        // What the driver cannot read is compared on neither side.
        let unread = std::mem::take(&mut got.unread);
        crate::driver::blank(&mut want, &unread);
        crate::driver::blank(&mut got, &unread);
        // What a prune deleted is compared on neither side (`crate::drivers::prune`).
        let pruned = std::mem::take(&mut got.pruned);
        crate::driver::blank_pruned(&mut want, &mut got, &pruned);
        if want != got {
            let want = serde_json::to_value(&want).expect("a projection serializes");
            let got = serde_json::to_value(&got).expect("a projection serializes");
            let mut differences = Vec::new();
            diff("state", &want, &got, &mut differences);
            return Err(diverge("state", differences, &prefix));
        }
        before = after.clone();
    }
    Ok(tally)
}

fn show(v: &Option<Expected>) -> String {
    match v {
        Some(v) => v.to_string(),
        None => "no verdict (a step the server does not see)".into(),
    }
}

fn driver_error(error: &DriverError) -> String {
    format!("the driver could not apply the step: {error}")
}

/// One line per leaf where `want` (the model) and `got` (the implementation) differ.
pub fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff(
                    &format!("{path}.{k}"),
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if want != got => out.push(format!("{path}: expected {want}, observed {got}")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::diff;
    use serde_json::json;

    #[test]
    fn diff_names_the_path_of_each_difference() {
        let mut out = Vec::new();
        diff(
            "state",
            &json!({"jobs": [{"state": "running", "fence": 1}], "observation": null}),
            &json!({"jobs": [{"state": "queued", "fence": 1}], "observation": null}),
            &mut out,
        );
        assert_eq!(
            out,
            vec![r#"state.jobs[0].state: expected "running", observed "queued""#]
        );
    }

    #[test]
    fn ledgers_of_different_length_are_one_difference() {
        let mut out = Vec::new();
        diff(
            "s",
            &json!({"ledger": [1, 2]}),
            &json!({"ledger": [1]}),
            &mut out,
        );
        assert_eq!(out, vec!["s.ledger: expected [1,2], observed [1]"]);
    }
}
