//! The summary of a run: what it replayed, the verdicts and actions it exercised, the rejection
//! reasons and SQL statements it never hit, as text a person reads and as one JSON document.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use leasewright_model::{Config, Reason};
use serde_json::{json, Value};

use crate::replay::{action_key, Divergence};
use crate::select::{Batch, Selection, Suite};
use crate::suite::Outcome;

/// The SQL statements a run executed: each statement's executions during the run, every
/// statement listed (`None`: over --http, where they run in the server's process).
pub type StatementCoverage = Option<Vec<(&'static str, u64)>>;

/// Executions of each statement between two snapshots of
/// [`crate::suite::SuiteDriver::statement_counts`].
pub fn statement_delta(
    before: Option<Vec<(&'static str, u64)>>,
    after: Option<Vec<(&'static str, u64)>>,
) -> StatementCoverage {
    let (before, after) = (before?, after?);
    Some(
        after
            .into_iter()
            .zip(before)
            .map(|((name, after), (_, before))| (name, after.saturating_sub(before)))
            .collect(),
    )
}

/// A finished run, ready to be rendered.
pub struct Summary<'a> {
    /// What was selected.
    pub selection: &'a Selection,
    /// What the run found.
    pub report: &'a Outcome,
    /// The generated traces.
    pub batches: &'a [Batch],
    /// The statements it executed.
    pub statements: &'a StatementCoverage,
}

impl Summary<'_> {
    fn reasons_never(&self) -> Vec<&'static str> {
        let reasons_hit: BTreeSet<String> = self
            .report
            .tally
            .verdicts
            .keys()
            .filter_map(|k| k.strip_prefix("rejected:").map(str::to_string))
            .collect();
        Reason::ALL
            .iter()
            .map(|r| r.as_str())
            .filter(|r| !reasons_hit.contains(*r))
            .collect()
    }

    /// The kinds the generated traces contain (the property suite keeps no traces: the kinds its
    /// agreeing cases exercised).
    fn action_kinds(&self) -> BTreeSet<String> {
        self.batches
            .iter()
            .flat_map(|b| {
                b.traces
                    .iter()
                    .flat_map(|t| t.steps.iter().map(|(a, _)| action_key(a)))
            })
            .chain(self.report.tally.actions.keys().cloned())
            .collect()
    }

    fn statements_never(&self) -> Option<Vec<&'static str>> {
        self.statements.as_ref().map(|counts| {
            counts
                .iter()
                .filter(|(_, n)| *n == 0)
                .map(|(name, _)| *name)
                .collect()
        })
    }

    fn seconds(&self) -> f64 {
        self.report.elapsed.as_secs_f64().max(1e-9)
    }

    /// The summary as one JSON document; `driver` is the driver's short name.
    pub fn to_json(&self, driver: &str) -> Value {
        let (selection, report, statements) = (self.selection, self.report, self.statements);
        let seconds = self.seconds();
        json!({
            "driver": driver,
            "suite": format!("{:?}", selection.suite).to_lowercase(),
            "seed": selection.seed,
            "shard": selection.shard.to_string(),
            "proptest_cases": selection.with_property().then_some(selection.cases),
            "config": selection.config,
            "traces": report.traces,
            "steps": report.tally.steps,
            "seconds": report.elapsed.as_secs_f64(),
            "traces_per_second": report.traces as f64 / seconds,
            "steps_per_second": report.tally.steps as f64 / seconds,
            "verdicts": report.tally.verdicts,
            "actions": report.tally.actions,
            "reasons_never_hit": self.reasons_never(),
            "sql_statements": statements.as_ref().map(|counts| json!({
                "hit": counts.iter().filter(|(_, n)| *n > 0).count(),
                "total": counts.len(),
                "never_hit": self.statements_never(),
                "executions": counts.iter().map(|(name, n)| (name.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            })).unwrap_or_else(|| json!("not available: the implementation runs in another process")),
            "divergences": report.divergences.len(),
            "first_divergence": report.divergences.first().map(Divergence::render),
        })
    }

    /// The summary as text, under `heading`.
    pub fn render(&self, heading: &str) -> String {
        let (selection, report) = (self.selection, self.report);
        let seconds = self.seconds();
        let mut out = String::new();
        let _ = writeln!(out, "{heading}");
        let _ = writeln!(
            out,
            "  configuration   {}",
            describe_config(&selection.config)
        );
        if let Some(cover) = self
            .batches
            .iter()
            .find(|b| b.traces.iter().any(|t| t.generator == "cover"))
        {
            let _ = writeln!(
                out,
                "  cover config    {}",
                describe_config(&cover.model.config)
            );
        }
        if selection.suite == Suite::Proptest {
            let _ = writeln!(
                out,
                "  suite           Proptest (seed {}, {} cases of up to {} steps)",
                selection.seed, selection.cases, selection.walk_len
            );
        } else if selection.suite == Suite::All && selection.shard.index == 1 {
            let _ = writeln!(
                out,
                "  suite           All (seed {}, shard {}; proptest: {} cases of up to {} steps)",
                selection.seed, selection.shard, selection.cases, selection.walk_len
            );
        } else {
            let _ = writeln!(
                out,
                "  suite           {:?} (seed {}, shard {})",
                selection.suite, selection.seed, selection.shard
            );
        }
        let _ = writeln!(out, "  traces          {}", report.traces);
        let _ = writeln!(out, "  steps           {}", report.tally.steps);
        let _ = writeln!(
            out,
            "  time            {:.1} s ({:.0} traces/s, {:.0} steps/s)",
            report.elapsed.as_secs_f64(),
            report.traces as f64 / seconds,
            report.tally.steps as f64 / seconds
        );
        let _ = writeln!(out, "  verdicts");
        write_counts(&mut out, &report.tally.verdicts);
        let _ = writeln!(
            out,
            "  transitions by action kind ({} kinds)",
            self.action_kinds().len()
        );
        write_counts(&mut out, &report.tally.actions);
        let reasons_never = self.reasons_never();
        if reasons_never.is_empty() {
            let _ = writeln!(out, "  rejection reasons never hit: none");
        } else {
            let _ = writeln!(
                out,
                "  rejection reasons never hit: {}",
                reasons_never.join(", ")
            );
        }
        match (self.statements, &self.statements_never()) {
            (Some(counts), Some(never)) => {
                let _ = writeln!(
                    out,
                    "  SQL statements hit: {}/{}",
                    counts.len() - never.len(),
                    counts.len()
                );
                if never.is_empty() {
                    let _ = writeln!(out, "  SQL statements never hit: none");
                } else {
                    let _ = writeln!(out, "  SQL statements never hit: {}", never.join(", "));
                }
            }
            _ => {
                let _ = writeln!(
                    out,
                    "  SQL statement coverage: not available (the implementation runs in \
                     another process: --http, --driver-cmd)"
                );
            }
        }
        let _ = writeln!(out, "  divergences     {}", report.divergences.len());
        out
    }
}

fn write_counts(out: &mut String, counts: &BTreeMap<String, u64>) {
    for (k, v) in counts {
        let _ = writeln!(out, "    {k:<28} {v:>9}");
    }
}

/// A configuration in one line.
pub fn describe_config(c: &Config) -> String {
    format!(
        "{} jobs, {} runners{}, {} attempts/job, lease ttl {} ticks, {} target",
        c.jobs,
        c.runners,
        if c.outsider { " + outsider" } else { "" },
        c.attempts_per_job,
        c.lease_ttl,
        c.target
    )
}
