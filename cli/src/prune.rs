//! `leasewright prune`: delete the finished jobs older than a retention, with everything they own,
//! in small batches (docs/http.md, "Retention"; docs/audit.md, "Pruning audited jobs"). One run;
//! `serve --retain-finished-jobs` runs the same prune periodically.

use clap::Args;
use leasewright_impl::{PrunePolicy, PruneReport};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct PruneArgs {
    /// The database (its value is never shown in --help).
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The PostgreSQL schema our tables live in.
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Prune the jobs that finished longer ago than this: a number and a unit, `s`, `m`, `h` or
    /// `d` (`30d`, `12h`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Duration,
    /// First record that the ledger is audited through this watermark: the token `leasewright
    /// audit` printed last (`since: lw2.…`), verified as `audit --since` verifies it (this
    /// database, schema and epoch, a position the ledger reached); a bare number only for a schema
    /// from before migration 0015. Jobs whose every record is at or below it may be pruned. The
    /// recorded watermark never goes back.
    #[arg(long, value_name = "WATERMARK")]
    audited_through: Option<leasewright_audit::chain::Since>,
    /// Prune jobs whose ledgers are not audited yet too (each is counted as `unaudited`).
    #[arg(long)]
    unaudited: bool,
    /// The most jobs one batch (one short transaction) deletes.
    #[arg(long, default_value_t = leasewright_server::app::DEFAULT_PRUNE_BATCH,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// `30d`, `12h`, `90m`, `3600s`: a positive whole number and a unit.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let unit_at = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write 30d, 12h, 90m or 3600s"))?;
    let (number, unit) = text.split_at(unit_at);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number (30d, 12h)"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    if n == 0 {
        return Err("an age of zero would prune every finished job at once".into());
    }
    n.checked_mul(seconds)
        .filter(|s| *s <= 100 * 365 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is more than a hundred years"))
}

fn report_json(
    report: &PruneReport,
    kept_unaudited: u64,
    watermark: Option<i64>,
) -> serde_json::Value {
    serde_json::json!({
        "audit_watermark": watermark,
        "batches": report.batches,
        "jobs": report.jobs,
        "unaudited": report.unaudited,
        "kept_unaudited": kept_unaudited,
        "deleted": {
            "jobs": report.jobs,
            "attempts": report.attempts,
            "observations": report.observations,
            "reconciliations": report.reconciliations,
            "cancels": report.cancels,
            "expiry_sweeps": report.expiry_sweeps,
            "log_chunks": report.log_chunks,
            "artifacts": report.artifacts,
            "target_mutations": report.target_mutations,
        },
    })
}

pub fn run(args: &PruneArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = crate::db::probe(&args.database_url, crate::db::Access::Writes).await?;
        let store = leasewright_impl::Store::connect(
            &url,
            Arc::new(leasewright_impl::SystemClock),
            leasewright_impl::StoreConfig {
                max_connections: 2,
                schema: args.schema.clone(),
                ..Default::default()
            },
        )
        .await?;
        // The server's tables go with their jobs by their foreign keys (server/migrations/1002).
        leasewright_server::app::ensure_schema(&store)
            .await
            .map_err(|e| anyhow::anyhow!("the server's tables: {}", e.message()))?;
        if let Some(watermark) = &args.audited_through {
            let audited = leasewright_impl::database::with_search_path(&url, &args.schema);
            match leasewright_audit::verify_watermark(&audited, watermark).await {
                Ok(position) => {
                    store.record_audit_watermark(position).await?;
                }
                Err(error) => {
                    store.close().await;
                    eprintln!("leasewright prune: --audited-through: {error}");
                    return Ok(2);
                }
            }
        }
        let watermark = store.audit_watermark().await?;
        let age = chrono::Duration::from_std(args.older_than)?;
        let finished_before = chrono::Utc::now() - age;
        let report = store
            .prune_finished_jobs(PrunePolicy {
                finished_before,
                unaudited: args.unaudited,
                batch: args.batch,
                max_batches: None,
            })
            .await?;
        let kept_unaudited = if args.unaudited {
            0
        } else {
            store.unaudited_finished_jobs(finished_before).await?
        };
        store.close().await;
        if args.json {
            crate::output::print_json(&report_json(&report, kept_unaudited, watermark))?;
        } else {
            println!(
                "pruned {} finished job(s) that finished before {} in {} batch(es): {} attempts, \
                 {} observations, {} reconciliations, {} cancels, {} expiry sweeps, {} log \
                 chunks, {} artifacts, {} target mutations",
                report.jobs,
                finished_before.to_rfc3339(),
                report.batches,
                report.attempts,
                report.observations,
                report.reconciliations,
                report.cancels,
                report.expiry_sweeps,
                report.log_chunks,
                report.artifacts,
                report.target_mutations
            );
            match watermark {
                Some(w) => println!("audit watermark: {w}"),
                None => println!("audit watermark: none recorded (--audited-through WATERMARK)"),
            }
            if report.unaudited > 0 {
                println!(
                    "UNAUDITED: {} of the pruned jobs had records above the audit watermark; \
                     their ledgers were deleted without an audit",
                    report.unaudited
                );
            }
            if kept_unaudited > 0 {
                println!(
                    "kept {kept_unaudited} finished job(s) past the retention: their ledgers \
                     are not audited yet (audit, then --audited-through WATERMARK; or --unaudited)"
                );
            }
        }
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::parse_age;
    use std::time::Duration;

    #[test]
    fn ages_take_a_number_and_a_unit() {
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_secs(90 * 60)));
        assert_eq!(parse_age("3600s"), Ok(Duration::from_secs(3_600)));
        for bad in [
            "",
            "30",
            "d",
            "0d",
            "-1d",
            "1.5d",
            "30 d",
            "30w",
            "99999999999d",
        ] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
