//! Control planes as real processes: `leasewright serve` started by the benchmark on the
//! benchmark's database, each on 127.0.0.1 and a port of its own choosing, stopped (killed) when
//! dropped. The database URL goes to the child in `DATABASE_URL` and the operator token in
//! `LEASEWRIGHT_OPERATOR_TOKEN`, never on its command line.

use crate::fixture::BenchError;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a `serve` process may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One running `leasewright serve`.
pub struct ServeProcess {
    child: Child,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
}

impl ServeProcess {
    /// Starts `exe serve` on `database_url` with a database pool of `connections`.
    pub fn start(exe: &Path, database_url: &str, connections: u32) -> Result<Self, BenchError> {
        let failed = |what: String| BenchError::Invalid(format!("a serve process: {what}"));
        let mut child = Command::new(exe)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--lease-ttl",
                "3600",
                "--database-connections",
                &connections.to_string(),
                "--schema",
                crate::fixture::schema(),
            ])
            .env("DATABASE_URL", database_url)
            .env("LEASEWRIGHT_OPERATOR_TOKEN", operator_token())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("cannot start {}: {e}", exe.display())))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        // A thread reads the child's stderr for its whole life (a full pipe would stop it), and
        // hands over the line that says where it listens.
        let (tell, told) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tell = Some(tell);
            let mut seen = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("listening on ").nth(1) {
                    if let Some(tell) = tell.take() {
                        let _ = tell.send(Ok(url.trim().to_string()));
                    }
                } else if tell.is_some() && seen.len() < 20 {
                    seen.push(line);
                }
            }
            if let Some(tell) = tell.take() {
                let _ = tell.send(Err(seen.join("\n")));
            }
        });
        match told.recv_timeout(START_TIMEOUT) {
            Ok(Ok(url)) => Ok(ServeProcess { child, url }),
            Ok(Err(said)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(failed(format!("exited before listening: {said}")))
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(failed(format!(
                    "did not listen within {} s",
                    START_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Its process id (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token for the child's operator routes, which the benchmark never calls.
fn operator_token() -> String {
    format!("bench-operator-{}", uuid_like())
}

fn uuid_like() -> String {
    leasewright_impl::ProjectId::new_random()
        .0
        .simple()
        .to_string()
}
