//! The fenced floor: what no fenced claim on the implementation's schema can beat.
//!
//! A claim that fences a job must, whatever else it does, write three records (docs/protocol.md
//! §6.2, §8.3): the job's state change with its fence + 1 and current attempt, the attempt's row
//! (the ledger, with the lease id and fence its unique constraints keep fresh), and the slot's row
//! with its new slot token and holder. An accepted result must write four (§6.4, invariant 10):
//! the attempt's outcome, the job's, the slot's release and the observation of the message. The
//! floor is those writes as one plain statement each on the implementation's own tables, with
//! their indexes, constraints and foreign keys, the ledger chain's columns (migration 0015: the
//! job's head, the later of the job row's and the attempt's (0017), advanced in the job's own
//! update, the record stamped with it, as the rules do;
//! hashed here without the records' fields, which costs no WAL byte), and nothing else: no lookup of the runner's
//! project, no check that the slot is free, no one-job-per-slot, no skipping of slots another
//! claim is reserving, no guard of the result's tuple, no plan settings. It is correct only
//! because every benchmark job has a slot of its own ([`crate::fixture::Fixture::load_queued`])
//! and one worker reports each lease once; it is a yardstick, never a rule (the implementation's
//! are `impl/sql/claim.sql` and `impl/sql/attempt_commit_result_if_current.sql`).
//!
//! It sits between the two numbers an operator compares: `fenced floor / skip-locked` is what
//! the protocol's writes cost against a bare queue, and `fenced claim / fenced floor` is what the
//! rules' guards cost on top (docs/benchmarks.md, "The fenced floor").
//!
//! Benchmark code knows the implementation's schema, as the bulk loader does: this statement runs
//! in the fixture's schema (the pool's `search_path`).

use chrono::{DateTime, Utc};
use leasewright_impl::{ProjectId, RunnerId};
use sqlx::PgPool;
use uuid::Uuid;

/// What a floor claim hands its worker: the tuple its result names.
#[derive(Clone, Copy, Debug)]
pub struct FloorLease {
    pub job: Uuid,
    pub attempt: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
}

/// One floor claim by `runner` of `project`'s earliest queued job, if one was queued.
pub async fn claim(
    pool: &PgPool,
    runner: RunnerId,
    project: ProjectId,
    now: DateTime<Utc>,
    lease_expiry: DateTime<Utc>,
) -> Result<Option<FloorLease>, sqlx::Error> {
    Ok(claim_batch(pool, runner, project, 1, now, lease_expiry)
        .await?
        .pop())
}

/// One floor claim by `runner` of up to `k` of `project`'s earliest queued jobs, in one
/// statement.
pub async fn claim_batch(
    pool: &PgPool,
    runner: RunnerId,
    project: ProjectId,
    k: i64,
    now: DateTime<Utc>,
    lease_expiry: DateTime<Utc>,
) -> Result<Vec<FloorLease>, sqlx::Error> {
    let rows: Vec<(Uuid, Uuid, Uuid, i64)> = sqlx::query_as(
        "WITH picked AS (
             SELECT id FROM jobs
             WHERE project_id = $2 AND queued
             ORDER BY submitted_seq
             LIMIT $5
             FOR NO KEY UPDATE SKIP LOCKED
         ), started AS (
             UPDATE jobs AS j
             SET state = 'running', fence = j.fence + 1, current_attempt_id = gen_random_uuid(),
                 chain_seq = j.chain_seq + 1, chain_head = sha256(j.chain_head)
             FROM picked AS p
             WHERE j.id = p.id
             RETURNING j.id, j.project_id, j.fence, j.target, j.current_attempt_id, j.chain_seq,
                 j.chain_head
         ), reserved AS (
             UPDATE target_slots AS s
             SET holder_project_id = st.project_id, holder_job_id = st.id,
                 holder_attempt_id = st.current_attempt_id, reserved_at = $3,
                 slot_token = s.slot_token + 1
             FROM started AS st
             WHERE s.slot = st.target
             RETURNING s.slot, s.slot_token
         )
         INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state,
             lease_expiry, claim_lease_expiry, claimed_at, slot_token, chain_seq, chain_hash, ledger_seq)
         SELECT st.current_attempt_id, st.id, st.project_id, $1, gen_random_uuid(), st.fence,
             'active', $4, $4, $3, r.slot_token, st.chain_seq, st.chain_head, nextval('ledger_seq')
         FROM started AS st JOIN reserved AS r ON r.slot = st.target
         RETURNING job_id, id, lease_id, fence",
    )
    .bind(runner.0)
    .bind(project.0)
    .bind(now)
    .bind(lease_expiry)
    .bind(k)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(job, attempt, lease_id, fence)| FloorLease {
            job,
            attempt,
            lease_id,
            fence,
        })
        .collect())
}

/// One floor result (`passed`) of `lease`, reported by `runner`: its four writes. Returns whether
/// the job was finished.
pub async fn result(
    pool: &PgPool,
    runner: RunnerId,
    lease: &FloorLease,
    now: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "WITH committed AS (
             UPDATE attempts
             SET state = 'passed', outcome = 'passed', result_digest = 'bench', ended_at = $6
             WHERE id = $3
             RETURNING job_id, job_chain_seq, job_chain_head
         ), finished AS (
             UPDATE jobs AS j
             SET state = 'passed', outcome = 'passed', result_digest = 'bench', finished_at = $6,
                 chain_seq = ledger_later_seq(j.chain_seq, c.job_chain_seq) + 1,
                 chain_head = sha256(ledger_later_head(j.chain_seq, j.chain_head,
                     c.job_chain_seq, c.job_chain_head))
             FROM committed AS c
             WHERE j.id = c.job_id
             RETURNING j.id, j.target, j.chain_seq, j.chain_head
         ), released AS (
             UPDATE target_slots
             SET holder_project_id = NULL, holder_job_id = NULL, holder_attempt_id = NULL,
                 reserved_at = NULL
             WHERE slot = (SELECT target FROM finished)
         )
         INSERT INTO observations (sender_runner_id, kind, named_job_id, named_attempt_id,
             named_lease_id, named_fence, attempt_id, received_at, verdict, outcome, chain_seq,
             chain_hash, ledger_seq)
         SELECT $1, 'result', $2, $3, $4, $5, $3, $6, 'accepted', 'passed', chain_seq, chain_head,
             nextval('ledger_seq')
         FROM finished",
    )
    .bind(runner.0)
    .bind(lease.job)
    .bind(lease.attempt)
    .bind(lease.lease_id)
    .bind(lease.fence)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
