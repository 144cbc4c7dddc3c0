//! The failover, replayed (issue 39 item 6): a trace with the model's `failover` step runs in a
//! schema of its own, so that its database can lose what the model's server loses.
//!
//! The model's failover takes the server back to its state before its last committed transition
//! (`LeaseModel::server`, `State::before`), raises the epoch and makes claims wait. The driver
//! does the same to PostgreSQL:
//! - before the step the failover will lose, it copies every table of the trace's schema, and
//!   every sequence's position, into a snapshot schema beside it ([`TraceSchema::snapshot`]);
//! - at the failover it puts every table and sequence back as the copy holds them
//!   ([`TraceSchema::restore`]): the rows that step committed, and everything after it, are gone,
//!   as on a promoted standby that never received them;
//! - then it does what production does after a failover or a restore: the operator's epoch step
//!   (`migrate --advance-epoch`, `leasewright_impl::epoch::advance_epoch`), the server's record
//!   of its lease policy on its new connection, and the new epoch's first claim, which takes
//!   nothing and starts the wait (`claim_epoch`; runners poll, so in production it comes at once,
//!   and the model's wait starts at the failover: docs/model.md "Failover").
//!
//! Each such trace's schema is made by the implementation's own migrations, so the epoch
//! (`epoch_offset`), the recorded lease policy and the epochs' starts are the trace's alone.

use std::collections::BTreeSet;

use leasewright_model::{Action, LeaseModel, Server};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Executor as _, PgPool};

use crate::driver::DriverError;
use crate::generate::Generated;

/// Whether `trace` has a failover step (it then needs a schema of its own).
pub fn has_failover(trace: &Generated<LeaseModel>) -> bool {
    trace.steps.iter().any(|(a, _)| *a == Action::Failover)
}

/// The 0-based indices of the steps before which the driver takes its snapshot: for each
/// failover step, the last earlier step that changed the model's server state (the transition
/// the failover loses). `None` when a failover's state to go back to is not one of the trace's
/// states before a step (the model and this reading of it disagree).
pub fn snapshot_steps(trace: &Generated<LeaseModel>) -> Option<BTreeSet<usize>> {
    let mut steps = BTreeSet::new();
    let mut states = Vec::with_capacity(trace.steps.len() + 1);
    states.push(&trace.init);
    states.extend(trace.steps.iter().map(|(_, s)| s));
    for (f, (action, _)) in trace.steps.iter().enumerate() {
        if *action != Action::Failover {
            continue;
        }
        // The state before the failover holds the server state it goes back to.
        let back_to = states[f].before.as_deref()?;
        // Only `tick` moves time, and with it every state's time origin (the model counts lease
        // expiries from the state's own now); no other step does, so across any other step the
        // server states compare as they are. A tick and a failover commit nothing.
        let lost = (0..f)
            .rev()
            .find(|&i| {
                !matches!(trace.steps[i].0, Action::Failover | Action::Tick)
                    && LeaseModel::server(states[i]) != LeaseModel::server(states[i + 1])
            })
            .filter(|&i| same_but_time(&LeaseModel::server(states[i]), back_to))?;
        steps.insert(lost);
    }
    Some(steps)
}

/// Whether two server states are one but for when their leases expire (each counted from its
/// own state's now).
fn same_but_time(a: &Server, b: &Server) -> bool {
    let untimed = |s: &Server| {
        s.attempts
            .iter()
            .map(|a| (a.state, a.digest))
            .collect::<Vec<_>>()
    };
    a.jobs == b.jobs
        && a.slots == b.slots
        && a.policy_recorded == b.policy_recorded
        && untimed(a) == untimed(b)
}

/// A schema of one trace's own, dropped (with its snapshot) when this is dropped.
pub struct TraceSchema {
    /// The schema's name (`lw_failover_<random>`).
    pub name: String,
    /// Where the snapshot is kept (`<name>_snapshot`).
    snapshot: String,
    /// How to reach the database to drop the schemas.
    admin: PgConnectOptions,
}

impl TraceSchema {
    /// A new schema name on the database `options` reaches (created by the caller's migrations).
    pub fn new(options: PgConnectOptions) -> TraceSchema {
        let name = format!("lw_failover_{}", uuid::Uuid::new_v4().simple());
        TraceSchema {
            snapshot: format!("{name}_snapshot"),
            name,
            admin: options,
        }
    }

    /// Copies every table of the schema, and the position of every sequence, into the snapshot
    /// schema (replacing an earlier snapshot).
    pub async fn snapshot(&self, pool: &PgPool) -> Result<(), DriverError> {
        let sql = format!(
            r#"DO $snapshot$
DECLARE
    t text;
    s text;
BEGIN
    DROP SCHEMA IF EXISTS "{snap}" CASCADE;
    CREATE SCHEMA "{snap}";
    FOR t IN SELECT c.relname FROM pg_class AS c
             WHERE c.relnamespace = '"{schema}"'::regnamespace
               AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    LOOP
        EXECUTE format('CREATE TABLE %I.%I AS TABLE %I.%I', '{snap}', t, '{schema}', t);
    END LOOP;
    CREATE TABLE "{snap}"._sequences (name text, last_value bigint, is_called boolean);
    FOR s IN SELECT c.relname FROM pg_class AS c
             WHERE c.relnamespace = '"{schema}"'::regnamespace AND c.relkind = 'S'
    LOOP
        EXECUTE format('INSERT INTO %I._sequences SELECT %L, last_value, is_called FROM %I.%I',
                       '{snap}', s, '{schema}', s);
    END LOOP;
END
$snapshot$"#,
            snap = self.snapshot,
            schema = self.name,
        );
        pool.execute(sql.as_str()).await.map_err(database)?;
        Ok(())
    }

    /// Puts every table and sequence of the schema back as the snapshot holds them: the tables
    /// emptied, then filled from the copy in the order their foreign keys need (generated columns
    /// computed again, identity values kept), and every sequence set to its position.
    pub async fn restore(&self, pool: &PgPool) -> Result<(), DriverError> {
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
            EXECUTE format('INSERT INTO %I.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %I.%I',
                           '{schema}', t, columns, columns, '{snap}', t);
            done := done || t;
            progress := true;
        END LOOP;
        EXIT WHEN NOT progress;
    END LOOP;
    IF cardinality(done) <> cardinality(tables) THEN
        RAISE EXCEPTION 'the snapshot of % could not be restored: foreign keys in a cycle', '{schema}';
    END IF;
    FOR seq IN EXECUTE format('SELECT name, last_value, is_called FROM %I._sequences', '{snap}')
    LOOP
        PERFORM setval(format('%I.%I', '{schema}', seq.name), seq.last_value, seq.is_called);
    END LOOP;
END
$restore$"#,
            snap = self.snapshot,
            schema = self.name,
        );
        pool.execute(sql.as_str()).await.map_err(database)?;
        Ok(())
    }
}

impl Drop for TraceSchema {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let sql = format!(
            r#"DROP SCHEMA IF EXISTS "{}" CASCADE; DROP SCHEMA IF EXISTS "{}" CASCADE"#,
            self.name, self.snapshot
        );
        if !leasewright_impl::database::execute_from_drop(admin, sql) {
            eprintln!(
                "warning: could not drop the failover trace's schema {}",
                self.name
            );
        }
    }
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn database(error: sqlx::Error) -> DriverError {
    DriverError::Implementation(format!("the failover's snapshot: {error}"))
}
