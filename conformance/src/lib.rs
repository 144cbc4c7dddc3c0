//! Conformance: traces generated from the model, replayed against an implementation, step by
//! step, comparing verdicts, reasons and the projected state. See docs/conformance.md.

pub mod coverage;
pub mod driver;
pub mod drivers;
pub mod export;
pub mod generate;
pub mod history;
pub mod junit;
pub mod minimize;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod probe;
pub mod property;
pub mod replay;
pub mod runner_suite;
pub mod scenarios;
pub mod select;
pub mod shard;
pub mod side_effects;
pub mod suite;
pub mod summary;
pub mod traces;
