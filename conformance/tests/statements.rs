//! Every statement the server runs in production is replayed (issue 28 item 4), shown with a bug
//! planted in each path the suite once left out (feature `mutants`): the sweep over every project
//! (what the server's background sweeper runs), the batch result's order and checks, and who
//! stored a cache entry. Each mutant is caught by traces the default suite replays the same way;
//! the unmutated implementation passes them. Run:
//! `cargo test -p leasewright-conformance --features mutants --test statements`.
#![cfg(feature = "mutants")]

use std::sync::Arc;

use leasewright_conformance::drivers::pg::{sends_batch_results, sweeps_globally, PgDriver};
use leasewright_conformance::generate::{random_walks, Generated};
use leasewright_conformance::probe;
use leasewright_conformance::select::{has_step, side_effect_config};
use leasewright_conformance::suite::{self, RunOptions};
use leasewright_impl::database::TestDatabase;
use leasewright_impl::mutants::Mutant;
use leasewright_model::{
    Action, Config, LeaseModel, MessageKind, Outcome, SideEffect, State, Verdict,
};
use stateright::Model;

async fn pool() -> (TestDatabase, sqlx::PgPool) {
    let db = TestDatabase::create().await.expect("a test database");
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    (db, pool)
}

/// `traces` renamed `{prefix}-{i}-{k}`, with the first `k` for which `wanted` holds of the name
/// (the drivers choose a path by a stable hash of the name).
fn named(
    mut traces: Vec<Generated<LeaseModel>>,
    prefix: &str,
    wanted: impl Fn(&str) -> bool,
) -> Vec<Generated<LeaseModel>> {
    for (i, t) in traces.iter_mut().enumerate() {
        t.name = (0..)
            .map(|k| format!("{prefix}-{i}-{k}"))
            .find(|n| wanted(n))
            .expect("some name");
    }
    traces
}

/// The number of divergences of `traces` against the implementation (with `mutant`), printing
/// the first.
async fn divergences(
    pool: &sqlx::PgPool,
    model: &Arc<LeaseModel>,
    traces: &[Generated<LeaseModel>],
    mutant: Option<Mutant>,
) -> usize {
    let driver = PgDriver::new(pool.clone()).await.expect("migrations");
    let driver = Arc::new(match mutant {
        Some(m) => driver.with_mutant(m),
        None => driver,
    });
    let outcome = suite::run(
        driver,
        Arc::clone(model),
        traces.to_vec(),
        &RunOptions {
            parallel: 4,
            stop_at_first: false,
        },
        |_| {},
    )
    .await;
    if let Some(first) = outcome.divergences.first() {
        eprintln!("{mutant:?}: {}", first.render());
    }
    outcome.divergences.len()
}

async fn caught(model: LeaseModel, traces: Vec<Generated<LeaseModel>>, mutant: Mutant) {
    assert!(!traces.is_empty(), "{mutant:?}: no trace to replay");
    let (_db, pool) = pool().await;
    let model = Arc::new(model);
    assert_eq!(
        divergences(&pool, &model, &traces, None).await,
        0,
        "the unmutated implementation diverges"
    );
    assert!(
        divergences(&pool, &model, &traces, Some(mutant)).await > 0,
        "{mutant:?} survives {} traces",
        traces.len()
    );
}

/// Random walks of `model` in which some step satisfies `wanted` (of the state before it and the
/// step), the first `limit`.
fn walks_with(
    model: &LeaseModel,
    limit: usize,
    wanted: impl Fn(&State, &Action, &State) -> bool,
) -> Vec<Generated<LeaseModel>> {
    random_walks(model, 7, 200_000, 40)
        .into_iter()
        .filter(|w| has_step(w, &wanted))
        .take(limit)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_over_every_project_made_a_no_op_is_caught() {
    let model = LeaseModel::new(Config::one_job());
    let walks = walks_with(&model, 12, |before, a, after| {
        matches!(a, Action::ExpirySweep) && before.jobs != after.jobs
    });
    caught(
        model,
        named(walks, "global", sweeps_globally),
        Mutant::GlobalSweepNoOp,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handling_one_jobs_results_in_reverse_order_is_caught() {
    let model = LeaseModel::new(Config::one_job());
    let walks = walks_with(
        &model,
        12,
        |_, a, _| matches!(a, Action::Deliver { message } if matches!(message.kind, MessageKind::Result(_))),
    );
    caught(
        model,
        named(walks, "batch", sends_batch_results),
        Mutant::BatchResultsReverseOrder,
    )
    .await;
}

/// A claim, then a `cancelled` result the running job's holder sends: refused by the single
/// result and, sent again through the batch route (as every trace's results are), by the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_accepting_cancelled_from_a_running_job_is_caught() {
    let model = LeaseModel::new(Config::one_job());
    let init = model.init_states().remove(0);
    let claim = Action::Claim { runner: 0 };
    let claimed = model.next_state(&init, claim.clone()).expect("a claim");
    let probe = probe::candidates(&model, &claimed)
        .into_iter()
        .find(|a| {
            matches!(a, Action::Replay { message, .. }
                if message.kind == MessageKind::Result(Outcome::Cancelled))
                && model
                    .expected(&claimed, a)
                    .is_some_and(|e| e.verdict == Verdict::Rejected)
        })
        .expect("a probe of a cancelled result while running");
    let after = probe::apply(&model, &claimed, &probe).expect("the probe applies");
    // One trace sending its results one by one, one as batches.
    let traces = [false, true]
        .into_iter()
        .map(|batch| Generated {
            name: (0..)
                .map(|k| format!("cancelled-while-running-{k}"))
                .find(|n| sends_batch_results(n) == batch)
                .expect("a name"),
            generator: "random",
            seed: None,
            init: init.clone(),
            steps: vec![
                (claim.clone(), claimed.clone()),
                (probe.clone(), after.clone()),
            ],
        })
        .collect();
    caught(model, traces, Mutant::BatchResultCancelledWhileRunning).await;
}

/// A `cache put` by a later attempt over an entry an earlier attempt stored: the entry names
/// the later attempt (compared in the projection, `Stored::cache`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_keeping_the_first_storer_is_caught() {
    let model = LeaseModel::new(side_effect_config(&Config::one_job()));
    let walks = walks_with(&model, 8, |before, a, after| {
        matches!(
            a,
            Action::SideEffect {
                effect: SideEffect::CachePut { .. },
                ..
            }
        ) && before.cache[0]
            .is_some_and(|e| after.cache[0].is_some_and(|n| n.stored_by != e.stored_by))
    });
    caught(model, walks, Mutant::CacheKeepsFirstStorer).await;
}

/// Issue 39 item 7: a runner revoked mid-lease whose heartbeat, result or claim comes after the
/// revocation (refused `unknown_runner` and recorded nowhere by the model); authentication that
/// still reads a revoked runner's token hash judges it as if it were never revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_runner_still_authenticating_is_caught() {
    use leasewright_conformance::select::revocation_config;
    let model = LeaseModel::new(revocation_config(&Config::one_job()));
    let walks = walks_with(&model, 12, |before, a, _| {
        let revoked = |runner: u8| {
            before
                .runners
                .get(usize::from(runner))
                .is_some_and(|r| r.revoked)
        };
        match a {
            Action::Deliver { message } => revoked(message.sender),
            Action::Claim { runner } => revoked(*runner),
            _ => false,
        }
    });
    caught(model, walks, Mutant::RevokedRunnerAuthenticates).await;
}

/// Issue 39 item 7: a batch claim whose jobs reach past the K earliest queued ones, because some
/// of those wait on a busy slot (R1 "Batch claim": the K earliest *claimable* jobs); a claim that
/// stops at busy slots takes fewer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stopping_at_busy_slots_is_caught() {
    use leasewright_conformance::select::{batch_claim_configs, batch_reaches_past_busy_slot};
    let [(_, config), _] = batch_claim_configs(&Config::one_job());
    let model = LeaseModel::new(config);
    let walks = walks_with(&model, 12, batch_reaches_past_busy_slot);
    caught(model, walks, Mutant::BatchStopsAtBusySlot).await;
}

/// Issue 39 item 6: walks through a failover that claim a job in the new epoch, replayed with
/// the database losing what the model's failover loses (the in-process driver's own schema per
/// trace, snapshot and restore, then the epoch advanced as after a restore); a claim that issues
/// its fences and slot tokens without the epoch issues the lost claim's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_without_the_epoch_is_caught_by_failovers_replayed() {
    use leasewright_conformance::select::{claims_in_new_epoch, failover_config};
    let model = LeaseModel::new(failover_config(&Config::one_job()));
    let walks = walks_with(&model, 8, claims_in_new_epoch);
    assert!(walks
        .iter()
        .all(leasewright_conformance::drivers::failover::has_failover));
    caught(model, walks, Mutant::ClaimIgnoresEpoch).await;
}

/// Issue 39: claims sent while the claims wait after a failover (the probes of
/// `select::failover_wait_probes`, as every probe suite sends them) must take nothing; a claim
/// that does not wait takes the job there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_without_the_wait_is_caught_by_the_claims_held_by_the_wait() {
    use leasewright_conformance::select::{failover_config, failover_wait_probes};
    let model = LeaseModel::new(failover_config(&Config::one_job()));
    let walks = random_walks(&model, 5, 6_000, 30);
    let probes = failover_wait_probes(&model, &walks);
    assert!(!probes.is_empty(), "no claim waits after a failover");
    caught(model, probes, Mutant::ClaimWithoutWait).await;
}

/// Issue 39: with replica clocks one tick apart the wait after a failover is `lease_ttl + 2δ`;
/// a wait without its 2δ has ended at its last tick, where the claims held by the wait
/// (`select::failover_wait_probes` in `select::failover_wait_config`, as every probe suite sends
/// them) must still take nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_without_its_clock_skew_is_caught_by_the_claims_held_at_its_last_tick() {
    caught_by_wait_probes("probe-failover-wait-", Mutant::WaitWithoutClockSkew).await;
}

/// Issue 39: a claim received at the very end of the wait after a failover takes a job (the
/// wait is `now < began_at + ttl + 2δ`); a wait that lasts a moment longer refuses it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_ends_late_is_caught_by_the_claims_at_its_end() {
    caught_by_wait_probes("probe-failover-wait-end-", Mutant::WaitEndsLate).await;
}

/// `mutant` caught by the probes of the failover wait configuration named `prefix` and a number.
async fn caught_by_wait_probes(prefix: &str, mutant: Mutant) {
    use leasewright_conformance::select::{failover_wait_config, failover_wait_probes};
    let model = LeaseModel::new(failover_wait_config(&Config::one_job()));
    let walks = random_walks(&model, 5, 6_000, 30);
    let probes: Vec<_> = failover_wait_probes(&model, &walks)
        .into_iter()
        .filter(|p| {
            p.name
                .strip_prefix(prefix)
                .is_some_and(|n| n.parse::<usize>().is_ok())
        })
        .collect();
    assert!(!probes.is_empty(), "no {prefix}* probe");
    caught(model, probes, mutant).await;
}

/// Issue 39 item 7: replica clocks one tick apart (δ recorded in the trace's own schema). A sweep
/// sent where a lease has expired by less than 2δ must take nothing; a sweep that acts δ past a
/// lease takes the job there (the probes of `select::replica_sweep_probes`, as every probe suite
/// sends them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_at_one_skew_is_caught_by_replica_clocks() {
    use leasewright_conformance::select::{replica_clock_config, replica_sweep_probes};
    let model = LeaseModel::new(replica_clock_config(&Config::one_job()));
    let walks = random_walks(&model, 7, 4_000, 40);
    let probes = replica_sweep_probes(&model, &walks);
    caught(model, probes, Mutant::SweepAtOneSkew).await;
}

/// Issue 39: a lease expired by exactly 2δ is swept (`lease_expiry <= now - 2δ`); a sweep that
/// acts a moment later takes nothing there (the probes of `select::replica_sweep_probes` at the
/// margin's end, `probe-replica-sweep-end-*`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_that_ends_late_is_caught_by_the_sweeps_at_the_margins_end() {
    use leasewright_conformance::select::{replica_clock_config, replica_sweep_probes};
    let model = LeaseModel::new(replica_clock_config(&Config::one_job()));
    let walks = random_walks(&model, 7, 4_000, 40);
    let probes: Vec<_> = replica_sweep_probes(&model, &walks)
        .into_iter()
        .filter(|p| p.name.starts_with("probe-replica-sweep-end-"))
        .collect();
    caught(model, probes, Mutant::SweepEndsLate).await;
}

/// Issue 39 item 7: walks pruned between their jobs (the in-process driver audits the trace's
/// ledger, records the watermark, prunes every finished job and audits `--since` the watermark).
/// A prune whose audited guard reads the job's own position prunes a job finished after the
/// audit; the audit `--since` names it (`watermark_mismatch`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_guard_reading_the_jobs_own_position_is_caught_by_pruned_walks() {
    let (model, walks) = pruned_walks();
    caught(model, walks, Mutant::PruneGuardReadsOwnPosition).await;
}

/// Issue 39 item 7: after the prune of a job whose attempt stored the project's cache entry, the
/// entry is still there and still names its storer; a read joining the storer's attempt loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_read_losing_a_pruned_storer_is_caught_by_pruned_walks() {
    let (model, walks) = pruned_walks();
    caught(model, walks, Mutant::CacheReadLosesPrunedStorer).await;
}

/// The pruned walks a default suite replays (`select::prune_config`, `random-prune-*`).
fn pruned_walks() -> (LeaseModel, Vec<Generated<LeaseModel>>) {
    use leasewright_conformance::drivers::prune;
    use leasewright_conformance::select::prune_config;
    let model = LeaseModel::new(prune_config(&Config::one_job()));
    let walks: Vec<_> = random_walks(&model, 7, 20_000, 40)
        .into_iter()
        .filter_map(|mut w| {
            w.steps.truncate(prune::steps_to_keep(&w)?);
            prune::plan(&w)
                .is_some_and(|p| p.prunes_cache_storer)
                .then_some(w)
        })
        .take(8)
        .enumerate()
        .map(|(i, mut w)| {
            w.name = format!("{}-{i}", prune::PREFIX);
            w
        })
        .collect();
    (model, walks)
}

/// A manual-clock server on a test database of its own, its store with `mutant` (none: the
/// implementation as it is), and the HTTP driver against it.
async fn server_with(
    mutant: Option<Mutant>,
) -> (
    TestDatabase,
    leasewright_conformance::drivers::http::HttpDriver,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    use leasewright_server::app::{self, AppState};
    const OPERATOR: &str = "conform-operator";
    let db = TestDatabase::create().await.expect("a test database");
    let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
    let clock = leasewright_impl::ManualClock::new(chrono::Utc::now());
    let store = leasewright_impl::Store::from_pool(
        pool,
        Arc::new(clock.clone()),
        leasewright_impl::StoreConfig {
            lease_ttl: std::time::Duration::from_secs(30),
            ..leasewright_impl::StoreConfig::default()
        },
    )
    .await
    .expect("the store");
    app::ensure_schema(&store)
        .await
        .expect("the server's tables");
    let store = match mutant {
        Some(m) => store.with_mutant(m),
        None => store,
    };
    let state = AppState::new(
        store,
        Some(clock),
        OPERATOR,
        leasewright_server::source::Limits::default(),
    );
    let router = app::router(state, 1024 * 1024);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(async move { axum::serve(listener, router).await });
    let http = leasewright_conformance::drivers::http::HttpDriver::connect(&url, OPERATOR)
        .await
        .expect("the HTTP driver connects");
    (db, http, served)
}

/// `mutant` diverges over HTTP on `traces`, which the implementation as it is replays with no
/// divergence (each on a server of its own).
async fn caught_over_http(model: LeaseModel, traces: Vec<Generated<LeaseModel>>, mutant: Mutant) {
    let model = Arc::new(model);
    for m in [None, Some(mutant)] {
        let (_db, http, served) = server_with(m).await;
        let outcome = suite::run(
            Arc::new(http),
            Arc::clone(&model),
            traces.clone(),
            &RunOptions {
                parallel: 2,
                stop_at_first: false,
            },
            |_| {},
        )
        .await;
        let first = outcome.divergences.first().map(|d| d.render());
        match m {
            None => assert!(first.is_none(), "the unmutated server diverges: {first:?}"),
            Some(m) => assert!(
                first.is_some(),
                "{m:?} survives {} traces over HTTP",
                traces.len()
            ),
        }
        served.abort();
    }
}

/// The same slip over HTTP (issue 39 items 6 and 7): a manual-clock server whose store claims
/// without the epoch, its failovers replayed through its test hooks (`POST /v1/test/replicate`,
/// `POST /v1/test/failover`), issues the lost claim's fence again and diverges; the server
/// without the slip agrees on the same walks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_without_the_epoch_is_caught_by_failovers_replayed_over_http() {
    use leasewright_conformance::select::{claims_in_new_epoch, failover_config};
    let model = LeaseModel::new(failover_config(&Config::one_job()));
    // Those whose target mutations no failover reaches (the others are left out over HTTP: a
    // demonstration target keeps its state in the database the failover takes back).
    let walks: Vec<_> = walks_with(&model, 64, claims_in_new_epoch)
        .into_iter()
        .filter(|w| !leasewright_conformance::drivers::http::judged_otherwise_by_a_demo_target(w))
        .take(8)
        .collect();
    assert_eq!(walks.len(), 8, "too few walks claiming in a new epoch");
    caught_over_http(model, walks, Mutant::ClaimIgnoresEpoch).await;
}

/// The prune's slips over HTTP (issue 39 item 7): the walks the random suite prunes between
/// their jobs, audited and pruned through a manual-clock server's test hooks (`POST
/// /v1/test/audit`, `POST /v1/test/prune`), diverge where the prune's audited guard reads the
/// job's own position (an unaudited job pruned: the audit since the watermark after it finds it)
/// and where the cache read loses an entry whose storer's job was pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prunes_slips_are_caught_by_walks_pruned_over_http() {
    use leasewright_conformance::select;
    let (model, walks) = select::random_prune_walks(3)
        .expect("generates")
        .map(|b| (b.model, b.traces))
        .expect("the random suite prunes between jobs");
    for mutant in [
        Mutant::PruneGuardReadsOwnPosition,
        Mutant::CacheReadLosesPrunedStorer,
    ] {
        caught_over_http(model.as_ref().clone(), walks.clone(), mutant).await;
    }
}
