//! `leasewright migrate`: apply the migrations (the protocol's, impl/migrations, then the
//! server's, server/migrations) to one schema of a database, and say which it applied; or, with
//! `--status`, list every migration and whether the schema has it.

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
            crate::output::print_json(&serde_json::json!({
                "schema": args.schema,
                "applied_now": applied_now,
                "migrations": migrations,
            }))?;
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
        }
        Ok(0)
    })
}
