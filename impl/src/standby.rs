//! A standby of one schema, for replaying a failover (test support: the conformance harness's
//! in-process driver and a manual-clock server's test hooks, `POST /v1/test/replicate` and
//! `POST /v1/test/failover`, are its only callers; no production path reaches it).
//!
//! The model's failover takes the server back to its state before its last committed transition
//! and raises the epoch (docs/model.md, "Failover"). On one PostgreSQL the same loss is a copy:
//! - [`replicate`] copies every table of the schema, and every sequence's position, into a copy
//!   schema beside it (replacing an earlier copy): the standby has caught up;
//! - [`restore`] puts every table and sequence back as the copy holds them: what was committed
//!   since is gone, as on a promoted standby that never received it.
//!
//! The caller then does what production does after a failover or a restore: the operator's epoch
//! step ([`crate::epoch::advance_epoch`], `migrate --advance-epoch`) and the server's record of
//! its lease policy on its new connection ([`crate::Store::record_lease_policy`]).

use chrono::{DateTime, Utc};
use sqlx::{Executor as _, PgPool};

use crate::error::Error;
use crate::schema::schema_name;

/// The name of `schema`'s copy, as the server's test hooks keep it (`<schema>_standby`).
pub fn copy_name(schema: &str) -> String {
    format!("{schema}_standby")
}

/// Copies every table of `schema` and the position of every sequence into the schema `copy`
/// (dropped and made again).
pub async fn replicate(pool: &PgPool, schema: &str, copy: &str) -> Result<(), Error> {
    let (schema, copy) = (schema_name(schema)?, schema_name(copy)?);
    let sql = format!(
        r#"DO $replicate$
DECLARE
    t text;
    s text;
BEGIN
    DROP SCHEMA IF EXISTS "{copy}" CASCADE;
    CREATE SCHEMA "{copy}";
    FOR t IN SELECT c.relname FROM pg_class AS c
             WHERE c.relnamespace = '"{schema}"'::regnamespace
               AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    LOOP
        EXECUTE format('CREATE TABLE %I.%I AS TABLE %I.%I', '{copy}', t, '{schema}', t);
    END LOOP;
    CREATE TABLE "{copy}"._sequences (name text, last_value bigint, is_called boolean);
    FOR s IN SELECT c.relname FROM pg_class AS c
             WHERE c.relnamespace = '"{schema}"'::regnamespace AND c.relkind = 'S'
    LOOP
        EXECUTE format('INSERT INTO %I._sequences SELECT %L, last_value, is_called FROM %I.%I',
                       '{copy}', s, '{schema}', s);
    END LOOP;
END
$replicate$"#
    );
    pool.execute(sql.as_str()).await?;
    Ok(())
}

/// Whether the schema `copy` exists (a [`replicate`] made it).
pub async fn has_copy(pool: &PgPool, copy: &str) -> Result<bool, Error> {
    crate::schema::schema_exists(pool, schema_name(copy)?).await
}

/// Puts every table and sequence of `schema` back as the schema `copy` holds them: the tables
/// emptied, then filled from the copy in the order their foreign keys need (generated columns
/// computed again, identity values kept, none of our triggers run: every row is the one the copy
/// holds, its ledger position and chain hash included, as on a promoted standby), and every
/// sequence set to its position. The copy is kept (a later failover without a new [`replicate`]
/// goes back to it again). Runs as the schema's owner (it disables the tables' triggers while
/// it fills them, in its one transaction).
pub async fn restore(pool: &PgPool, schema: &str, copy: &str) -> Result<(), Error> {
    let (schema, copy) = (schema_name(schema)?, schema_name(copy)?);
    let sql = format!(
        r#"DO $restore$
DECLARE
    schema_oid oid := '"{schema}"'::regnamespace;
    tables text[];
    done text[] := '{{}}';
    t text;
    columns text;
    progress boolean;
    seq record;
BEGIN
    SELECT array_agg(c.relname) INTO tables FROM pg_class AS c
    WHERE c.relnamespace = schema_oid AND c.relkind IN ('r', 'p') AND NOT c.relispartition;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%I.%I', '{schema}', x), ', ')
                            FROM unnest(tables) AS x);
    LOOP
        progress := false;
        FOR t IN SELECT x FROM unnest(tables) AS x
                 WHERE NOT x = ANY (done)
                   AND NOT EXISTS (
                       SELECT 1 FROM pg_constraint AS k
                       JOIN pg_class AS r ON r.oid = k.conrelid
                       JOIN pg_class AS f ON f.oid = k.confrelid
                       WHERE k.contype = 'f' AND r.relnamespace = schema_oid AND r.relname = x
                         AND f.relname <> x AND NOT f.relname = ANY (done))
        LOOP
            SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
            FROM pg_attribute AS a
            WHERE a.attrelid = format('%I.%I', '{schema}', t)::regclass
              AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
            -- The rows as they were: no trigger of ours runs on them (the ledger's chain
            -- triggers would draw new positions and hashes, the policy's would add history).
            EXECUTE format('ALTER TABLE %I.%I DISABLE TRIGGER USER', '{schema}', t);
            EXECUTE format('INSERT INTO %I.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %I.%I',
                           '{schema}', t, columns, columns, '{copy}', t);
            EXECUTE format('ALTER TABLE %I.%I ENABLE TRIGGER USER', '{schema}', t);
            done := done || t;
            progress := true;
        END LOOP;
        EXIT WHEN NOT progress;
    END LOOP;
    IF cardinality(done) <> cardinality(tables) THEN
        RAISE EXCEPTION 'the copy of % could not be restored: foreign keys in a cycle', '{schema}';
    END IF;
    FOR seq IN EXECUTE format('SELECT name, last_value, is_called FROM %I._sequences', '{copy}')
    LOOP
        PERFORM setval(format('%I.%I', '{schema}', seq.name), seq.last_value, seq.is_called);
    END LOOP;
END
$restore$"#
    );
    pool.execute(sql.as_str()).await?;
    Ok(())
}

/// Until when claims wait after the current epoch's change (its first claim's receipt time plus
/// the largest lease ttl and 2δ the database records: impl/sql/functions/claim.sql,
/// `claim_epoch`); `None` while no claim of the epoch has come (the wait begins at its first),
/// and for the epoch current when the schema was made, which never waits (its `began_at` is
/// `-infinity`: migration 0012). `pool` reaches the schema on its search path.
pub async fn claims_wait_until(pool: &PgPool) -> Result<Option<DateTime<Utc>>, Error> {
    Ok(sqlx::query_scalar(
        "SELECT e.began_at + coalesce((SELECT p.max_lease_ttl + 2 * p.max_clock_skew \
                                        FROM lease_policy AS p WHERE p.id), interval '0') \
         FROM epochs AS e WHERE e.epoch = current_epoch() AND isfinite(e.began_at)",
    )
    .fetch_optional(pool)
    .await?)
}
