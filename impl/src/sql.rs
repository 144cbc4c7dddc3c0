//! Every SQL statement, loaded from `impl/sql/<name>.sql` at compile time. A statement's name is
//! the rule it enforces; guard predicates are marked `-- guard: <what>` at the end of their line
//! (the `mutants` feature removes exactly one kind of guard to prove a test notices).

/// One named SQL statement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Statement {
    #[cfg_attr(not(any(test, feature = "mutants")), allow(dead_code))]
    pub(crate) name: &'static str,
    pub(crate) text: &'static str,
}

macro_rules! statements {
    ($($constant:ident = $file:literal;)+) => {
        $(
            pub(crate) const $constant: Statement = Statement {
                name: $file,
                text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $file, ".sql")),
            };
        )+

        /// Every statement, for the test that checks each names itself.
        #[cfg(test)]
        pub(crate) const ALL: &[Statement] = &[$($constant),+];
    };
}

statements! {
    PROJECT_INSERT = "project_insert";
    RUNNER_INSERT = "runner_insert";
    RUNNER_SELECT_PROJECT = "runner_select_project";
    RUNNER_SELECT_TOKEN_HASH = "runner_select_token_hash";
    JOB_INSERT = "job_insert";
    JOB_LOCK = "job_lock";
    JOB_PICK_EARLIEST_QUEUED_WITH_FREE_TARGET = "job_pick_earliest_queued_with_free_target";
    TARGET_RESERVE_IF_FREE = "target_reserve_if_free";
    JOB_START_IF_QUEUED = "job_start_if_queued";
    ATTEMPT_INSERT_ON_CLAIM = "attempt_insert_on_claim";
    ATTEMPT_SELECT_OF_JOB = "attempt_select_of_job";
    ATTEMPT_HEARTBEAT_IF_CURRENT = "attempt_heartbeat_if_current";
    ATTEMPT_AUTHORIZE_REJOIN = "attempt_authorize_rejoin";
    ATTEMPT_AUTHORIZE_SIDE_EFFECT = "attempt_authorize_side_effect";
    ATTEMPT_COMMIT_RESULT_IF_CURRENT = "attempt_commit_result_if_current";
    JOB_COMMIT_OUTCOME = "job_commit_outcome";
    TARGET_RELEASE = "target_release";
    OBSERVATION_RECORD = "observation_record";
    JOB_SELECT_SOURCE = "job_select_source";
    LOG_APPEND_ONCE = "log_append_once";
    LOG_SELECT_CHUNK_DIGEST = "log_select_chunk_digest";
    LOG_SELECT_OF_ATTEMPT = "log_select_of_attempt";
    ARTIFACT_PUT = "artifact_put";
    ARTIFACT_GET = "artifact_get";
    CACHE_ENTRY_PUT = "cache_entry_put";
    CACHE_ENTRY_GET = "cache_entry_get";
    JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED = "job_make_uncertain_if_lease_expired";
    JOB_CANCEL_IF_QUEUED = "job_cancel_if_queued";
    JOB_REQUEST_CANCEL_IF_RUNNING = "job_request_cancel_if_running";
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
    RECONCILIATION_SELECT_OF_JOB = "reconciliation_select_of_job";
    TARGET_RESERVATION_SELECT_OF_JOB = "target_reservation_select_of_job";
    TARGET_ENSURE = "target_ensure";
    TARGET_LOCK = "target_lock";
    TARGET_FENCED_APPLY_IF_NOT_STALE = "target_fenced_apply_if_not_stale";
    TARGET_IDEMPOTENT_APPLY_ONCE = "target_idempotent_apply_once";
    TARGET_COUNT_APPLICATION = "target_count_application";
    TARGET_MUTATION_RECORD = "target_mutation_record";
}

#[cfg(test)]
mod tests {
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
