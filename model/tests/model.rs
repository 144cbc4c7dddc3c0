//! The model's own tests: the named scenarios of docs/protocol.md §10, one exact counterexample per
//! flawed variant, pinned state counts, and the trace round trip.

use leasewright_model::properties::*;
use leasewright_model::*;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;

/// One job, two runners (and the outsider), two attempts, two-tick leases, disconnects, the
/// fenced target: small enough for every test to explore exhaustively.
fn small() -> Config {
    Config {
        jobs: 1,
        runners: 2,
        attempts_per_job: 2,
        lease_ttl: 2,
        max_skew: 0,
        disconnects: true,
        outsider: true,
        forgery: false,
        target: TargetKind::Fenced,
        variant: Variant::None,
    }
}

/// Runs `actions` from the initial state, asserting that each one is enabled; returns every state.
fn walk(model: &LeaseModel, actions: &[Action]) -> Vec<State> {
    let mut states = vec![model.init_state()];
    for action in actions {
        let s = states.last().unwrap();
        let mut enabled = Vec::new();
        model.actions(s, &mut enabled);
        assert!(
            enabled.contains(action),
            "{action:?} is not enabled in {s:?}"
        );
        states.push(model.next_state(s, action.clone()).expect("a successor"));
    }
    states
}

/// The only message in flight of `kind` sent by `runner` for `attempt`.
fn sent(s: &State, runner: RunnerId, attempt: AttemptId, kind: MessageKind) -> Message {
    *s.in_flight
        .iter()
        .find(|m| m.sender == runner && m.attempt == attempt && m.kind == kind)
        .expect("the message is in flight")
}

/// Stale completion (§10.1), with fences 1 and 2 instead of 7 and 8: A1 (attempt 0, runner 0)
/// reports `passed`, but the report is delayed; A1's lease expires, the sweep makes the job
/// `uncertain`, a reconciliation finds A1's outcome observed and decides `retry`; runner 1 claims
/// A2 with the next fence; then A1's report arrives.
#[test]
fn a_late_passed_result_of_a_retried_attempt_is_rejected_not_current_and_kept_in_its_own_ledger() {
    let model = LeaseModel::new(small());
    let mut states = walk(
        &model,
        &[
            Action::Claim { runner: 0 },
            Action::Result {
                runner: 0,
                outcome: Outcome::Passed,
                runner_time: 0,
            },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
        ],
    );
    let s = states.last().unwrap();
    assert_eq!(s.jobs[0].state, JobState::Uncertain);
    assert_eq!(s.attempts[0].state, AttemptState::Uncertain);
    let reconcile = Action::Reconcile {
        job: 0,
        finding: Finding::ObservedPassed,
        decision: Decision::Retry,
    };
    assert_eq!(model.expected(s, &reconcile), Some(Expected::ACCEPTED));
    states.extend(walk_from(
        &model,
        s,
        &[reconcile, Action::Claim { runner: 1 }],
    ));
    let s = states.last().unwrap().clone();
    assert_eq!(s.attempts[1].fence, s.attempts[0].fence + 1);
    let late = sent(&s, 0, 0, MessageKind::Result(Outcome::Passed));
    let deliver = Action::Deliver { message: late };
    assert_eq!(
        model.expected(&s, &deliver),
        Some(Expected::rejected(Reason::NotCurrent))
    );
    assert_eq!(
        model.observation(&s, &late).attempt,
        Some(0),
        "kept in A1's ledger"
    );
    let after = model.next_state(&s, deliver).unwrap();
    assert_eq!(after.jobs[0].state, JobState::Running);
    assert_eq!(after.jobs[0].current, Some(1));
    assert_eq!(after.attempts[1].state, AttemptState::Active);
}

fn walk_from(model: &LeaseModel, from: &State, actions: &[Action]) -> Vec<State> {
    let mut states = Vec::new();
    let mut s = from.clone();
    for action in actions {
        let mut enabled = Vec::new();
        model.actions(&s, &mut enabled);
        assert!(enabled.contains(action), "{action:?} is not enabled");
        s = model.next_state(&s, action.clone()).unwrap();
        states.push(s.clone());
    }
    states
}

/// Ownership tuple (§10.2): current lease (runner 0, lease L, fence 1).
#[test]
fn a_wrong_lease_or_fence_is_rejected_and_the_exact_tuple_is_accepted() {
    let model = LeaseModel::new(small());
    let states = walk(&model, &[Action::Claim { runner: 0 }]);
    let s = states.last().unwrap();
    let attempt = &s.attempts[0];
    for kind in [
        MessageKind::Heartbeat,
        MessageKind::Rejoin,
        MessageKind::Result(Outcome::Passed),
    ] {
        let exact = Message {
            kind,
            sender: 0,
            job: 0,
            attempt: 0,
            lease: attempt.lease,
            fence: attempt.fence,
            runner_time: 0,
        };
        let verdict = |m: Message| model.expected(s, &Action::Deliver { message: m });
        assert_eq!(
            verdict(Message {
                lease: FORGED_LEASE,
                ..exact
            }),
            Some(Expected::rejected(Reason::LeaseMismatch))
        );
        assert_eq!(
            verdict(Message {
                fence: FORGED_FENCE,
                ..exact
            }),
            Some(Expected::rejected(Reason::FenceMismatch))
        );
        assert_eq!(verdict(exact), Some(Expected::ACCEPTED));
        // Identity before standing: another runner copying the exact tuple is told it is not theirs.
        assert_eq!(
            verdict(Message { sender: 1, ..exact }),
            Some(Expected::rejected(Reason::RunnerMismatch))
        );
        assert_eq!(
            verdict(Message { sender: 2, ..exact }),
            Some(Expected::rejected(Reason::WrongProject))
        );
    }
}

/// Reconnect (§10.4): the runner disconnects with its target mutation in flight, its lease
/// expires, it rejoins with its original tuple and is told `lease_expired` (stop); no second
/// attempt has started.
#[test]
fn a_runner_rejoining_after_expiry_is_told_to_stop_and_no_second_attempt_starts() {
    let model = LeaseModel::new(small());
    let states = walk(
        &model,
        &[
            Action::Claim { runner: 0 },
            Action::TargetMutation { runner: 0 },
            Action::Disconnect { runner: 0 },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
            Action::Rejoin {
                runner: 0,
                runner_time: 0,
            },
        ],
    );
    let s = states.last().unwrap();
    let rejoin = sent(s, 0, 0, MessageKind::Rejoin);
    assert_eq!(
        model.expected(s, &Action::Deliver { message: rejoin }),
        Some(Expected::rejected(Reason::LeaseExpired))
    );
    assert_eq!(s.jobs[0].state, JobState::Uncertain);
    assert_eq!(s.attempts.len(), 1);
    let mut enabled = Vec::new();
    model.actions(s, &mut enabled);
    assert!(
        !enabled.contains(&Action::Claim { runner: 1 }),
        "the job's target stays reserved"
    );
}

/// Fenced target (§10.3): after the fence-2 attempt mutated the target, the fence-1 mutation is
/// refused `stale_fence`.
#[test]
fn a_fenced_target_refuses_the_mutation_of_a_superseded_attempt() {
    let model = LeaseModel::new(small());
    let states = walk(
        &model,
        &[
            Action::Claim { runner: 0 },
            Action::TargetMutation { runner: 0 },
            Action::StopExecuting { runner: 0 },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
            Action::Reconcile {
                job: 0,
                finding: Finding::Stopped,
                decision: Decision::Retry,
            },
            Action::Claim { runner: 1 },
            Action::TargetMutation { runner: 1 },
        ],
    );
    let s = states.last().unwrap();
    let new = sent(s, 1, 1, MessageKind::TargetMutation);
    let old = sent(s, 0, 0, MessageKind::TargetMutation);
    let s = model
        .next_state(s, Action::Deliver { message: new })
        .unwrap();
    assert_eq!(
        model.expected(&s, &Action::Deliver { message: old }),
        Some(Expected::rejected(Reason::StaleFence))
    );
}

/// Checks `config` until `property` is discovered, asserting that `actions` is a counterexample.
fn assert_counterexample(variant: Variant, property: &'static str, actions: Vec<Action>) {
    let model = LeaseModel::new(small().with_variant(variant));
    let checker = model
        .checker()
        .symmetry()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_dfs()
        .join();
    checker.assert_discovery(property, actions);
}

#[test]
fn requeue_on_expiry_puts_an_expired_job_back_in_the_queue() {
    assert_counterexample(
        Variant::RequeueOnExpiry,
        EXPIRED_IS_UNCERTAIN,
        vec![
            Action::Claim { runner: 0 },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
        ],
    );
}

#[test]
fn heartbeat_extends_expired_resurrects_an_expired_lease() {
    assert_counterexample(
        Variant::HeartbeatExtendsExpired,
        NO_HEARTBEAT_AFTER_EXPIRY,
        vec![
            Action::Claim { runner: 0 },
            Action::Tick,
            Action::Tick,
            Action::Heartbeat {
                runner: 0,
                runner_time: 0,
            },
        ],
    );
}

fn passed_of_first_attempt() -> Message {
    Message {
        kind: MessageKind::Result(Outcome::Passed),
        sender: 0,
        job: 0,
        attempt: 0,
        lease: 1,
        fence: 1,
        runner_time: 0,
    }
}

#[test]
fn completion_checks_runner_only_lets_a_retried_attempt_complete_the_job() {
    assert_counterexample(
        Variant::CompletionChecksRunnerOnly,
        NO_STALE_COMPLETION,
        vec![
            Action::Claim { runner: 0 },
            Action::Result {
                runner: 0,
                outcome: Outcome::Passed,
                runner_time: 0,
            },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
            Action::Reconcile {
                job: 0,
                finding: Finding::ObservedPassed,
                decision: Decision::Retry,
            },
            Action::Claim { runner: 0 },
            Action::Deliver {
                message: passed_of_first_attempt(),
            },
        ],
    );
}

#[test]
fn completion_checks_fence_only_lets_a_runner_of_another_project_complete_a_job() {
    assert_counterexample(
        Variant::CompletionChecksFenceOnly,
        NO_CROSS_PROJECT_CHANGE,
        vec![
            Action::Claim { runner: 0 },
            Action::Result {
                runner: 0,
                outcome: Outcome::Passed,
                runner_time: 0,
            },
            Action::Replay {
                runner: 2,
                message: passed_of_first_attempt(),
                forge: Forge::AsIs,
            },
        ],
    );
}

#[test]
fn conflict_overwrites_replaces_a_committed_outcome() {
    let failed = Message {
        kind: MessageKind::Result(Outcome::Failed),
        ..passed_of_first_attempt()
    };
    assert_counterexample(
        Variant::ConflictOverwrites,
        OUTCOME_NEVER_CHANGES,
        vec![
            Action::Claim { runner: 0 },
            Action::Result {
                runner: 0,
                outcome: Outcome::Passed,
                runner_time: 0,
            },
            Action::Deliver {
                message: passed_of_first_attempt(),
            },
            Action::Result {
                runner: 0,
                outcome: Outcome::Failed,
                runner_time: 0,
            },
            Action::Deliver { message: failed },
        ],
    );
}

#[test]
fn auto_retry_unfenced_runs_two_attempts_of_one_job_at_once() {
    assert_counterexample(
        Variant::AutoRetryUnfenced,
        ONE_EXECUTION_PER_JOB,
        vec![
            Action::Claim { runner: 0 },
            Action::Tick,
            Action::Tick,
            Action::ExpirySweep,
            Action::Claim { runner: 1 },
        ],
    );
}

#[test]
fn every_variant_is_caught_by_some_always_property_in_the_small_configuration() {
    for &variant in &Variant::ALL[1..] {
        let model = LeaseModel::new(small().with_variant(variant));
        let checker = model
            .checker()
            .symmetry()
            .finish_when(HasDiscoveries::AnyFailures)
            .spawn_dfs()
            .join();
        let always: Vec<&str> = checker
            .model()
            .properties()
            .iter()
            .filter(|p| p.expectation.discovery_is_failure())
            .map(|p| p.name)
            .collect();
        assert!(
            always.iter().any(|p| checker.discovery(p).is_some()),
            "{variant} is not caught"
        );
    }
}

/// Exhaustive DFS with symmetry reduction, as `leasewright check` runs it.
fn check(config: &Config) -> impl Checker<LeaseModel> {
    LeaseModel::for_checking(config.clone())
        .checker()
        .symmetry()
        .threads(2)
        .spawn_dfs()
        .join()
}

/// Exhaustive DFS with symmetry reduction: every `always` holds, every `sometimes` is reached, and
/// the number of unique states is pinned (a change to it is a change to the model: say why).
fn assert_checks(config: &Config, unique_states: usize) {
    let checker = check(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), unique_states, "{config:?}");
}

#[test]
fn the_protocol_satisfies_every_property_with_one_job() {
    assert_checks(&small(), 13_679);
}

#[test]
fn the_protocol_satisfies_every_property_with_one_runner() {
    assert_checks(
        &Config {
            runners: 1,
            ..small()
        },
        3_119,
    );
}

#[test]
fn the_protocol_satisfies_every_property_without_disconnects_and_with_one_tick_leases() {
    assert_checks(
        &Config {
            disconnects: false,
            lease_ttl: 1,
            ..small()
        },
        2_384,
    );
}

/// Two jobs with one attempt each (the default's shape, smaller): the jobs' order stops mattering
/// once both are claimed, so every job renaming is a symmetry from then on. Without retries two
/// `sometimes` cases (a retry, a stale completion) cannot happen; every invariant holds.
#[test]
fn the_protocol_satisfies_every_invariant_with_two_jobs_of_one_attempt() {
    let config = Config {
        attempts_per_job: 1,
        ..Config::default()
    };
    assert_eq!(config.jobs, 2);
    let checker = check(&config);
    assert!(
        checker.discovery(properties::EVERY_INVARIANT).is_none(),
        "{config:?}"
    );
    assert!(checker
        .discovery(properties::SOMETIMES_CONFLICT_RECORDED)
        .is_some());
    assert_eq!(checker.unique_state_count(), 20_757, "{config:?}");
}

#[test]
fn variant_names_are_kebab_case_and_parse_back() {
    for &v in Variant::ALL {
        assert_eq!(v.to_string().parse::<Variant>(), Ok(v));
    }
    assert_eq!(
        "requeue-on-expiry".parse::<Variant>(),
        Ok(Variant::RequeueOnExpiry)
    );
    assert!("requeue_on_expiry".parse::<Variant>().is_err());
}

#[test]
fn reason_codes_are_the_stable_strings_of_the_protocol() {
    let codes: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    for code in [
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
        "no_queued_job",
        "reconcile_required",
        "not_uncertain",
        "execution_not_stopped",
        "nothing_to_adopt",
        "stale_fence",
    ] {
        assert!(codes.contains(&code), "{code} is missing");
    }
}

#[test]
fn a_counterexample_survives_the_round_trip_through_itf() {
    let model = LeaseModel::new(small());
    let actions = vec![
        Action::Claim { runner: 0 },
        Action::Result {
            runner: 0,
            outcome: Outcome::Passed,
            runner_time: 0,
        },
        Action::Deliver {
            message: passed_of_first_attempt(),
        },
    ];
    let states = walk(&model, &actions);
    let path: Vec<(Action, State)> = actions
        .iter()
        .cloned()
        .zip(states.into_iter().skip(1))
        .collect();
    let text = trace::to_string(&model.config, "test", 7, "round trip", &path);
    let (config, parsed, expected) = trace::from_str(&text).expect("reads back");
    assert_eq!(config, model.config);
    assert_eq!(parsed, actions);
    assert_eq!(
        expected,
        vec![Some(Expected::ACCEPTED), None, Some(Expected::ACCEPTED)]
    );

    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["states"][3]["jobs"][0]["state"] = serde_json::json!("failed");
    let err = trace::parse(&doc).unwrap_err();
    assert!(err.0.contains("state 3"), "{err}");
}

/// The symmetries the checker reduces by (runner renaming, job renaming once all but one job are
/// terminal, passed/failed exchange per job, ledger order) are symmetries of the model: along
/// seeded random walks in a two-job configuration, a state and each of its images have the same
/// representative, satisfy the same properties, and have the same successors up to symmetry.
fn fingerprint(s: &State) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

#[test]
fn the_reductions_are_symmetries_of_the_model() {
    use stateright::Representative;
    let model = LeaseModel::new(Config {
        jobs: 2,
        disconnects: true,
        forgery: true,
        ..Config::one_job()
    });
    let properties = model.properties();
    let successors = |s: &State| -> BTreeSet<State> {
        model
            .next_steps(s)
            .into_iter()
            .map(|(_, next)| next.representative())
            .collect()
    };
    let mut seed: u64 = 0x5eed;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let (mut images_checked, mut job_renamings, mut reorderings) = (0, 0, 0);
    for _walk in 0..40 {
        let mut s = model.init_state();
        for _step in 0..40 {
            let mut images = vec![s.rename_runners(&[1, 0])];
            for job in 0..2 {
                let mut swapped = s.clone();
                swapped.swap_outcomes(job);
                images.push(swapped);
            }
            if (0..2).filter(|&j| s.claim_order_matters(j)).count() <= 1 {
                images.push(s.rename_jobs(&[1, 0]));
                job_renamings += 1;
            }
            let mut reordered = s.clone();
            reordered.canonicalize_attempts();
            if reordered != s {
                images.push(reordered);
                reorderings += 1;
            }
            let representative = s.representative();
            assert_eq!(representative.representative(), representative);
            // The lazy comparison and the hash agree with building the image and with `Eq`.
            let swapped = s.rename_runners(&[1, 0]);
            for other in [&s, &swapped, &representative] {
                assert_eq!(s.cmp_renamed_runners(&[1, 0], other), swapped.cmp(other));
                assert_eq!(fingerprint(other) == fingerprint(&s), *other == s);
            }
            for image in &images {
                assert_eq!(image.representative(), representative, "{s:?}\n{image:?}");
                for p in &properties {
                    assert_eq!(
                        (p.condition)(&model, &s),
                        (p.condition)(&model, image),
                        "{}",
                        p.name
                    );
                }
                assert_eq!(successors(&s), successors(image));
                images_checked += 1;
            }
            let steps = model.next_steps(&s);
            if steps.is_empty() {
                break;
            }
            // Half the time, a step that moves a job's lifecycle on (so that walks reach
            // retries, and ledgers whose jobs' claims interleave).
            let lifecycle: Vec<&(Action, State)> = steps
                .iter()
                .filter(|(a, _)| {
                    matches!(
                        a,
                        Action::Claim { .. }
                            | Action::Tick
                            | Action::ExpirySweep
                            | Action::StopExecuting { .. }
                            | Action::Reconcile { .. }
                    )
                })
                .collect();
            s = if !lifecycle.is_empty() && next(2) == 0 {
                lifecycle[next(lifecycle.len())].1.clone()
            } else {
                steps[next(steps.len())].1.clone()
            };
        }
    }
    assert!(
        images_checked > 1000 && job_renamings > 50 && reorderings > 10,
        "{images_checked} {job_renamings} {reorderings}"
    );
}
