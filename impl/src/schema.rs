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

/// Whether `name` is one of PostgreSQL's own schemas (`pg_catalog`, `pg_toast`, `pg_temp_N`,
/// any `pg_` name, which PostgreSQL reserves, and `information_schema`): never a place for our
/// tables.
pub fn is_system_schema(name: &str) -> bool {
    name.starts_with("pg_") || name == "information_schema"
}

/// `name` if it is a schema name we accept: 1 to 63 bytes of `a`–`z`, `0`–`9` and `_`, not
/// starting with a digit (no quoting is ever needed), and not a system schema
/// ([`is_system_schema`]).
pub fn schema_name(name: &str) -> Result<&str, Error> {
    if is_system_schema(name) {
        return Err(Error::InvalidArgument(
            "a system schema (pg_catalog, information_schema, pg_toast, pg_temp*, any pg_ name) \
             cannot hold our tables: name another schema",
        ));
    }
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

/// Whether `schema` exists (a catalog read: any role may do it).
pub async fn schema_exists(pool: &PgPool, schema: &str) -> Result<bool, Error> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(pool)
            .await?,
    )
}

/// Create `schema` if it is missing (the pool's connections must select it: [`connect_options`]).
/// A schema that exists is left alone without any DDL, so a role without `CREATE` on the
/// database (docs/roles.md) passes here once the owner made it.
pub async fn create_schema(pool: &PgPool, schema: &str) -> Result<(), Error> {
    let schema = schema_name(schema)?;
    if schema_exists(pool, schema).await? {
        return Ok(());
    }
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
///
/// A schema that is up to date ([`up_to_date`]) is left alone: no statement that needs more
/// than reading is run (sqlx's migrator would run `CREATE TABLE IF NOT EXISTS _sqlx_migrations`,
/// which needs `CREATE` on the schema), so a data-only role may start a server on a schema the
/// owner migrated. Otherwise a schema that holds tables we did not create
/// ([`refuse_foreign_schema`]) is refused before anything is written.
pub async fn migrate(pool: &PgPool, migrators: &[&Migrator]) -> Result<Vec<i64>, Error> {
    if up_to_date(pool, migrators).await? {
        return Ok(Vec::new());
    }
    refuse_foreign_schema(pool).await?;
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

/// Whether every migration of `migrators` is applied in the pool's schema, successfully and
/// with the checksum it has here (what sqlx's migrator would check before doing nothing). Rows
/// of versions we do not know (a newer leasewright's) are no reason to migrate. Reads only.
pub async fn up_to_date(pool: &PgPool, migrators: &[&Migrator]) -> Result<bool, Error> {
    let mut conn = pool.acquire().await?;
    if !has_migrations_table(&mut conn).await? {
        return Ok(false);
    }
    let rows: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations")
            .fetch_all(&mut *conn)
            .await?;
    Ok(migrators
        .iter()
        .flat_map(|m| m.iter())
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| {
            rows.iter().any(|(version, checksum, success)| {
                *version == m.version && *success && checksum.as_slice() == &*m.checksum
            })
        }))
}

/// Refuse (with [`Error::Schema`]) a schema that holds tables, views, sequences, types (enums,
/// domains, ranges, composite types) or functions (procedures, aggregates) that no leasewright
/// migration made: ones that are there while `_sqlx_migrations` is missing, or whose
/// `_sqlx_migrations` lacks our first migration (another application's sqlx history). Called
/// before anything is written, so a refused schema is left exactly as it was (no
/// `_sqlx_migrations` of ours left behind). Reads only the catalog.
pub async fn refuse_foreign_schema(pool: &PgPool) -> Result<(), Error> {
    let mut conn = pool.acquire().await?;
    let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut *conn)
        .await?;
    let Some(schema) = schema else {
        return Ok(()); // no schema yet: nothing in it
    };
    // Every object a migration could collide with: relations (tables, views, materialized
    // views, sequences, foreign tables, composite types), types (enums, domains, ranges, base
    // types; not the array types PostgreSQL makes beside them), and functions, procedures and
    // aggregates. Each named with its kind.
    let others: Vec<String> = sqlx::query_scalar(
        "SELECT o.kind || ' ' || o.name FROM ( \
           SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                  WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table' WHEN 'c' THEN 'type' \
                  ELSE 'table' END AS kind, c.relname::text AS name \
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S', 'c') \
             AND c.relname <> '_sqlx_migrations' \
           UNION ALL \
           SELECT CASE t.typtype WHEN 'e' THEN 'enum' WHEN 'd' THEN 'domain' \
                  WHEN 'r' THEN 'range type' WHEN 'm' THEN 'multirange type' ELSE 'type' END, \
                  t.typname::text \
           FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
           WHERE n.nspname = $1 AND t.typtype IN ('b', 'e', 'd', 'r', 'm') \
             AND t.typcategory <> 'A' \
           UNION ALL \
           SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate' \
                  ELSE 'function' END, p.proname::text \
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
           WHERE n.nspname = $1 \
         ) AS o ORDER BY o.name, o.kind",
    )
    .bind(&schema)
    .fetch_all(&mut *conn)
    .await?;
    if others.is_empty() {
        return Ok(());
    }
    let ours = match MIGRATOR.iter().next() {
        Some(first) if has_migrations_table(&mut conn).await? => {
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 \
                 AND checksum = $2)",
            )
            .bind(first.version)
            .bind(&*first.checksum)
            .fetch_one(&mut *conn)
            .await?
        }
        _ => false,
    };
    if ours {
        return Ok(());
    }
    let shown: Vec<&str> = others.iter().take(5).map(String::as_str).collect();
    let more = if others.len() > shown.len() {
        format!(" and {} more", others.len() - shown.len())
    } else {
        String::new()
    };
    Err(Error::Schema(format!(
        "the schema {schema} holds objects leasewright did not create ({}{more}): nothing was \
         written; name a schema of its own (--schema NAME)",
        shown.join(", ")
    )))
}

/// Whether the pool's schema has sqlx's `_sqlx_migrations` table (catalog read).
async fn has_migrations_table(conn: &mut sqlx::PgConnection) -> Result<bool, Error> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relname = '_sqlx_migrations')",
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// The versions `_sqlx_migrations` of the pool's schema records as applied (none if the table
/// does not exist yet).
async fn applied_versions(pool: &PgPool) -> Result<Vec<i64>, Error> {
    let mut conn = pool.acquire().await?;
    if !has_migrations_table(&mut conn).await? {
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
        for good in ["leasewright", "lw_2", "_x", "public", "information_schema2"] {
            assert!(schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Leasewright",
            "2x",
            "pg_temp",
            "pg_catalog",
            "pg_toast",
            "pg_temp_3",
            "information_schema",
            "a-b",
            "a;drop",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(schema_name(bad).is_err(), "{bad}");
        }
    }
}
