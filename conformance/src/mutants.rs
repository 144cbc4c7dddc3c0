//! Mutant runs (feature `mutants`): the suite against the unmutated implementation, then against
//! each named mutant of it; a mutant is killed when the suite diverges on it.

use std::sync::Arc;

use leasewright_impl as imp;
use leasewright_impl::mutants::Mutant;
use leasewright_model::LeaseModel;
use sqlx::PgPool;

use crate::drivers::pg::PgDriver;
use crate::property::{self, PropertyFailure, PropertyOptions};
use crate::replay::Divergence;
use crate::select::Batch;
use crate::suite::run_batches;

/// What a mutant run found.
pub enum Table {
    /// The unmutated implementation already diverges (its divergence, rendered): no mutant can be
    /// judged.
    CleanDiverges(String),
    /// Every mutant was run; this many survived.
    Judged { survived: usize },
}

/// The generated `batches` against the unmutated implementation, then against each mutant (each
/// run stops at its first divergence); `each` is told every mutant's first divergence, `None`
/// when it survived.
pub async fn generated(
    pool: &PgPool,
    batches: &[Batch],
    parallel: usize,
    progress: impl Fn(u64) + Clone + Send + Sync + 'static,
    mut each: impl FnMut(Mutant, Option<&Divergence>),
) -> Result<Table, imp::Error> {
    // The unmutated implementation first: a mutant only counts as killed if the real one passes.
    let clean = run_batches(
        Arc::new(PgDriver::new(pool.clone()).await?),
        batches,
        parallel,
        true,
        progress.clone(),
    )
    .await;
    if let Some(d) = clean.divergences.first() {
        return Ok(Table::CleanDiverges(d.render()));
    }
    let mut survived = 0;
    for mutant in Mutant::ALL {
        let driver = Arc::new(PgDriver::new(pool.clone()).await?.with_mutant(mutant));
        let report = run_batches(driver, batches, parallel, true, progress.clone()).await;
        let first = report.divergences.first();
        survived += usize::from(first.is_none());
        each(mutant, first);
    }
    Ok(Table::Judged { survived })
}

/// The property suite against the unmutated implementation, then against each mutant; `each` is
/// told every mutant's failure (with the minimal trace proptest shrank it to), `None` when it
/// survived.
pub async fn property(
    pool: &PgPool,
    model: Arc<LeaseModel>,
    options: PropertyOptions,
    progress: impl Fn(u64) + Clone + Send + Sync + 'static,
    mut each: impl FnMut(Mutant, Option<&PropertyFailure>),
) -> Result<Table, imp::Error> {
    let clean = property::run(
        Arc::new(PgDriver::new(pool.clone()).await?),
        Arc::clone(&model),
        options.clone(),
        progress.clone(),
    )
    .await;
    if let Some(failure) = &clean.failure {
        return Ok(Table::CleanDiverges(failure.divergence.render()));
    }
    let mut survived = 0;
    for mutant in Mutant::ALL {
        let driver = Arc::new(PgDriver::new(pool.clone()).await?.with_mutant(mutant));
        let outcome = property::run(
            driver,
            Arc::clone(&model),
            options.clone(),
            progress.clone(),
        )
        .await;
        survived += usize::from(outcome.failure.is_none());
        each(mutant, outcome.failure.as_ref());
    }
    Ok(Table::Judged { survived })
}

/// The mutant named `name` (as `{:?}` prints it), or an error listing every name.
pub fn named(name: &str) -> Result<Mutant, String> {
    Mutant::ALL
        .into_iter()
        .find(|m| format!("{m:?}") == name)
        .ok_or_else(|| {
            let names: Vec<String> = Mutant::ALL.iter().map(|m| format!("{m:?}")).collect();
            format!("no mutant named {name}; the mutants: {}", names.join(", "))
        })
}
