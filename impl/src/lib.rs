//! The fenced-lease protocol of docs/protocol.md on PostgreSQL.
//!
//! Every rule is exactly one transaction ([`Store`]); every SQL statement lives in impl/sql/,
//! named after the rule it enforces; every invariant a row can carry is a named constraint in
//! impl/migrations. Time is an argument ([`Clock`]); rejections are values ([`Verdict`],
//! [`Reason`]); infrastructure failures are [`Error`]s. See docs/impl.md.

mod clock;
pub mod database;
pub mod epoch;
mod error;
pub mod hosts;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod schema;
mod sql;
pub mod standby;
mod store;
pub mod target;
mod transaction;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{DatabaseSaid, Error};
pub use schema::DEFAULT_SCHEMA;
pub use sql::statement_counts;
pub use store::{
    record_lease_policy_on, PrunePolicy, PruneReport, ResultObserver, Store, StoreConfig,
    DEFAULT_TOKEN_RECHECK,
};
pub use target::{DemoTarget, TargetAdapter, TargetMutation, TargetState};
pub use transaction::begin as begin_transaction;
pub use types::*;
