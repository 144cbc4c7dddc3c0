//! Conformance: traces generated from the model, replayed against an implementation.

pub mod generate;
pub mod junit;
pub mod shard;
