//! `leasewright audit`: check a live database's ledger against the model (docs/audit.md). Thin:
//! the audit lives in `leasewright_conformance::audit`.
use clap::Args;
use leasewright_audit::{self as audit, AuditOptions};
use std::io::IsTerminal as _;
use std::path::PathBuf;

#[derive(Args)]
pub struct AuditArgs {
    /// The database to audit (read-only: a replica or a read-only role will do). Default:
    /// $DATABASE_URL (which keeps the password off the command line).
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The PostgreSQL schema our tables live in (created if missing; every connection's
    /// search_path).
    #[arg(long, value_name = "NAME", default_value = leasewright_impl::DEFAULT_SCHEMA, value_parser = crate::db::parse_schema)]
    schema: String,
    /// Audit only this project's jobs (its name or id).
    #[arg(long, value_name = "P")]
    project: Option<String>,
    /// Audit only the jobs with a record after this watermark (the `since:` token the previous
    /// run printed; it is verified: another database's or an earlier epoch's is refused, an edit
    /// below it is reported). A bare number (before migration 0015) is taken with a warning.
    #[arg(long, value_name = "WATERMARK")]
    since: Option<audit::chain::Since>,
    /// The witness file kept beside the watermark token (docs/audit.md, "The witness"): with
    /// --since, the file the run that printed the token wrote (every job's rows are then compared
    /// with the watermark's, and a mismatch names its jobs); after the run, this run's witness is
    /// written to it (replacing it), to keep with the `since:` token this run prints.
    #[arg(long, value_name = "FILE")]
    witness: Option<PathBuf>,
    /// Jobs read per round trip.
    #[arg(long, default_value_t = 2000)]
    batch: usize,
    /// Connections reading the ledger at once, all in one snapshot (0: one per core). The
    /// report does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    connections: usize,
    /// Seconds to wait, before the audit's snapshot, for the transactions in progress at its
    /// start to end, so that no record in flight lies below the watermark it prints. When the
    /// wait runs out the audit still runs, says so on stderr, and prints the watermark it started
    /// from (--since's, or 0: the next --since run replays everything after it).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    settle_timeout: f64,
    /// Print the report as one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Also write the report as JUnit XML.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

pub fn run(args: &AuditArgs) -> anyhow::Result<i32> {
    let Some(url) = args.database_url.clone().filter(|u| !u.is_empty()) else {
        eprintln!("leasewright audit: no --database-url and no DATABASE_URL");
        return Ok(2);
    };
    let Ok(settle_timeout) = std::time::Duration::try_from_secs_f64(args.settle_timeout) else {
        eprintln!("leasewright audit: --settle-timeout is a number of seconds, 0 or more");
        return Ok(2);
    };
    if args.batch == 0 {
        eprintln!("leasewright audit: --batch is at least 1");
        return Ok(2);
    }
    if let Some(audit::chain::Since::Position(p)) = &args.since {
        eprintln!(
            "leasewright audit: warning: --since {p} is a bare number (a watermark printed \
             before migration 0015): records at or below it are not verified, so an edit, \
             deletion or insertion there cannot be detected; this run prints a watermark token \
             (`since:`) to use next time"
        );
    }
    // A refused connection at once, with its address and never its password; of a host list,
    // the host `target_session_attrs` asks for (`read-only`: a standby will do).
    let url = match crate::db::probe_blocking(&url, crate::db::Access::Reads) {
        Ok(url) => url,
        Err(error) => {
            eprintln!("leasewright audit: {error:#}");
            return Ok(2);
        }
    };
    let since_witness = match (&args.since, &args.witness) {
        (Some(audit::chain::Since::Token(w)), Some(path)) if w.witness.is_some() => {
            match std::fs::read(path).map(|b| audit::witness::Witness::from_bytes(&b)) {
                Ok(Some(witness)) => Some(witness),
                Ok(None) => {
                    eprintln!(
                        "leasewright audit: {} is not a witness file (written by `leasewright \
                         audit --witness`)",
                        path.display()
                    );
                    return Ok(2);
                }
                Err(error) => {
                    eprintln!(
                        "leasewright audit: cannot read the witness {}: {error}",
                        path.display()
                    );
                    return Ok(2);
                }
            }
        }
        _ => None,
    };
    let options = AuditOptions {
        project: args.project.clone(),
        since: args.since.as_ref().map(audit::chain::Since::position),
        since_token: match &args.since {
            Some(audit::chain::Since::Token(w)) => Some(w.clone()),
            _ => None,
        },
        batch: args.batch,
        settle_timeout: Some(settle_timeout),
        since_witness,
        threads: 0,
        connections: args.connections,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let show_progress = std::io::stderr().is_terminal() || !args.json;
    let mut last_shown = 0.0;
    let url = leasewright_impl::database::with_search_path(&url, &args.schema);
    let result = runtime.block_on(audit::audit(&url, &options, |p| {
        if show_progress && p.seconds - last_shown >= 2.0 {
            last_shown = p.seconds;
            eprintln!(
                "leasewright audit: {}: {}/{} jobs, {} records, {:.0} records/s",
                p.phase,
                p.jobs_done,
                p.jobs_total,
                p.records,
                p.records as f64 / p.seconds.max(1e-9)
            );
        }
    }));
    let (report, projects) = match result {
        Ok(done) => done,
        Err(error) => {
            eprintln!("leasewright audit: {error}");
            return Ok(2);
        }
    };
    if let Some(why) = &report.watermark_unsettled {
        eprintln!("leasewright audit: the watermark's position is not settled: {why}");
    }
    if let Some(why) = &report.rows_not_compared {
        eprintln!("leasewright audit: warning: {why}");
    }
    if let (Some(path), Some(witness)) = (&args.witness, &report.witness) {
        // Written beside, then renamed over: the file is always a whole witness.
        let mut partial = path.clone().into_os_string();
        partial.push(".partial");
        let written = std::fs::write(&partial, witness.to_bytes())
            .and_then(|()| std::fs::rename(&partial, path));
        if let Err(error) = written {
            eprintln!(
                "leasewright audit: cannot write the witness {}: {error}",
                path.display()
            );
            return Ok(2);
        }
    }
    if let Some(path) = &args.junit {
        if let Err(error) = std::fs::write(path, report.junit()) {
            eprintln!(
                "leasewright audit: cannot write {}: {error}",
                path.display()
            );
            return Ok(2);
        }
    }
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        print!("{}", report.render(&projects));
    }
    Ok(if report.is_clean() { 0 } else { 1 })
}
