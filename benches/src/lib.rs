//! Benchmark support shared by the criterion benches and `leasewright bench`.

pub mod baseline;
pub mod measure;
