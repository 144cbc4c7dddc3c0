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

/// A secret file must be readable by its owner alone, as ssh insists of a private key: one that
/// group or others may read (any of the mode bits 0o077) is refused, with the command that fixes
/// it. The mode is the file's, through any symbolic link.
fn refuse_shared_file(what: &str, path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} from {}: {e}", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{} holds {what} but group or others may access it (mode {mode:04o}); make it readable by its owner only: chmod 600 {}",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

/// The secret, or `None` when no source gives one. A file's content is taken without its
/// surrounding whitespace (a trailing newline); an empty secret is an error, and so is a file that
/// group or others may access ([`refuse_shared_file`]).
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
        refuse_shared_file(what, path)?;
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
