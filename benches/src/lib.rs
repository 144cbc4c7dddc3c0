//! Benchmark support shared by the criterion benches and `leasewright bench`.
