//! `sqlx::migrate!` embeds impl/migrations at compile time; without this, cargo does not rebuild
//! the crate when a migration is added (sqlx's documented build script).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
