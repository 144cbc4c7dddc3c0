//! Where our tables live: one PostgreSQL schema (default [`DEFAULT_SCHEMA`], never `public`
//! unless asked), selected on every connection by its `search_path`, and the migrations applied
//! into it (sqlx's `_sqlx_migrations` table too). Two schemas of one database are two independent
//! installations.

use crate::error::Error;
use sqlx::migrate::{Migrate as _, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::Executor as _;

/// The schema our tables live in unless `--schema` names another.
pub const DEFAULT_SCHEMA: &str = "leasewright";

/// The protocol's migrations (impl/migrations).
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// `name` if it is a schema name we accept: 1 to 63 bytes of `a`–`z`, `0`–`9` and `_`, not
/// starting with a digit, and not a `pg_` name (no quoting is ever needed).
pub fn schema_name(name: &str) -> Result<&str, Error> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.starts_with("pg_")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(name)
    } else {
        Err(Error::InvalidArgument(
            "a schema name is 1 to 63 of a-z, 0-9 and _, not starting with a digit or pg_",
        ))
    }
}

/// The connection options of `database_url` with `search_path` set to `schema` on every
/// connection (after any `search_path` the URL sets).
pub fn connect_options(database_url: &str, schema: &str) -> Result<PgConnectOptions, Error> {
    let options: PgConnectOptions = database_url
        .parse()
        .map_err(|_| Error::InvalidArgument("the database URL is not a PostgreSQL URL"))?;
    select_schema(options, schema)
}

/// `options` with `search_path` set to `schema` on every connection (a startup option, after any
/// `search_path` the options set).
pub fn select_schema(options: PgConnectOptions, schema: &str) -> Result<PgConnectOptions, Error> {
    let schema = schema_name(schema)?;
    Ok(options.options([("search_path", schema)]))
}

/// One migration and whether it is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationStatus {
    pub version: i64,
    pub description: String,
    pub applied: bool,
}

/// Create `schema` if it is missing (the pool's connections must select it: [`connect_options`]).
pub async fn create_schema(pool: &PgPool, schema: &str) -> Result<(), Error> {
    let schema = schema_name(schema)?;
    // Concurrent `CREATE SCHEMA IF NOT EXISTS` can race on the catalog: serialize them.
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('leasewright schema ' || $1, 0))")
        .bind(schema)
        .execute(&mut *tx)
        .await?;
    // A validated identifier (schema_name): nothing to quote.
    tx.execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Apply `migrators`, in order, in the pool's schema; returns the versions applied now. Several
/// migrators share the one `_sqlx_migrations` table (their versions must be disjoint): each
/// ignores the others' rows.
pub async fn migrate(pool: &PgPool, migrators: &[&Migrator]) -> Result<Vec<i64>, Error> {
    let before = applied_versions(pool).await?;
    for migrator in migrators {
        let mut migrator = Migrator {
            migrations: migrator.migrations.clone(),
            ..Migrator::DEFAULT
        };
        migrator.set_ignore_missing(true);
        migrator.run(pool).await?;
    }
    let after = applied_versions(pool).await?;
    Ok(after.into_iter().filter(|v| !before.contains(v)).collect())
}

/// Every migration of `migrators` and whether the pool's schema has it applied.
pub async fn status(pool: &PgPool, migrators: &[&Migrator]) -> Result<Vec<MigrationStatus>, Error> {
    let applied = applied_versions(pool).await?;
    Ok(migrators
        .iter()
        .flat_map(|m| m.iter())
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| MigrationStatus {
            version: m.version,
            description: m.description.to_string(),
            applied: applied.contains(&m.version),
        })
        .collect())
}

/// The versions `_sqlx_migrations` of the pool's schema records as applied (none if the table
/// does not exist yet).
async fn applied_versions(pool: &PgPool) -> Result<Vec<i64>, Error> {
    let mut conn = pool.acquire().await?;
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = '_sqlx_migrations')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(conn
        .list_applied_migrations()
        .await?
        .into_iter()
        .map(|m| m.version)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::schema_name;

    #[test]
    fn schema_names_need_no_quoting() {
        for good in ["leasewright", "lw_2", "_x", "public"] {
            assert!(schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Leasewright",
            "2x",
            "pg_temp",
            "a-b",
            "a;drop",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(schema_name(bad).is_err(), "{bad}");
        }
    }
}
