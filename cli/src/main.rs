//! The `leasewright` command.
use clap::Parser;

#[derive(Parser)]
#[command(name = "leasewright", version, about = "Fenced leases, model-checked and conformance-tested")]
enum Command {}

fn main() {
    let _ = Command::parse();
}
