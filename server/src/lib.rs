//! The HTTP control plane, the runner agent, immutable source snapshots and target adapters.
//!
//! - [`app`]: the axum server (docs/http.md). Every protocol decision comes from the impl
//!   `Store`; this crate holds no protocol rule.
//! - [`agent`]: the runner agent (`leasewright runner`).
//! - [`source`]: deterministic source snapshots and their bounded, verified extraction.
//! - [`client`]: a small HTTP client for the runner and operator routes.
//! - [`serve`]: `leasewright serve` (database selection, throwaway PostgreSQL).

pub mod agent;
pub mod app;
pub mod client;
pub mod metrics;
pub mod serve;
pub mod source;
pub mod wire;
