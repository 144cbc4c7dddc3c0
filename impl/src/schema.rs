//! Where our tables live: one PostgreSQL schema (default [`DEFAULT_SCHEMA`], never `public`
//! unless asked), selected on every connection by its `search_path`, and the migrations applied
//! into it (sqlx's `_sqlx_migrations` table too). Two schemas of one database are two independent
//! installations.
//!
//! Tables in migrations, functions in one file each (docs/ARCHITECTURE.md, "SQL"): the versioned
//! migrations (impl/migrations) change tables; every server-side function and trigger is written
//! once, in the form the database runs it, in impl/sql/functions ([`FUNCTIONS`]), and applied
//! after the migrations whenever the files changed (Flyway's repeatable migrations). Their
//! checksum is recorded in `_sqlx_migrations` as the row [`FUNCTIONS_VERSION`], so any role that
//! can tell whether the migrations are applied can tell whether the functions are current.
//! Migrations that defined functions were edited to leave them out when the functions moved
//! there; a schema that applied them before is recognised by the checksums it recorded
//! ([`EDITED_MIGRATIONS`]) and its records are brought to the edited files' checksums.

use crate::error::Error;
use sqlx::migrate::{Migrate as _, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::Executor as _;

/// The schema our tables live in unless `--schema` names another.
pub const DEFAULT_SCHEMA: &str = "leasewright";

/// The protocol's migrations (impl/migrations).
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The server-side functions and triggers, each file of impl/sql/functions (its name without
/// `.sql`, its text), in the order they are applied: a function before every function whose
/// SQL-standard body calls it. Every file replaces what it defines (`CREATE OR REPLACE`), so
/// applying them again is harmless; a file that changes a function's signature drops the old one
/// first.
pub static FUNCTIONS: &[(&str, &str)] = &[
    ("epoch", include_str!("../sql/functions/epoch.sql")),
    (
        "ledger_encoding",
        include_str!("../sql/functions/ledger_encoding.sql"),
    ),
    (
        "ledger_chain",
        include_str!("../sql/functions/ledger_chain.sql"),
    ),
    ("claim", include_str!("../sql/functions/claim.sql")),
    (
        "lease_policy_history",
        include_str!("../sql/functions/lease_policy_history.sql"),
    ),
];

/// The row of `_sqlx_migrations` that records the function files a schema has (their checksum,
/// [`functions_checksum`]); no migration has this version. Applied after every migration.
pub const FUNCTIONS_VERSION: i64 = 0;

/// The migrations whose files were edited after release, with the SHA-384 checksum (hex) that a
/// schema migrated before the edit recorded for them: 0007, 0008, 0009, 0011, 0012, 0015, 0016
/// and 0017 as of 2026-12-04 (commit 597c0d9), before their functions moved to impl/sql/functions.
/// The edits removed only function and trigger definitions (and, in 0012, inlined
/// `current_epoch()` into its one-time seed of the epochs table), so the tables such a schema has
/// are the tables the edited files make; `migrate` rewrites the recorded checksums to the edited
/// files' and then applies the function files, which replace the functions with their current
/// (identical) definitions. cli/tests/migrate.rs upgrades a schema migrated by the files as they
/// were (cli/tests/fixtures/impl-migrations-0017) and compares its catalog with a fresh one's.
pub const EDITED_MIGRATIONS: &[(i64, &str)] = &[
    (
        7,
        "daaa736da7f6f73d66f830daad270c6a718154d2bfbc6a2abc733c22f36ae592\
         4bed63077ab9a372e67860b7262f1ee1",
    ),
    (
        8,
        "0962661baa74207615448795956bfa37052ee6bb6722c38cb6b9f1ee5ec8586c\
         1059ff40aec77574d7f0344ea255d2a4",
    ),
    (
        9,
        "1c8400c7b7d031351a6a24668923bb01431e5331cead6cc46372b006b71bbd1b\
         97633806a7ce2d76f1956165e7825d3b",
    ),
    (
        11,
        "e0be47c97f52aa764c5785a994a87efc8da2de21d340636f2252856547d4b417\
         6ed4c7dc0ec437e52be2e54d39cfc113",
    ),
    (
        12,
        "d729c839cf5a7ac4d115965299f3be02c3cb028eb8805808c74dea62d6f5010b\
         d662124618d57731e9d06d175a6c8816",
    ),
    (
        15,
        "e89919430a543d798764955b2b4eba653c50bcffab384a576d9b9e8e5e970700\
         76bbf2d10031b7a357f7a7b5010f542d",
    ),
    (
        16,
        "2d7662446a69386216fe8c96e4012f07cf527b2c59157a54a033bda07c931b91\
         7453fa57d5c4067f4aebdfa678bed991",
    ),
    (
        17,
        "5e7037e8f78a6f92e1b57733a6b51696daffcd524bbbb3e11c36591c6c233b50\
         7b3f85fbab24371684d5dda59d940d71",
    ),
];

/// The checksum recorded for the function files: SHA-384 over each file's name and text, in order.
pub fn functions_checksum() -> Vec<u8> {
    use sha2::{Digest as _, Sha384};
    let mut hash = Sha384::new();
    for (name, text) in FUNCTIONS {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    hash.finalize().to_vec()
}

/// Whether `migrators` include the protocol's ([`MIGRATOR`]), which carries the function files.
fn carries_functions(migrators: &[&Migrator]) -> bool {
    migrators.iter().any(|m| std::ptr::eq(*m, &MIGRATOR))
}

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

/// How long a pooled connection may sit idle before the pool tests it (a ping, one round trip)
/// as it hands it out: [`pool_options`].
pub const IDLE_BEFORE_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool settings of every store and of `serve`: a connection that sat idle for
/// [`IDLE_BEFORE_PING`] or longer is pinged before it is handed out, and one that fails the
/// ping is closed and another one taken (or made), so that a connection a failover or restart
/// cut while it sat idle never meets a request. A connection in use within the last second is
/// handed out as it is: sqlx's default pings every one (`test_before_acquire`), a round trip on
/// every statement under load that tests nothing a statement's own error does not report
/// (docs/benchmarks.md, "What a claim costs before its jobs"; the pattern is sqlx's own,
/// documented at `PoolOptions::before_acquire`). A request that meets a connection cut in use
/// fails as it did with the ping (`serve` answers `503 database_unavailable`, runners retry),
/// and sqlx closes that connection when it is given back (its release ping fails).
pub fn pool_options() -> sqlx::postgres::PgPoolOptions {
    sqlx::postgres::PgPoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_BEFORE_PING {
                    sqlx::Connection::ping(connection).await?;
                }
                Ok(true)
            })
        })
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
    let created = tx
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await
        .map_err(Error::from);
    match created {
        Err(Error::Permission(said)) => Err(Error::Schema(format!(
            "the schema {schema} does not exist, and this database role may not create it \
             ({said}): run `leasewright migrate --schema {schema}` as the schema's owner \
             (docs/roles.md), or name an existing schema (--schema NAME)"
        ))),
        Err(error) => Err(error),
        Ok(_) => Ok(tx.commit().await?),
    }
}

/// Apply `migrators`, in order, in the pool's schema, and then, when they include the protocol's
/// ([`MIGRATOR`]), the function files ([`FUNCTIONS`]) if the schema's are not current; returns the
/// versions applied now ([`FUNCTIONS_VERSION`] among them when the functions were). Several
/// migrators share the one `_sqlx_migrations` table (their versions must be disjoint): each
/// ignores the others' rows.
///
/// A schema that is up to date ([`up_to_date`]) is left alone: no statement that needs more
/// than reading is run (sqlx's migrator would run `CREATE TABLE IF NOT EXISTS _sqlx_migrations`,
/// which needs `CREATE` on the schema), so a data-only role may start a server on a schema the
/// owner migrated. Otherwise a schema that holds tables we did not create
/// ([`refuse_foreign_schema`]) is refused before anything is written, and a schema migrated
/// before the functions moved out of the migrations has its records of them brought to the
/// edited files ([`EDITED_MIGRATIONS`]).
pub async fn migrate(pool: &PgPool, migrators: &[&Migrator]) -> Result<Vec<i64>, Error> {
    if up_to_date(pool, migrators).await? {
        return Ok(Vec::new());
    }
    refuse_foreign_schema(pool).await?;
    let before = applied_versions(pool).await?;
    if carries_functions(migrators) {
        accept_edited_migrations(pool).await?;
    }
    for migrator in migrators {
        let mut migrator = Migrator {
            migrations: migrator.migrations.clone(),
            ..Migrator::DEFAULT
        };
        migrator.set_ignore_missing(true);
        migrator.run(pool).await?;
    }
    let mut applied: Vec<i64> = applied_versions(pool)
        .await?
        .into_iter()
        .filter(|v| !before.contains(v))
        .collect();
    if carries_functions(migrators) && apply_functions(pool).await? {
        applied.push(FUNCTIONS_VERSION);
    }
    Ok(applied)
}

/// A schema migrated before the functions moved out of the migrations: each record of an edited
/// migration that carries the checksum of the file as it was ([`EDITED_MIGRATIONS`]) gets the
/// edited file's, in one transaction. Records with any other checksum are left for sqlx to
/// refuse (a file changed in some other way).
async fn accept_edited_migrations(pool: &PgPool) -> Result<(), Error> {
    let mut tx = pool.begin().await?;
    if !has_migrations_table(&mut tx).await? {
        return Ok(());
    }
    for (version, historical) in EDITED_MIGRATIONS {
        let Some(edited) = MIGRATOR.iter().find(|m| m.version == *version) else {
            continue;
        };
        sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $2 \
             WHERE version = $1 AND checksum = decode($3, 'hex')",
        )
        .bind(version)
        .bind(&*edited.checksum)
        .bind(historical)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Apply the function files ([`FUNCTIONS`]), in order and in one transaction, unless the schema
/// records their checksum already; whether they were applied. Concurrent callers are serialized
/// (the second finds them current).
async fn apply_functions(pool: &PgPool) -> Result<bool, Error> {
    let checksum = functions_checksum();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended('leasewright functions ' \
         || current_schema(), 0))",
    )
    .execute(&mut *tx)
    .await?;
    let recorded: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = $1 AND success")
            .bind(FUNCTIONS_VERSION)
            .fetch_optional(&mut *tx)
            .await?;
    if recorded.as_deref() == Some(checksum.as_slice()) {
        return Ok(false);
    }
    let started = std::time::Instant::now();
    for (_, text) in FUNCTIONS {
        // A file of several statements, sent as one simple query (as sqlx sends a migration).
        tx.execute(*text).await?;
    }
    let names: Vec<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
    sqlx::query(
        "INSERT INTO _sqlx_migrations \
         (version, description, installed_on, success, checksum, execution_time) \
         VALUES ($1, $2, now(), true, $3, $4) \
         ON CONFLICT (version) DO UPDATE SET description = EXCLUDED.description, \
         installed_on = EXCLUDED.installed_on, success = true, checksum = EXCLUDED.checksum, \
         execution_time = EXCLUDED.execution_time",
    )
    .bind(FUNCTIONS_VERSION)
    .bind(functions_description(&names))
    .bind(&checksum)
    .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// How `migrate --status` names the function files.
fn functions_description(names: &[&str]) -> String {
    format!("functions {}", names.join(" "))
}

/// Every migration of `migrators` and whether the pool's schema has it applied; then, when they
/// include the protocol's, the function files ([`FUNCTIONS_VERSION`]) and whether the schema's are
/// current.
pub async fn status(pool: &PgPool, migrators: &[&Migrator]) -> Result<Vec<MigrationStatus>, Error> {
    let applied = applied_versions(pool).await?;
    let mut status: Vec<MigrationStatus> = migrators
        .iter()
        .flat_map(|m| m.iter())
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| MigrationStatus {
            version: m.version,
            description: m.description.to_string(),
            applied: applied.contains(&m.version),
        })
        .collect();
    if carries_functions(migrators) {
        let names: Vec<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
        status.push(MigrationStatus {
            version: FUNCTIONS_VERSION,
            description: functions_description(&names),
            applied: functions_current(pool).await?,
        });
    }
    Ok(status)
}

/// Whether the pool's schema records the function files' current checksum (reads only).
async fn functions_current(pool: &PgPool) -> Result<bool, Error> {
    let mut conn = pool.acquire().await?;
    if !has_migrations_table(&mut conn).await? {
        return Ok(false);
    }
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = $1 AND success \
         AND checksum = $2)",
    )
    .bind(FUNCTIONS_VERSION)
    .bind(functions_checksum())
    .fetch_one(&mut *conn)
    .await?)
}

/// Whether every migration of `migrators` is applied in the pool's schema, successfully and
/// with the checksum it has here (what sqlx's migrator would check before doing nothing), and,
/// when they include the protocol's, the function files are current ([`FUNCTIONS_VERSION`]).
/// Rows of versions we do not know (a newer leasewright's) are no reason to migrate. Reads only.
pub async fn up_to_date(pool: &PgPool, migrators: &[&Migrator]) -> Result<bool, Error> {
    let mut conn = pool.acquire().await?;
    if !has_migrations_table(&mut conn).await? {
        return Ok(false);
    }
    let rows: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations")
            .fetch_all(&mut *conn)
            .await?;
    let recorded = |version: i64, expected: &[u8]| {
        rows.iter().any(|(v, checksum, success)| {
            *v == version && *success && checksum.as_slice() == expected
        })
    };
    let migrations = migrators
        .iter()
        .flat_map(|m| m.iter())
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| recorded(m.version, &m.checksum));
    let functions =
        !carries_functions(migrators) || recorded(FUNCTIONS_VERSION, &functions_checksum());
    Ok(migrations && functions)
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
    fn every_function_file_is_applied_once_and_names_itself() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/functions");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("impl/sql/functions")
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sql").map(str::to_string)
            })
            .collect();
        files.sort();
        let mut listed: Vec<String> = super::FUNCTIONS
            .iter()
            .map(|(name, _)| name.to_string())
            .collect();
        listed.sort();
        assert_eq!(
            listed, files,
            "impl/sql/functions against schema::FUNCTIONS"
        );
        for (name, text) in super::FUNCTIONS {
            let header = format!("-- function: {name}\n");
            assert!(
                text.starts_with(&header),
                "{name}.sql must start with {header:?}"
            );
        }
    }

    /// No versioned migration defines a function or a trigger: each is written once, in
    /// impl/sql/functions.
    #[test]
    fn no_migration_defines_a_function_or_a_trigger() {
        for migration in super::MIGRATOR.iter() {
            let words = migration
                .sql
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join(" ")
                .to_uppercase();
            let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
            for definition in [
                "CREATE FUNCTION",
                "CREATE OR REPLACE FUNCTION",
                "CREATE TRIGGER",
                "CREATE OR REPLACE TRIGGER",
            ] {
                assert!(
                    !words.contains(definition),
                    "migration {} has {definition}: move it to impl/sql/functions",
                    migration.version
                );
            }
        }
    }

    #[test]
    fn edited_migrations_name_migrations_whose_files_changed() {
        for (version, historical) in super::EDITED_MIGRATIONS {
            let migration = super::MIGRATOR
                .iter()
                .find(|m| m.version == *version)
                .expect("an edited migration exists");
            assert_eq!(historical.len(), 96, "a SHA-384 in hex: {version}");
            assert_ne!(hex::encode(&*migration.checksum), *historical, "{version}");
        }
        assert!(super::MIGRATOR
            .iter()
            .all(|m| m.version != super::FUNCTIONS_VERSION));
    }

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
