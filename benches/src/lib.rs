//! Benchmark support shared by the criterion benches (benches/benches) and `leasewright bench`.
//! See docs/benchmarks.md.

pub mod baseline;
pub mod claims;
pub mod contender;
pub mod curve;
pub mod fixture;
pub mod floor;
pub mod lifecycle;
pub mod measure;
pub mod peers;
pub mod probe;
pub mod replicas;
pub mod scaling;
pub mod shared_slots;
pub mod vacuum;
pub mod writes;
