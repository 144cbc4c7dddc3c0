//! The drivers, side by side: each applies the model's steps to one kind of implementation
//! through the interface in [`crate::driver`], which imports none of them.
//!
//! - [`pg`]: the implementation's `Store` API in-process, with a manual clock.
//! - [`http`]: a running `leasewright serve --manual-clock`, over HTTP.
//! - [`cmd`]: any implementation in any language behind a child process speaking the JSON-lines
//!   driver protocol (docs/conformance.md).
//! - [`failover`]: how the in-process driver replays the model's failover (a schema of the
//!   trace's own, snapshot and restore).
//! - [`prune`]: when the in-process driver audits and prunes between a walk's jobs, and what the
//!   model says the prune must and may delete.

pub mod cmd;
pub mod failover;
pub mod http;
pub mod pg;
pub mod prune;
