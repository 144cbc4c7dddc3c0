//! `leasewright migrate`: apply the migrations (the protocol's, impl/migrations, then the
//! server's, server/migrations) to one schema of a database, and say which it applied; or, with
//! `--status`, list every migration and whether the schema has it. `--advance-epoch`: the
//! operator's step after a restore that kept the WAL timeline (docs/protocol.md, "What the protocol
//! needs from its database"). `--set-max-clock-skew-ms`: the operator's way to lower the
//! max_clock_skew the database records (docs/reliability.md, "Bounds on operator knobs").

use clap::Args;

#[derive(Args)]
pub struct MigrateArgs {
    /// The database (its value is never shown in --help).
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The PostgreSQL schema our tables live in (created if missing).
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// List every migration and whether it is applied; apply nothing.
    #[arg(long)]
    status: bool,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// After the migrations, raise the epoch to one above every epoch the database has seen
    /// (its epochs table, the high 32 bits of every fence and slot token). Run it once after a
    /// logical restore (pg_dump / pg_restore) or a file-level copy started without archive
    /// recovery, before any server serves the database: those keep or reset the WAL timeline,
    /// so the epoch would not rise by itself.
    #[arg(long, conflicts_with = "status")]
    advance_epoch: bool,
    /// After the migrations, set the max_clock_skew the database records (the largest any
    /// server recorded; the expiry sweep acts twice it past a lease) to this many milliseconds,
    /// from 1 to 60000. To lower it, first restart every server of the database with
    /// `--max-clock-skew-ms` no larger: a server records its own again when it starts and on
    /// every new database connection.
    #[arg(long, value_name = "MS", conflicts_with = "status")]
    set_max_clock_skew_ms: Option<u64>,
}

pub fn run(args: &MigrateArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // The primary among the URL's hosts (a standby alone is refused).
        let url = crate::db::probe(&args.database_url, crate::db::Access::Writes).await?;
        let url = url.as_str();
        let applied_now = if args.status {
            Vec::new()
        } else {
            leasewright_server::app::migrate(url, &args.schema).await?
        };
        let advanced = if args.advance_epoch {
            let pool = leasewright_server::app::schema_pool(url, &args.schema).await?;
            let advanced = leasewright_impl::epoch::advance_epoch(&pool).await;
            pool.close().await;
            Some(advanced?)
        } else {
            None
        };
        let skew = match args.set_max_clock_skew_ms {
            Some(ms) => {
                if let Err(error) = crate::serve::check_max_clock_skew_ms(ms) {
                    eprintln!("leasewright migrate: --set-max-clock-skew-ms {error}");
                    return Ok(2);
                }
                let pool = leasewright_server::app::schema_pool(url, &args.schema).await?;
                let before = leasewright_server::app::set_recorded_max_clock_skew(
                    &pool,
                    std::time::Duration::from_millis(ms),
                )
                .await
                .map_err(leasewright_impl::Error::from);
                pool.close().await;
                Some((before?, ms))
            }
            None => None,
        };
        let status = leasewright_server::app::migration_status(url, &args.schema).await?;
        if args.json {
            let migrations: Vec<serde_json::Value> = status
                .iter()
                .map(|m| {
                    serde_json::json!({
                        "version": m.version,
                        "description": m.description,
                        "applied": m.applied,
                        "applied_now": applied_now.contains(&m.version),
                    })
                })
                .collect();
            let mut doc = serde_json::json!({
                "schema": args.schema,
                "applied_now": applied_now,
                "migrations": migrations,
            });
            if let Some(a) = advanced {
                doc["epoch"] = serde_json::json!({"before": a.before, "after": a.after});
            }
            if let Some((before, after)) = skew {
                doc["max_clock_skew_ms"] = serde_json::json!({
                    "before": before.map(|b| b.as_millis() as u64),
                    "after": before.map(|_| after),
                });
            }
            crate::output::print_json(&doc)?;
        } else {
            for m in &status {
                let mark = if applied_now.contains(&m.version) {
                    "applied now"
                } else if m.applied {
                    "applied"
                } else {
                    "pending"
                };
                println!("{:>5}  {:<12} {}", m.version, mark, m.description);
            }
            if !args.status {
                println!(
                    "schema {}: {} migration(s) applied now, {} in all",
                    args.schema,
                    applied_now.len(),
                    status.len()
                );
            }
            if let Some(a) = advanced {
                println!(
                    "epoch {} -> {}: every fence and slot token issued from now on is above \
                     every one the database has seen; the first claim starts the wait for \
                     the earlier epoch's leases",
                    a.before, a.after
                );
            }
            match skew {
                Some((Some(before), after)) => println!(
                    "max_clock_skew recorded in the database: {} ms -> {after} ms",
                    before.as_millis()
                ),
                Some((None, _)) => println!(
                    "no lease policy is recorded yet: nothing set (the first server records its \
                     --max-clock-skew-ms)"
                ),
                None => {}
            }
        }
        Ok(0)
    })
}
