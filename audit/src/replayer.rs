//! The replay of the jobs, batch by batch: each batch is replayed on threads while the next one
//! is read, and its findings are taken in job order, so the report is the one a single thread
//! gives. A batch comes from the audit's own reads (`read::ledgers`) or, in a full run, from the
//! rows the chain pass reads (`chain::check_all`): each record is then read once.

use crate::{order, read, replay, slots, stored, AcrossEpoch, Violation};
use chrono::{DateTime, Utc};
use leasewright_impl::epoch::epoch_of;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use uuid::Uuid;

/// One batch of jobs to replay, in job id order.
pub(crate) struct Batch {
    pub ledgers: Vec<read::JobLedger>,
    /// Each job's submission position and time (the claim order check).
    pub submitted: HashMap<Uuid, (i64, DateTime<Utc>)>,
    /// The stored side-effect rows (read here only without the chain: with it, the chain pass
    /// checks them).
    pub stored: HashMap<Uuid, Vec<stored::StoredRow>>,
}

/// A batch being replayed (on its own threads) while the next one is read, with what its
/// findings are taken with.
struct Pending {
    replaying: std::thread::JoinHandle<(Vec<read::JobLedger>, Vec<replay::Outcome>)>,
    stored: HashMap<Uuid, Vec<stored::StoredRow>>,
    submitted: HashMap<Uuid, (i64, DateTime<Utc>)>,
}

/// What the replay found so far, and the batch in flight.
pub(crate) struct Replayer {
    chained: bool,
    runner_projects: Arc<HashMap<Uuid, Uuid>>,
    policy: crate::time::Policy,
    threads: usize,
    pending: Option<Pending>,
    pub jobs: usize,
    pub records: usize,
    pub violations: Vec<Violation>,
    pub unjudged_records: usize,
    pub unauditable: Vec<(Uuid, String)>,
    pub claims_per_epoch: BTreeMap<i64, usize>,
    pub still_leased: Vec<AcrossEpoch>,
    pub reservations: Vec<replay::Reservation>,
    /// Without the chain: every claim of the jobs replayed (with it, the chain pass notes them).
    pub issued: slots::Issued,
    /// Without the chain: the side effects of the jobs replayed.
    pub side_effects: stored::Checker,
    cache: HashMap<Uuid, Vec<stored::StoredRow>>,
    pub claim_order: order::ClaimOrder,
    /// The jobs whose replay stopped at a violation: what it was (a slot finding on a
    /// reservation of theirs says it follows from it).
    pub stopped: HashMap<Uuid, String>,
}

impl Replayer {
    /// `threads`: 0, one per core. `cache`: without the chain, every cache entry by its storer's
    /// job.
    pub fn new(
        chained: bool,
        runner_projects: Arc<HashMap<Uuid, Uuid>>,
        policy: crate::time::Policy,
        threads: usize,
        cache: HashMap<Uuid, Vec<stored::StoredRow>>,
    ) -> Replayer {
        let mut side_effects = stored::Checker::default();
        side_effects.entries(cache.values().flatten());
        Replayer {
            chained,
            runner_projects,
            policy,
            threads: replay_threads(threads),
            pending: None,
            jobs: 0,
            records: 0,
            violations: Vec::new(),
            unjudged_records: 0,
            unauditable: Vec::new(),
            claims_per_epoch: BTreeMap::new(),
            still_leased: Vec::new(),
            reservations: Vec::new(),
            issued: slots::Issued::default(),
            side_effects,
            cache,
            claim_order: order::ClaimOrder::new(policy.tolerance),
            stopped: HashMap::new(),
        }
    }

    /// The findings of the batch in flight taken (waiting for its replay), and `next` (if any)
    /// set replaying.
    pub fn feed(&mut self, next: Option<Batch>) {
        if let Some(pending) = self.pending.take() {
            self.take(pending);
        }
        let Some(Batch {
            ledgers,
            submitted,
            stored,
        }) = next
        else {
            return;
        };
        let runner_projects = self.runner_projects.clone();
        let (policy, threads) = (self.policy, self.threads);
        self.pending = Some(Pending {
            replaying: std::thread::spawn(move || {
                let outcomes = replay_batch(&ledgers, &runner_projects, policy, threads);
                (ledgers, outcomes)
            }),
            stored,
            submitted,
        });
    }

    fn take(&mut self, pending: Pending) {
        let Pending {
            replaying,
            mut stored,
            submitted,
        } = pending;
        let (ledgers, outcomes) = replaying.join().expect("the replay does not panic");
        for (jl, outcome) in ledgers.into_iter().zip(outcomes) {
            for a in &jl.attempts {
                let claimed_in = epoch_of(a.fence).max(epoch_of(a.slot_token));
                *self.claims_per_epoch.entry(claimed_in).or_default() += 1;
                if a.state == "active" || a.state == "uncertain" {
                    self.still_leased.push(AcrossEpoch {
                        job: jl.job.id,
                        project: jl.job.project,
                        attempt: a.id,
                        state: a.state.clone(),
                        claimed_in,
                        latest: 0,
                    });
                }
            }
            if !self.chained {
                let mut rows = stored.remove(&jl.job.id).unwrap_or_default();
                rows.extend(self.cache.get(&jl.job.id).cloned().unwrap_or_default());
                let messages: Vec<stored::Message> = jl
                    .observations
                    .iter()
                    .filter_map(|o| {
                        stored::Message::of(
                            o.id,
                            o.ledger_seq,
                            &o.kind,
                            &o.verdict,
                            o.attributed,
                            o.payload_sha256.clone(),
                            o.received_at,
                        )
                    })
                    .collect();
                let found = self
                    .side_effects
                    .job(jl.job.id, jl.job.project, &messages, &rows);
                self.violations.extend(found);
                self.issued.read(&jl);
            }
            self.jobs += 1;
            self.records += jl.records();
            self.claim_order
                .read(&jl, submitted.get(&jl.job.id).copied());
            match outcome {
                replay::Outcome::Clean(held) => self.reservations.extend(held),
                replay::Outcome::Violation(v, mut held) => {
                    replay::release_as_the_ledger_shows(&jl, &mut held);
                    self.stopped
                        .insert(jl.job.id, format!("[{}] at {}", v.kind.as_str(), v.record));
                    self.violations.push(*v);
                    self.reservations.extend(held);
                }
                replay::Outcome::Unauditable(why) => {
                    // What needs no lease expiry is still checked, and named.
                    self.violations
                        .extend(replay::unjudged_checks(&jl, self.policy));
                    self.unjudged_records += jl.records();
                    self.unauditable.push((jl.job.id, why));
                }
            }
        }
    }

    /// The side-effect findings left (without the chain), once every batch was fed.
    pub fn finish(&mut self) {
        self.feed(None);
        if !self.chained {
            let left = std::mem::take(&mut self.side_effects).finish();
            self.violations.extend(left);
        }
    }
}

/// How many threads replay: `asked`, or one per core.
fn replay_threads(asked: usize) -> usize {
    match asked {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
}

/// Each job of `ledgers` replayed, in order, on up to `threads` threads (jobs are independent).
fn replay_batch(
    ledgers: &[read::JobLedger],
    runner_projects: &HashMap<Uuid, Uuid>,
    policy: crate::time::Policy,
    threads: usize,
) -> Vec<replay::Outcome> {
    let one = |jl: &read::JobLedger| replay::replay(jl, runner_projects, policy);
    if threads <= 1 || ledgers.len() < 2 {
        return ledgers.iter().map(one).collect();
    }
    let per_thread = ledgers.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = ledgers
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().map(one).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("the replay does not panic"))
            .collect()
    })
}
