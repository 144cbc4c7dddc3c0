//! Reaching a PostgreSQL server the user named, before any work starts: one host, or the host
//! list a high-availability manager hands out (`postgres://h1:p1,h2:p2/db?target_session_attrs=
//! read-write`), tried in order as libpq does (leasewright_impl::hosts).

use std::time::Duration;

use anyhow::bail;
use leasewright_impl::hosts::{self, DatabaseUrl};
use sqlx::Connection as _;

/// How long one connection attempt may take (the URL's `connect_timeout` overrides it).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the command does with the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It writes (`serve`, `migrate`, `stress`, `conform`, `bench`): the first host that accepts
    /// writes, whatever `target_session_attrs` says (a URL asking for a standby is refused).
    Writes,
    /// It only reads (`audit`): the host `target_session_attrs` asks for (default: the first
    /// that answers).
    Reads,
}

/// Connect to the host of `url` the command needs, at once: a refused or unanswered connection,
/// or a standby where a primary is needed, is an error with the address of every host tried
/// (never the password), instead of a pool retrying for 30 s and then reporting a timeout.
/// Returns the chosen host's single-host URL (what the rest of the command connects to).
pub async fn probe(url: &str, access: Access) -> anyhow::Result<String> {
    let parsed = match DatabaseUrl::parse(url) {
        Ok(parsed) => parsed,
        Err(error) => bail!(
            "the database URL is not a PostgreSQL URL (postgres://user@host:port/db, or \
             postgres://user@h1:p1,h2:p2/db?target_session_attrs=read-write): {error}"
        ),
    };
    let wanted = match access {
        Access::Writes => parsed.target_session_attrs().for_writes()?,
        Access::Reads => parsed.target_session_attrs(),
    };
    match hosts::resolve(&parsed, wanted, PROBE_TIMEOUT).await {
        Ok((resolved, connection)) => {
            let _ = connection.close().await;
            Ok(resolved.url)
        }
        Err(error) => bail!("{error}"),
    }
}

/// [`probe`] from synchronous code.
pub fn probe_blocking(url: &str, access: Access) -> anyhow::Result<String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(probe(url, access))
}

/// `--schema`: a name [`leasewright_impl::schema::schema_name`] accepts.
pub fn parse_schema(name: &str) -> Result<String, String> {
    leasewright_impl::schema::schema_name(name)
        .map(str::to_owned)
        .map_err(|error| error.to_string())
}
