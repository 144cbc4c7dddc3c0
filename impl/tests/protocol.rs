//! The protocol of docs/protocol.md against real PostgreSQL: one fresh database per test (on
//! DATABASE_URL, or on one throwaway cluster per test binary).

mod common;

use common::{checks, run, World};
use leasewright_impl::database::{HarnessError, TestDatabase};
use leasewright_impl::*;
use std::collections::HashSet;
use std::sync::Arc;

mod scenarios {
    use super::*;

    #[tokio::test]
    async fn a_stale_completion_from_a_superseded_attempt_is_rejected_and_kept_in_its_own_ledger() {
        run(|w| Box::pin(checks::stale_completion(w))).await;
    }

    #[tokio::test]
    async fn every_message_checks_the_whole_ownership_tuple() {
        run(|w| Box::pin(checks::ownership_tuple(w))).await;
    }

    #[tokio::test]
    async fn a_runner_reconnecting_after_expiry_is_told_to_stop_and_no_second_attempt_starts() {
        run(|w| Box::pin(checks::reconnect(w))).await;
    }

    #[tokio::test]
    async fn a_fenced_target_refuses_a_stale_fence_and_an_unfenced_one_stays_reserved() {
        run(|w| Box::pin(checks::target_boundary(w))).await;
    }

    #[tokio::test]
    async fn a_slot_reserved_by_an_uncertain_job_of_one_project_blocks_claims_of_every_project() {
        run(|w| Box::pin(checks::shared_slot_reserved(w))).await;
    }

    #[tokio::test]
    async fn a_cut_off_workers_stale_slot_token_is_refused_after_another_projects_job_deployed() {
        run(|w| Box::pin(checks::shared_slot_stale_token(w))).await;
    }

    #[tokio::test]
    async fn the_next_job_on_a_fenced_slot_deploys_with_the_next_slot_token_whatever_its_fence() {
        run(|w| Box::pin(checks::shared_slot_next_job(w))).await;
    }
}

mod rules {
    use super::*;

    #[tokio::test]
    async fn a_heartbeat_after_expiry_is_rejected_and_the_lease_is_unchanged() {
        run(|w| Box::pin(checks::heartbeat_after_expiry(w))).await;
    }

    #[tokio::test]
    async fn an_identical_duplicate_result_is_acknowledged_after_the_lease_without_renewing_rights()
    {
        run(|w| Box::pin(checks::duplicate_result(w))).await;
    }

    #[tokio::test]
    async fn a_conflicting_result_is_recorded_and_the_committed_outcome_is_unchanged() {
        run(|w| Box::pin(checks::conflicting_result(w))).await;
    }

    #[tokio::test]
    async fn runner_clock_skew_of_hours_in_either_direction_changes_no_verdict() {
        run(|w| Box::pin(checks::runner_clock_skew(w))).await;
    }

    #[tokio::test]
    async fn cross_project_access_is_rejected_on_every_operation() {
        run(|w| Box::pin(checks::cross_project(w))).await;
    }

    #[tokio::test]
    async fn an_operator_of_another_project_cannot_reconcile_an_uncertain_job() {
        run(|w| Box::pin(checks::cross_project_reconcile(w))).await;
    }

    #[tokio::test]
    async fn a_sweep_restricted_to_one_project_leaves_other_projects_alone() {
        let w = World::new().await;
        let mine = w.submit().await.expect("submit");
        let theirs = w
            .store
            .submit_job(w.other_project, NewJob::new("r", "d", "c"))
            .await
            .expect("submit");
        w.claim().await.expect("claim");
        w.claim_by(w.other_runner).await.expect("claim");
        w.advance_secs(common::LEASE_TTL_SECS);
        let swept = w
            .store
            .sweep_expired_in(Some(w.other_project))
            .await
            .expect("sweep");
        assert_eq!(swept, SweepVerdict::Uncertain(vec![theirs]));
        assert_eq!(w.job(mine).await.expect("job").state, JobState::Running);
        let swept = w.store.sweep_expired().await.expect("sweep");
        assert_eq!(swept, SweepVerdict::Uncertain(vec![mine]));
    }

    #[tokio::test]
    async fn expiry_makes_running_work_uncertain_never_queued() {
        run(|w| Box::pin(checks::expiry_makes_uncertain(w))).await;
    }

    #[tokio::test]
    async fn a_retry_after_reconciliation_gets_a_larger_fence_and_late_reports_stay_in_the_old_ledger(
    ) {
        run(|w| Box::pin(checks::retry_after_reconciliation(w))).await;
    }

    #[tokio::test]
    async fn rejoin_answers_continue_cancel_or_stop_and_never_extends_the_lease() {
        run(|w| Box::pin(checks::rejoin_answers(w))).await;
    }

    #[tokio::test]
    async fn log_appends_are_idempotent_per_sequence_number_and_missing_entries_are_not_found() {
        run(|w| Box::pin(checks::side_effect_rules(w))).await;
    }
}

mod precedence {
    use super::*;

    #[tokio::test]
    async fn a_tuple_wrong_in_two_ways_gets_the_first_reason_of_the_precedence() {
        run(|w| Box::pin(checks::tuple_precedence(w))).await;
    }

    #[tokio::test]
    async fn the_standing_checks_follow_the_precedence_after_identity() {
        run(|w| Box::pin(checks::standing_precedence(w))).await;
    }

    #[tokio::test]
    async fn cancel_follows_its_table() {
        run(|w| Box::pin(checks::cancel_table(w))).await;
    }

    #[tokio::test]
    async fn reconcile_follows_its_table() {
        run(|w| Box::pin(checks::reconcile_table(w))).await;
    }
}

mod concurrency {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn thirty_two_concurrent_claimers_on_a_thousand_jobs_claim_each_job_exactly_once_with_fence_one(
    ) {
        let w = World::with_store(|store| store, 40).await;
        let mut submitted = HashSet::new();
        for _ in 0..1000 {
            submitted.insert(w.submit().await.expect("submit"));
        }
        let mut claimers = Vec::new();
        for _ in 0..32 {
            let store = w.store.clone();
            let runner = w.runner;
            claimers.push(tokio::spawn(async move {
                let mut leases = Vec::new();
                loop {
                    match store.claim_batch(runner, 1, None).await.expect("claim") {
                        Verdict::Accepted(batch) => leases.extend(batch),
                        Verdict::Rejected(Reason::NoQueuedJob) => return leases,
                        other => panic!("claim: {other:?}"),
                    }
                }
            }));
        }
        let mut claimed = Vec::new();
        for claimer in claimers {
            claimed.extend(claimer.await.expect("claimer"));
        }
        assert_eq!(claimed.len(), 1000, "every job claimed once");
        let jobs: HashSet<JobId> = claimed.iter().map(|lease| lease.tuple.job).collect();
        assert_eq!(jobs, submitted, "each job exactly once");
        assert!(
            claimed.iter().all(|lease| lease.tuple.fence == 1),
            "each with fence 1"
        );
        assert_eq!(
            w.store.claim(w.runner, None).await.expect("claim"),
            Verdict::Rejected(Reason::NoQueuedJob)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_batch_claimers_never_hold_two_jobs_of_one_shared_target() {
        let w = World::with_store(|store| store, 20).await;
        for i in 0..200 {
            let job = NewJob {
                target: Some(format!("target-{}", i % 8)),
                ..NewJob::new("r", "d", "c")
            };
            w.store.submit_job(w.project, job).await.expect("submit");
        }
        let mut claimers = Vec::new();
        for _ in 0..16 {
            let store = w.store.clone();
            let runner = w.runner;
            claimers.push(tokio::spawn(async move {
                match store
                    .claim_batch(runner, 4, None)
                    .await
                    .expect("no deadlock, no error")
                {
                    Verdict::Accepted(leases) => leases,
                    Verdict::Rejected(Reason::NoQueuedJob) => Vec::new(),
                    other => panic!("claim: {other:?}"),
                }
            }));
        }
        let mut claimed = Vec::new();
        for claimer in claimers {
            claimed.extend(claimer.await.expect("claimer"));
        }
        // Top up: whatever was skipped while another claim was reserving is claimable now.
        while let Verdict::Accepted(leases) =
            w.store.claim_batch(w.runner, 8, None).await.expect("claim")
        {
            claimed.extend(leases);
        }
        let mut targets = Vec::new();
        for lease in &claimed {
            targets.push(
                w.store
                    .job(lease.tuple.job)
                    .await
                    .expect("job")
                    .expect("job")
                    .target,
            );
        }
        targets.sort();
        let distinct: HashSet<_> = targets.iter().cloned().collect();
        assert_eq!(
            targets.len(),
            distinct.len(),
            "one job per target: {targets:?}"
        );
        assert_eq!(distinct.len(), 8, "every target is in use");
    }

    #[tokio::test]
    async fn a_batch_claim_takes_at_most_one_job_per_slot() {
        run(|w| Box::pin(checks::batch_claim_one_per_slot(w))).await;
    }

    /// Slots are global (docs/protocol.md §8.2): claimers of two projects whose jobs share a few
    /// slots race in rounds. In every round each slot is reserved exactly once (never twice, never
    /// by two projects at once), its token is the round number (tokens strictly increase over
    /// every reservation of the slot, whatever project held it), and a result releases it for the
    /// next round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_claimers_of_two_projects_sharing_slots_never_get_two_reservations_of_one_slot(
    ) {
        const SLOTS: usize = 5;
        const ROUNDS: i64 = 4;
        let w = World::with_store(|store| store, 24).await;
        let mut slot_of = std::collections::HashMap::new();
        for i in 0..(SLOTS * ROUNDS as usize * 3) {
            let project = if i % 2 == 0 {
                w.project
            } else {
                w.other_project
            };
            let slot = format!("shared-{}", i % SLOTS);
            let job = NewJob {
                target: Some(slot.clone()),
                ..NewJob::new("r", "d", "deploy")
            };
            slot_of.insert(
                w.store.submit_job(project, job).await.expect("submit"),
                slot,
            );
        }
        let runners = [w.runner, w.second_runner, w.other_runner];
        for round in 1..=ROUNDS {
            let mut claimers = Vec::new();
            for i in 0..12 {
                let store = w.store.clone();
                let runner = runners[i % runners.len()];
                claimers.push(tokio::spawn(async move {
                    match store.claim_batch(runner, 2, None).await.expect("no error") {
                        Verdict::Accepted(leases) => leases,
                        Verdict::Rejected(Reason::NoQueuedJob) => Vec::new(),
                        other => panic!("claim: {other:?}"),
                    }
                }));
            }
            let mut claimed = Vec::new();
            for claimer in claimers {
                claimed.extend(claimer.await.expect("claimer"));
            }
            // Top up what was skipped while another claim was reserving a slot.
            for runner in runners {
                while let Verdict::Accepted(leases) =
                    w.store.claim_batch(runner, 8, None).await.expect("claim")
                {
                    claimed.extend(leases);
                }
            }
            let mut slots: Vec<&String> = claimed.iter().map(|l| &slot_of[&l.tuple.job]).collect();
            slots.sort();
            let distinct: HashSet<_> = slots.iter().collect();
            assert_eq!(
                slots.len(),
                distinct.len(),
                "round {round}: one holder per slot: {slots:?}"
            );
            assert_eq!(
                distinct.len(),
                SLOTS,
                "round {round}: every slot is reserved"
            );
            assert!(
                claimed.iter().all(|lease| lease.slot_token == round),
                "round {round}: every slot's token is the round: {:?}",
                claimed.iter().map(|l| l.slot_token).collect::<Vec<_>>()
            );
            for lease in &claimed {
                let verdict = w
                    .store
                    .report_result(&lease.tuple, Outcome::Passed, "d", None)
                    .await
                    .expect("result");
                assert_eq!(
                    verdict,
                    Verdict::Accepted(()),
                    "the result releases the slot"
                );
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_heartbeats_results_sweeps_cancels_and_reconciles_keep_every_invariant() {
        let w = World::with_store(|store| store, 24).await;
        let jobs = 40;
        for _ in 0..jobs {
            w.submit().await.expect("submit");
        }
        let leases = w
            .store
            .claim_batch(w.runner, jobs, None)
            .await
            .expect("claim");
        let leases = leases.accepted().expect("claimed");
        let mut tasks = tokio::task::JoinSet::new();
        for (i, lease) in leases.into_iter().enumerate() {
            let store = w.store.clone();
            let project = w.project;
            tasks.spawn(async move {
                let t = lease.tuple;
                for round in 0..6 {
                    store.heartbeat(&t, None).await?;
                    store.append_log(&t, round, b"x", None).await?;
                    if i % 3 == 0 && round == 2 {
                        store.cancel(project, t.job).await?;
                    }
                    if i % 5 == 0 && round == 3 {
                        store.report_result(&t, Outcome::Passed, "d", None).await?;
                    }
                    tokio::task::yield_now().await;
                }
                Ok::<_, Error>(())
            });
        }
        let sweeper = {
            let store = w.store.clone();
            let clock = w.clock.clone();
            let project = w.project;
            tokio::spawn(async move {
                for _ in 0..12 {
                    clock.advance(chrono::Duration::seconds(7));
                    if let SweepVerdict::Uncertain(jobs) = store.sweep_expired().await? {
                        for job in jobs {
                            store
                                .reconcile(project, job, Finding::Stopped, Decision::Abort)
                                .await?;
                        }
                    }
                    tokio::task::yield_now().await;
                }
                Ok::<_, Error>(())
            })
        };
        while let Some(task) = tasks.join_next().await {
            task.expect("task")
                .expect("no infrastructure error (no deadlock)");
        }
        sweeper
            .await
            .expect("sweeper")
            .expect("no infrastructure error (no deadlock)");
        // The schema's constraints held throughout (no write failed); check the cross-table ones.
        let broken: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs AS j LEFT JOIN attempts AS a ON a.id = j.current_attempt_id \
             WHERE (j.state IN ('running', 'cancelling') AND a.state IS DISTINCT FROM 'active') \
                OR (j.state = 'uncertain' AND a.state IS DISTINCT FROM 'uncertain') \
                OR (j.state IN ('passed', 'failed') AND a.state IS DISTINCT FROM j.state) \
                OR (j.state IN ('running', 'cancelling', 'uncertain') \
                    AND NOT EXISTS (SELECT 1 FROM target_slots AS s WHERE s.holder_job_id = j.id)) \
                OR (j.state NOT IN ('running', 'cancelling', 'uncertain') \
                    AND EXISTS (SELECT 1 FROM target_slots AS s WHERE s.holder_job_id = j.id))",
        )
        .fetch_one(w.store.pool())
        .await
        .expect("query");
        assert_eq!(
            broken, 0,
            "jobs whose attempt or reservation disagrees with their state"
        );
        let states: Vec<String> = sqlx::query_scalar("SELECT DISTINCT state FROM jobs")
            .fetch_all(w.store.pool())
            .await
            .expect("query");
        assert!(
            !states.iter().any(|s| s == "queued"),
            "expiry never requeued: {states:?}"
        );
        assert!(states.len() >= 3,);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_stores_connecting_at_once_migrate_the_same_database_safely() {
        let db = TestDatabase::create().await.expect("a test database");
        let mut connecting = Vec::new();
        for _ in 0..8 {
            let url = db.url().to_owned();
            connecting.push(tokio::spawn(async move {
                let config = StoreConfig {
                    max_connections: 2,
                    ..StoreConfig::default()
                };
                Store::connect(&url, Arc::new(SystemClock), config)
                    .await
                    .map(|_| ())
            }));
        }
        for store in connecting {
            store.await.expect("task").expect("connect and migrate");
        }
    }

    #[tokio::test]
    async fn a_batch_claim_takes_up_to_k_jobs_in_submission_order() {
        let w = World::new().await;
        let jobs = [
            w.submit().await.ok(),
            w.submit().await.ok(),
            w.submit().await.ok(),
        ];
        let leases = w
            .store
            .claim_batch(w.runner, 2, None)
            .await
            .expect("claim")
            .accepted();
        let claimed: Vec<_> = leases
            .expect("accepted")
            .iter()
            .map(|l| Some(l.tuple.job))
            .collect();
        assert_eq!(claimed, jobs[..2].to_vec());
        let rest = w
            .store
            .claim_batch(w.runner, 5, None)
            .await
            .expect("claim")
            .accepted();
        assert_eq!(rest.map(|leases| leases.len()), Some(1));
    }

    /// A batch claim takes the K earliest queued jobs whose slot is free, even when the earliest
    /// queued jobs wait on a busy slot (docs/protocol.md, "Batch claim"). The claim locks the
    /// head of the queue first (migration 0011): a head job on a busy slot is passed over, and
    /// the claim takes as many jobs after the head as the head fell short of K.
    #[tokio::test]
    async fn a_batch_claim_takes_k_free_jobs_past_jobs_waiting_on_a_busy_slot() {
        let w = World::new().await;
        let on = |slot: &str| NewJob {
            target: Some(slot.to_string()),
            ..NewJob::new("r", "d", "deploy")
        };
        let mut jobs = Vec::new();
        for slot in [
            "busy", "busy", "busy", "free-1", "free-2", "free-3", "free-4",
        ] {
            jobs.push(
                w.store
                    .submit_job(w.project, on(slot))
                    .await
                    .expect("submit"),
            );
        }
        // The first job reserves the slot `busy`: the next two wait on it.
        let first = w
            .store
            .claim(w.runner, None)
            .await
            .expect("claim")
            .accepted();
        assert_eq!(first.map(|lease| lease.tuple.job), Some(jobs[0]));
        // The jobs a batch claim of three takes.
        let claim_three = || async {
            let leases = w.store.claim_batch(w.second_runner, 3, None).await;
            let leases = leases.expect("claim").accepted().expect("accepted");
            leases
                .iter()
                .map(|lease| lease.tuple.job)
                .collect::<Vec<_>>()
        };
        // The head is the two waiting jobs and `free-1`; two more come from beyond it.
        assert_eq!(claim_three().await, jobs[3..6].to_vec());
        // Nothing else is free but `free-4`; the waiting jobs stay queued.
        assert_eq!(claim_three().await, vec![jobs[6]]);
    }
}

mod setup {
    use super::*;

    #[tokio::test]
    async fn a_runner_token_authenticates_only_its_runner_and_is_stored_as_a_hash() {
        let w = World::new().await;
        let (runner, token) = w
            .store
            .create_runner(w.project, "tokened")
            .await
            .expect("runner");
        assert_eq!(
            w.store.authenticate(&token).await.expect("auth"),
            Some(runner)
        );
        let mut forged = token.clone();
        forged.pop();
        forged.push('x');
        assert_eq!(w.store.authenticate(&forged).await.expect("auth"), None);
        assert_eq!(w.store.authenticate("garbage").await.expect("auth"), None);
        // The hash read for the runner is kept: the token still authenticates, a forged one
        // still does not, also through a clone of the store (one memory for every clone).
        let clone = w.store.clone();
        assert_eq!(
            clone.authenticate(&token).await.expect("auth"),
            Some(runner)
        );
        assert_eq!(clone.authenticate(&forged).await.expect("auth"), None);
        let stored: Vec<u8> = sqlx::query_scalar("SELECT token_sha256 FROM runners WHERE id = $1")
            .bind(runner.0)
            .fetch_one(w.store.pool())
            .await
            .expect("row");
        assert_eq!(stored.len(), 32);
        assert!(!String::from_utf8_lossy(&stored).contains(&token));
    }

    #[tokio::test]
    async fn a_job_naming_a_slot_registered_with_another_kind_is_refused_at_submission() {
        run(|w| Box::pin(checks::slot_kind_mismatch(w))).await;
    }

    #[tokio::test]
    async fn an_unknown_runner_cannot_claim_and_names_are_unique() {
        let w = World::new().await;
        assert_eq!(
            w.store
                .claim(RunnerId::new_random(), None)
                .await
                .expect("claim"),
            Verdict::Rejected(Reason::UnknownRunner)
        );
        assert!(matches!(
            w.store.create_project("alpha").await,
            Err(Error::ProjectNameTaken)
        ));
        assert!(matches!(
            w.store.create_runner(w.project, "runner-a").await,
            Err(Error::RunnerNameTaken)
        ));
    }

    #[tokio::test]
    async fn a_write_breaking_an_invariant_is_refused_by_its_named_constraint() {
        let w = World::new().await;
        let job = w.submit().await.expect("submit");
        let error = sqlx::query("UPDATE jobs SET state = 'aborted' WHERE id = $1")
            .bind(job.0)
            .execute(w.store.pool())
            .await
            .map_err(Error::from)
            .expect_err("a terminal job without an outcome");
        assert!(
            matches!(&error, Error::Constraint { constraint } if constraint == "jobs_terminal_has_outcome"),
            "{error:?}"
        );
        let lease = w.claim().await.expect("claim");
        let error = sqlx::query(
            "INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, slot_token, \
             lease_expiry, claimed_at) SELECT gen_random_uuid(), job_id, project_id, runner_id, \
             gen_random_uuid(), fence + 1, slot_token + 1, lease_expiry, claimed_at FROM attempts \
             WHERE id = $1",
        )
        .bind(lease.tuple.attempt.0)
        .execute(w.store.pool())
        .await
        .map_err(Error::from)
        .expect_err("a second executing attempt");
        assert!(
            matches!(&error, Error::Constraint { constraint } if constraint == "attempts_one_current_per_job"),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "constraint violated: attempts_one_current_per_job"
        );
    }

    #[tokio::test]
    async fn an_unreachable_database_is_a_typed_error_without_database_text() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let url = format!("postgres://postgres@127.0.0.1:{port}/nothing");
        let config = StoreConfig {
            acquire_timeout: std::time::Duration::from_secs(1),
            ..StoreConfig::default()
        };
        let connect = Store::connect(&url, Arc::new(SystemClock), config);
        let error = tokio::time::timeout(std::time::Duration::from_secs(60), connect)
            .await
            .expect("fails fast")
            .expect_err("nothing listens");
        assert!(matches!(error, Error::Database(_)), "{error:?}");
        assert_eq!(error.to_string(), "database unavailable");
    }

    #[test]
    fn the_missing_binaries_error_names_the_fix() {
        let message = HarnessError::NoBinaries.to_string();
        assert!(message.contains("apt-get install postgresql"), "{message}");
        assert!(message.contains("DATABASE_URL"), "{message}");
    }

    #[test]
    fn every_reason_has_its_stable_code() {
        let codes: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            codes,
            [
                "unknown_runner",
                "unknown_job",
                "wrong_project",
                "unknown_attempt",
                "runner_mismatch",
                "lease_mismatch",
                "fence_mismatch",
                "not_current",
                "conflicting_result",
                "job_finished",
                "lease_expired",
                "cancel_requested",
                "cancel_not_requested",
                "sequence_conflict",
                "not_found",
                "no_queued_job",
                "reconcile_required",
                "not_uncertain",
                "execution_not_stopped",
                "nothing_to_adopt",
                "stale_fence",
            ]
        );
        for reason in Reason::ALL {
            assert_eq!(Reason::from_code(reason.as_str()), Some(reason));
        }
    }
}

/// What the composite foreign keys enforced before migration 0005 (it dropped them with their
/// unique indexes to write fewer index entries per job), what the reservation's foreign keys
/// enforced before migration 0009 (it made the reservation columns of the slot's row, without
/// them), and what the attempt's runner's foreign key enforced before migration 0022 (it dropped
/// it: every claim locked its runner's row), now a test: every attempt is of its job's project
/// and held by an existing runner of that project, every job's current attempt is an
/// attempt of that job, every reservation (a slot's holder columns) names an existing job of its
/// project whose target is the slot, held by an existing attempt of that job. The claim statement
/// is the only one that writes these columns; the workload below runs every rule that touches
/// attempts, current attempts or reservations, then looks for a row that breaks one of them.
mod cross_row {
    use super::*;

    /// Every row breaking one of them, described.
    const STRAYS: &str = "
        SELECT 'attempt ' || a.id || ' is of another project than its job'
        FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
        WHERE a.project_id <> j.project_id
        UNION ALL
        SELECT 'attempt ' || a.id || CASE WHEN r.id IS NULL
            THEN ' is held by a runner that does not exist'
            ELSE ' is held by a runner of another project' END
        FROM attempts AS a LEFT JOIN runners AS r ON r.id = a.runner_id
        WHERE r.id IS NULL OR r.project_id <> a.project_id
        UNION ALL
        SELECT 'job ' || j.id || ' names an attempt of another job as current'
        FROM jobs AS j JOIN attempts AS a ON a.id = j.current_attempt_id
        WHERE a.job_id <> j.id
        UNION ALL
        SELECT 'job ' || j.id || ' names an attempt that does not exist as current'
        FROM jobs AS j LEFT JOIN attempts AS a ON a.id = j.current_attempt_id
        WHERE j.current_attempt_id IS NOT NULL AND a.id IS NULL
        UNION ALL
        SELECT 'a ' || t.kind || ' of job ' || t.job_id || ' names an attempt that does not exist'
        FROM (SELECT 'reconciliation' AS kind, job_id, attempt_id FROM reconciliations
              UNION ALL SELECT 'cancel', job_id, attempt_id FROM cancels
              UNION ALL SELECT 'expiry sweep', job_id, attempt_id FROM expiry_sweeps) AS t
        LEFT JOIN attempts AS a ON a.id = t.attempt_id
        WHERE t.attempt_id IS NOT NULL AND a.id IS NULL
        UNION ALL
        SELECT 'a ' || t.kind || ' of job ' || t.job_id || ' names an attempt of another job'
        FROM (SELECT 'reconciliation' AS kind, job_id, attempt_id FROM reconciliations
              UNION ALL SELECT 'cancel', job_id, attempt_id FROM cancels
              UNION ALL SELECT 'expiry sweep', job_id, attempt_id FROM expiry_sweeps) AS t
        JOIN attempts AS a ON a.id = t.attempt_id
        WHERE a.job_id <> t.job_id
        UNION ALL
        SELECT 'the reservation of slot ' || s.slot || ' names a job that does not exist'
        FROM target_slots AS s LEFT JOIN jobs AS j ON j.id = s.holder_job_id
        WHERE s.holder_job_id IS NOT NULL AND j.id IS NULL
        UNION ALL
        SELECT 'the reservation of slot ' || s.slot || ' is of another project than its job'
        FROM target_slots AS s JOIN jobs AS j ON j.id = s.holder_job_id
        WHERE s.holder_project_id <> j.project_id
        UNION ALL
        SELECT 'the reservation of slot ' || s.slot || ' names a job of another slot'
        FROM target_slots AS s JOIN jobs AS j ON j.id = s.holder_job_id
        WHERE j.target <> s.slot
        UNION ALL
        SELECT 'the reservation of slot ' || s.slot || ' is held by an attempt that does not exist'
        FROM target_slots AS s LEFT JOIN attempts AS a ON a.id = s.holder_attempt_id
        WHERE s.holder_attempt_id IS NOT NULL AND a.id IS NULL
        UNION ALL
        SELECT 'the reservation of slot ' || s.slot || ' is held by an attempt of another job'
        FROM target_slots AS s JOIN attempts AS a ON a.id = s.holder_attempt_id
        WHERE a.job_id <> s.holder_job_id";

    async fn strays(store: &Store) -> Vec<String> {
        sqlx::query_scalar(STRAYS)
            .fetch_all(store.pool())
            .await
            .expect("the cross-row query")
    }

    async fn submit(w: &World, project: ProjectId, slot: &str) -> JobId {
        w.store
            .submit_job(
                project,
                NewJob {
                    target: Some(slot.into()),
                    target_kind: TargetKind::Fenced,
                    ..NewJob::new("r", "d", "deploy")
                },
            )
            .await
            .expect("submit")
    }

    async fn leases(w: &World, runner: RunnerId, k: usize) -> Vec<Lease> {
        match w.store.claim_batch(runner, k, None).await.expect("claim") {
            Verdict::Accepted(leases) => leases,
            other => panic!("claim: {other:?}"),
        }
    }

    /// Claims (single, batch, past a taken slot), heartbeats, results, a cancel, the sweep and
    /// every reconciliation decision, over two projects sharing slots.
    async fn workload() -> World {
        let w = World::new().await;
        for slot in ["a", "b", "a", "c", "d", "e", "f"] {
            submit(&w, w.project, slot).await;
        }
        submit(&w, w.other_project, "a").await;
        submit(&w, w.other_project, "g").await;
        // A batch over a shared slot, a single claim, the other project's claim of what is free.
        let batch = leases(&w, w.runner, 4).await;
        assert_eq!(batch.len(), 3, "one job of slot a in the batch");
        let single = leases(&w, w.second_runner, 1).await;
        let other = leases(&w, w.other_runner, 2).await;
        for lease in batch.iter().chain(&single).chain(&other) {
            let verdict = w.store.heartbeat(&lease.tuple, None).await.expect("beat");
            assert!(verdict.is_accepted(), "{verdict:?}");
        }
        // A result, a cancel answered by a cancelled result, lost leases reconciled every way.
        let verdict = w
            .store
            .report_result(&batch[0].tuple, Outcome::Passed, "d", None)
            .await
            .expect("result");
        assert!(verdict.is_accepted(), "{verdict:?}");
        let cancelled = w
            .store
            .cancel(w.project, batch[1].tuple.job)
            .await
            .expect("cancel");
        assert!(cancelled.is_accepted(), "{cancelled:?}");
        let verdict = w
            .store
            .report_result(&batch[1].tuple, Outcome::Cancelled, "d", None)
            .await
            .expect("result");
        assert!(verdict.is_accepted(), "{verdict:?}");
        w.advance_secs(common::LEASE_TTL_SECS);
        w.store.sweep_expired().await.expect("sweep");
        let decisions = [
            (batch.get(2), Finding::Stopped, Decision::Retry),
            (single.first(), Finding::ObservedFailed, Decision::Adopt),
            (other.first(), Finding::Stopped, Decision::Abort),
        ];
        for (lease, finding, decision) in decisions {
            let lease = lease.expect("a lease");
            let project = if lease.tuple.runner == w.other_runner {
                w.other_project
            } else {
                w.project
            };
            let verdict = w
                .store
                .reconcile(project, lease.tuple.job, finding, decision)
                .await
                .expect("reconcile");
            assert!(verdict.is_accepted(), "{verdict:?}");
        }
        // The retried job again, and the rest of the queue; then claims that find nothing.
        assert_eq!(leases(&w, w.runner, 8).await.len(), 4);
        for runner in [w.second_runner, w.other_runner] {
            let verdict = w.store.claim(runner, None).await.expect("claim");
            assert_eq!(verdict, Verdict::Rejected(Reason::NoQueuedJob));
        }
        w
    }

    #[tokio::test]
    async fn every_attempt_and_reservation_is_of_its_job_and_project() {
        let w = workload().await;
        assert_eq!(strays(&w.store).await, Vec::<String>::new());
    }

    /// The check above can fail: a job naming another job's attempt as current passes the
    /// remaining foreign key (the attempt exists) and is found.
    #[tokio::test]
    async fn a_current_attempt_of_another_job_is_found() {
        let w = workload().await;
        sqlx::query(
            "UPDATE jobs SET current_attempt_id = (
                 SELECT a.id FROM attempts AS a WHERE a.job_id <> jobs.id LIMIT 1)
             WHERE id = (SELECT job_id FROM attempts ORDER BY ledger_seq LIMIT 1)",
        )
        .execute(w.store.pool())
        .await
        .expect("sabotage");
        let found = strays(&w.store).await;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("an attempt of another job"), "{found:?}");
    }

    /// Since migration 0013 no foreign key refuses a current attempt, or the attempt of a
    /// reconciliation, cancel or sweep, that does not exist, or one of another job, and since
    /// 0022 none refuses an attempt's runner of another project or that does not exist: each is
    /// found.
    #[tokio::test]
    async fn a_reference_to_an_attempt_that_does_not_exist_or_of_another_job_is_found() {
        let sabotages = [
            (
                "UPDATE jobs SET current_attempt_id = gen_random_uuid()
                 WHERE id = (SELECT job_id FROM attempts ORDER BY ledger_seq LIMIT 1)",
                "names an attempt that does not exist as current",
            ),
            (
                "UPDATE attempts SET runner_id = (
                     SELECT r.id FROM runners AS r WHERE r.project_id <> attempts.project_id
                     LIMIT 1)
                 WHERE id = (SELECT id FROM attempts ORDER BY ledger_seq LIMIT 1)",
                "is held by a runner of another project",
            ),
            (
                "UPDATE attempts SET runner_id = gen_random_uuid()
                 WHERE id = (SELECT id FROM attempts ORDER BY ledger_seq LIMIT 1)",
                "is held by a runner that does not exist",
            ),
            (
                "UPDATE reconciliations SET attempt_id = gen_random_uuid()
                 WHERE id = (SELECT min(id) FROM reconciliations WHERE attempt_id IS NOT NULL)",
                "a reconciliation of job",
            ),
            (
                "UPDATE expiry_sweeps SET attempt_id = (
                     SELECT a.id FROM attempts AS a WHERE a.job_id <> expiry_sweeps.job_id LIMIT 1)
                 WHERE id = (SELECT min(id) FROM expiry_sweeps)",
                "names an attempt of another job",
            ),
        ];
        for (sabotage, expected) in sabotages {
            let w = workload().await;
            let changed = sqlx::query(sabotage)
                .execute(w.store.pool())
                .await
                .expect("sabotage")
                .rows_affected();
            assert_eq!(changed, 1, "{sabotage}");
            let found = strays(&w.store).await;
            assert_eq!(found.len(), 1, "{sabotage}: {found:?}");
            assert!(found[0].contains(expected), "{found:?}");
        }
    }

    /// A reservation held in another job's name, in another project's name, by another job's
    /// attempt or by an attempt that does not exist (none of which a foreign key refuses since
    /// migration 0009) is found.
    #[tokio::test]
    async fn a_reservation_of_another_job_project_or_attempt_is_found() {
        let sabotages = [
            (
                "UPDATE target_slots SET holder_attempt_id = (
                     SELECT a.id FROM attempts AS a
                     WHERE a.job_id <> target_slots.holder_job_id LIMIT 1)",
                "is held by an attempt of another job",
            ),
            (
                "UPDATE target_slots SET holder_project_id = (
                     SELECT p.id FROM projects AS p
                     WHERE p.id <> target_slots.holder_project_id LIMIT 1)",
                "is of another project than its job",
            ),
            (
                "UPDATE target_slots SET holder_job_id = (
                     SELECT j.id FROM jobs AS j
                     WHERE j.target <> target_slots.slot
                       AND j.project_id = target_slots.holder_project_id LIMIT 1)",
                "names a job of another slot",
            ),
            (
                "UPDATE target_slots SET holder_attempt_id = gen_random_uuid()",
                "is held by an attempt that does not exist",
            ),
            (
                "UPDATE target_slots SET holder_job_id = gen_random_uuid()",
                "names a job that does not exist",
            ),
        ];
        for (sabotage, expected) in sabotages {
            let w = workload().await;
            // One reservation changed: the slot held by the earliest claimed attempt that holds one.
            sqlx::query(&format!(
                "{sabotage} WHERE slot = (
                     SELECT s.slot FROM target_slots AS s
                     JOIN attempts AS a ON a.id = s.holder_attempt_id
                     ORDER BY a.ledger_seq LIMIT 1)"
            ))
            .execute(w.store.pool())
            .await
            .expect("sabotage");
            // (A job or attempt id changed also makes the attempt another job's: two findings.)
            let found = strays(&w.store).await;
            assert!(
                found.iter().any(|stray| stray.contains(expected)),
                "{sabotage}: {found:?}"
            );
        }
    }
}

/// An observation is attributed to an attempt only together with that attempt's job (docs/protocol.md
/// §7, checks 1-5): the read of an attempt's observations relies on it (migration 0010).
mod attribution {
    use super::*;

    /// Every attributed observation whose named job is not its attempt's job.
    const MISATTRIBUTED: &str = "
        SELECT o.id FROM observations AS o JOIN attempts AS a ON a.id = o.attempt_id
        WHERE a.job_id <> o.named_job_id
        UNION ALL
        SELECT o.id FROM observations AS o LEFT JOIN attempts AS a ON a.id = o.attempt_id
        WHERE o.attempt_id IS NOT NULL AND a.id IS NULL";

    async fn misattributed(store: &Store) -> Vec<i64> {
        sqlx::query_scalar(MISATTRIBUTED)
            .fetch_all(store.pool())
            .await
            .expect("the attribution query")
    }

    /// Accepted, late, forged and foreign messages over two jobs; every one is recorded, and the
    /// attributed ones name their attempt's job.
    async fn messages() -> (World, Lease, Lease) {
        let w = World::new().await;
        w.submit().await.expect("submit");
        w.submit().await.expect("submit");
        let first = w.claim().await.expect("first");
        let second = w.claim().await.expect("second");
        let beat = w.store.heartbeat(&first.tuple, None).await.expect("beat");
        assert!(beat.is_accepted(), "{beat:?}");
        // The first job's attempt named with the second job: unknown_attempt, unattributed.
        let crossed = Tuple {
            job: second.tuple.job,
            ..first.tuple
        };
        let verdict = w.store.heartbeat(&crossed, None).await.expect("crossed");
        assert_eq!(verdict, Verdict::Rejected(Reason::UnknownAttempt));
        // A runner of another project naming the first job: wrong_project, unattributed.
        let foreign = Tuple {
            runner: w.other_runner,
            ..first.tuple
        };
        let verdict = w.store.heartbeat(&foreign, None).await.expect("foreign");
        assert_eq!(verdict, Verdict::Rejected(Reason::WrongProject));
        // The first lease lost and retried: the old attempt's late result is attributed to it.
        w.advance_secs(common::LEASE_TTL_SECS);
        w.store.sweep_expired().await.expect("sweep");
        let retried = w
            .store
            .reconcile(
                w.project,
                first.tuple.job,
                Finding::Stopped,
                Decision::Retry,
            )
            .await
            .expect("reconcile");
        assert!(retried.is_accepted(), "{retried:?}");
        let again = w.claim().await.expect("the retried job");
        let late = w
            .store
            .report_result(&first.tuple, Outcome::Passed, "d", None)
            .await
            .expect("late");
        assert_eq!(late, Verdict::Rejected(Reason::NotCurrent));
        let verdict = w
            .store
            .report_result(&again.tuple, Outcome::Passed, "d", None)
            .await
            .expect("result");
        assert!(verdict.is_accepted(), "{verdict:?}");
        (w, first, again)
    }

    #[tokio::test]
    async fn every_attributed_observation_names_its_attempts_job() {
        let (w, first, again) = messages().await;
        assert_eq!(misattributed(&w.store).await, Vec::<i64>::new());
        // The old attempt's ledger: its accepted heartbeat and its late result, nothing crossed.
        let old = w
            .store
            .attempt_observations(first.tuple.attempt)
            .await
            .expect("old ledger");
        let verdicts: Vec<_> = old.iter().map(|o| (o.kind, o.verdict)).collect();
        assert_eq!(
            verdicts,
            vec![
                (MessageKind::Heartbeat, Verdict::Accepted(())),
                (MessageKind::Result, Verdict::Rejected(Reason::NotCurrent)),
            ]
        );
        assert!(old
            .iter()
            .all(|o| o.attempt == Some(first.tuple.attempt) && o.named.job == first.tuple.job));
        let new = w
            .store
            .attempt_observations(again.tuple.attempt)
            .await
            .expect("new ledger");
        assert_eq!(new.len(), 1, "{new:?}");
    }

    /// Since migration 0013 no foreign key refuses an attribution to an attempt that does not
    /// exist: it is found.
    #[tokio::test]
    async fn an_observation_attributed_to_an_attempt_that_does_not_exist_is_found() {
        let (w, first, _) = messages().await;
        sqlx::query(
            "UPDATE observations SET attempt_id = gen_random_uuid()
             WHERE id = (SELECT min(id) FROM observations WHERE attempt_id = $1)",
        )
        .bind(first.tuple.attempt.0)
        .execute(w.store.pool())
        .await
        .expect("sabotage");
        assert_eq!(misattributed(&w.store).await.len(), 1);
    }

    /// The check above can fail: an attributed observation moved to another job is found.
    #[tokio::test]
    async fn an_attributed_observation_of_another_job_is_found() {
        let (w, first, _) = messages().await;
        sqlx::query(
            "UPDATE observations SET named_job_id = (SELECT id FROM jobs WHERE id <> $1 LIMIT 1)
             WHERE id = (SELECT min(id) FROM observations WHERE attempt_id = $2)",
        )
        .bind(first.tuple.job.0)
        .bind(first.tuple.attempt.0)
        .execute(w.store.pool())
        .await
        .expect("sabotage");
        assert_eq!(misattributed(&w.store).await.len(), 1);
    }
}

/// The batch result (`report_results`) is the single result applied to each item in order.
mod batch_result {
    use super::*;

    fn report(tuple: Tuple, outcome: Outcome, digest: &str) -> ResultReport {
        ResultReport {
            tuple,
            outcome,
            result_digest: digest.into(),
            runner_time: None,
        }
    }

    /// Four jobs claimed by one runner, every lease then expired and swept, one job retried and
    /// claimed again. The batch: the new attempt's result, its identical repeat, a conflicting
    /// one, a forged lease, the retried job's old attempt's late report, an expired attempt's.
    async fn items(w: &World) -> Vec<ResultReport> {
        for _ in 0..4 {
            w.submit().await.expect("submit");
        }
        let leases: Vec<Lease> = match w.store.claim_batch(w.runner, 3, None).await {
            Ok(Verdict::Accepted(leases)) => leases,
            other => panic!("claim: {other:?}"),
        };
        let lost = w.claim().await.expect("a fourth job");
        w.advance_secs(common::LEASE_TTL_SECS);
        w.store.sweep_expired().await.expect("sweep");
        let reconciled = w
            .store
            .reconcile(w.project, lost.tuple.job, Finding::Stopped, Decision::Retry)
            .await
            .expect("reconcile");
        assert!(reconciled.is_accepted(), "{reconciled:?}");
        let retried = w.claim().await.expect("the retried job");
        assert_eq!(retried.tuple.job, lost.tuple.job);
        // The first three leases expired with the lost one: their jobs are uncertain now.
        let a = leases[0].tuple;
        let forged = |t: Tuple| Tuple {
            lease_id: LeaseId::new_random(),
            ..t
        };
        vec![
            report(retried.tuple, Outcome::Passed, "r"),
            report(retried.tuple, Outcome::Passed, "r"),
            report(retried.tuple, Outcome::Failed, "other"),
            report(forged(a), Outcome::Passed, "x"),
            report(lost.tuple, Outcome::Failed, "late"),
            report(a, Outcome::Failed, "expired"),
        ]
    }

    #[tokio::test]
    async fn each_item_gets_the_verdict_of_a_single_result_sent_in_its_place() {
        let batch = World::new().await;
        let items_b = items(&batch).await;
        let single = World::new().await;
        let items_s = items(&single).await;
        let answered = batch.store.report_results(&items_b).await.expect("batch");
        let mut expected = Vec::new();
        for item in &items_s {
            expected.push(
                single
                    .store
                    .report_result(&item.tuple, item.outcome, &item.result_digest, None)
                    .await
                    .expect("single"),
            );
        }
        assert_eq!(
            answered,
            vec![
                Verdict::Accepted(()),
                Verdict::Acknowledged,
                Verdict::Rejected(Reason::ConflictingResult),
                Verdict::Rejected(Reason::LeaseMismatch),
                Verdict::Rejected(Reason::NotCurrent),
                Verdict::Rejected(Reason::LeaseExpired),
            ]
        );
        assert_eq!(answered, expected);
        // The same records, in both worlds: every item is observed once, late ones in the
        // ledger of the attempt they name.
        for (world, items) in [(&batch, &items_b), (&single, &items_s)] {
            for (item, verdict) in items.iter().zip(&answered) {
                let seen = world
                    .store
                    .observations(item.tuple.job)
                    .await
                    .expect("observations");
                let matching: Vec<&ObservationView> = seen
                    .iter()
                    .filter(|o| {
                        o.named == item.tuple
                            && o.kind == MessageKind::Result
                            && o.outcome == Some(item.outcome)
                            && o.verdict == *verdict
                    })
                    .collect();
                assert!(!matching.is_empty(), "{item:?} {verdict:?}: {seen:?}");
            }
        }
    }

    /// Several accepted items in one batch, one of them after a forged item naming its job: the
    /// forged one is rejected, the valid one accepted, both recorded.
    #[tokio::test]
    async fn a_forged_item_does_not_spoil_a_valid_one_of_the_same_job() {
        let w = World::new().await;
        for _ in 0..3 {
            w.submit().await.expect("submit");
        }
        let leases: Vec<Lease> = match w.store.claim_batch(w.runner, 3, None).await {
            Ok(Verdict::Accepted(leases)) => leases,
            other => panic!("claim: {other:?}"),
        };
        let forged = Tuple {
            fence: leases[0].tuple.fence + 1,
            ..leases[0].tuple
        };
        let answered = w
            .store
            .report_results(&[
                report(forged, Outcome::Passed, "f"),
                report(leases[0].tuple, Outcome::Passed, "0"),
                report(leases[1].tuple, Outcome::Failed, "1"),
                report(leases[2].tuple, Outcome::Passed, "2"),
            ])
            .await
            .expect("batch");
        assert_eq!(
            answered,
            vec![
                Verdict::Rejected(Reason::FenceMismatch),
                Verdict::Accepted(()),
                Verdict::Accepted(()),
                Verdict::Accepted(()),
            ]
        );
        for (lease, state) in
            leases
                .iter()
                .zip([JobState::Passed, JobState::Failed, JobState::Passed])
        {
            assert_eq!(w.job(lease.tuple.job).await.expect("job").state, state);
            assert_eq!(
                w.store
                    .target_reservation(lease.tuple.job)
                    .await
                    .expect("reservation"),
                None,
                "a committed outcome releases the slot"
            );
        }
        assert_eq!(w.store.report_results(&[]).await.expect("empty"), vec![]);
    }
}
