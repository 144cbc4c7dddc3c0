//! Deliberately broken rules (feature `mutants`, off by default), for mutation testing: each
//! [`Mutant`] removes exactly one rule, so a test suite (impl/tests/mutants.rs, and later the
//! conformance suite) can show that some check fails without it. With the feature off none of
//! this is compiled and the production code path is unchanged.

use crate::sql::Statement;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

/// One rule removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// `attempt_commit_result_if_current` loses its `-- guard: fence` predicate.
    NoFencePredicateOnCompletion,
    /// Every tuple statement loses its `-- guard: lease` predicate.
    NoLeasePredicate,
    /// `attempt_heartbeat_if_current` loses its `-- guard: expiry` predicate.
    HeartbeatIgnoresExpiry,
    /// The expiry sweep runs `job_requeue_if_lease_expired` instead of
    /// `job_make_uncertain_if_lease_expired`.
    ExpiryRequeues,
    /// A `conflicting_result` overwrites the committed outcome (`attempt_overwrite_outcome`).
    ConflictOverwrites,
    /// An identical repeated result is rejected `conflicting_result` instead of acknowledged.
    DuplicateNotAcknowledged,
    /// Every statement loses its `-- guard: project` predicate.
    NoProjectCheck,
    /// Leases are judged by the runner's observed time instead of the server's receipt time.
    RunnerClockDecidesExpiry,
    /// A late report (`not_current`) is not recorded as an observation.
    LateReportDropped,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 9] = [
        Mutant::NoFencePredicateOnCompletion,
        Mutant::NoLeasePredicate,
        Mutant::HeartbeatIgnoresExpiry,
        Mutant::ExpiryRequeues,
        Mutant::ConflictOverwrites,
        Mutant::DuplicateNotAcknowledged,
        Mutant::NoProjectCheck,
        Mutant::RunnerClockDecidesExpiry,
        Mutant::LateReportDropped,
    ];

    /// The guard label this mutant removes, and from which statements (`None`: all).
    fn removed_guard(self) -> Option<(&'static str, Option<&'static [&'static str]>)> {
        match self {
            Mutant::NoFencePredicateOnCompletion => {
                Some(("fence", Some(&["attempt_commit_result_if_current"])))
            }
            Mutant::NoLeasePredicate => Some(("lease", None)),
            Mutant::HeartbeatIgnoresExpiry => {
                Some(("expiry", Some(&["attempt_heartbeat_if_current"])))
            }
            Mutant::NoProjectCheck => Some(("project", None)),
            _ => None,
        }
    }
}

pub(crate) const JOB_REQUEUE_IF_LEASE_EXPIRED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sql/mutants/job_requeue_if_lease_expired.sql"
));

pub(crate) const ATTEMPT_OVERWRITE_OUTCOME: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sql/mutants/attempt_overwrite_outcome.sql"
));

type Cache = Mutex<HashMap<(Mutant, &'static str), &'static str>>;

/// The text of `statement` under `mutant`: the lines marked with the removed guard are dropped.
pub(crate) fn statement_text(mutant: Option<Mutant>, statement: Statement) -> &'static str {
    let Some((label, only)) = mutant.and_then(Mutant::removed_guard) else {
        return statement.text;
    };
    if only.is_some_and(|names| !names.contains(&statement.name)) {
        return statement.text;
    }
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (mutant.unwrap_or(Mutant::NoProjectCheck), statement.name);
    cache.entry(key).or_insert_with(|| {
        let marker = format!("-- guard: {label}");
        let text: String = statement
            .text
            .lines()
            .filter(|line| !line.trim_end().ends_with(&marker))
            .map(|line| format!("{line}\n"))
            .collect();
        // Leaked once per (mutant, statement): test-only and bounded.
        Box::leak(text.into_boxed_str())
    })
}
