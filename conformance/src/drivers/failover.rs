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
//!   as on a promoted standby that never received them (both are `leasewright_impl::standby`,
//!   which a manual-clock server's test hooks run too: the HTTP driver replays failovers with
//!   them, [`super::http`]);
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
use sqlx::PgPool;

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
    /// schema (replacing an earlier snapshot): `leasewright_impl::standby::replicate`, as a
    /// manual-clock server's `POST /v1/test/replicate` does.
    pub async fn snapshot(&self, pool: &PgPool) -> Result<(), DriverError> {
        leasewright_impl::standby::replicate(pool, &self.name, &self.snapshot)
            .await
            .map_err(database)
    }

    /// Puts every table and sequence of the schema back as the snapshot holds them
    /// (`leasewright_impl::standby::restore`, as `POST /v1/test/failover` does).
    pub async fn restore(&self, pool: &PgPool) -> Result<(), DriverError> {
        leasewright_impl::standby::restore(pool, &self.name, &self.snapshot)
            .await
            .map_err(database)
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
fn database(error: leasewright_impl::Error) -> DriverError {
    DriverError::Implementation(format!("the failover's snapshot: {error}"))
}
