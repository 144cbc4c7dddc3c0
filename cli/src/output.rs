//! Output every subcommand shares.

use serde::Serialize;

/// The version of every `--json` document this command prints (`check`, `conform`, `stress`,
/// `bench`): bumped when a field changes meaning or goes away, never when one is added. Each
/// document carries it as `schema_version`.
pub const SCHEMA_VERSION: u64 = 1;

/// Prints `value` as one pretty JSON document on stdout, with `schema_version` added.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut doc = serde_json::to_value(value)?;
    if let serde_json::Value::Object(fields) = &mut doc {
        fields.insert("schema_version".into(), SCHEMA_VERSION.into());
    }
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

/// How `serve` and `runner` write their logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people; colour only when stderr is a terminal.
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for log collectors.
    Json,
}

/// A count where zero makes no sense (`check --threads`, `runner --max-jobs`, `conform --steps`,
/// ...): 1 or more, else clap refuses it with exit 2.
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(error) => Err(error.to_string()),
    }
}
