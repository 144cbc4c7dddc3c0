//! The CHECK constraints that list the spec's names (docs/impl.md, "Schema"): each lists exactly
//! the names the Rust API has, written as one array literal, and refuses a name the spec does not
//! have. Migration 0024 rewrote them from `IN (...)` lists: PostgreSQL prepares a table's CHECK
//! constraints again for every statement that writes it, and an `ARRAY[...]` of constants (what
//! `IN` is stored as) is read back and folded into an array constant by constant each time
//! (docs/benchmarks.md, "What a statement costs before its rows"). A later migration that lists
//! names the old way, or a name the API does not have, fails here.

mod common;

use common::World;
use leasewright_impl::*;
use std::collections::BTreeSet;

/// The CHECK constraints of the store's tables (the connection's schema), name -> definition.
async fn check_constraints(w: &World) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT c.conname::text, pg_get_constraintdef(c.oid)
         FROM pg_constraint AS c
         WHERE c.contype = 'c' AND c.connamespace = current_schema()::regnamespace
         ORDER BY 1",
    )
    .fetch_all(w.store.pool())
    .await
    .expect("the schema's CHECK constraints")
}

/// The values of the one array literal `'{a,b,...}'::text[]` in `definition`.
fn listed(definition: &str) -> BTreeSet<String> {
    let start = definition
        .find("'{")
        .unwrap_or_else(|| panic!("no array literal in {definition}"));
    let rest = &definition[start + 2..];
    let end = rest.find("}'").expect("the literal's end");
    assert!(
        !rest[end..].contains("'{"),
        "more than one array literal in {definition}"
    );
    rest[..end].split(',').map(str::to_owned).collect()
}

fn names(codes: impl IntoIterator<Item = &'static str>) -> BTreeSet<String> {
    codes.into_iter().map(str::to_owned).collect()
}

/// Every spec name of the named enum `$t`.
macro_rules! all {
    ($t:ty) => {
        names(<$t>::ALL.iter().map(|v| v.as_str()))
    };
}

#[tokio::test]
async fn every_listed_name_check_lists_the_apis_names_as_one_array_literal() {
    let w = World::new().await;
    let constraints = check_constraints(&w).await;
    let definition = |name: &str| -> &str {
        constraints
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_str())
            .unwrap_or_else(|| panic!("no constraint {name}"))
    };
    let verdicts = names([
        Verdict::<()>::Accepted(()).as_str(),
        Verdict::<()>::Acknowledged.as_str(),
        Verdict::<()>::Rejected(Reason::NoQueuedJob).as_str(),
    ]);
    let cases: [(&str, BTreeSet<String>); 15] = [
        ("jobs_state_known", all!(JobState)),
        ("attempts_state_known", all!(AttemptState)),
        ("jobs_target_kind_known", all!(TargetKind)),
        ("target_slots_kind_known", all!(TargetKind)),
        ("observations_kind_known", all!(MessageKind)),
        ("observations_verdict_known", verdicts.clone()),
        ("cancels_verdict_known", verdicts.clone()),
        ("target_mutations_verdict_known", verdicts.clone()),
        (
            "reconciliations_verdict_known",
            names(["accepted", "rejected"]),
        ),
        ("reconciliations_decision_known", all!(Decision)),
        ("reconciliations_finding_known", all!(Finding)),
        ("targets_kind_known", all!(TargetKind)),
        ("observations_outcome_only_on_result", all!(Outcome)),
        ("attempts_committed_has_outcome", all!(Outcome)),
        (
            "jobs_terminal_has_outcome",
            names(
                JobState::ALL
                    .iter()
                    .filter(|s| s.is_terminal())
                    .map(|s| s.as_str()),
            ),
        ),
    ];
    for (name, expected) in cases {
        assert_eq!(listed(definition(name)), expected, "{name}");
    }
    // No CHECK of the schema names values as ARRAY[...] (or IN, which is stored as one).
    let old_form: Vec<&(String, String)> = constraints
        .iter()
        .filter(|(_, d)| d.contains("ARRAY["))
        .collect();
    assert!(
        old_form.is_empty(),
        "CHECK constraints listing values one constant each: {old_form:?}"
    );
}

#[tokio::test]
async fn a_name_the_spec_does_not_have_is_refused_by_its_named_constraint() {
    let w = World::new().await;
    let job = w.submit().await.expect("submit");
    let lease = w.claim().await.expect("claim");
    let writes = [
        (
            "UPDATE jobs SET state = 'paused' WHERE id = $1",
            "jobs_state_known",
        ),
        (
            "UPDATE jobs SET target_kind = 'eventual' WHERE id = $1",
            "jobs_target_kind_known",
        ),
        (
            "UPDATE attempts SET state = 'paused', ended_at = now() WHERE job_id = $1",
            "attempts_state_known",
        ),
        (
            "UPDATE target_slots SET kind = 'eventual' \
             WHERE slot = (SELECT target FROM jobs WHERE id = $1)",
            "target_slots_kind_known",
        ),
        (
            "UPDATE target_slots SET reserved_at = NULL \
             WHERE slot = (SELECT target FROM jobs WHERE id = $1)",
            "target_slots_holder_all_or_none",
        ),
    ];
    for (statement, constraint) in writes {
        let error = sqlx::query(statement)
            .bind(job.0)
            .execute(w.store.pool())
            .await
            .map_err(Error::from)
            .expect_err(statement);
        assert!(
            matches!(&error, Error::Constraint { constraint: c } if c == constraint),
            "{statement}: {error:?}"
        );
    }
    // Every name the API has passes: the job's row takes each state with what it requires.
    for state in JobState::ALL {
        let outcome = state.is_terminal().then_some(state.as_str());
        sqlx::query(
            "UPDATE jobs SET state = $2, outcome = $3,
                 finished_at = CASE WHEN $3::text IS NULL THEN NULL ELSE now() END,
                 cancel_requested = cancel_requested OR $2 = 'cancelling',
                 current_attempt_id = CASE WHEN $2 = 'queued' THEN NULL ELSE $4 END
             WHERE id = $1",
        )
        .bind(job.0)
        .bind(state.as_str())
        .bind(outcome)
        .bind(lease.tuple.attempt.0)
        .execute(w.store.pool())
        .await
        .unwrap_or_else(|e| panic!("{state}: {e}"));
    }
}
