//! Reaching a PostgreSQL server the user named, before any work starts.

use std::time::Duration;

use anyhow::{bail, Context as _};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _};

/// How long one connection attempt may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection attempt to `url`: a refused or unanswered connection is an error at once, with
/// the address (host and port; never the password), instead of a pool retrying for 30 s and then
/// reporting a timeout.
pub async fn probe(url: &str) -> anyhow::Result<()> {
    let options: PgConnectOptions = url
        .parse()
        .context("the database URL is not a PostgreSQL URL (postgres://user@host:port/db)")?;
    let address = format!("{}:{}", options.get_host(), options.get_port());
    match tokio::time::timeout(PROBE_TIMEOUT, options.connect()).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(error)) => bail!("cannot connect to PostgreSQL at {address}: {error}"),
        Err(_) => bail!(
            "cannot connect to PostgreSQL at {address}: no answer within {} s",
            PROBE_TIMEOUT.as_secs()
        ),
    }
}

/// [`probe`] from synchronous code.
pub fn probe_blocking(url: &str) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(probe(url))
}

/// `--schema`: a name [`leasewright_impl::schema::schema_name`] accepts.
pub fn parse_schema(name: &str) -> Result<String, String> {
    leasewright_impl::schema::schema_name(name)
        .map(str::to_owned)
        .map_err(|error| error.to_string())
}
