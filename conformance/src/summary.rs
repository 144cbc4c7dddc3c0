//! The summary of a run: what it replayed, the verdicts and actions it exercised, the rejection
//! reasons and SQL statements it never hit, as text a person reads and as one JSON document.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use leasewright_model::{Config, Reason};
use serde::Serialize;
use serde_json::{json, Value};

use crate::coverage::{products, Coverage};
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
    /// The parts of the projection the driver cannot read, so never compared
    /// ([`crate::suite::SuiteDriver::not_compared`]).
    pub not_compared: &'a [crate::driver::Part],
}

/// One class of the coverage report: the cells hit, and the rest of the class's product split
/// into never exercised (reachable: some probe candidate or replayed step gets there) and
/// unreachable in the replayed configurations.
#[derive(Debug, Default, Serialize)]
pub struct ClassReport {
    /// Cells of the product.
    pub product: usize,
    /// Cells some step can reach (`None`: no probes ran, so reachability is unknown).
    pub reachable: Option<usize>,
    /// Cells hit.
    pub hit: usize,
    /// Reachable cells no replayed step exercised: a gap of the suite.
    pub never_exercised: Vec<String>,
    /// Cells of the product that no replayed configuration can reach.
    pub unreachable: Vec<String>,
}

/// The two-job situations the default suite must replay (class 6), as the start of a cell name.
pub const TWO_JOB_SITUATIONS: [(&str, &str); 3] = [
    ("claim order", "claim with jobs [running"),
    (
        "a runner moves to the other job",
        "a runner that held job 0 claims again, takes job 1",
    ),
    (
        "an old job's message from a runner now on the other job",
        "naming job 0 from a runner now on job 1",
    ),
];

/// The coverage report of `coverage`, judged against `reachable` (if known).
pub fn class_reports(
    coverage: &Coverage,
    reachable: Option<&Coverage>,
) -> BTreeMap<&'static str, ClassReport> {
    let mut out = BTreeMap::new();
    let hits: BTreeMap<&str, &super::coverage::Cells> = coverage.classes().into_iter().collect();
    let known: Option<BTreeMap<&str, &super::coverage::Cells>> =
        reachable.map(|r| r.classes().into_iter().collect());
    for (class, product) in products() {
        let hit = hits[class];
        let hit_in = |cell: &String| match class {
            "targets" => hit.get(cell).is_some_and(|v| v.contains_key("replayed")),
            _ => hit.contains_key(cell),
        };
        let can_reach = |cell: &String| {
            hit_in(cell) || known.as_ref().is_some_and(|k| k[class].contains_key(cell))
        };
        let mut report = ClassReport {
            product: product.len(),
            reachable: known
                .as_ref()
                .map(|_| product.iter().filter(|c| can_reach(c)).count()),
            hit: product.iter().filter(|c| hit_in(c)).count(),
            ..ClassReport::default()
        };
        for cell in &product {
            if hit_in(cell) {
                continue;
            }
            if class == "targets" || known.is_none() || can_reach(cell) {
                report.never_exercised.push(cell.clone());
            } else {
                report.unreachable.push(cell.clone());
            }
        }
        out.insert(class, report);
    }
    let two = hits["two_jobs"];
    let mut report = ClassReport {
        product: TWO_JOB_SITUATIONS.len(),
        ..ClassReport::default()
    };
    for (name, start) in TWO_JOB_SITUATIONS {
        if two.keys().any(|k| k.contains(start)) {
            report.hit += 1;
        } else {
            report.never_exercised.push(name.to_string());
        }
    }
    out.insert("two_jobs", report);
    let shared = hits["shared_slots"];
    let mut report = ClassReport {
        product: SHARED_SLOT_SITUATIONS.len(),
        ..ClassReport::default()
    };
    for (name, start) in SHARED_SLOT_SITUATIONS {
        if shared.keys().any(|k| k.contains(start)) {
            report.hit += 1;
        } else {
            report.never_exercised.push(name.to_string());
        }
    }
    out.insert("shared_slots", report);
    out
}

/// The shared-slot situations (issue 13) the default suite must exercise: (name, what the
/// coverage cell starts with).
pub const SHARED_SLOT_SITUATIONS: [(&str, &str); 5] = [
    (
        "a claim blocked by a same-project job holding the slot",
        "claim blocked: the slot is held by a same-project job",
    ),
    (
        "a claim blocked by another project's job holding the slot",
        "claim blocked: the slot is held by another project's job",
    ),
    (
        "a claim blocked by an uncertain job's reservation",
        "job (uncertain)",
    ),
    (
        "a stale token refused after another job's mutation",
        "token below the highest",
    ),
    (
        "a later holder's lower job fence accepted after another job's mutation",
        "token at or above the highest, job fence below theirs",
    ),
];

impl Summary<'_> {
    /// What the generated traces exercised, by class (the property suite keeps no traces).
    pub fn coverage(&self) -> Coverage {
        let mut coverage = Coverage::default();
        for batch in self.batches {
            for trace in &batch.traces {
                let mut before = &trace.init;
                for (action, after) in &trace.steps {
                    coverage.record(&batch.model, before, action, after);
                    before = after;
                }
            }
        }
        coverage
    }

    /// The cells the probes found reachable, if probes ran.
    fn reachable(&self) -> Option<Coverage> {
        let mut reachable: Option<Coverage> = None;
        for r in self.batches.iter().filter_map(|b| b.reachable.as_ref()) {
            reachable.get_or_insert_with(Coverage::default).absorb(r);
        }
        reachable
    }

    /// The coverage report by class.
    pub fn class_reports(&self) -> BTreeMap<&'static str, ClassReport> {
        class_reports(&self.coverage(), self.reachable().as_ref())
    }

    /// Whether some class has a cell never exercised.
    pub fn has_gaps(&self) -> bool {
        self.class_reports()
            .values()
            .any(|r| !r.never_exercised.is_empty())
    }

    fn notes(&self) -> Vec<&str> {
        self.batches
            .iter()
            .filter_map(|b| b.note.as_deref())
            .collect()
    }

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
            "batch_claims": report.tally.batch_claims,
            "batch_results": report.tally.batch_results,
            "reasons_never_hit": self.reasons_never(),
            "sql_statements": statements.as_ref().map(|counts| json!({
                "hit": counts.iter().filter(|(_, n)| *n > 0).count(),
                "total": counts.len(),
                "never_hit": self.statements_never(),
                "never_hit_why": self.statements_never().map(|never| never.iter().map(|name| json!({
                    "statement": name,
                    "why": unreached_why(name),
                })).collect::<Vec<_>>()),
                "executions": counts.iter().map(|(name, n)| (name.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            })).unwrap_or_else(|| json!("not available: the implementation runs in another process")),
            "not_compared": self.not_compared.iter().map(|p| p.describe()).collect::<Vec<_>>(),
            "coverage": {
                "classes": self.class_reports(),
                "cells": self.coverage(),
                "sampled": self.notes(),
            },
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
        let _ = writeln!(
            out,
            "  batch claims    {}",
            report.tally.batch_claims.describe()
        );
        let _ = writeln!(
            out,
            "  batch results   {}",
            report.tally.batch_results.describe()
        );
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
                let unexplained: Vec<&str> = never
                    .iter()
                    .copied()
                    .filter(|n| unreached_why(n).is_none())
                    .collect();
                if unexplained.is_empty() {
                    let _ = writeln!(out, "  SQL statements never hit without a reason: none");
                } else {
                    let _ = writeln!(
                        out,
                        "  SQL statements never hit without a reason: {}",
                        unexplained.join(", ")
                    );
                }
                if never.is_empty() {
                    let _ = writeln!(out, "  SQL statements never hit: none");
                } else {
                    let _ = writeln!(out, "  SQL statements never hit ({}):", never.len());
                    for name in never {
                        let _ = writeln!(
                            out,
                            "    {name}: {}",
                            unreached_why(name).unwrap_or("NO REASON: a gap of the suite")
                        );
                    }
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
        if self.not_compared.is_empty() {
            let _ = writeln!(out, "  fields not compared over this driver: none");
        } else {
            let parts: Vec<&str> = self.not_compared.iter().map(|p| p.describe()).collect();
            let _ = writeln!(
                out,
                "  fields not compared over this driver (it cannot read them): {}",
                parts.join("; ")
            );
        }
        let _ = writeln!(
            out,
            "  coverage by class (docs/conformance.md; --json lists every cell)"
        );
        for (class, r) in self.class_reports() {
            let reach = r
                .reachable
                .map(|n| format!(" of {n} reachable,"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {class:<14} {} hit{reach} {} in the product; never exercised: {}",
                r.hit,
                r.product,
                if r.never_exercised.is_empty() {
                    "none".to_string()
                } else {
                    r.never_exercised.join("; ")
                }
            );
        }
        for note in self.notes() {
            let _ = writeln!(out, "  sampled         {note}");
        }
        let _ = writeln!(out, "  divergences     {}", report.divergences.len());
        out
    }
}

/// The statements no trace of the default suite can reach, each with why (issue 28 item 4): the
/// summary prints the reason beside a statement never hit, and names any statement never hit
/// without one.
pub const UNREACHED: &[(&str, &str)] = &[
    (
        "runner_revoke",
        "revoking a runner is an operator's act the model has no action for (docs/protocol.md \
         §6.1: a revoked token is refused at authentication, before any rule); \
         server/tests/operations.rs runs it",
    ),
    (
        "runner_select_page_of_project",
        "no rule: the operator's list of a project's runners (`op runners`); \
         cli/tests/operate.rs runs it",
    ),
    (
        "lease_policy_record_clock_skew",
        "records a server's δ: run by the random suite's replica-clock walks and the probe \
         suite's sweeps within the margin (in-process only: each in a schema of its own); \
         impl/tests/clock_skew.rs runs it too",
    ),
    (
        "runner_select_token_hash",
        "runner authentication by token is the HTTP server's: the in-process driver calls the Store \
         with runner ids (over --http the server runs it on every runner call)",
    ),
    (
        "observation_select_of_attempt",
        "a read-only view (an attempt's observations) the projection does not need: it reads \
         the job's observations",
    ),
    (
        "reconciliation_select_of_job",
        "a read-only view (a job's reconciliations) the projection does not need",
    ),
    (
        "database_select_replication",
        "no rule: what a session knows of its server (primary or standby, epoch), read by serve \
         (/healthz, /metrics, finding the primary); server/tests/failover.rs runs it",
    ),
    (
        "lease_policy_record",
        "runs once when a store opens (every server start), before the suite's count begins: \
         the driver opens its store before the first trace",
    ),
    (
        "epoch_select_current",
        "no rule: the current epoch as /healthz and `migrate` read it",
    ),
    (
        "epoch_advance",
        "a failover: run by the random suite's failover walks (random-failover-*) and the \
         failover probes, in-process and (through `POST /v1/test/failover`) in the server over \
         HTTP; impl/tests/epochs.rs runs it too",
    ),
    (
        "audit_watermark_record",
        "retention: run by the random suite's walks pruned between their jobs \
         (random-prune-*), in-process and (through `POST /v1/test/audit`) in the server over \
         HTTP; impl/tests/retention.rs runs \
         it too",
    ),
    (
        "audit_watermark_select",
        "retention: run by the random suite's walks pruned between their jobs \
         (random-prune-*), in-process and (through `POST /v1/test/audit`) in the server over \
         HTTP; impl/tests/retention.rs runs \
         it too",
    ),
    (
        "job_lock_finished_before",
        "retention: run by the random suite's walks pruned between their jobs \
         (random-prune-*), in-process and (through `POST /v1/test/audit`) in the server over \
         HTTP; impl/tests/retention.rs runs \
         it too",
    ),
    (
        "job_delete_with_ledger",
        "retention: run by the random suite's walks pruned between their jobs \
         (random-prune-*), in-process and (through `POST /v1/test/audit`) in the server over \
         HTTP; impl/tests/retention.rs runs \
         it too",
    ),
    (
        "job_count_finished_before_unaudited",
        "retention: run by the random suite's walks pruned between their jobs \
         (random-prune-*), in-process and (through `POST /v1/test/audit`) in the server over \
         HTTP; impl/tests/retention.rs runs \
         it too",
    ),
    (
        "job_count_unfinished_by_project_and_state",
        "no rule: the queue depth /metrics reads",
    ),
    (
        "job_pick_earliest_queued_with_free_target",
        "the claim's path past a slot a concurrent claim took after the claim statement's snapshot: \
         a trace replays one step at a time (impl/tests run two claims at once)",
    ),
    (
        "target_reserve_if_free",
        "the claim's path past a slot a concurrent claim took (see \
         job_pick_earliest_queued_with_free_target)",
    ),
    (
        "job_start_if_queued",
        "the claim's path past a slot a concurrent claim took (see \
         job_pick_earliest_queued_with_free_target)",
    ),
    (
        "attempt_insert_on_claim",
        "the claim's path past a slot a concurrent claim took (see \
         job_pick_earliest_queued_with_free_target)",
    ),
];

/// Why no trace of the default suite reaches the statement `name`, if that is known.
pub fn unreached_why(name: &str) -> Option<&'static str> {
    UNREACHED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
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

#[cfg(test)]
mod unreached_tests {
    use super::UNREACHED;

    /// Every statement the summary explains is one of the implementation's, named once.
    #[test]
    fn every_unreached_statement_is_a_statement_of_the_implementation() {
        let names: Vec<&str> = leasewright_impl::statement_counts()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        for (i, (name, why)) in UNREACHED.iter().enumerate() {
            assert!(names.contains(name), "{name} is no statement");
            assert!(!why.is_empty());
            assert!(
                UNREACHED[..i].iter().all(|(n, _)| n != name),
                "{name} twice"
            );
        }
    }
}
