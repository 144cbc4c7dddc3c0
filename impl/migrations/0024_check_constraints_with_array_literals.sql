-- Every CHECK constraint that lists values names them as one array constant instead of a list of
-- constants (issue 35; docs/benchmarks.md, "What a statement costs before its rows"). Same names,
-- same meaning: `x IN ('a', 'b')` and `x = ANY ('{a,b}'::text[])` accept and refuse the same
-- rows, NULL included. No rule, predicate or verdict changes.
--
-- Why: PostgreSQL 15 prepares a table's CHECK constraints again for every statement that writes
-- the table: it reads each one back from its stored node tree (`pg_constraint.conbin`, text) and
-- plans it (constant folding), per execution, before the first row (ExecConstraints). `IN (...)`
-- is stored as an ARRAY[...] expression of one constant node per value, which is read back node by
-- node and folded into an array on every execution; an array literal is stored as that array,
-- one constant. `perf` of the single claim -> result path put ExecConstraints at 18% of the
-- backends' CPU, 17 points of it reading and folding, 1 evaluating. The node trees of the four
-- tables a job's statements write go from 22,680 to 16,825 characters here.
ALTER TABLE jobs
    DROP CONSTRAINT jobs_state_known,
    ADD CONSTRAINT jobs_state_known CHECK (state = ANY (
        '{queued,running,cancelling,uncertain,passed,failed,cancelled,aborted}'::text[])),
    DROP CONSTRAINT jobs_target_kind_known,
    ADD CONSTRAINT jobs_target_kind_known CHECK (target_kind = ANY (
        '{fenced,idempotent,unfenced}'::text[])),
    DROP CONSTRAINT jobs_terminal_has_outcome,
    ADD CONSTRAINT jobs_terminal_has_outcome CHECK (
        (state = ANY ('{passed,failed,cancelled,aborted}'::text[])) = (outcome IS NOT NULL)
        AND (outcome IS NULL OR outcome = state)
        AND (outcome IS NULL) = (finished_at IS NULL)),
    DROP CONSTRAINT jobs_leased_or_uncertain_has_current_attempt,
    ADD CONSTRAINT jobs_leased_or_uncertain_has_current_attempt CHECK (
        state <> ALL ('{running,cancelling,uncertain}'::text[])
        OR current_attempt_id IS NOT NULL),
    DROP CONSTRAINT jobs_passed_or_failed_has_current_attempt,
    ADD CONSTRAINT jobs_passed_or_failed_has_current_attempt CHECK (
        state <> ALL ('{passed,failed}'::text[]) OR current_attempt_id IS NOT NULL);

ALTER TABLE attempts
    DROP CONSTRAINT attempts_state_known,
    ADD CONSTRAINT attempts_state_known CHECK (state = ANY (
        '{active,uncertain,passed,failed,cancelled,stopped}'::text[])),
    DROP CONSTRAINT attempts_committed_has_outcome,
    ADD CONSTRAINT attempts_committed_has_outcome CHECK (
        (state = ANY ('{passed,failed,cancelled}'::text[])) = (outcome IS NOT NULL)
        AND (outcome IS NULL OR outcome = state)),
    DROP CONSTRAINT attempts_ended_has_end_time,
    ADD CONSTRAINT attempts_ended_has_end_time CHECK (
        (state = ANY ('{active,uncertain}'::text[])) = (ended_at IS NULL));

ALTER TABLE observations
    DROP CONSTRAINT observations_kind_known,
    ADD CONSTRAINT observations_kind_known CHECK (kind = ANY (
        '{heartbeat,result,rejoin,source_fetch,log_append,artifact_put,artifact_get,cache_get,cache_put}'::text[])),
    DROP CONSTRAINT observations_verdict_known,
    ADD CONSTRAINT observations_verdict_known CHECK (verdict = ANY (
        '{accepted,acknowledged,rejected}'::text[])),
    DROP CONSTRAINT observations_outcome_only_on_result,
    ADD CONSTRAINT observations_outcome_only_on_result CHECK (
        outcome IS NULL
        OR (kind = 'result' AND outcome = ANY ('{passed,failed,cancelled}'::text[])));

ALTER TABLE target_slots
    DROP CONSTRAINT target_slots_kind_known,
    ADD CONSTRAINT target_slots_kind_known CHECK (kind = ANY (
        '{fenced,idempotent,unfenced}'::text[])),
    DROP CONSTRAINT target_slots_holder_all_or_none,
    ADD CONSTRAINT target_slots_holder_all_or_none CHECK (
        num_nulls(holder_project_id, holder_job_id, holder_attempt_id, reserved_at)
            = ANY ('{0,4}'::int[]));

-- The tables off the claim -> result path, written the same way so that the schema has one form
-- (impl/tests/check_constraints.rs holds every CHECK to it).
ALTER TABLE reconciliations
    DROP CONSTRAINT reconciliations_decision_known,
    ADD CONSTRAINT reconciliations_decision_known CHECK (decision = ANY (
        '{retry,abort,adopt}'::text[])),
    DROP CONSTRAINT reconciliations_finding_known,
    ADD CONSTRAINT reconciliations_finding_known CHECK (finding = ANY (
        '{stopped,still_running,observed_passed,observed_failed}'::text[])),
    DROP CONSTRAINT reconciliations_verdict_known,
    ADD CONSTRAINT reconciliations_verdict_known CHECK (verdict = ANY (
        '{accepted,rejected}'::text[]));

ALTER TABLE targets
    DROP CONSTRAINT targets_kind_known,
    ADD CONSTRAINT targets_kind_known CHECK (kind = ANY ('{fenced,idempotent,unfenced}'::text[]));

ALTER TABLE target_mutations
    DROP CONSTRAINT target_mutations_verdict_known,
    ADD CONSTRAINT target_mutations_verdict_known CHECK (verdict = ANY (
        '{accepted,acknowledged,rejected}'::text[]));

ALTER TABLE cancels
    DROP CONSTRAINT cancels_verdict_known,
    ADD CONSTRAINT cancels_verdict_known CHECK (verdict = ANY (
        '{accepted,acknowledged,rejected}'::text[]));
