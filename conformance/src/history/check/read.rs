//! Reading the final ledger of every job after a run.

use super::*;

/// Read the ledger of every job of `project` (`parallel` readers).
/// How far past a lease the expiry sweep of the store's database acts: twice the largest
/// `max_clock_skew` any server recorded in `lease_policy` (docs/protocol.md §3.1, migration 0016;
/// zero when none did).
pub async fn sweep_margin(store: &imp::Store) -> Result<chrono::Duration, imp::Error> {
    let micros: i64 = sqlx::query_scalar(
        "SELECT coalesce((SELECT (extract(epoch FROM 2 * max_clock_skew) * 1000000)::bigint \
         FROM lease_policy LIMIT 1), 0)",
    )
    .fetch_one(store.pool())
    .await
    .map_err(imp::Error::Database)?;
    Ok(chrono::Duration::microseconds(micros))
}

pub async fn read_ledger(
    store: &imp::Store,
    project: ProjectId,
    parallel: usize,
) -> Result<Ledger, imp::Error> {
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE project_id = $1 ORDER BY submitted_seq")
            .bind(project.0)
            .fetch_all(store.pool())
            .await
            .map_err(imp::Error::Database)?;
    let parallel = parallel.max(1);
    let chunks: Vec<Vec<JobId>> = (0..parallel)
        .map(|k| {
            ids.iter()
                .skip(k)
                .step_by(parallel)
                .map(|id| JobId(*id))
                .collect()
        })
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for id in chunk {
                let Some(job) = store.job(id).await? else {
                    continue;
                };
                let attempts = store.attempts(id).await?;
                let reconciliations = store.reconciliations(id).await?;
                let observations = Some(store.observations(id).await?);
                out.push(JobLedger {
                    job,
                    attempts,
                    reconciliations,
                    observations,
                });
            }
            Ok::<_, imp::Error>(out)
        }));
    }
    let mut ledger = Ledger::default();
    for task in tasks {
        let jobs = task
            .await
            .map_err(|_| imp::Error::Invariant("a ledger reader panicked"))??;
        for job in jobs {
            ledger.jobs.insert(job.job.id, job);
        }
    }
    Ok(ledger)
}
