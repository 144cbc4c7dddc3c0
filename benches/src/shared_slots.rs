//! Claims of many jobs that share few target slots (docs/protocol.md §8.2): at most one job per
//! slot holds it at a time, so most claims find every queued job's slot reserved and are answered
//! `no_queued_job`. The row reports jobs/s of claim->result and the blocked-claim rate (the share
//! of claims refused while jobs were queued), next to the claims of jobs on distinct slots.

use crate::claims::{line, Line};
use crate::fixture::{BenchError, Fixture};
use crate::measure::closed_loop;
use leasewright_impl::{Outcome, ProjectId, Verdict};
use std::sync::Arc;
use std::time::Duration;

/// Queued jobs per slot loaded before the run: far more than a run can take (one claim->result
/// per slot at a time), so a refused claim is always a blocked one, never an empty queue.
const JOBS_PER_SLOT: i64 = 2_000;

/// What the shared-slot run measured.
#[derive(Clone, Debug)]
pub struct SharedSlots {
    /// The row: `empty` counts the blocked claims.
    pub line: Line,
    /// Blocked claims / all claims.
    pub blocked_claim_rate: f64,
}

impl SharedSlots {
    /// The note printed under the table.
    pub fn note(&self) -> String {
        format!(
            "{}: {:.1}% of claims were blocked (every queued job's slot was reserved by another \
             job: no_queued_job), {} blocked claims",
            self.line.contender,
            self.blocked_claim_rate * 100.0,
            self.line.empty
        )
    }
}

/// Runs claim->result on `concurrency` workers for `duration`, in a project of its own whose
/// queued jobs share `slots` target slots.
pub async fn measure(
    fixture: &Fixture,
    concurrency: usize,
    duration: Duration,
    slots: usize,
) -> Result<SharedSlots, BenchError> {
    if slots == 0 {
        return Err(BenchError::Invalid(
            "shared slots: at least one slot".into(),
        ));
    }
    let store = fixture.store.clone();
    let run = ProjectId::new_random().0.simple().to_string();
    let project = store.create_project(&format!("bench-shared-{run}")).await?;
    let mut runners = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        runners.push(
            store
                .create_runner(project, &format!("shared-{i}"))
                .await?
                .0,
        );
    }
    load(fixture, project, &run, slots).await?;
    let runners = Arc::new(runners);
    let round = closed_loop(concurrency, duration, move |w| {
        let store = store.clone();
        let runner = runners[w as usize];
        async move {
            match store.claim(runner, None).await? {
                Verdict::Accepted(lease) => {
                    store
                        .report_result(&lease.tuple, Outcome::Passed, "bench", None)
                        .await?;
                    Ok(1)
                }
                _ => Ok::<u64, BenchError>(0),
            }
        }
    })
    .await?;
    let queued: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE project_id = $1 AND queued")
            .bind(project.0)
            .fetch_one(&fixture.pool)
            .await?;
    if queued == 0 {
        return Err(BenchError::Invalid(
            "shared slots: the queue ran empty, so a refused claim was not a blocked one".into(),
        ));
    }
    let claims = round.ops + round.empty;
    let blocked_claim_rate = if claims == 0 {
        0.0
    } else {
        round.empty as f64 / claims as f64
    };
    Ok(SharedSlots {
        line: line(&format!("claim->result, {slots} slots"), &[round]),
        blocked_claim_rate,
    })
}

/// Bulk-loads `JOBS_PER_SLOT` queued `unfenced` jobs per slot, the slots registered as
/// `job_insert` registers them, submitted round-robin over the slots.
async fn load(
    fixture: &Fixture,
    project: ProjectId,
    run: &str,
    slots: usize,
) -> Result<(), BenchError> {
    sqlx::query(
        "WITH slots AS (
           INSERT INTO target_slots (slot, kind)
           SELECT 'shared-' || $3 || '-' || s, 'unfenced' FROM generate_series(1, $2) AS s)
         INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest,
                           command, target, target_kind)
         SELECT gen_random_uuid(), $1, now(), 'bench-revision', 'bench-digest', 'true',
                'shared-' || $3 || '-' || (1 + i % $2), 'unfenced'
         FROM generate_series(0, $2 * $4 - 1) AS i",
    )
    .bind(project.0)
    .bind(slots as i64)
    .bind(run)
    .bind(JOBS_PER_SLOT)
    .execute(&fixture.pool)
    .await?;
    Ok(())
}
