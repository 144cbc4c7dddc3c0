//! The fenced-lease protocol of docs/protocol.md as a stateright model.
//!
//! No I/O, no clock, no randomness: time is the state's bounded `clock`, advanced by the `tick`
//! action, and every choice is an action. The public API is used by the conformance suite:
//!
//! - [`Config`], [`TargetKind`], [`Variant`]: what to check;
//! - [`LeaseModel`]: implements `stateright::Model<State = State, Action = Action>`;
//! - [`LeaseModel::expected`]: the server's verdict for one step, computed in one place;
//! - [`trace`]: the Informal Trace Format (ITF) shape of a path, and its replay;
//! - [`describe`]: human-readable steps and Mermaid sequence diagrams.

pub mod batch;
pub mod describe;
pub mod itf;
mod model;
pub mod properties;
mod reductions;
pub mod search;
pub mod side_effects;
mod state;
mod symmetry;
pub mod trace;
mod types;

pub use model::LeaseModel;
pub use side_effects::{CacheEntry, SideEffect};
pub use state::*;
pub use types::*;
