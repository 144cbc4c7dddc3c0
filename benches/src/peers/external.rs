//! The peers that are other people's libraries: installed at pinned versions into a cache
//! directory by this command (npm for node, a venv and pip for Python), each driven through its
//! own documented worker API by a small driver script of ours (benches/peers/, compiled into
//! the binary and written next to the install), one process per phase: `setup`, `enqueue`,
//! `work`. A driver takes its settings from the environment (the database URL never on a
//! command line) and answers with one JSON line on stdout.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The runtime a peer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Node,
    Python,
}

/// One peer library.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// The name `--only` takes and the report prints.
    pub name: &'static str,
    /// The pinned version.
    pub version: &'static str,
    pub runtime: Runtime,
    /// What npm or pip installs (`name@version` / `name==version` and its database driver).
    pub packages: &'static [&'static str],
    /// The driver script.
    pub script: &'static str,
}

/// The peers, in the order they run in a round.
pub const PEERS: [Peer; 4] = [
    Peer {
        name: "graphile-worker",
        version: "0.16.6",
        runtime: Runtime::Node,
        packages: &["graphile-worker@0.16.6"],
        script: include_str!("../../peers/graphile_worker_driver.js"),
    },
    Peer {
        name: "pg-boss",
        version: "10.4.2",
        runtime: Runtime::Node,
        packages: &["pg-boss@10.4.2"],
        script: include_str!("../../peers/pg_boss_driver.js"),
    },
    Peer {
        name: "pgqueuer",
        version: "1.6.0",
        runtime: Runtime::Python,
        packages: &["pgqueuer==1.6.0", "asyncpg==0.32.0"],
        script: include_str!("../../peers/pgqueuer_driver.py"),
    },
    Peer {
        name: "procrastinate",
        version: "3.10.0",
        runtime: Runtime::Python,
        packages: &["procrastinate==3.10.0", "psycopg[binary]==3.3.9"],
        script: include_str!("../../peers/procrastinate_driver.py"),
    },
];

/// What one phase of a driver is told.
#[derive(Clone, Debug)]
pub struct Phase {
    /// The peer's database (no password on a command line: it goes in the environment).
    pub dsn: String,
    pub jobs: u64,
    /// Jobs queued beyond `jobs` when the work starts.
    pub depth: u64,
    pub workers: usize,
    pub payload_bytes: usize,
    /// The work phase stops after this long even if fewer than `jobs` jobs ran.
    pub max_seconds: u64,
}

/// A driver's answer (the fields a phase has).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Answer {
    pub version: Option<String>,
    pub enqueued: Option<u64>,
    pub done: Option<u64>,
    pub seconds: Option<f64>,
    pub settings: Option<String>,
}

/// An installed peer, ready to run.
#[derive(Clone, Debug)]
pub struct Installed {
    pub peer: Peer,
    dir: PathBuf,
}

impl Peer {
    fn dir(&self, cache: &Path) -> PathBuf {
        cache.join(format!("{}-{}", self.name, self.version))
    }

    fn driver_file(&self) -> &'static str {
        match self.runtime {
            Runtime::Node => "driver.js",
            Runtime::Python => "driver.py",
        }
    }

    /// Installs the peer into `cache/<name>-<version>` unless a previous run did (a marker file
    /// is written last), and writes the driver script beside it. Why not, when it cannot be.
    pub async fn install(self, cache: &Path) -> Result<Installed, String> {
        let dir = self.dir(cache);
        let marker = dir.join(".leasewright-installed");
        match self.runtime {
            Runtime::Node => {
                need("node", &["--version"]).await?;
                need("npm", &["--version"]).await?;
            }
            Runtime::Python => need("python3", &["-c", "import venv, ensurepip"]).await?,
        }
        if !marker.exists() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            eprintln!(
                "leasewright bench peers: installing {} {} into {}",
                self.name,
                self.version,
                dir.display()
            );
            match self.runtime {
                Runtime::Node => {
                    let mut args = vec!["install", "--no-audit", "--no-fund", "--prefix"];
                    let prefix = dir.to_string_lossy().into_owned();
                    args.push(&prefix);
                    args.extend(self.packages);
                    step("npm", &args, &dir).await?;
                }
                Runtime::Python => {
                    let venv = dir.to_string_lossy().into_owned();
                    step("python3", &["-m", "venv", &venv], &dir).await?;
                    let pip = dir.join("bin/pip").to_string_lossy().into_owned();
                    let mut args = vec!["install", "--quiet"];
                    args.extend(self.packages);
                    step(&pip, &args, &dir).await?;
                }
            }
            std::fs::write(&marker, self.packages.join("\n"))
                .map_err(|e| format!("{}: {e}", marker.display()))?;
        }
        std::fs::write(dir.join(self.driver_file()), self.script)
            .map_err(|e| format!("writing the driver into {}: {e}", dir.display()))?;
        Ok(Installed { peer: self, dir })
    }
}

impl Installed {
    /// Runs one phase (`setup`, `enqueue` or `work`) and reads its answer.
    pub async fn run(&self, phase: &str, settings: &Phase) -> Result<Answer, String> {
        let driver = self.dir.join(self.peer.driver_file());
        let mut command = match self.peer.runtime {
            Runtime::Node => {
                let mut c = tokio::process::Command::new("node");
                c.env("NODE_PATH", self.dir.join("node_modules"));
                c
            }
            Runtime::Python => tokio::process::Command::new(self.dir.join("bin/python")),
        };
        command
            .arg(&driver)
            .arg(phase)
            .env("LW_PEER_DSN", &settings.dsn)
            .env("LW_PEER_JOBS", settings.jobs.to_string())
            .env("LW_PEER_DEPTH", settings.depth.to_string())
            .env("LW_PEER_WORKERS", settings.workers.to_string())
            .env("LW_PEER_PAYLOAD_BYTES", settings.payload_bytes.to_string())
            .env("LW_PEER_MAX_SECONDS", settings.max_seconds.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // Setup and enqueue are bounded generously; the work phase stops itself at max_seconds.
        let limit = Duration::from_secs(settings.max_seconds + 300);
        let output = tokio::time::timeout(limit, command.output())
            .await
            .map_err(|_| {
                format!(
                    "{} {phase}: no answer in {} s",
                    self.peer.name,
                    limit.as_secs()
                )
            })?
            .map_err(|e| format!("{} {phase}: could not start: {e}", self.peer.name))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
        if !output.status.success() || last.is_none() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "{} {phase} failed ({}): {}",
                self.peer.name,
                output.status,
                tail.join(" | ")
            ));
        }
        serde_json::from_str(last.unwrap_or_default()).map_err(|e| {
            format!(
                "{} {phase}: unreadable answer {:?}: {e}",
                self.peer.name,
                last.unwrap_or_default()
            )
        })
    }
}

/// `Ok` when `program args` runs and succeeds, else why the peer is skipped.
async fn need(program: &str, args: &[&str]) -> Result<(), String> {
    let status = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("`{program} {}` failed ({s})", args.join(" "))),
        Err(e) => Err(format!("`{program}` is not available ({e})")),
    }
}

/// One install step; its error output's tail when it fails.
async fn step(program: &str, args: &[&str], dir: &Path) -> Result<(), String> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("`{program}` could not start: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
    Err(format!(
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    ))
}

/// The URL a peer's driver connects with: the database's URL without its `options` parameters
/// (sqlx's `options[search_path]=`, the implementation's schema), which libpq-style drivers
/// refuse.
pub fn peer_dsn(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("options=") && !p.starts_with("options["))
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::peer_dsn;

    #[test]
    fn a_peer_dsn_drops_only_the_search_path_option() {
        assert_eq!(
            peer_dsn("postgres://u@h:5/db?options=-csearch_path%3Dx&sslmode=disable"),
            "postgres://u@h:5/db?sslmode=disable"
        );
        assert_eq!(
            peer_dsn("postgres://u@h:5/db?options=-csearch_path%3Dx"),
            "postgres://u@h:5/db"
        );
        assert_eq!(
            peer_dsn("postgres://u@h:5/db?sslmode=disable&options[search_path]=leasewright"),
            "postgres://u@h:5/db?sslmode=disable"
        );
        assert_eq!(peer_dsn("postgres://u@h:5/db"), "postgres://u@h:5/db");
    }
}
