//! Secrets (tokens) for the commands: never required on the command line, where every local user
//! can read them (`ps`, /proc/PID/cmdline). Each is taken from, in order: its flag (kept for
//! scripts and tests), a file named by its `-file` flag, or an environment variable.

use std::path::Path;

/// Where a secret can come from.
pub struct Sources<'a> {
    /// What the secret is (for messages), e.g. "the runner token".
    pub what: &'a str,
    /// The value of the flag itself, e.g. `--token`.
    pub flag: Option<String>,
    /// The value of the file flag, e.g. `--token-file`.
    pub file: Option<&'a Path>,
    /// The environment variable, e.g. `LEASEWRIGHT_RUNNER_TOKEN`.
    pub env: &'a str,
}

/// The secret, or `None` when no source gives one. A file's content is taken without its
/// surrounding whitespace (a trailing newline); an empty secret is an error.
pub fn read(sources: Sources<'_>) -> anyhow::Result<Option<String>> {
    let Sources {
        what,
        flag,
        file,
        env,
    } = sources;
    let value = if let Some(value) = flag {
        Some(value)
    } else if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {what} from {}: {e}", path.display()))?;
        Some(text.trim().to_owned())
    } else {
        std::env::var(env).ok()
    };
    match value {
        Some(value) if value.trim().is_empty() => anyhow::bail!("{what} is empty"),
        other => Ok(other),
    }
}
