//! The HTTP control plane, the runner agent, immutable source snapshots and target adapters.
