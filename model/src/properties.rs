//! The properties the model checks: docs/protocol.md §11 as `always`, and `sometimes` properties
//! that show each interesting case is reached (so no `always` holds only because nothing happened).
//!
//! Every `always` property can fail: [`caught_by`] names, for each flawed [`Variant`], the
//! properties it violates, and the model's tests check that every property is violated by some
//! variant (a property no variant violates fails the test).
//!
//! Many properties are about what the server would do with a message: they look at every
//! **probe** ([`LeaseModel::probes`]): every message that could be delivered now, genuine or
//! forged (another runner of either project, an unknown runner, a forged lease id or fence,
//! another attempt's tuple, an unknown attempt or job). Their ground truth (who sent what, which
//! attempt really is whose) is computed here, independently of the server's own checks.

use crate::batch;
pub use crate::batch::{
    BATCH_EARLIEST_OF_EACH_SLOT, BATCH_ONE_JOB_PER_SLOT, BATCH_SKIPS_NOTHING_CLAIMABLE,
    SOMETIMES_BATCH_FEWER, SOMETIMES_BATCH_WALKS_PAST,
};
use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;
use stateright::{Model, Property};

/// Invariant 1: at most one current attempt per job.
pub const AT_MOST_ONE_CURRENT_ATTEMPT: &str = "at most one current attempt per job";
/// Invariant 2: the fences of a job's attempts strictly increase in claim order.
pub const FENCES_INCREASE: &str = "the fences of a job strictly increase";
/// Invariant 3: no result from a non-current attempt completes a job.
pub const NO_STALE_COMPLETION: &str = "no result from a non-current attempt completes a job";
/// Invariant 4: a committed outcome never changes.
pub const OUTCOME_NEVER_CHANGES: &str = "a committed outcome never changes";
/// Invariant 5: no message extends an expired lease (a heartbeat, a rejoin).
pub const NO_HEARTBEAT_AFTER_EXPIRY: &str = "an expired lease is never extended";
/// Invariant 6: no two attempts of one job execute at the same time.
pub const ONE_EXECUTION_PER_JOB: &str = "no two attempts of one job execute at the same time";
/// Invariant 7: a fenced target never applies an older reservation's mutation after a newer one's.
pub const FENCED_TARGET_MONOTONIC: &str = "a fenced target never applies a stale slot token";
/// Invariant 8: an idempotent target applies each deployment at most once per slot.
pub const IDEMPOTENT_TARGET_ONCE: &str =
    "an idempotent target applies each deployment at most once";
/// Invariant 9: an expired job is `uncertain`, never `queued`, until a reconciliation decides.
pub const EXPIRED_IS_UNCERTAIN: &str = "an expired job is uncertain until a reconciliation decides";
/// Invariant 10: every received message is recorded, once, against the attempt that sent it.
pub const REPORTS_ATTRIBUTED: &str = "every received message is recorded against its attempt";
/// Invariant 11: verdicts and effects never depend on the runner's observed time.
pub const RUNNER_TIME_IRRELEVANT: &str = "verdicts and effects never depend on runner time";
/// Invariant 12: a runner never changes a job of another project.
pub const NO_CROSS_PROJECT_CHANGE: &str = "a runner never changes a job of another project";
/// Invariant 13: when only time can pass (or an operator cancel), no job is `queued`.
pub const QUIESCENCE_RESOLVED: &str = "quiescence leaves every job terminal or uncertain";
/// Invariant 14: no two attempts that may execute hold one slot; a reserved slot blocks claims.
pub const SLOT_EXCLUSIVE: &str = "one attempt at a time holds a slot";
/// Invariant 15: slot tokens strictly increase in reservation order.
pub const SLOT_TOKENS_INCREASE: &str = "slot tokens strictly increase in reservation order";
/// Invariant 16: only the exact current ownership tuple is accepted.
pub const EXACT_TUPLE_ONLY: &str = "only the exact current ownership tuple is accepted";
/// Invariant 17: no result is accepted at or after its lease's expiry.
pub const NO_RESULT_AFTER_EXPIRY: &str = "no result is accepted at or after its lease expiry";
/// Invariant 18: a job with a cancel request is never retried.
pub const NO_RETRY_AFTER_CANCEL: &str = "no retry after a cancel request";
/// Invariant 19: a lease never expires later than `now + lease_ttl` of its last grant.
pub const LEASE_BOUNDED: &str = "a lease never expires later than now + lease_ttl";
/// Invariant 20: a result that differs from the committed one (outcome or digest) is recorded
/// as a conflict with its own attempt.
pub const CONFLICT_RECORDED: &str = "a conflicting result is recorded as a conflict";

/// Invariant 26: an accepted heartbeat never shortens its lease (with 19, an accepted heartbeat
/// sets it to `now + lease_ttl`, which is never earlier than it was).
pub const HEARTBEAT_NEVER_SHORTENS: &str = "an accepted heartbeat never shortens its lease";

/// Invariant 30: the outcome a job commits from a result was produced by the execution that
/// holds its current attempt: every result the server accepts was really sent by the runner that
/// claimed the job's current attempt, about that attempt (ground truth: the execution the
/// message came from, not the ids it names).
pub const RESULT_FROM_CURRENT_EXECUTION: &str =
    "an accepted result comes from the execution that holds the current attempt";

/// Invariant 21: the ledger holds a record of every message the server received, written once,
/// against the attempt that really sent it (unattributed otherwise).
pub const LEDGER_RECORDS_EVERY_MESSAGE: &str =
    "the ledger records every received message against its attempt";
/// Invariant 22: a late report and a conflicting result stay in the ledger with their own
/// attempt, outcome and digest.
pub const LEDGER_KEEPS_LATE_REPORTS: &str =
    "the ledger keeps late reports and conflicts with their own attempt";
/// Invariant 23: no record of another project's runner is attributed to this project's attempt.
pub const LEDGER_NO_FOREIGN_RECORD: &str =
    "no record of another project's runner is attributed to this project's attempt";
/// R8 (with [`Config::side_effects`]): a side effect the server accepts or acknowledges names the
/// exact tuple of its job's current attempt, sent by that attempt's runner, while the attempt holds
/// a valid lease (`active`, `now < lease_expiry`) and its job is `running`.
pub const SIDE_EFFECTS_NEED_LEASE: &str =
    "a side effect is served or stored only for the current attempt holding a valid lease";
/// R8: each project's cache entry was stored by an attempt of that project's jobs, a `cache get`
/// serves exactly its own project's entry and an `artifact get` exactly the attempt's own artifact.
pub const CACHE_PER_PROJECT: &str =
    "a cache get serves only its own project's entry, an artifact get only its attempt's own";

/// A result of a superseded attempt was rejected `not_current`.
pub const SOMETIMES_STALE_COMPLETION_REJECTED: &str = "a stale completion is rejected";
/// An identical repeat of a committed result was acknowledged.
pub const SOMETIMES_DUPLICATE_ACKNOWLEDGED: &str = "a duplicate result is acknowledged";
/// A conflicting result was recorded.
pub const SOMETIMES_CONFLICT_RECORDED: &str = "a conflicting result is recorded";
/// A result with the committed outcome and another digest was recorded as a conflict.
pub const SOMETIMES_DIGEST_CONFLICT: &str = "the same outcome with another digest is a conflict";
/// An accepted heartbeat moved its lease's expiry later (the lease is extended, not only
/// bounded: invariant 19 alone is an upper bound).
pub const SOMETIMES_HEARTBEAT_EXTENDS: &str = "an accepted heartbeat extends its lease";
/// A claim a failover lost was made again in the new epoch, with a fence above every fence of
/// the earlier epoch ([`Config::failover`] only).
pub const SOMETIMES_LOST_CLAIM_MADE_AGAIN: &str =
    "a claim a failover lost is made again in the new epoch";
/// With reissued ids ([`Config::reissued_ids`]): a result of the execution whose claim a
/// failover lost names the attempt id and lease id the next claim was issued again, and is
/// refused `fence_mismatch` (the fence, which carries the epoch, is all that tells them apart).
pub const SOMETIMES_REISSUED_ID_FENCED: &str =
    "a lost execution's result under a reissued id is refused by its fence";
/// Some job became `uncertain`.
pub const SOMETIMES_UNCERTAIN: &str = "a job becomes uncertain";
/// A job got a second attempt with a larger fence.
pub const SOMETIMES_RETRY: &str = "a retry gets a larger fence";
/// A result of an expired attempt was kept as a late observation of that attempt.
pub const SOMETIMES_LATE_REPORT: &str = "a late report is recorded";
/// A heartbeat after expiry was rejected `lease_expired`.
pub const SOMETIMES_HEARTBEAT_REJECTED: &str = "a heartbeat after expiry is rejected";
/// A cancellation completed with the runner's `cancelled` result.
pub const SOMETIMES_CANCELLED: &str = "a cancellation completes";
/// The fenced target refused a stale slot token (fenced targets only).
pub const SOMETIMES_STALE_FENCE: &str = "the fenced target refuses a stale fence";
/// The idempotent target acknowledged a repeated deployment (idempotent targets only).
pub const SOMETIMES_REPEAT_ACKNOWLEDGED: &str = "the idempotent target acknowledges a repeat";
/// The unfenced target applied a mutation of an earlier reservation after a later one's: the
/// residual risk of §8.5 (unfenced targets only).
pub const SOMETIMES_APPLIED_TWICE: &str =
    "the unfenced target applies a stale mutation (residual risk)";
/// A claim found a queued job's slot reserved by another job (shared slots only).
pub const SOMETIMES_SLOT_BLOCKS_CLAIM: &str = "a reserved slot blocks another job's claim";

/// Every property for `config`, `always` first, in a fixed order.
pub fn all(config: &Config) -> Vec<Property<LeaseModel>> {
    let mut properties: Vec<Property<LeaseModel>> = INVARIANTS
        .iter()
        .zip(SINGLE)
        .map(|(&(name, _), condition)| Property::always(name, condition))
        .collect();
    properties.extend(sometimes(config));
    properties
}

// ----- vacuity, derived from what the check reached ----------------------------------------

/// A job is claimed a second time: a retry, or the claim again of a job whose claim a failover
/// lost (what a second attempt of a job is about: fences, stale completions, two executions).
pub const WITNESS_SECOND_CLAIM: &str = "witness: a job is claimed a second time";
/// Some slot is reserved a second time (a retry, or another job on the same slot).
pub const WITNESS_SECOND_RESERVATION: &str = "witness: a slot is reserved a second time";
/// A fenced target's slot is reserved a second time.
pub const WITNESS_FENCED_SECOND_RESERVATION: &str =
    "witness: a fenced target's slot is reserved a second time";
/// A job deploying to an idempotent target is claimed a second time.
pub const WITNESS_IDEMPOTENT_SECOND_CLAIM: &str =
    "witness: a job deploying to an idempotent target is claimed a second time";
/// Some lease expires (by every replica's clock).
pub const WITNESS_LEASE_EXPIRES: &str = "witness: a lease expires";
/// A job with a cancel request loses its lease (what a retry after a cancel would start from).
pub const WITNESS_CANCELLED_JOB_UNCERTAIN: &str =
    "witness: a job with a cancel request becomes uncertain";
/// A runner of another project than a job's holds or can name the job's attempt.
pub const WITNESS_FOREIGN_RUNNER: &str =
    "witness: a runner of another project than a claimed job's can send";
/// Another runner of a claimed job's project than the one that claimed it can send.
pub const WITNESS_OTHER_RUNNER_OF_PROJECT: &str =
    "witness: another runner of a claimed job's project can send";
/// The ledger in the state holds a record.
pub const WITNESS_LEDGER_ENTRY: &str = "witness: the ledger holds a record";
/// The ledger in the state holds a record of another project's runner than the named job's.
pub const WITNESS_FOREIGN_LEDGER_ENTRY: &str =
    "witness: the ledger holds a record of another project's runner";
/// A runner holding a lease can send side effects of R8.
pub const WITNESS_SIDE_EFFECTS_SENT: &str = "witness: a runner holding a lease sends side effects";
/// A valid lease has less than `lease_ttl` left while its runner executes and can heartbeat (so
/// an accepted heartbeat can move its expiry later).
pub const WITNESS_HEARTBEAT_MAY_EXTEND: &str =
    "witness: a lease a heartbeat can renew has less than lease_ttl left";
/// With batch claims: two claimable jobs of one runner's project name one slot.
pub const WITNESS_TWO_CLAIMABLE_ON_ONE_SLOT: &str =
    "witness: a batch claim finds two claimable jobs on one slot";
/// With batch claims: a runner's K earliest claimable jobs are not all among its K earliest
/// queued ones (jobs waiting on busy slots come first).
pub const WITNESS_BATCH_PAST_BUSY_SLOT: &str =
    "witness: a batch claim's K earliest claimable jobs reach past its K earliest queued";
/// With batch claims: a queued job of a runner's project waits on a busy slot while a later one
/// is claimable.
pub const WITNESS_BATCH_AFTER_BUSY_SLOT: &str =
    "witness: a batch claim finds a job waiting on a busy slot before a claimable one";

type Witness = (&'static str, fn(&LeaseModel, &State) -> bool);

/// The witnesses: `sometimes` properties about the precondition of another property, in a
/// fixed order. A property whose witness is not reached in a configuration is reported
/// `vacuous-here` there (nothing in its reach could break it); one whose witness is reached is
/// `holds` or `violated`. Never a failure by itself.
const WITNESSES: &[Witness] = &[
    (WITNESS_SECOND_CLAIM, |_, s| second_claim(s).is_some()),
    (WITNESS_SECOND_RESERVATION, |_, s| {
        s.targets.iter().any(|t| t.reservations >= 2)
    }),
    (WITNESS_FENCED_SECOND_RESERVATION, |m, s| {
        m.config.target == TargetKind::Fenced && s.targets.iter().any(|t| t.reservations >= 2)
    }),
    (WITNESS_IDEMPOTENT_SECOND_CLAIM, |m, s| {
        m.config.target == TargetKind::Idempotent && second_claim(s).is_some()
    }),
    (WITNESS_LEASE_EXPIRES, |_, s| {
        s.attempts.iter().any(|a| a.expired)
    }),
    (WITNESS_CANCELLED_JOB_UNCERTAIN, |_, s| {
        s.jobs
            .iter()
            .any(|j| j.cancel_requested && j.state == JobState::Uncertain)
    }),
    (WITNESS_FOREIGN_RUNNER, |_, s| {
        s.attempts.iter().any(|a| {
            let project = s.jobs[a.job as usize].project;
            s.runners.iter().any(|r| r.project != project)
        })
    }),
    (WITNESS_OTHER_RUNNER_OF_PROJECT, |_, s| {
        s.attempts.iter().any(|a| {
            let project = s.jobs[a.job as usize].project;
            s.runners
                .iter()
                .enumerate()
                .any(|(r, runner)| r as RunnerId != a.runner && runner.project == project)
        })
    }),
    (WITNESS_LEDGER_ENTRY, |_, s| !s.ledger.is_empty()),
    (WITNESS_FOREIGN_LEDGER_ENTRY, |_, s| {
        s.ledger.iter().any(|e| {
            let sender = s.runners.get(e.received.sender as usize).map(|r| r.project);
            let job = s.jobs.get(e.received.job as usize).map(|j| j.project);
            sender.is_some() && job.is_some() && sender != job
        })
    }),
    (WITNESS_SIDE_EFFECTS_SENT, |m, s| {
        m.config.side_effects
            && (0..s.runners.len() as RunnerId).any(|r| m.executing(s, r).is_some())
    }),
    (WITNESS_HEARTBEAT_MAY_EXTEND, |m, s| {
        let now = LeaseModel::now(s);
        let ttl = m.ttl(s);
        m.deliverable(s)
            .filter(|msg| msg.kind == MessageKind::Heartbeat)
            .any(|msg| {
                let a = &s.attempts[msg.attempt as usize];
                a.state == AttemptState::Active
                    && now < a.lease_expiry
                    && a.lease_expiry < now.saturating_add(ttl)
            })
    }),
    (
        WITNESS_TWO_CLAIMABLE_ON_ONE_SLOT,
        batch::two_claimable_on_one_slot,
    ),
    (
        WITNESS_BATCH_PAST_BUSY_SLOT,
        batch::claimable_past_busy_slot,
    ),
    (
        WITNESS_BATCH_AFTER_BUSY_SLOT,
        batch::claimable_after_busy_slot,
    ),
];

/// The first attempt of a job claimed after an earlier attempt of the same job, if any.
fn second_claim(s: &State) -> Option<usize> {
    s.attempts
        .iter()
        .enumerate()
        .position(|(i, a)| s.attempts[..i].iter().any(|b| b.job == a.job))
}

/// The witness of `property`: the `sometimes` property about its precondition, or `None` for a
/// property every configuration puts at stake (a runner's messages, which every configuration
/// sends and probes forge).
pub fn witness_of(property: &str) -> Option<&'static str> {
    Some(match property {
        FENCES_INCREASE
        | NO_STALE_COMPLETION
        | ONE_EXECUTION_PER_JOB
        | SOMETIMES_RETRY
        | SOMETIMES_STALE_COMPLETION_REJECTED => WITNESS_SECOND_CLAIM,
        FENCED_TARGET_MONOTONIC | SOMETIMES_STALE_FENCE => WITNESS_FENCED_SECOND_RESERVATION,
        IDEMPOTENT_TARGET_ONCE | SOMETIMES_REPEAT_ACKNOWLEDGED => WITNESS_IDEMPOTENT_SECOND_CLAIM,
        SLOT_EXCLUSIVE | SLOT_TOKENS_INCREASE | SOMETIMES_APPLIED_TWICE => {
            WITNESS_SECOND_RESERVATION
        }
        NO_HEARTBEAT_AFTER_EXPIRY
        | EXPIRED_IS_UNCERTAIN
        | NO_RESULT_AFTER_EXPIRY
        | SOMETIMES_HEARTBEAT_REJECTED => WITNESS_LEASE_EXPIRES,
        NO_RETRY_AFTER_CANCEL => WITNESS_CANCELLED_JOB_UNCERTAIN,
        NO_CROSS_PROJECT_CHANGE | "check produces wrong_project" => WITNESS_FOREIGN_RUNNER,
        "check produces runner_mismatch" => WITNESS_OTHER_RUNNER_OF_PROJECT,
        LEDGER_RECORDS_EVERY_MESSAGE | LEDGER_KEEPS_LATE_REPORTS => WITNESS_LEDGER_ENTRY,
        LEDGER_NO_FOREIGN_RECORD => WITNESS_FOREIGN_LEDGER_ENTRY,
        SIDE_EFFECTS_NEED_LEASE | CACHE_PER_PROJECT => WITNESS_SIDE_EFFECTS_SENT,
        SOMETIMES_HEARTBEAT_EXTENDS => WITNESS_HEARTBEAT_MAY_EXTEND,
        BATCH_ONE_JOB_PER_SLOT | BATCH_EARLIEST_OF_EACH_SLOT | SOMETIMES_BATCH_FEWER => {
            WITNESS_TWO_CLAIMABLE_ON_ONE_SLOT
        }
        BATCH_SKIPS_NOTHING_CLAIMABLE => WITNESS_BATCH_PAST_BUSY_SLOT,
        SOMETIMES_BATCH_WALKS_PAST => WITNESS_BATCH_AFTER_BUSY_SLOT,
        _ => return None,
    })
}

/// Whether `property` is a witness (reported beside the others, never a failure itself).
pub fn is_witness(property: &str) -> bool {
    WITNESSES.iter().any(|(name, _)| *name == property)
}

/// The witness properties' names, in their fixed order.
pub fn witness_names() -> impl Iterator<Item = &'static str> {
    WITNESSES.iter().map(|&(name, _)| name)
}

/// The condition of the witness `name`.
pub fn witness_condition(name: &str) -> Option<fn(&LeaseModel, &State) -> bool> {
    WITNESSES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, condition)| condition)
}

/// Why `property` was not tested in a run whose reached `sometimes` properties `reached`
/// answers: its witness was not reached there (`None`: it was tested). Derived from what the
/// run reached, never declared from the configuration: a property is `vacuous-here` exactly
/// when nothing the check explored put it at stake. (A violated property is reported violated
/// whatever this says.)
pub fn vacuous(property: &str, reached: impl Fn(&'static str) -> bool) -> Option<String> {
    let witness = witness_of(property)?;
    (!reached(witness)).then(|| format!("not reached here: {witness}"))
}

/// The name of [`every_invariant`] as one property.
pub const EVERY_INVARIANT: &str = "every invariant holds";

/// Every `always` property as one (for exhaustive checking: the checker's cost per state grows
/// with the number of properties, and the probes are computed once), then the `sometimes`
/// properties. When it is violated, [`violated`] names the invariants that fail in the last
/// state of the counterexample.
pub fn combined(config: &Config) -> Vec<Property<LeaseModel>> {
    let mut properties = vec![Property::always(EVERY_INVARIANT, every_invariant)];
    properties.extend(sometimes(config));
    properties
}

/// Every invariant holds in `s` (only [`LeaseModel::focus`] if the model has one).
///
/// The probes' verdicts and records depend on a small part of the state ([`probe_key`]): when
/// the probes of a state with the same key were checked already and held (and none of them was
/// a message of another project that the server accepted, whose effect depends on more), the
/// probe invariants (10, 12's probe part, 16, 17, 20) hold here too and are not computed again.
/// The other invariants are checked in every state.
pub fn every_invariant(m: &LeaseModel, s: &State) -> bool {
    if m.focus.is_some() {
        let ctx = Ctx::new(m, s);
        return INVARIANTS
            .iter()
            .filter(|(name, _)| m.focus.is_none_or(|f| f == *name))
            .all(|(_, holds)| holds(&ctx));
    }
    let key = probe_key(s);
    let known = m.probe_memo.contains(&m.config, key);
    let ctx = Ctx {
        probes_known: known,
        ..Ctx::new(m, s)
    };
    let holds = INVARIANTS.iter().all(|(_, holds)| holds(&ctx));
    if holds && !known && !ctx.cross_project_accepted() {
        m.probe_memo.insert(&m.config, key);
    }
    holds
}

/// A hash of the part of `s` the probes' verdicts and records depend on, and what the probe
/// invariants compare them with: the clock; each job's project, state, current attempt and
/// fence; each attempt's job, runner, lease id, fence, lease expiry, state, committed digest and
/// whether it is executing; the runners; the messages in flight. (Not: the targets, a job's
/// history and bookkeeping, an attempt's slot token and how its execution ended, which no probe's
/// verdict or record reads; an accepted message of another project, whose effect would, is never
/// memoized.)
pub fn probe_key(s: &State) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    // Fixed seeds: a key names the same probes in every thread and run. (SipHash, the standard
    // hasher, cost about 5 % of the default check here.)
    let mut h = ahash::RandomState::with_seeds(1, 2, 3, 4).build_hasher();
    h.write_u8(s.clock);
    if s.replica != 0 {
        // The receipt time is `clock + replica` (replica clocks only: one clock keeps its keys).
        h.write_i8(s.replica);
    }
    h.write_usize(s.jobs.len());
    for j in &s.jobs {
        (j.project, j.state, j.current, j.fence).hash(&mut h);
    }
    h.write_usize(s.attempts.len());
    for a in &s.attempts {
        (
            a.job,
            a.runner,
            a.lease,
            a.fence,
            a.lease_expiry,
            a.state,
            a.digest,
            a.execution == Execution::Executing,
            a.log,
            a.artifact,
            a.lost,
        )
            .hash(&mut h);
    }
    s.cache.hash(&mut h);
    s.runners.hash(&mut h);
    s.in_flight.hash(&mut h);
    h.finish()
}

/// The invariants about an effect a user would see (issue 39 item 4, "harm first"): a job
/// executed twice at once or two holders on one slot (6, 14), a stale write applied at a target
/// (7, 8), an outcome from the wrong execution, changed, or from a non-current attempt (3, 4,
/// 30), a job stuck in the queue or run again after its cancel (13, 18), another project's
/// runner changing a job, its record in this project's ledger, its cache entry served (12, 23,
/// 25), and evidence lost (22: a late report or conflict not kept). The others state a rule
/// (which check answers, what is recorded, how a number moves) whose breach may or may not
/// come to harm; docs/model.md, "Harm first", says for each flawed variant which harm catches
/// it, or why none can follow.
pub const HARM: &[&str] = &[
    NO_STALE_COMPLETION,
    OUTCOME_NEVER_CHANGES,
    ONE_EXECUTION_PER_JOB,
    FENCED_TARGET_MONOTONIC,
    IDEMPOTENT_TARGET_ONCE,
    NO_CROSS_PROJECT_CHANGE,
    QUIESCENCE_RESOLVED,
    SLOT_EXCLUSIVE,
    NO_RETRY_AFTER_CANCEL,
    LEDGER_KEEPS_LATE_REPORTS,
    LEDGER_NO_FOREIGN_RECORD,
    CACHE_PER_PROJECT,
    RESULT_FROM_CURRENT_EXECUTION,
];

/// The names of the invariants that fail in `s`, in their fixed order.
pub fn violated(m: &LeaseModel, s: &State) -> Vec<&'static str> {
    let ctx = Ctx::new(m, s);
    INVARIANTS
        .iter()
        .filter(|(_, holds)| !holds(&ctx))
        .map(|&(name, _)| name)
        .collect()
}

/// The names of every `always` property, in their fixed order.
pub fn invariant_names() -> impl Iterator<Item = &'static str> {
    INVARIANTS.iter().map(|&(name, _)| name)
}

/// The `always` properties a flawed variant violates, the one its counterexample is printed
/// for first. The model's tests check each of them (a breadth-first search of that property
/// alone finds a counterexample), and that every property is in some variant's list.
pub fn caught_by(variant: Variant) -> &'static [&'static str] {
    match variant {
        Variant::None => &[],
        // Its harm first: the requeued job is claimed again while its first attempt still
        // executes (two executions at once), then the rules it breaks.
        // A requeued job with a cancel request is queued again (18), also with one attempt.
        Variant::RequeueOnExpiry => &[
            ONE_EXECUTION_PER_JOB,
            EXPIRED_IS_UNCERTAIN,
            AT_MOST_ONE_CURRENT_ATTEMPT,
            NO_RETRY_AFTER_CANCEL,
        ],
        Variant::HeartbeatExtendsExpired => &[NO_HEARTBEAT_AFTER_EXPIRY],
        // Its harm first: another attempt's result, sent by the runner of the current one, is
        // accepted as the current attempt's outcome (30); then the rules.
        Variant::CompletionChecksRunnerOnly => &[
            RESULT_FROM_CURRENT_EXECUTION,
            NO_STALE_COMPLETION,
            EXACT_TUPLE_ONLY,
        ],
        Variant::CompletionChecksFenceOnly => &[NO_CROSS_PROJECT_CHANGE, EXACT_TUPLE_ONLY],
        Variant::ConflictOverwrites => &[OUTCOME_NEVER_CHANGES, CONFLICT_RECORDED],
        Variant::AutoRetryUnfenced => &[ONE_EXECUTION_PER_JOB, SLOT_EXCLUSIVE],
        Variant::ResultAfterExpiry => &[NO_RESULT_AFTER_EXPIRY],
        Variant::RetryAfterCancel => &[NO_RETRY_AFTER_CANCEL],
        // Its harm first: another runner's copy of the holder's result is accepted (an outcome
        // the current execution did not produce), then the rules it breaks.
        Variant::RunnerNotChecked => &[
            RESULT_FROM_CURRENT_EXECUTION,
            EXACT_TUPLE_ONLY,
            REPORTS_ATTRIBUTED,
        ],
        // Only the rule: with fences that carry the epoch the lease id never is the one thing
        // that tells two executions apart (docs/model.md "Caught by their harm").
        Variant::LeaseNotChecked => &[EXACT_TUPLE_ONLY],
        // Its harm first (with reissued ids): after a failover the lost claim's execution,
        // which has the new attempt's id and lease id, has its result accepted as the new
        // attempt's; then the rule.
        Variant::FenceNotChecked => &[RESULT_FROM_CURRENT_EXECUTION, EXACT_TUPLE_ONLY],
        Variant::RunnerClockExtendsLease => &[LEASE_BOUNDED, RUNNER_TIME_IRRELEVANT],
        // Its harm first: the evidence of a late report is lost (22); then the rules.
        Variant::LateReportDropped => &[
            LEDGER_KEEPS_LATE_REPORTS,
            REPORTS_ATTRIBUTED,
            LEDGER_RECORDS_EVERY_MESSAGE,
        ],
        // Its harm first: the evidence of a conflict is lost (22); then the rules.
        Variant::ConflictNotRecorded => &[
            LEDGER_KEEPS_LATE_REPORTS,
            CONFLICT_RECORDED,
            REPORTS_ATTRIBUTED,
            LEDGER_RECORDS_EVERY_MESSAGE,
        ],
        Variant::RecordByNamedAttempt => &[
            LEDGER_NO_FOREIGN_RECORD,
            REPORTS_ATTRIBUTED,
            LEDGER_RECORDS_EVERY_MESSAGE,
        ],
        Variant::DigestIgnored => &[CONFLICT_RECORDED],
        Variant::TargetIgnoresFence => &[FENCED_TARGET_MONOTONIC],
        Variant::SlotComparesJobFences => &[FENCED_TARGET_MONOTONIC],
        Variant::ReservationPerProject => &[SLOT_EXCLUSIVE],
        Variant::UncertainReleasesSlot => &[SLOT_EXCLUSIVE],
        Variant::RetryKeepsSlot => &[QUIESCENCE_RESOLVED],
        Variant::RejoinResurrectsLease => &[NO_HEARTBEAT_AFTER_EXPIRY],
        // Its harm first: the shortened lease is swept while its runner still rightly executes
        // by its own reckoning, and the retry a reconciliation based on the duty allows runs
        // beside it; then the rule.
        Variant::HeartbeatShortensLease => &[ONE_EXECUTION_PER_JOB, HEARTBEAT_NEVER_SHORTENS],
        // Its harm first: the lost claim's stale mutation lands after the new holder's at a
        // fenced target (equal tokens), then the rules it breaks.
        Variant::FailoverWithoutEpoch => &[
            FENCED_TARGET_MONOTONIC,
            FENCES_INCREASE,
            SLOT_TOKENS_INCREASE,
        ],
        Variant::FailoverWithoutWait => &[ONE_EXECUTION_PER_JOB, SLOT_EXCLUSIVE],
        Variant::HalfSkewMargin => &[ONE_EXECUTION_PER_JOB, SLOT_EXCLUSIVE],
        Variant::FailoverForgetsPolicy => &[ONE_EXECUTION_PER_JOB, SLOT_EXCLUSIVE],
        // Their harm: the early sweep lets a reconciliation record `stopped` on the basis of
        // §2's duty while the runner still rightly executes, and the retry runs beside it.
        Variant::SweepWithoutSkewMargin | Variant::SweepAtLeaseExpiry => {
            &[ONE_EXECUTION_PER_JOB, SLOT_EXCLUSIVE]
        }
        Variant::StillRunningAllowsRetry => &[ONE_EXECUTION_PER_JOB],
        Variant::UntruthfulFinding => &[ONE_EXECUTION_PER_JOB],
        // Its harm first (with reissued ids): the claim after a failover gets the lost claim's
        // whole tuple, and the lost execution's result is accepted as its; then the rule.
        Variant::FenceReused => &[RESULT_FROM_CURRENT_EXECUTION, FENCES_INCREASE],
        // Its harm first: a stale holder's write lands at a fenced target after a later
        // holder's (the reset token is not below the target's highest), then the rule itself.
        Variant::SlotTokenResets => &[FENCED_TARGET_MONOTONIC, SLOT_TOKENS_INCREASE],
        Variant::IdempotencyKeyPerAttempt => &[IDEMPOTENT_TARGET_ONCE],
        Variant::SideEffectsCheckRunnerOnly => &[SIDE_EFFECTS_NEED_LEASE, EXACT_TUPLE_ONLY],
        Variant::CacheSharedAcrossProjects => &[CACHE_PER_PROJECT],
        // Its harm first: the second job of the slot is claimed while the first one's attempt
        // holds it (14); then the rule.
        Variant::BatchTwoPerSlot => &[SLOT_EXCLUSIVE, BATCH_ONE_JOB_PER_SLOT],
        Variant::BatchSkipsEarliest => &[BATCH_EARLIEST_OF_EACH_SLOT],
        Variant::BatchStopsAtBusySlot => &[BATCH_SKIPS_NOTHING_CLAIMABLE],
        // Its harm first: a later reservation of a batch job's slot is issued the token that
        // job was given, and the earlier holder's mutation lands after the later one's at a
        // fenced target (equal tokens); then the rule.
        Variant::BatchOneSlotToken => &[FENCED_TARGET_MONOTONIC, SLOT_TOKENS_INCREASE],
    }
}

/// What every invariant of one state looks at: the model, the state, and its probes with the
/// verdict and the record each would get (computed once per state).
pub struct Ctx<'a> {
    m: &'a LeaseModel,
    s: &'a State,
    probes: std::cell::OnceCell<Vec<Probe>>,
    /// The probes of a state with the same [`probe_key`] were checked already and held.
    probes_known: bool,
}

/// One probe the server receives, with its verdict and record.
struct Probe {
    msg: Message,
    verdict: Expected,
    record: Option<Observation>,
}

impl<'a> Ctx<'a> {
    fn new(m: &'a LeaseModel, s: &'a State) -> Self {
        Ctx {
            m,
            s,
            probes: std::cell::OnceCell::new(),
            probes_known: false,
        }
    }

    fn probes(&self) -> &[Probe] {
        let (m, s) = (self.m, self.s);
        self.probes.get_or_init(|| {
            m.probes(s)
                .into_iter()
                .filter(|msg| msg.kind != MessageKind::TargetMutation)
                .map(|msg| {
                    let record = m.record(s, &msg);
                    let verdict = match &record {
                        Some(o) => Expected {
                            verdict: o.verdict,
                            reason: o.reason,
                        },
                        None => m.delivery_verdict(s, &msg),
                    };
                    Probe {
                        msg,
                        verdict,
                        record,
                    }
                })
                .collect()
        })
    }

    /// The probes the server (not the target) receives, computed once per state; none when the
    /// probes of a state with the same [`probe_key`] were checked already and held.
    ///
    /// A revoked runner's messages ([`Config::revocation`]) are not among them: they are from no
    /// runner (§6.1 check 1), which every property about a runner's message leaves aside;
    /// [`Ctx::revoked_probes`] are checked on their own.
    fn server_probes(&self) -> impl Iterator<Item = &Probe> {
        self.known_probes()
            .iter()
            .filter(|p| !LeaseModel::revoked_sender(self.s, &p.msg))
    }

    /// The probes sent by a runner an operator revoked ([`Config::revocation`]).
    fn revoked_probes(&self) -> impl Iterator<Item = &Probe> {
        self.known_probes()
            .iter()
            .filter(|p| LeaseModel::revoked_sender(self.s, &p.msg))
    }

    /// Every probe of the state; none when the probes of a state with the same [`probe_key`]
    /// were checked already and held.
    fn known_probes(&self) -> &[Probe] {
        if self.probes_known {
            &[]
        } else {
            self.probes()
        }
    }

    /// Some probe of a runner of another project than its job's would be accepted: its effect
    /// depends on more than [`probe_key`], so the state's probes are not memoized.
    fn cross_project_accepted(&self) -> bool {
        let s = self.s;
        let project = |r: RunnerId| s.runners.get(r as usize).map(|r| r.project);
        self.server_probes().any(|p| {
            p.verdict.verdict != Verdict::Rejected
                && s.jobs
                    .get(p.msg.job as usize)
                    .is_some_and(|job| project(p.msg.sender).is_some_and(|p| p != job.project))
        })
    }
}

type Condition = fn(&Ctx<'_>) -> bool;

/// The `always` properties (docs/protocol.md §11), in a fixed order.
const INVARIANTS: &[(&str, Condition)] = &[
    (AT_MOST_ONE_CURRENT_ATTEMPT, at_most_one_current_attempt),
    (FENCES_INCREASE, fences_increase),
    (NO_STALE_COMPLETION, no_stale_completion),
    (OUTCOME_NEVER_CHANGES, outcome_never_changes),
    (NO_HEARTBEAT_AFTER_EXPIRY, no_heartbeat_after_expiry),
    (ONE_EXECUTION_PER_JOB, one_execution_per_job),
    (FENCED_TARGET_MONOTONIC, fenced_target_monotonic),
    (IDEMPOTENT_TARGET_ONCE, idempotent_target_once),
    (EXPIRED_IS_UNCERTAIN, expired_is_uncertain),
    (REPORTS_ATTRIBUTED, reports_attributed),
    (RUNNER_TIME_IRRELEVANT, runner_time_irrelevant),
    (NO_CROSS_PROJECT_CHANGE, no_cross_project_change),
    (QUIESCENCE_RESOLVED, quiescence_resolved),
    (SLOT_EXCLUSIVE, slot_exclusive),
    (SLOT_TOKENS_INCREASE, slot_tokens_increase),
    (EXACT_TUPLE_ONLY, exact_tuple_only),
    (NO_RESULT_AFTER_EXPIRY, no_result_after_expiry),
    (NO_RETRY_AFTER_CANCEL, no_retry_after_cancel),
    (LEASE_BOUNDED, lease_bounded),
    (CONFLICT_RECORDED, conflict_recorded),
    (LEDGER_RECORDS_EVERY_MESSAGE, ledger_records_every_message),
    (LEDGER_KEEPS_LATE_REPORTS, ledger_keeps_late_reports),
    (LEDGER_NO_FOREIGN_RECORD, ledger_no_foreign_record),
    (SIDE_EFFECTS_NEED_LEASE, side_effects_need_lease),
    (CACHE_PER_PROJECT, cache_per_project),
    (HEARTBEAT_NEVER_SHORTENS, heartbeat_never_shortens),
    (RESULT_FROM_CURRENT_EXECUTION, result_from_current_execution),
    // The batch claim (crate::batch): every batch any runner could ask for in the state.
    (BATCH_ONE_JOB_PER_SLOT, |c| {
        batch::one_job_per_slot(c.m, c.s)
    }),
    (BATCH_EARLIEST_OF_EACH_SLOT, |c| {
        batch::earliest_of_each_slot(c.m, c.s)
    }),
    (BATCH_SKIPS_NOTHING_CLAIMABLE, |c| {
        batch::skips_nothing_claimable(c.m, c.s)
    }),
];

fn single<const I: usize>(m: &LeaseModel, s: &State) -> bool {
    (INVARIANTS[I].1)(&Ctx::new(m, s))
}

/// Each invariant as its own stateright condition, in the order of [`INVARIANTS`].
const SINGLE: [fn(&LeaseModel, &State) -> bool; 30] = [
    single::<0>,
    single::<1>,
    single::<2>,
    single::<3>,
    single::<4>,
    single::<5>,
    single::<6>,
    single::<7>,
    single::<8>,
    single::<9>,
    single::<10>,
    single::<11>,
    single::<12>,
    single::<13>,
    single::<14>,
    single::<15>,
    single::<16>,
    single::<17>,
    single::<18>,
    single::<19>,
    single::<20>,
    single::<21>,
    single::<22>,
    single::<23>,
    single::<24>,
    single::<25>,
    single::<26>,
    single::<27>,
    single::<28>,
    single::<29>,
];

/// The rejection reasons `check` must show produced (§6.1–6.3; `sequence_conflict` and
/// `not_found` belong to the side effects, [`SIDE_EFFECT_REASONS`], and `stale_fence` is
/// [`SOMETIMES_STALE_FENCE`]).
const REASONS: [(Reason, &str); 18] = [
    (Reason::UnknownRunner, "check produces unknown_runner"),
    (Reason::UnknownJob, "check produces unknown_job"),
    (Reason::WrongProject, "check produces wrong_project"),
    (Reason::UnknownAttempt, "check produces unknown_attempt"),
    (Reason::RunnerMismatch, "check produces runner_mismatch"),
    (Reason::LeaseMismatch, "check produces lease_mismatch"),
    (Reason::FenceMismatch, "check produces fence_mismatch"),
    (Reason::NotCurrent, "check produces not_current"),
    (
        Reason::ConflictingResult,
        "check produces conflicting_result",
    ),
    (Reason::JobFinished, "check produces job_finished"),
    (Reason::LeaseExpired, "check produces lease_expired"),
    (Reason::CancelRequested, "check produces cancel_requested"),
    (
        Reason::CancelNotRequested,
        "check produces cancel_not_requested",
    ),
    (Reason::NoQueuedJob, "check produces no_queued_job"),
    (
        Reason::ReconcileRequired,
        "check produces reconcile_required",
    ),
    (Reason::NotUncertain, "check produces not_uncertain"),
    (
        Reason::ExecutionNotStopped,
        "check produces execution_not_stopped",
    ),
    (Reason::NothingToAdopt, "check produces nothing_to_adopt"),
];

/// The rejection reasons only side effects give (§6.1 checks 14 and 15): `check` must show them
/// produced when the configuration has side effects ([`Config::side_effects`]).
const SIDE_EFFECT_REASONS: [(Reason, &str); 2] = [
    (Reason::SequenceConflict, "check produces sequence_conflict"),
    (Reason::NotFound, "check produces not_found"),
];

fn produces_side_effect_reason<const I: usize>(m: &LeaseModel, s: &State) -> bool {
    produces(m, s, SIDE_EFFECT_REASONS[I].0)
}

fn produces_nth<const I: usize>(m: &LeaseModel, s: &State) -> bool {
    produces(m, s, REASONS[I].0)
}

const PRODUCES: [fn(&LeaseModel, &State) -> bool; 18] = [
    produces_nth::<0>,
    produces_nth::<1>,
    produces_nth::<2>,
    produces_nth::<3>,
    produces_nth::<4>,
    produces_nth::<5>,
    produces_nth::<6>,
    produces_nth::<7>,
    produces_nth::<8>,
    produces_nth::<9>,
    produces_nth::<10>,
    produces_nth::<11>,
    produces_nth::<12>,
    produces_nth::<13>,
    produces_nth::<14>,
    produces_nth::<15>,
    produces_nth::<16>,
    produces_nth::<17>,
];

/// Some step the server could take now (a probe's delivery, a claim by any runner or by an
/// unknown one, a cancel or reconciliation by either project's operator of any job or of an
/// unknown one) is rejected with `reason`.
fn produces(m: &LeaseModel, s: &State, reason: Reason) -> bool {
    let want = Some(Expected::rejected(reason));
    let rejected = |e: Expected| e.reason == Some(reason);
    if m.probes(s)
        .iter()
        .any(|p| rejected(m.delivery_verdict(s, p)))
    {
        return true;
    }
    let runners = s.runners.len() as RunnerId;
    if (0..=runners).any(|runner| m.expected(s, &Action::Claim { runner }) == want) {
        return true;
    }
    (0..=s.jobs.len() as JobId).any(|job| {
        (0..=1).any(|project| {
            rejected(m.cancel_verdict(s, project, job))
                || Finding::ALL.iter().any(|&finding| {
                    Decision::ALL.iter().any(|&decision| {
                        rejected(m.reconcile_verdict(s, project, job, finding, decision))
                    })
                })
        })
    })
}

/// Replaces the condition of every `sometimes` property of `properties` by one that answers only
/// until it was reached once (see [`LeaseModel::settle_sometimes`]), and leaves out those reached
/// already: stateright's depth-first checker takes the list anew for every block of states and
/// looks each property up among its discoveries in every state (a lock and a string hash each),
/// so a reached `sometimes` it is no longer given costs nothing. Its discovery stays (the report
/// looks discoveries up by name, for the whole list of [`all`]); an `always` property is always
/// kept. The originals are kept in the model's memo (the same list each time: it depends only on
/// the configuration).
pub(crate) fn settle(m: &LeaseModel, properties: &mut Vec<Property<LeaseModel>>) {
    use std::sync::atomic::Ordering;
    let sometimes = || {
        properties
            .iter()
            .filter(|p| p.expectation == stateright::Expectation::Sometimes)
    };
    let table = m.probe_memo.sometimes().get_or_init(|| {
        sometimes()
            .map(|p| (p.condition, std::sync::atomic::AtomicBool::new(false)))
            .collect()
    });
    if table.len() > SETTLED.len() {
        return;
    }
    let mut i = 0;
    properties.retain_mut(|p| {
        if p.expectation != stateright::Expectation::Sometimes {
            return true;
        }
        p.condition = SETTLED[i];
        let reached = table[i].1.load(Ordering::Relaxed);
        i += 1;
        !reached
    });
}

fn settled<const I: usize>(m: &LeaseModel, s: &State) -> bool {
    use std::sync::atomic::Ordering;
    let Some((condition, reached)) = m.probe_memo.sometimes().get().and_then(|t| t.get(I)) else {
        return false;
    };
    if reached.load(Ordering::Relaxed) {
        return false;
    }
    let holds = condition(m, s);
    if holds {
        reached.store(true, Ordering::Relaxed);
    }
    holds
}

const SETTLED: [fn(&LeaseModel, &State) -> bool; 64] = [
    settled::<0>,
    settled::<1>,
    settled::<2>,
    settled::<3>,
    settled::<4>,
    settled::<5>,
    settled::<6>,
    settled::<7>,
    settled::<8>,
    settled::<9>,
    settled::<10>,
    settled::<11>,
    settled::<12>,
    settled::<13>,
    settled::<14>,
    settled::<15>,
    settled::<16>,
    settled::<17>,
    settled::<18>,
    settled::<19>,
    settled::<20>,
    settled::<21>,
    settled::<22>,
    settled::<23>,
    settled::<24>,
    settled::<25>,
    settled::<26>,
    settled::<27>,
    settled::<28>,
    settled::<29>,
    settled::<30>,
    settled::<31>,
    settled::<32>,
    settled::<33>,
    settled::<34>,
    settled::<35>,
    settled::<36>,
    settled::<37>,
    settled::<38>,
    settled::<39>,
    settled::<40>,
    settled::<41>,
    settled::<42>,
    settled::<43>,
    settled::<44>,
    settled::<45>,
    settled::<46>,
    settled::<47>,
    settled::<48>,
    settled::<49>,
    settled::<50>,
    settled::<51>,
    settled::<52>,
    settled::<53>,
    settled::<54>,
    settled::<55>,
    settled::<56>,
    settled::<57>,
    settled::<58>,
    settled::<59>,
    settled::<60>,
    settled::<61>,
    settled::<62>,
    settled::<63>,
];

/// The `sometimes` properties: each case an `always` property is about is reached, and every
/// rejection reason is produced. Some depend on the target kind and on shared slots.
fn sometimes(config: &Config) -> Vec<Property<LeaseModel>> {
    let mut properties = vec![
        Property::sometimes(SOMETIMES_STALE_COMPLETION_REJECTED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::NotCurrent)
            })
        }),
        Property::sometimes(SOMETIMES_DUPLICATE_ACKNOWLEDGED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.verdict == Verdict::Acknowledged
            })
        }),
        Property::sometimes(SOMETIMES_CONFLICT_RECORDED, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::ConflictingResult) && o.attempt.is_some()
            })
        }),
        Property::sometimes(SOMETIMES_DIGEST_CONFLICT, |m, s: &State| {
            m.probes(s)
                .iter()
                .filter(|p| is_result_message(p))
                .any(|p| {
                    let Some(o) = m.record(s, p) else {
                        return false;
                    };
                    let committed = o.attempt.map(|a| s.attempts[a as usize].state.outcome());
                    o.reason == Some(Reason::ConflictingResult)
                        && committed.flatten() == o.result.map(|(outcome, _)| outcome)
                })
        }),
        Property::sometimes(SOMETIMES_UNCERTAIN, |_, s: &State| {
            s.jobs.iter().any(|j| j.state == JobState::Uncertain)
        }),
        Property::sometimes(SOMETIMES_RETRY, |_, s: &State| {
            s.attempts
                .iter()
                .any(|a| a.fence > 1 && a.state == AttemptState::Active)
        }),
        Property::sometimes(SOMETIMES_LATE_REPORT, |m, s: &State| {
            observed(m, s, is_result_message, |o| {
                o.reason == Some(Reason::LeaseExpired) && o.attempt.is_some()
            })
        }),
        Property::sometimes(SOMETIMES_HEARTBEAT_REJECTED, |m, s: &State| {
            observed(m, s, is_kind(MessageKind::Heartbeat), |o| {
                o.reason == Some(Reason::LeaseExpired)
            })
        }),
        Property::sometimes(SOMETIMES_HEARTBEAT_EXTENDS, |m, s: &State| {
            heartbeats(m, s).any(|(before, after)| after > before)
        }),
        Property::sometimes(SOMETIMES_CANCELLED, |_, s: &State| {
            s.jobs
                .iter()
                .any(|j| j.state == JobState::Cancelled && j.completed_by.is_some())
        }),
    ];
    properties.push(match config.target {
        TargetKind::Fenced => Property::sometimes(SOMETIMES_STALE_FENCE, |m, s: &State| {
            m.deliverable(s).any(|msg| {
                msg.kind == MessageKind::TargetMutation
                    && m.delivery_verdict(s, &msg).reason == Some(Reason::StaleFence)
            })
        }),
        TargetKind::Idempotent => {
            Property::sometimes(SOMETIMES_REPEAT_ACKNOWLEDGED, |m, s: &State| {
                m.deliverable(s).any(|msg| {
                    msg.kind == MessageKind::TargetMutation
                        && m.delivery_verdict(s, &msg).verdict == Verdict::Acknowledged
                })
            })
        }
        TargetKind::Unfenced => Property::sometimes(SOMETIMES_APPLIED_TWICE, |_, s: &State| {
            s.targets.iter().any(|t| t.last_applied < t.highest_applied)
        }),
    });
    if config.failover {
        properties.push(Property::sometimes(
            SOMETIMES_LOST_CLAIM_MADE_AGAIN,
            |_, s: &State| {
                s.attempts.iter().any(|lost| {
                    lost.lost
                        && s.attempts.iter().any(|a| {
                            !a.lost
                                && a.job == lost.job
                                && a.fence > EPOCH_BASE
                                && a.token > EPOCH_BASE
                        })
                })
            },
        ));
    }
    if config.reissued_ids {
        properties.push(Property::sometimes(
            SOMETIMES_REISSUED_ID_FENCED,
            |m: &LeaseModel, s: &State| {
                s.in_flight.iter().any(|msg| {
                    matches!(msg.kind, MessageKind::Result(_))
                        && sending_execution(s, msg).is_some_and(|a| s.attempts[a as usize].lost)
                        && m.server_attempt(s, msg.attempt).is_some()
                        && m.delivery_verdict(s, msg) == Expected::rejected(Reason::FenceMismatch)
                })
            },
        ));
    }
    if config.shared_slot && config.all_jobs() > 1 {
        properties.push(Property::sometimes(
            SOMETIMES_SLOT_BLOCKS_CLAIM,
            slot_blocks_claim,
        ));
    }
    if config.batch_claim >= 2 {
        properties.push(Property::sometimes(
            SOMETIMES_BATCH_FEWER,
            batch::takes_fewer,
        ));
        properties.push(Property::sometimes(
            SOMETIMES_BATCH_WALKS_PAST,
            batch::walks_past,
        ));
    }
    for ((_, name), condition) in REASONS.iter().zip(PRODUCES) {
        properties.push(Property::sometimes(name, condition));
    }
    for &(name, condition) in WITNESSES {
        properties.push(Property::sometimes(name, condition));
    }
    if config.side_effects {
        let conditions: [fn(&LeaseModel, &State) -> bool; 2] = [
            produces_side_effect_reason::<0>,
            produces_side_effect_reason::<1>,
        ];
        for ((_, name), condition) in SIDE_EFFECT_REASONS.iter().zip(conditions) {
            properties.push(Property::sometimes(name, condition));
        }
    }
    properties
}

/// For every heartbeat an executing runner could send now that the server accepts: its
/// attempt's lease expiry before and after receipt.
fn heartbeats<'a>(m: &'a LeaseModel, s: &'a State) -> impl Iterator<Item = (u8, u8)> + 'a {
    m.deliverable(s)
        .filter(move |msg| {
            msg.kind == MessageKind::Heartbeat
                && m.delivery_verdict(s, msg).verdict == Verdict::Accepted
        })
        .filter_map(move |msg| {
            let before = s.attempts.get(msg.attempt as usize)?.lease_expiry;
            let mut after = s.clone();
            m.deliver(&mut after, &msg);
            Some((before, after.attempts[msg.attempt as usize].lease_expiry))
        })
}

/// Every heartbeat the server would accept now leaves its lease expiring no earlier than before.
/// With replica clocks (docs/protocol.md §3.1) a replica behind the one that granted the lease
/// may set it up to `2 × replica_skew` earlier (its receipt time is earlier), never more.
fn heartbeat_never_shortens(c: &Ctx<'_>) -> bool {
    let slack = c.m.config.replica_skew.saturating_mul(2);
    heartbeats(c.m, c.s).all(|(before, after)| after.saturating_add(slack) >= before)
}

/// A runner's project has a `queued` job (with attempts left) whose slot another job holds.
fn slot_blocks_claim(_: &LeaseModel, s: &State) -> bool {
    s.jobs.iter().enumerate().any(|(j, job)| {
        job.state == JobState::Queued
            && job.attempts_left > 0
            && s.targets[job.slot as usize]
                .holder
                .is_some_and(|h| h as usize != j)
    })
}

/// Some deliverable message (in flight, or a heartbeat a runner can send now) that `message`
/// selects, received now, would be recorded as `f` describes. Its delivery is enabled, so reaching
/// such a state means the next step can record it.
fn observed(
    m: &LeaseModel,
    s: &State,
    message: impl Fn(&Message) -> bool,
    f: impl Fn(&Observation) -> bool,
) -> bool {
    m.deliverable(s)
        .filter(|msg| message(msg))
        .any(|msg| m.record(s, &msg).is_some_and(|o| f(&o)))
}

fn is_result_message(m: &Message) -> bool {
    matches!(m.kind, MessageKind::Result(_))
}

fn is_kind(kind: MessageKind) -> impl Fn(&Message) -> bool {
    move |m| m.kind == kind
}

// ----- ground truth, independent of the server's checks ------------------------------------------

/// The attempt `m` really belongs to: the named attempt exists, is an attempt of the named job,
/// was claimed by the sender, and the sender's project owns the job (§7 notes: checks 1–5).
pub(crate) fn true_attribution(s: &State, m: &Message) -> Option<AttemptId> {
    let sender = s.runners.get(m.sender as usize)?;
    let job = s.jobs.get(m.job as usize)?;
    let attempt = s.attempts.get(m.attempt as usize)?;
    // An attempt whose claim a failover lost cannot be recorded against: its database does not
    // know it (the record is unattributed, `unknown_attempt`).
    (sender.project == job.project
        && attempt.job == m.job
        && attempt.runner == m.sender
        && !attempt.lost)
        .then_some(m.attempt)
}

/// `m`, received in `s`, is a result with the exact tuple of the attempt its sender claimed
/// (its lease id and fence), and that attempt either can no longer act (it is not its job's
/// current attempt, or its lease expired, swept or not: a late report) or holds a committed
/// outcome the result is not identical to (a conflict). Recorded with the ledger's entry when
/// the server receives `m`.
pub(crate) fn late_or_conflicting(s: &State, m: &Message) -> bool {
    let MessageKind::Result(outcome) = m.kind else {
        return false;
    };
    let Some(a) = true_attribution(s, m) else {
        return false;
    };
    let attempt = &s.attempts[a as usize];
    if attempt.lease != m.lease || attempt.fence != m.fence {
        return false;
    }
    if s.jobs[m.job as usize].current != Some(a) {
        return true;
    }
    if let Some(committed) = attempt.state.outcome() {
        return !(outcome == committed && attempt.digest.is_none_or(|d| d == m.digest));
    }
    attempt.state == AttemptState::Uncertain
        || (attempt.state == AttemptState::Active
            && crate::LeaseModel::now(s) >= attempt.lease_expiry)
}

/// The execution `m` really came from: the attempt recorded at the id it names, when that
/// attempt is of the named job and was claimed by the sender (its own message, or one it altered
/// itself), whether or not the server still knows the attempt; `None` for a message of a runner
/// that never claimed it. Independent of the server's checks, and of the id the server issued
/// (with [`Config::reissued_ids`] a lost claim's execution and the next claim's have one id).
pub(crate) fn sending_execution(s: &State, m: &Message) -> Option<AttemptId> {
    let attempt = s.attempts.get(m.attempt as usize)?;
    (attempt.job == m.job && attempt.runner == m.sender).then_some(m.attempt)
}

/// With [`Config::reissued_ids`], what reissuing costs the ledger: a message naming an attempt
/// whose claim a failover lost names the id the next claim was issued again; when that attempt
/// is of the same job and was claimed by the sender, the sender names an id its own attempt
/// holds, checks 1–5 cannot tell the two apart, and the record is attributed to that attempt
/// (the fence, check 7, then rejects the lost execution's message).
fn reissued_namesake(m: &LeaseModel, s: &State, msg: &Message) -> Option<AttemptId> {
    let lost = s.attempts.get(msg.attempt as usize)?.lost;
    if !(m.config.reissued_ids && lost) {
        return None;
    }
    let name = s.attempt_name(msg.attempt, true);
    (0..s.attempts.len() as AttemptId).find(|&b| {
        let attempt = &s.attempts[b as usize];
        !attempt.lost
            && s.attempt_name(b, true) == name
            && attempt.job == msg.job
            && attempt.runner == msg.sender
    })
}

/// `m` carries the exact ownership tuple of its job's current attempt.
fn exact_current_tuple(s: &State, m: &Message) -> bool {
    true_attribution(s, m).is_some_and(|a| {
        let attempt = &s.attempts[a as usize];
        attempt.lease == m.lease
            && attempt.fence == m.fence
            && s.jobs[m.job as usize].current == Some(a)
    })
}

/// The attempt of `job` that holds its slot: its current attempt while `active` or `uncertain`
/// (it may still execute).
fn holds_slot(s: &State, job: usize) -> bool {
    s.jobs[job].current.is_some_and(|a| {
        matches!(
            s.attempts[a as usize].state,
            AttemptState::Active | AttemptState::Uncertain
        )
    })
}

// ----- the invariants --------------------------------------------------------------------------

/// Acting as current: holding the lease (`active`) or having lost it (`uncertain`). At most one
/// such attempt per job, and it is the job's current attempt.
fn at_most_one_current_attempt(c: &Ctx<'_>) -> bool {
    let s = c.s;
    // An attempt whose claim a failover lost is not the server's (it cannot be current).
    s.attempts.iter().enumerate().all(|(a, attempt)| {
        attempt.lost
            || !matches!(
                attempt.state,
                AttemptState::Active | AttemptState::Uncertain
            )
            || s.jobs[attempt.job as usize].current == Some(a as AttemptId)
    })
}

fn fences_increase(c: &Ctx<'_>) -> bool {
    let s = c.s;
    (0..s.jobs.len()).all(|j| {
        let mut fences = s
            .attempts
            .iter()
            .filter(|a| a.job as usize == j)
            .map(|a| a.fence);
        let mut last = fences.next();
        fences.all(|f| {
            let increases = last.is_some_and(|l| l < f);
            last = Some(f);
            increases
        })
    })
}

/// The attempt named by the result that completed a job is the job's current attempt, and it
/// holds the job's outcome.
fn no_stale_completion(c: &Ctx<'_>) -> bool {
    let s = c.s;
    s.jobs.iter().all(|job| match job.completed_by {
        None => true,
        Some((a, _)) => {
            job.current == Some(a)
                && s.attempts[a as usize]
                    .state
                    .outcome()
                    .map(Outcome::job_state)
                    == Some(job.state)
        }
    })
}

fn outcome_never_changes(c: &Ctx<'_>) -> bool {
    c.s.jobs
        .iter()
        .all(|job| job.committed.is_none_or(|committed| committed == job.state))
}

/// Once a lease has expired (a `tick` reached its expiry while it was `active`), it is never valid
/// again.
fn no_heartbeat_after_expiry(c: &Ctx<'_>) -> bool {
    let s = c.s;
    s.attempts
        .iter()
        .all(|a| !a.expired || a.state != AttemptState::Active || s.clock >= a.lease_expiry)
}

fn one_execution_per_job(c: &Ctx<'_>) -> bool {
    let s = c.s;
    (0..s.jobs.len()).all(|j| {
        s.attempts
            .iter()
            .filter(|a| a.job as usize == j && a.execution == Execution::Executing)
            .count()
            <= 1
    })
}

/// The last mutation a fenced slot applied came from the latest reservation whose mutation it
/// applied (slot tokens as the control plane issued them, whatever the target compared).
fn fenced_target_monotonic(c: &Ctx<'_>) -> bool {
    c.m.config.target != TargetKind::Fenced
        || c.s
            .targets
            .iter()
            .all(|t| t.last_applied == t.highest_applied)
}

fn idempotent_target_once(c: &Ctx<'_>) -> bool {
    c.m.config.target != TargetKind::Idempotent || c.s.targets.iter().all(|t| !t.applied_twice)
}

/// A `queued` job has no attempt that may still be executing without a reconciliation having
/// decided about it: every earlier attempt is `stopped` (or holds an outcome).
fn expired_is_uncertain(c: &Ctx<'_>) -> bool {
    let s = c.s;
    // An attempt whose claim a failover lost is not the server's: the wait after the epoch
    // change (and invariants 6 and 14) cover its execution.
    s.jobs.iter().enumerate().all(|(j, job)| {
        job.state != JobState::Queued
            || s.attempts
                .iter()
                .filter(|a| a.job as usize == j && !a.lost)
                .all(|a| a.state == AttemptState::Stopped || a.state.outcome().is_some())
    })
}

/// Every probe the server receives is recorded exactly once: with the verdict it gets, its
/// result's outcome and digest, and against the attempt that sent it (unattributed when it did
/// not: another runner, another project, a forged tuple naming an attempt that is not the
/// sender's). So a late report and a conflicting result are kept with their own attempt, and no
/// record of another project's runner lands in this project's ledger.
fn reports_attributed(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    // A revoked runner's message is from no runner: refused `unknown_runner` and recorded
    // nowhere (§6.1 check 1, §7).
    let unknown = Expected::rejected(Reason::UnknownRunner);
    c.revoked_probes()
        .all(|p| p.record.is_none() && m.delivery_verdict(s, &p.msg) == unknown)
        && c.server_probes().all(|p| {
            let msg = &p.msg;
            let Some(record) = p.record else {
                return false;
            };
            let verdict = p.verdict;
            let result = match msg.kind {
                MessageKind::Result(o) => Some((o, msg.digest)),
                _ => None,
            };
            record.attempt == true_attribution(s, msg).or_else(|| reissued_namesake(m, s, msg))
                && record.sender == msg.sender
                && record.job == msg.job
                && record.named_attempt == msg.attempt
                && (record.verdict, record.reason) == (verdict.verdict, verdict.reason)
                && record.result == result
        })
}

/// Every deliverable message gets the same verdict with runner time 0, +7 and 255, and an
/// accepted one the same effect.
fn runner_time_irrelevant(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    m.deliverable(s).all(|msg| {
        let verdict = m.delivery_verdict(s, &msg);
        let effect = |t: u8| {
            let mut after = s.clone();
            m.deliver(
                &mut after,
                &Message {
                    runner_time: t,
                    ..msg
                },
            );
            after
        };
        let times = [0, msg.runner_time.wrapping_add(7), u8::MAX];
        let same_verdict = times.iter().all(|&t| {
            m.delivery_verdict(
                s,
                &Message {
                    runner_time: t,
                    ..msg
                },
            ) == verdict
        });
        same_verdict
            && (verdict.verdict != Verdict::Accepted || {
                let first = effect(times[0]);
                times[1..].iter().all(|&t| effect(t) == first)
            })
    })
}

/// No accepted result came from a runner of another project, and no probe from a runner of
/// another project than the named job's changes that job, its attempts or its slot.
fn no_cross_project_change(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    let project = |r: RunnerId| s.runners.get(r as usize).map(|r| r.project);
    let completions = s.jobs.iter().all(|job| {
        job.completed_by
            .is_none_or(|(_, sender)| project(sender) == Some(job.project))
    });
    completions
        && c.server_probes().all(|p| {
            let msg = &p.msg;
            let Some(job) = s.jobs.get(msg.job as usize) else {
                return true;
            };
            if project(msg.sender).is_none_or(|p| p == job.project)
                || p.verdict.verdict == Verdict::Rejected
            {
                return true;
            }
            let mut after = s.clone();
            m.deliver(&mut after, msg);
            let j = msg.job as usize;
            after.jobs[j] == s.jobs[j]
                && after.targets == s.targets
                && after
                    .attempts
                    .iter()
                    .zip(&s.attempts)
                    .all(|(x, y)| x.job as usize != j || x == y)
        })
}

/// Quiescent: no step but `tick` (and an operator's `cancel`, which is no way out for a job that
/// should run) changes the state. Then no job is `queued` except behind another job that holds
/// its slot (in a quiescent state an expired lease would be swept, so a leased job is one whose
/// lease has not expired yet and which the passing of time makes `uncertain`).
fn quiescence_resolved(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    // A queued job waiting for its slot, which another job holds, waits for that job (which
    // this property then covers: it is leased or uncertain).
    let waiting = |j: usize, job: &Job| {
        job.state != JobState::Queued
            || s.targets[job.slot as usize]
                .holder
                .is_some_and(|h| h as usize != j)
    };
    // After a failover, claims wait for the earlier epoch's leases: only time can end that.
    if s.epoch_wait > 0 || s.jobs.iter().enumerate().all(|(j, job)| waiting(j, job)) {
        return true;
    }
    // Cheap exits: an executing runner can stop, a disconnected one can rejoin, an idle one can
    // claim; each of these changes the state.
    if (0..s.runners.len() as RunnerId).any(|r| {
        m.executing_any(s, r) || !s.runners[r as usize].connected || m.claimable_job(s, r).is_some()
    }) {
        return true;
    }
    let quiescent = m.next_steps(s).into_iter().all(|(action, next)| {
        matches!(
            action,
            Action::Tick
                | Action::ReplicaClock { .. }
                | Action::Cancel { .. }
                | Action::OutsiderCancel { .. }
        ) || next == *s
    });
    !quiescent
}

/// Per slot, at most one attempt whose job names it is executing; and no runner's claim would
/// take a job whose slot is held by another job (of any project) whose attempt may execute.
fn slot_exclusive(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    let executing = (0..s.targets.len()).all(|slot| {
        s.attempts
            .iter()
            .filter(|a| {
                a.execution == Execution::Executing && s.jobs[a.job as usize].slot as usize == slot
            })
            .count()
            <= 1
    });
    executing
        && (0..s.runners.len() as RunnerId).all(|r| {
            m.claimable_job(s, r).is_none_or(|j| {
                let slot = s.jobs[j as usize].slot;
                !(0..s.jobs.len())
                    .any(|k| k != j as usize && s.jobs[k].slot == slot && holds_slot(s, k))
            })
        })
}

/// Per slot, the tokens of the attempts of the jobs naming it follow the order in which their
/// reservations were really issued (ground truth, [`Attempt::issued`], whatever the server
/// remembers: an attempt whose claim a failover lost counts), and the attempt holding the slot
/// has the highest of them.
fn slot_tokens_increase(c: &Ctx<'_>) -> bool {
    let s = c.s;
    (0..s.targets.len()).all(|slot| {
        let on_slot = || {
            s.attempts
                .iter()
                .enumerate()
                .filter(move |(_, a)| s.jobs[a.job as usize].slot as usize == slot)
        };
        let highest = on_slot().map(|(_, a)| a.token).max().unwrap_or(0);
        let distinct = on_slot().all(|(i, a)| {
            on_slot().all(|(k, b)| i == k || (a.issued < b.issued) == (a.token < b.token))
        });
        let holder_latest = on_slot().all(|(i, a)| {
            let current = s.jobs[a.job as usize].current == Some(i as AttemptId);
            !(current && holds_slot(s, a.job as usize)) || a.token == highest
        });
        distinct && holder_latest
    })
}

/// A probe the server accepts carries the exact tuple of its job's current attempt, sent by that
/// attempt's runner.
fn exact_tuple_only(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    let _ = m;
    c.server_probes()
        .all(|p| p.verdict.verdict != Verdict::Accepted || exact_current_tuple(s, &p.msg))
}

/// Invariant 30, the harm of accepting a result whose ids or sender are not the current
/// attempt's: every job's completing result (history) and every result the server would accept
/// now (probes) was sent by the execution of the job's current attempt. With reissued ids this is
/// what the fence alone guards: the lost claim's execution names the current attempt's id and
/// lease id, and only its older fence tells it apart.
fn result_from_current_execution(c: &Ctx<'_>) -> bool {
    let s = c.s;
    let completions = s.jobs.iter().all(|job| {
        job.completed_by.is_none_or(|(a, sender)| {
            job.current == Some(a)
                && s.attempts
                    .get(a as usize)
                    .is_some_and(|x| x.runner == sender)
        })
    });
    completions
        && c.server_probes().all(|p| {
            let msg = &p.msg;
            !matches!(msg.kind, MessageKind::Result(_))
                || p.verdict.verdict != Verdict::Accepted
                || s.jobs.get(msg.job as usize).is_some_and(|job| {
                    job.current.is_some() && sending_execution(s, msg) == job.current
                })
        })
}

/// A result the server accepts comes while its job's current attempt holds a valid lease:
/// `active`, and `now < lease_expiry`.
fn no_result_after_expiry(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    let _ = m;
    c.server_probes().all(|p| {
        let msg = &p.msg;
        let MessageKind::Result(_) = msg.kind else {
            return true;
        };
        if p.verdict.verdict != Verdict::Accepted {
            return true;
        }
        let current = s
            .jobs
            .get(msg.job as usize)
            .and_then(|j| j.current)
            .map(|a| &s.attempts[a as usize]);
        current.is_some_and(|a| {
            a.state == AttemptState::Active && crate::LeaseModel::now(s) < a.lease_expiry
        })
    })
}

fn no_retry_after_cancel(c: &Ctx<'_>) -> bool {
    c.s.jobs
        .iter()
        .all(|j| !(j.cancel_requested && j.state == JobState::Queued))
}

/// Every `active` lease expires at most `lease_ttl` after now (a grant sets it to its receipt time
/// plus `lease_ttl`, and time only moves on). With replica clocks the granting receipt time was
/// at most `replica_skew` ahead of the clock (docs/protocol.md §3.1).
fn lease_bounded(c: &Ctx<'_>) -> bool {
    let s = c.s;
    let bound = s
        .clock
        .saturating_add(c.m.ttl(s))
        .saturating_add(c.m.config.replica_skew);
    s.attempts
        .iter()
        .all(|a| a.state != AttemptState::Active || a.lease_expiry <= bound)
}

/// A result with the exact tuple of an attempt that holds its job's committed outcome, which is
/// not identical to the committed one (another outcome, or the same outcome with another digest
/// than the committing result's), is recorded against that attempt as `conflicting_result`.
fn conflict_recorded(c: &Ctx<'_>) -> bool {
    let (m, s) = (c.m, c.s);
    let _ = m;
    c.server_probes().all(|p| {
        let msg = &p.msg;
        let MessageKind::Result(outcome) = msg.kind else {
            return true;
        };
        if !exact_current_tuple(s, msg) {
            return true;
        }
        let attempt = &s.attempts[msg.attempt as usize];
        let Some(committed) = attempt.state.outcome() else {
            return true;
        };
        let identical = outcome == committed && attempt.digest.is_none_or(|d| d == msg.digest);
        identical
            || p.record.is_some_and(|o| {
                o.reason == Some(Reason::ConflictingResult) && o.attempt == Some(msg.attempt)
            })
    })
}

/// Every entry of the ledger has a record that names what was received (sender, kind, job,
/// attempt, a result's outcome and digest) and is attributed to the attempt that really sent it
/// (ground truth at receipt), or unattributed when none did.
fn ledger_records_every_message(c: &Ctx<'_>) -> bool {
    c.s.ledger.iter().all(|e| {
        let m = &e.received;
        let result = match m.kind {
            MessageKind::Result(o) => Some((o, m.digest)),
            _ => None,
        };
        e.record.is_some_and(|o| {
            o.sender == m.sender
                && o.kind == m.kind
                && o.job == m.job
                && o.named_attempt == m.attempt
                && o.result == result
                && o.attempt == e.sent_by
        })
    })
}

/// Every late report and conflicting result the server received is in the ledger against its
/// own attempt, with its outcome and digest, and was not accepted.
fn ledger_keeps_late_reports(c: &Ctx<'_>) -> bool {
    c.s.ledger
        .iter()
        .filter(|e| e.late_or_conflicting)
        .all(|e| {
            let m = &e.received;
            e.record.is_some_and(|o| {
                o.attempt == Some(m.attempt)
                    && o.result.is_some()
                    && o.result
                        == matches!(m.kind, MessageKind::Result(_)).then_some((
                            match m.kind {
                                MessageKind::Result(outcome) => outcome,
                                _ => Outcome::Passed,
                            },
                            m.digest,
                        ))
                    && o.verdict != Verdict::Accepted
            })
        })
}

/// No record is attributed to an attempt of another project than its sender's.
fn ledger_no_foreign_record(c: &Ctx<'_>) -> bool {
    let s = c.s;
    let project = |r: RunnerId| s.runners.get(r as usize).map(|r| r.project);
    s.ledger.iter().all(|e| {
        let Some(a) = e.record.and_then(|o| o.attempt) else {
            return true;
        };
        s.attempts
            .get(a as usize)
            .and_then(|attempt| s.jobs.get(attempt.job as usize))
            .is_some_and(|job| project(e.received.sender) == Some(job.project))
    })
}

/// R8: a side-effect probe the server accepts or acknowledges carries the exact tuple of its
/// job's current attempt, sent by that attempt's runner, whose lease is valid (`active`,
/// `now < lease_expiry`) while the job is `running` (not `cancelling`, not terminal).
fn side_effects_need_lease(c: &Ctx<'_>) -> bool {
    let s = c.s;
    c.server_probes().all(|p| {
        let msg = &p.msg;
        !matches!(msg.kind, MessageKind::SideEffect(_))
            || p.verdict.verdict == Verdict::Rejected
            || (exact_current_tuple(s, msg) && {
                let attempt = &s.attempts[msg.attempt as usize];
                attempt.state == AttemptState::Active
                    && crate::LeaseModel::now(s) < attempt.lease_expiry
                    && s.jobs[msg.job as usize].state == JobState::Running
            })
    })
}

/// R8: every project's cache entry was stored by an attempt of one of that project's jobs; an
/// accepted `cache get` serves its job's project's entry, an accepted `artifact get` the named
/// attempt's own artifact.
fn cache_per_project(c: &Ctx<'_>) -> bool {
    use crate::side_effects::{artifact_of, SideEffect};
    let (m, s) = (c.m, c.s);
    let owned = s.cache.iter().enumerate().all(|(project, entry)| {
        entry.is_none_or(|e| {
            s.attempts
                .get(e.stored_by as usize)
                .and_then(|a| s.jobs.get(a.job as usize))
                .is_some_and(|job| job.project as usize == project)
        })
    });
    owned
        && c.server_probes().all(|p| {
            let msg = &p.msg;
            if p.verdict != Expected::ACCEPTED {
                return true;
            }
            let own = match msg.kind {
                MessageKind::SideEffect(SideEffect::CacheGet) => s
                    .jobs
                    .get(msg.job as usize)
                    .and_then(|job| s.cache[job.project as usize])
                    .map(|e| e.content),
                MessageKind::SideEffect(SideEffect::ArtifactGet) => s
                    .attempts
                    .get(msg.attempt as usize)
                    .and_then(|a| artifact_of(a.artifact)),
                _ => return true,
            };
            own.is_some() && m.served(s, msg) == own
        })
}
