//! Rule R4 `expiry sweep`.

use super::Store;
use crate::error::Error;
use crate::sql;
use crate::types::*;
use uuid::Uuid;

impl Store {
    /// Rule R4 `expiry sweep`: every `running`/`cancelling` job whose lease expired at `now`
    /// becomes `uncertain` (never `queued`).
    pub async fn sweep_expired(&self) -> Result<SweepVerdict, Error> {
        self.sweep_expired_in(None).await
    }

    /// Rule R4 `expiry sweep` restricted to the jobs of `project` (`None`: every project), for
    /// callers that share one database between independent worlds (the conformance suite).
    pub async fn sweep_expired_in(
        &self,
        project: Option<ProjectId>,
    ) -> Result<SweepVerdict, Error> {
        let now = self.now();
        let mut tx = self.begin().await?;
        #[cfg(not(feature = "mutants"))]
        let statement = self.sql(sql::JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED);
        #[cfg(feature = "mutants")]
        let statement = if self.mutant_is(crate::mutants::Mutant::ExpiryRequeues) {
            crate::mutants::JOB_REQUEUE_IF_LEASE_EXPIRED
        } else {
            self.sql(sql::JOB_MAKE_UNCERTAIN_IF_LEASE_EXPIRED)
        };
        let mut jobs: Vec<JobId> = sqlx::query_scalar::<_, Uuid>(statement)
            .bind(now)
            .bind(project.map(|project| project.0))
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(JobId)
            .collect();
        tx.commit().await?;
        jobs.sort();
        Ok(if jobs.is_empty() {
            SweepVerdict::Accepted
        } else {
            SweepVerdict::Uncertain(jobs)
        })
    }
}
