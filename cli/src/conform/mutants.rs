//! `conform --mutants`: the suite against the unmutated implementation, then each mutant of a
//! `mutants` build (a normal build re-runs itself from one).

use super::*;

/// `--mutants`: the suite against the unmutated implementation, then each mutant; prints which
/// are killed.
pub(super) async fn mutants(
    args: &ConformArgs,
    pool: sqlx::PgPool,
    batches: &[Batch],
) -> anyhow::Result<i32> {
    #[cfg(feature = "mutants")]
    {
        use leasewright_conformance::mutants::{self, Table};
        let table = if args.suite == SuiteName::Proptest {
            if args.shard != Shard::ALL || args.cases == 0 || args.walk_len == 0 {
                eprintln!(
                    "error: --suite proptest takes no --shard, and --cases and --walk-len of at \
                     least 1"
                );
                return Ok(2);
            }
            let bar = progress_bar(
                u64::from(args.cases),
                "proptest cases",
                "postgres".into(),
                true,
            );
            let progress = {
                let bar = bar.clone();
                move |done: u64| bar.set_position(done)
            };
            let mut header = Some(format!(
                "{:<34} {:<9} minimal trace (proptest, seed {}, {} cases)",
                "mutant", "verdict", args.seed, args.cases
            ));
            let table = mutants::property(
                &pool,
                Arc::new(LeaseModel::new(args.config())),
                args.selection().property_options(),
                progress,
                |mutant, failure| {
                    if let Some(header) = header.take() {
                        bar.suspend(|| println!("{header}"));
                    }
                    let name = format!("{mutant:?}");
                    bar.suspend(|| match failure {
                        Some(failure) => println!(
                            "{name:<34} {:<9} {} ({} steps, shrunk from {}; step {}: {})",
                            "killed",
                            failure.minimal.name,
                            failure.minimal.steps.len(),
                            failure.original.steps.len(),
                            failure.divergence.step,
                            failure
                                .divergence
                                .differences
                                .first()
                                .map(String::as_str)
                                .unwrap_or("")
                        ),
                        None => println!("{name:<34} {:<9} -", "SURVIVED"),
                    });
                },
            )
            .await?;
            bar.finish_and_clear();
            table
        } else {
            println!("{:<34} {:<9} first failing trace", "mutant", "verdict");
            let total: u64 = batches.iter().map(|b| b.traces.len() as u64).sum();
            let bar = progress_bar(total, "traces", "postgres".into(), true);
            let progress = {
                let bar = bar.clone();
                move |done: u64| bar.set_position(done)
            };
            let table = mutants::generated(&pool, batches, args.parallel, progress, |mutant, d| {
                let name = format!("{mutant:?}");
                bar.suspend(|| match d {
                    Some(d) => println!(
                        "{name:<34} {:<9} {} (step {}: {})",
                        "killed",
                        d.trace,
                        d.step,
                        d.differences.first().map(String::as_str).unwrap_or("")
                    ),
                    None => println!("{name:<34} {:<9} -", "SURVIVED"),
                });
            })
            .await?;
            bar.finish_and_clear();
            table
        };
        match table {
            Table::CleanDiverges(render) => {
                eprintln!("the unmutated implementation already diverges:\n{render}");
                Ok(1)
            }
            Table::Judged { survived } => Ok(mutants_total(survived)),
        }
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = (args, pool, batches);
        unreachable!("a build without mutants re-runs itself from the mutants build first")
    }
}

/// Prints the last line of a mutant table; the exit code: 0 when every mutant was killed.
#[cfg(feature = "mutants")]
pub(super) fn mutants_total(survived: usize) -> i32 {
    use leasewright_impl::mutants::Mutant;
    println!(
        "{} mutants, {} killed, {survived} survived",
        Mutant::ALL.len(),
        Mutant::ALL.len() - survived
    );
    if survived == 0 {
        0
    } else {
        1
    }
}

/// On a normal build, `--mutants` re-runs the same command from a separate build with the
/// `mutants` feature (in target/mutants, so the production binary is never rebuilt with it).
#[cfg(not(feature = "mutants"))]
pub(super) fn rerun_with_mutants() -> anyhow::Result<i32> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace root")?
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "mutants live in a separate build so that the production binary never contains one; \
         building it in {} (the first time takes a few minutes)",
        root.join("target/mutants").display()
    );
    let status = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "--release",
            "--features",
            "mutants",
            "--bin",
            "leasewright",
        ])
        .arg("--target-dir")
        .arg(root.join("target/mutants"))
        .arg("--")
        .args(std::env::args_os().skip(1))
        .status()
        .context("running cargo to build the mutants build (is cargo on PATH?)")?;
    Ok(status.code().unwrap_or(2))
}
