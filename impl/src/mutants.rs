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
    // The mutants below are the slips the conformance suite's blind classes let through
    // (docs/conformance.md, "Coverage by class"); each changes one predicate, comparison or
    // expression of one statement (`Mutant::substitution`), and `conform` kills it.
    /// Class 1: a `cancelled` result is accepted while the job is `running` (the statement's
    /// `j.state = 'cancelling'` condition dropped).
    CancelledResultWhileRunning,
    /// Class 2: the attempt named by a rejected message is looked up without its job, so a tuple
    /// naming another job's attempt passes check 4 and fails a later one.
    AttemptLookupIgnoresJob,
    /// Class 3: `reconcile` with `retry` ignores a cancel request (its `-- guard: cancel` dropped).
    RetryIgnoresCancelRequest,
    /// Class 5: `rejoin` answers `continue` instead of `cancel` (`'cancelled'` for `'cancelling'`).
    RejoinMissesCancel,
    /// Class 5: the observation records the receipt time as the runner's time.
    ObservationRunnerTimeIsReceipt,
    /// Class 6: a claim takes the latest queued job instead of the earliest.
    ClaimTakesLatestJob,
    /// Class 7: `cancel` on an `uncertain` job requests the cancel instead of `reconcile_required`.
    CancelOnUncertainRequests,
    /// Class 7: `reconcile` with `abort` also aborts a `running` job (not only an `uncertain` one).
    AbortWithoutUncertain,
    /// Class 4: the `idempotent` target records a deployment with an upsert, so a repeat of a
    /// deployment id is applied again (accepted) instead of acknowledged.
    IdempotentRepeatReapplies,
    /// Class 4 (issue 13): the `fenced` target refuses a mutation carrying the highest token it
    /// applied (`<` for `<=`), so a holder's second mutation, or a repeat, is refused.
    FencedTargetRefusesSameToken,
    /// Class 7 (issue 18, R8): the side-effect gate `attempt_authorize_side_effect` loses its
    /// `-- guard: fence` predicate, so a log append, artifact put or cache put naming the attempt
    /// with another fence (a stale worker's copied tuple) is accepted instead of
    /// `fence_mismatch`.
    SideEffectIgnoresFence,
    // Issue 28 item 4: the statements the server runs every minute that the suite once left
    // unreplayed.
    /// The expiry sweep over every project (`project` NULL: what the server's background sweeper
    /// runs) matches no job: `($2::uuid IS NULL OR j.project_id = $2)` loses its first branch.
    GlobalSweepNoOp,
    /// The batch result's statement tries the last of one job's items first (`DISTINCT ON` keeps
    /// the highest position), so of two results for one job in one batch the second wins.
    BatchResultsReverseOrder,
    /// The batch result's statement accepts `cancelled` while the job is `running` (its
    /// `j.state = 'cancelling'` condition dropped; the single result's statement keeps it).
    BatchResultCancelledWhileRunning,
    /// `cache put` over an existing entry keeps the first storer's attempt (the upsert no longer
    /// sets `stored_by_attempt`).
    CacheKeepsFirstStorer,
    /// Issue 39 item 7: authentication reads a revoked runner's token hash too (the statement's
    /// `revoked_at IS NULL` dropped), so a revoked runner's heartbeat, result or claim is judged
    /// as if it had never been revoked; `conform`'s revocation walks and probes kill it.
    RevokedRunnerAuthenticates,
    /// Issue 39 item 7: the batch claim stops at busy slots: of the K earliest queued jobs it
    /// takes those whose slot is free, and never reaches past them (the claim's `beyond` step
    /// dropped), so a batch takes fewer jobs than the rule's K earliest claimable.
    BatchStopsAtBusySlot,
    /// Issue 39 item 6: the claim issues its fences and slot tokens without the epoch (the
    /// epoch base multiplied by 0: the wait after an epoch change is kept), so the claim again of
    /// a job whose claim a failover lost issues the lost claim's fence and token again;
    /// `conform`'s failover walks kill it.
    ClaimIgnoresEpoch,
    /// Issue 39: the claims do not wait after an epoch change: the new epoch's first claim still
    /// records it and takes nothing, but a claim during the wait (`claim_epoch` answering NULL)
    /// takes a job in the current epoch; `conform`'s claims held by the wait
    /// (`probe-failover-wait-*`) kill it.
    ClaimWithoutWait,
    /// Issue 39: the wait after an epoch change leaves out its 2δ: a claim during the wait takes
    /// a job once `began_at + max_lease_ttl` has passed (the claim's epoch taken from the epoch's
    /// row when `claim_epoch` answers NULL past that point); `conform`'s claims held at the
    /// wait's last tick, in the failover walks with replica clocks (`probe-failover-wait-*`),
    /// kill it.
    WaitWithoutClockSkew,
    /// Issue 39: the wait after an epoch change lasts a moment too long: a claim received at its
    /// very end (`began_at + max_lease_ttl + 2δ`) takes nothing (`<=` for `<`); `conform`'s claims
    /// at the wait's end (`probe-failover-wait-end-*`) kill it.
    WaitEndsLate,
    /// Issue 39 item 7: the expiry sweep acts δ past a lease instead of 2δ (its margin's factor 2
    /// dropped), so with replicas' clocks apart it can make a job uncertain while another
    /// replica still renews its lease; `conform`'s replica-clock walks kill it.
    SweepAtOneSkew,
    /// Issue 39: the expiry sweep acts a moment after its margin ends (`<` for `<=`): a lease
    /// expired by exactly 2δ is not swept; `conform`'s sweeps at the margin's end
    /// (`probe-replica-sweep-end-*`) kill it (so does any walk that sweeps at the very moment a
    /// lease becomes sweepable).
    SweepEndsLate,
    /// Issue 39 item 7: the prune's audited guard reads the job's own ledger position instead of
    /// its last record's (`AND ledger.last_record <= …` dropped), so a finished job whose result
    /// lies above the audit watermark is pruned without `--unaudited`; `conform`'s pruned walks
    /// (the audit `--since` after the prune) kill it.
    PruneGuardReadsOwnPosition,
    /// Issue 39 item 7: the operator's read of a cache entry joins the attempt that stored it
    /// (`JOIN` for `LEFT JOIN`), so an entry whose storer's job was pruned reads as missing;
    /// `conform`'s pruned walks kill it.
    CacheReadLosesPrunedStorer,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 34] = [
        Mutant::NoFencePredicateOnCompletion,
        Mutant::NoLeasePredicate,
        Mutant::HeartbeatIgnoresExpiry,
        Mutant::ExpiryRequeues,
        Mutant::ConflictOverwrites,
        Mutant::DuplicateNotAcknowledged,
        Mutant::NoProjectCheck,
        Mutant::RunnerClockDecidesExpiry,
        Mutant::LateReportDropped,
        Mutant::CancelledResultWhileRunning,
        Mutant::AttemptLookupIgnoresJob,
        Mutant::RetryIgnoresCancelRequest,
        Mutant::RejoinMissesCancel,
        Mutant::ObservationRunnerTimeIsReceipt,
        Mutant::ClaimTakesLatestJob,
        Mutant::CancelOnUncertainRequests,
        Mutant::AbortWithoutUncertain,
        Mutant::IdempotentRepeatReapplies,
        Mutant::FencedTargetRefusesSameToken,
        Mutant::SideEffectIgnoresFence,
        Mutant::GlobalSweepNoOp,
        Mutant::BatchResultsReverseOrder,
        Mutant::BatchResultCancelledWhileRunning,
        Mutant::CacheKeepsFirstStorer,
        Mutant::RevokedRunnerAuthenticates,
        Mutant::BatchStopsAtBusySlot,
        Mutant::ClaimIgnoresEpoch,
        Mutant::ClaimWithoutWait,
        Mutant::WaitWithoutClockSkew,
        Mutant::WaitEndsLate,
        Mutant::SweepAtOneSkew,
        Mutant::SweepEndsLate,
        Mutant::PruneGuardReadsOwnPosition,
        Mutant::CacheReadLosesPrunedStorer,
    ];

    /// Whether the implementation's own mutant tests (impl/tests/mutants.rs) name a check that
    /// kills it; the others are killed by `leasewright conform` (docs/conformance.md).
    pub fn killed_by_impl_tests(self) -> bool {
        Mutant::ALL[..9].contains(&self)
    }

    /// The change this mutant makes to a statement: (statement, text, replacement), the text
    /// occurring exactly once in the statement; one statement, or each statement that calls one
    /// server-side function the mutant stands for a slip in.
    fn substitutions(self) -> &'static [(&'static str, &'static str, &'static str)] {
        match self {
            Mutant::CancelledResultWhileRunning => &[(
                "attempt_commit_result_if_current",
                "OR (j.state = 'cancelling' AND $7 = 'cancelled'))",
                "OR $7 = 'cancelled')",
            )],
            Mutant::AttemptLookupIgnoresJob => &[(
                "attempt_select_of_job",
                "WHERE id = $1 AND job_id = $2",
                "WHERE id = $1",
            )],
            Mutant::RejoinMissesCancel => &[(
                "attempt_authorize_rejoin",
                "j.state = 'cancelling' AS cancel",
                "j.state = 'cancelled' AS cancel",
            )],
            Mutant::ObservationRunnerTimeIsReceipt => {
                &[("observation_record", "$7, $8, $9, $10", "$7, $8, $8, $10")]
            }
            Mutant::ClaimTakesLatestJob => &[(
                "claim",
                "ORDER BY j.submitted_seq",
                "ORDER BY j.submitted_seq DESC",
            )],
            Mutant::CancelOnUncertainRequests => &[(
                "job_request_cancel_if_running",
                "AND state = 'running'",
                "AND state IN ('running', 'uncertain')",
            )],
            Mutant::AbortWithoutUncertain => &[(
                "job_abort_if_uncertain_and_stopped",
                "AND j.state = 'uncertain'",
                "AND j.state IN ('uncertain', 'running')",
            )],
            Mutant::IdempotentRepeatReapplies => &[(
                "target_idempotent_apply_once",
                "DO NOTHING",
                "DO UPDATE SET applied_at = EXCLUDED.applied_at",
            )],
            Mutant::FencedTargetRefusesSameToken => &[(
                "target_fenced_apply_if_not_stale",
                "highest_slot_token <= $2",
                "highest_slot_token < $2",
            )],
            Mutant::GlobalSweepNoOp => &[(
                "job_make_uncertain_if_lease_expired",
                "AND ($2::uuid IS NULL OR j.project_id = $2)",
                "AND j.project_id = $2",
            )],
            Mutant::BatchResultsReverseOrder => &[(
                "attempt_commit_results_if_current",
                "ORDER BY i.job, i.position\n",
                "ORDER BY i.job, i.position DESC\n",
            )],
            Mutant::BatchResultCancelledWhileRunning => &[(
                "attempt_commit_results_if_current",
                "OR (j.state = 'cancelling' AND i.outcome = 'cancelled'))",
                "OR i.outcome = 'cancelled')",
            )],
            Mutant::CacheKeepsFirstStorer => &[(
                "cache_entry_put",
                "stored_by_attempt = EXCLUDED.stored_by_attempt, ",
                "",
            )],
            Mutant::SweepAtOneSkew => &[(
                "job_make_uncertain_if_lease_expired",
                "AND a.lease_expiry <= $1 - 2 * coalesce(",
                "AND a.lease_expiry <= $1 - coalesce(",
            )],
            Mutant::SweepEndsLate => &[(
                "job_make_uncertain_if_lease_expired",
                "AND a.lease_expiry <= $1 - 2 * coalesce(",
                "AND a.lease_expiry < $1 - 2 * coalesce(",
            )],
            Mutant::ClaimIgnoresEpoch => &[(
                "claim",
                "SELECT claim_epoch($3) * 4294967296 AS base",
                "SELECT claim_epoch($3) * 0 AS base",
            )],
            Mutant::ClaimWithoutWait => &[(
                "claim",
                "SELECT claim_epoch($3) * 4294967296 AS base",
                "SELECT coalesce(claim_epoch($3), current_epoch()) * 4294967296 AS base",
            )],
            // A slip in the function `claim_epoch` (impl/sql/functions/claim.sql), made in both
            // statements that call it: the claim, and the job-by-job path's `claim_epoch`.
            Mutant::WaitWithoutClockSkew => &[
                (
                    "claim",
                    "SELECT claim_epoch($3) * 4294967296 AS base",
                    "SELECT coalesce(claim_epoch($3), (SELECT e.epoch \
                     FROM epochs AS e, lease_policy AS p WHERE e.epoch = current_epoch() AND p.id \
                     AND $3 >= e.began_at + p.max_lease_ttl)) * 4294967296 AS base",
                ),
                (
                    "claim_epoch",
                    "SELECT claim_epoch($1) AS epoch",
                    "SELECT coalesce(claim_epoch($1), (SELECT e.epoch \
                     FROM epochs AS e, lease_policy AS p WHERE e.epoch = current_epoch() AND p.id \
                     AND $1 >= e.began_at + p.max_lease_ttl)) AS epoch",
                ),
            ],
            Mutant::WaitEndsLate => &[
                (
                    "claim",
                    "SELECT claim_epoch($3) * 4294967296 AS base",
                    "SELECT (CASE WHEN EXISTS (SELECT 1 FROM epochs AS e, lease_policy AS p \
                     WHERE e.epoch = current_epoch() AND p.id \
                     AND $3 = e.began_at + p.max_lease_ttl + 2 * p.max_clock_skew) \
                     THEN NULL ELSE claim_epoch($3) END) * 4294967296 AS base",
                ),
                (
                    "claim_epoch",
                    "SELECT claim_epoch($1) AS epoch",
                    "SELECT CASE WHEN EXISTS (SELECT 1 FROM epochs AS e, lease_policy AS p \
                     WHERE e.epoch = current_epoch() AND p.id \
                     AND $1 = e.began_at + p.max_lease_ttl + 2 * p.max_clock_skew) \
                     THEN NULL ELSE claim_epoch($1) END AS epoch",
                ),
            ],
            Mutant::BatchStopsAtBusySlot => &[(
                "claim",
                "WHERE (SELECT count(*) FROM head_free) < $2",
                "WHERE false",
            )],
            Mutant::PruneGuardReadsOwnPosition => &[(
                "job_lock_finished_before",
                "\n              AND ledger.last_record <= coalesce($2, -1)))",
                "))",
            )],
            Mutant::CacheReadLosesPrunedStorer => &[(
                "cache_entry_select_storer",
                "LEFT JOIN attempts",
                "JOIN attempts",
            )],
            Mutant::RevokedRunnerAuthenticates => &[(
                "runner_select_token_hash",
                "WHERE id = $1 AND revoked_at IS NULL",
                "WHERE id = $1",
            )],
            _ => &[],
        }
    }

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
            Mutant::RetryIgnoresCancelRequest => {
                Some(("cancel", Some(&["job_requeue_if_uncertain_and_stopped"])))
            }
            Mutant::SideEffectIgnoresFence => {
                Some(("fence", Some(&["attempt_authorize_side_effect"])))
            }
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

/// The text a mutant changes: the statement's, except for `claim`, whose statement calls the
/// server-side function of impl/sql/functions/claim.sql: there it is the function's one statement
/// (with the same parameters $1..$4), which the mutant build then sends as a statement of its own.
fn changeable_text(statement: Statement) -> &'static str {
    if statement.name == crate::sql::CLAIM.name {
        crate::sql::returned_query(crate::sql::CLAIM_FUNCTION_SOURCE)
            .expect("impl/sql/functions/claim.sql defines claim as RETURN QUERY ... END")
    } else {
        statement.text
    }
}

type Cache = Mutex<HashMap<(Mutant, &'static str), &'static str>>;

/// The text of `statement` under `mutant`: with the mutant's one substitution, or with the lines
/// marked with the removed guard dropped.
pub(crate) fn statement_text(mutant: Option<Mutant>, statement: Statement) -> &'static str {
    let Some(mutant) = mutant else {
        return statement.text;
    };
    let substitution = mutant
        .substitutions()
        .iter()
        .find(|(name, _, _)| *name == statement.name);
    let changed = match (substitution, mutant.removed_guard()) {
        (Some(_), _) => true,
        (None, _) if !mutant.substitutions().is_empty() => return statement.text,
        (None, Some((_, Some(names)))) if !names.contains(&statement.name) => {
            return statement.text
        }
        (None, Some(_)) => true,
        (None, None) => false,
    };
    if !changed {
        return statement.text;
    }
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    cache.entry((mutant, statement.name)).or_insert_with(|| {
        let text = match (substitution, mutant.removed_guard()) {
            (Some((_, from, to)), _) => {
                let original = changeable_text(statement);
                assert_eq!(
                    original.matches(from).count(),
                    1,
                    "{mutant:?}: `{from}` must occur once in {}",
                    statement.name
                );
                original.replacen(from, to, 1)
            }
            (None, Some((label, _))) => {
                let marker = format!("-- guard: {label}");
                statement
                    .text
                    .lines()
                    .filter(|line| !line.trim_end().ends_with(&marker))
                    .map(|line| format!("{line}\n"))
                    .collect()
            }
            (None, None) => unreachable!("an unchanged statement is returned above"),
        };
        // Leaked once per (mutant, statement): test-only and bounded.
        Box::leak(text.into_boxed_str())
    })
}
