//! Every SQL statement, loaded from `impl/sql/<name>.sql` at compile time. A statement's name is
//! the rule it enforces; guard predicates are marked `-- guard: <what>` at the end of their line
//! (the `mutants` feature removes exactly one kind of guard to prove a test notices).
//!
//! Every statement is issued through [`Statement::issue`], which counts it: [`statement_counts`]
//! tells how many times each was executed in this process (the conformance suite's statement
//! coverage). One relaxed atomic increment per statement; always on.

use std::sync::atomic::{AtomicU64, Ordering};

/// One named SQL statement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Statement {
    pub(crate) name: &'static str,
    pub(crate) text: &'static str,
    /// Its position in [`ALL`], which indexes its execution counter.
    ordinal: usize,
}

impl Statement {
    /// The statement's text, counted as one execution: call it where the statement is sent.
    /// (With the `mutants` feature every statement goes through the mutant-aware `sql()`s.)
    #[cfg_attr(feature = "mutants", allow(dead_code))]
    pub(crate) fn issue(self) -> &'static str {
        self.count();
        self.text
    }

    /// Counts one execution without taking the text (a caller that sends a variant of it).
    pub(crate) fn count(self) {
        EXECUTED[self.ordinal].fetch_add(1, Ordering::Relaxed);
    }
}

macro_rules! statements {
    ($($constant:ident = $file:literal;)+) => {
        /// The statements' ordinals, in the order they are declared.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        enum Ordinal {
            $($constant),+
        }

        $(
            pub(crate) const $constant: Statement = Statement {
                name: $file,
                text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $file, ".sql")),
                ordinal: Ordinal::$constant as usize,
            };
        )+

        /// Every statement, in declaration order (an ordinal is a position here).
        pub(crate) const ALL: &[Statement] = &[$($constant),+];
    };
}

statements! {
    PROJECT_INSERT = "project_insert";
    RUNNER_INSERT = "runner_insert";
    RUNNER_SELECT_PROJECT = "runner_select_project";
    RUNNER_SELECT_TOKEN_HASH = "runner_select_token_hash";
    RUNNER_REVOKE = "runner_revoke";
    RUNNER_SELECT_PAGE_OF_PROJECT = "runner_select_page_of_project";
    JOB_INSERT = "job_insert";
    JOB_LOCK = "job_lock";
    CLAIM = "claim";
    CLAIM_EPOCH = "claim_epoch";
    LEASE_POLICY_RECORD = "lease_policy_record";
    LEASE_POLICY_RECORD_CLOCK_SKEW = "lease_policy_record_clock_skew";
    EPOCH_SELECT_CURRENT = "epoch_select_current";
    EPOCH_ADVANCE = "epoch_advance";
    JOB_PICK_EARLIEST_QUEUED_WITH_FREE_TARGET = "job_pick_earliest_queued_with_free_target";
    TARGET_RESERVE_IF_FREE = "target_reserve_if_free";
    JOB_START_IF_QUEUED = "job_start_if_queued";
    ATTEMPT_INSERT_ON_CLAIM = "attempt_insert_on_claim";
    ATTEMPT_SELECT_OF_JOB = "attempt_select_of_job";
    ATTEMPT_HEARTBEAT_IF_CURRENT = "attempt_heartbeat_if_current";
    ATTEMPT_AUTHORIZE_REJOIN = "attempt_authorize_rejoin";
    ATTEMPT_AUTHORIZE_SIDE_EFFECT = "attempt_authorize_side_effect";
    ATTEMPT_COMMIT_RESULT_IF_CURRENT = "attempt_commit_result_if_current";
    ATTEMPT_COMMIT_RESULTS_IF_CURRENT = "attempt_commit_results_if_current";
    TARGET_RELEASE = "target_release";
    OBSERVATION_RECORD = "observation_record";
    JOB_SELECT_SOURCE = "job_select_source";
    ATTEMPT_BYTES_STORED = "attempt_bytes_stored";
    LOG_APPEND_ONCE = "log_append_once";
    LOG_SELECT_CHUNK_DIGEST = "log_select_chunk_digest";
    LOG_SELECT_OF_ATTEMPT = "log_select_of_attempt";
    ARTIFACT_PUT = "artifact_put";
    ARTIFACT_GET = "artifact_get";
    CACHE_ENTRY_PUT = "cache_entry_put";
    CACHE_ENTRY_GET = "cache_entry_get";
    CACHE_ENTRY_SELECT_STORER = "cache_entry_select_storer";
    JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED = "job_make_uncertain_if_lease_expired";
    JOB_CANCEL_IF_QUEUED = "job_cancel_if_queued";
    JOB_REQUEST_CANCEL_IF_RUNNING = "job_request_cancel_if_running";
    CANCEL_RECORD = "cancel_record";
    JOB_REQUEUE_IF_UNCERTAIN_AND_STOPPED = "job_requeue_if_uncertain_and_stopped";
    JOB_ABORT_IF_UNCERTAIN_AND_STOPPED = "job_abort_if_uncertain_and_stopped";
    JOB_ADOPT_IF_UNCERTAIN_AND_OBSERVED = "job_adopt_if_uncertain_and_observed";
    ATTEMPT_STOP_AFTER_RECONCILE = "attempt_stop_after_reconcile";
    ATTEMPT_ADOPT_OUTCOME = "attempt_adopt_outcome";
    RECONCILIATION_RECORD = "reconciliation_record";
    JOB_SELECT_VIEW = "job_select_view";
    ATTEMPT_SELECT_VIEWS_OF_JOB = "attempt_select_views_of_job";
    OBSERVATION_SELECT_OF_JOB = "observation_select_of_job";
    OBSERVATION_SELECT_OF_ATTEMPT = "observation_select_of_attempt";
    OBSERVATION_SELECT_SECURITY_LOG = "observation_select_security_log";
    RECONCILIATION_SELECT_OF_JOB = "reconciliation_select_of_job";
    TARGET_RESERVATION_SELECT_OF_JOB = "target_reservation_select_of_job";
    TARGET_ENSURE = "target_ensure";
    TARGET_LOCK = "target_lock";
    TARGET_FENCED_APPLY_IF_NOT_STALE = "target_fenced_apply_if_not_stale";
    TARGET_IDEMPOTENT_APPLY_ONCE = "target_idempotent_apply_once";
    TARGET_COUNT_APPLICATION = "target_count_application";
    TARGET_MUTATION_RECORD = "target_mutation_record";
    DATABASE_SELECT_REPLICATION = "database_select_replication";
    AUDIT_WATERMARK_RECORD = "audit_watermark_record";
    AUDIT_WATERMARK_SELECT = "audit_watermark_select";
    JOB_LOCK_FINISHED_BEFORE = "job_lock_finished_before";
    JOB_DELETE_WITH_LEDGER = "job_delete_with_ledger";
    JOB_COUNT_FINISHED_BEFORE_UNAUDITED = "job_count_finished_before_unaudited";
    JOB_COUNT_UNFINISHED_BY_PROJECT_AND_STATE = "job_count_unfinished_by_project_and_state";
}

/// The source of impl/sql/functions/claim.sql, which defines the server-side function `claim` (the
/// statement `claim` calls it), last in the file.
#[cfg(any(test, feature = "mutants"))]
pub(crate) const CLAIM_FUNCTION_SOURCE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sql/functions/claim.sql"
));

/// The one statement of a PL/pgSQL function whose body is `RETURN QUERY <statement>;` (as in
/// `claim`), from the file that defines it: the text after
/// `RETURN QUERY` up to the last `;` before `END`.
#[cfg(any(test, feature = "mutants"))]
pub(crate) fn returned_query(source: &str) -> Option<&str> {
    let start = source.find("RETURN QUERY")? + "RETURN QUERY".len();
    let end = start + source[start..].rfind("END")?;
    let statement = source[start..end].trim_end();
    Some(statement.strip_suffix(';')?.trim())
}

/// How many times each statement was executed, indexed by its ordinal.
static EXECUTED: [AtomicU64; ALL.len()] = [const { AtomicU64::new(0) }; ALL.len()];

/// Every named SQL statement (its file name in impl/sql without `.sql`) with the number of times
/// this process executed it, in declaration order; statements never executed are listed with 0.
///
/// The counters are process-global and never reset: they count every [`crate::Store`] and
/// [`crate::DemoTarget`] of the process. A statement counts when it is sent, whether or not it
/// then touched a row (a conditional statement that matched nothing was still executed) or failed.
/// To measure one piece of work, take the difference of two snapshots.
pub fn statement_counts() -> Vec<(&'static str, u64)> {
    ALL.iter()
        .map(|statement| {
            (
                statement.name,
                EXECUTED[statement.ordinal].load(Ordering::Relaxed),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ordinals_are_positions_in_all() {
        for (i, statement) in super::ALL.iter().enumerate() {
            assert_eq!(statement.ordinal, i, "{}", statement.name);
        }
    }

    #[test]
    fn every_statement_file_is_named_once() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("impl/sql")
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sql").map(str::to_string)
            })
            .collect();
        files.sort();
        let mut named: Vec<String> = super::statement_counts()
            .into_iter()
            .map(|(name, _)| name.to_string())
            .collect();
        named.sort();
        assert_eq!(named, files);
    }

    #[test]
    fn the_claim_functions_statement_is_found_in_its_file() {
        let statement =
            super::returned_query(super::CLAIM_FUNCTION_SOURCE).expect("RETURN QUERY ... END");
        assert!(statement.starts_with("-- In order:"), "{statement}");
        assert!(
            statement.ends_with("ORDER BY st.submitted_seq"),
            "{statement}"
        );
    }

    #[test]
    fn every_statement_file_names_its_statement() {
        for statement in super::ALL {
            let header = format!("-- name: {}\n", statement.name);
            assert!(
                statement.text.starts_with(&header),
                "{}.sql must start with {header:?}",
                statement.name
            );
        }
    }
}
