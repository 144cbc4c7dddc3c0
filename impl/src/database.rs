//! Where the tests (and conformance, benches, the server's tests) get a PostgreSQL database.
//!
//! - `DATABASE_URL` set: every [`TestDatabase`] is a fresh `CREATE DATABASE lw_test_<random>` on
//!   that server, dropped (`WITH (FORCE)`) when the `TestDatabase` is dropped.
//! - otherwise: one throwaway cluster per process (`initdb` into a temporary directory, a free
//!   port, `pg_ctl start`, as the `postgres` OS user when running as root, `fsync=off`), and a
//!   fresh database on it for every [`TestDatabase`]. A watchdog process stops the cluster and
//!   deletes its directory as soon as the process that started it exits (however it exits).
//!
//! The build never needs a database; only running the tests does.

use crate::clock::Clock;
use crate::error::Error;
use crate::store::{Store, StoreConfig};
use sqlx::{Connection, Executor, PgConnection};
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use uuid::Uuid;

/// Why no test database could be had.
#[derive(Clone, Debug, thiserror::Error)]
pub enum HarnessError {
    /// Neither `DATABASE_URL` nor PostgreSQL server binaries.
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: \
         install PostgreSQL server binaries (e.g. `apt-get install postgresql`) or set \
         DATABASE_URL to a server where the tests may create databases"
    )]
    NoBinaries,
    /// The throwaway cluster did not start.
    #[error("the throwaway PostgreSQL cluster did not start: {0}")]
    Cluster(String),
    /// The server refused to create (or connect to) the test database.
    #[error("could not create a test database: {0}")]
    Database(String),
}

/// A throwaway PostgreSQL cluster, started once per process.
#[derive(Debug)]
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
}

impl Cluster {
    /// The URL of database `name` on the cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// The directory holding the cluster (deleted when the process exits).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new throwaway cluster of the caller's own, not the process's shared one: for tests that
    /// restart the server (which would break every other test using the shared cluster). Stopped
    /// and deleted when the process exits, like the shared one.
    pub fn start_private() -> Result<Arc<Cluster>, HarnessError> {
        start_cluster().map(Arc::new)
    }

    /// The port the cluster listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A streaming standby of this cluster: a base backup (`pg_basebackup -R -X stream`, which
    /// writes `standby.signal` and `primary_conninfo`) started on a port of its own. Stopped and
    /// deleted when the process exits, like every throwaway cluster. For failover tests.
    pub fn start_standby(&self) -> Result<Arc<Cluster>, HarnessError> {
        let (dir, bin, run_as) = cluster_dir()?;
        run(
            as_postgres(&bin, &dir, run_as, "pg_basebackup")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ])
                .arg("-p")
                .arg(self.port.to_string())
                .arg("-D")
                .arg(dir.join("data")),
            &dir.join("pg_basebackup.out"),
            "pg_basebackup",
        )?;
        let port = free_port()?;
        start_server(&bin, &dir, run_as, port)?;
        Ok(Arc::new(Cluster {
            port,
            dir,
            bin,
            run_as,
        }))
    }

    /// Kill the postmaster with SIGKILL: a crash (no shutdown checkpoint; its backends exit when
    /// they notice, every connection is cut and the port refuses new ones).
    pub fn kill(&self) -> Result<(), HarnessError> {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| cluster_error("postmaster.pid", e))?
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        run(
            Command::new("kill").args(["-KILL", &pid]),
            &self.dir.join("kill.out"),
            "kill -KILL",
        )?;
        // Wait (bounded) until the port refuses connections.
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(HarnessError::Cluster(
            "the killed postmaster's port still accepts connections".into(),
        ))
    }

    /// Promote a standby (`pg_ctl promote -w`): it leaves recovery on a new WAL timeline.
    pub fn promote(&self) -> Result<(), HarnessError> {
        run(
            as_postgres(&self.bin, &self.dir, self.run_as, "pg_ctl")
                .args(["promote", "-w", "-t", "60", "-D"])
                .arg(self.dir.join("data")),
            &self.dir.join("pg_ctl-promote.out"),
            "pg_ctl promote",
        )
    }

    /// Restart the server (`pg_ctl restart -m fast`, waiting until it accepts connections again):
    /// every connection is terminated, open transactions are rolled back, the data stays.
    pub fn restart(&self) -> Result<(), HarnessError> {
        let mut command = Command::new(self.bin.join("pg_ctl"));
        command
            .current_dir(&self.dir)
            .env_remove("PGDATA")
            .process_group(0)
            .args(["restart", "-m", "fast", "-w", "-t", "60", "-D"])
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("postgres.log"));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        run(
            &mut command,
            &self.dir.join("pg_ctl-restart.out"),
            "pg_ctl restart",
        )
    }
}

static CLUSTER: OnceLock<Result<Arc<Cluster>, HarnessError>> = OnceLock::new();

/// The process's throwaway cluster, started on first use.
pub fn throwaway_cluster() -> Result<Arc<Cluster>, HarnessError> {
    CLUSTER
        .get_or_init(|| start_cluster().map(Arc::new))
        .clone()
}

/// The directory of `initdb` and `pg_ctl`: PATH first, then the newest /usr/lib/postgresql/*/bin.
fn find_binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(dir) = std::env::split_paths(&path).find(|dir| has_both(dir)) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The uid and gid of the `postgres` OS user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() == Some(&"postgres") && fields.len() > 3 {
            Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
        } else {
            None
        }
    })
}

fn run(command: &mut Command, log: &Path, what: &str) -> Result<(), HarnessError> {
    let out = File::create(log).map_err(|e| HarnessError::Cluster(format!("{what}: {e}")))?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::Cluster(format!("{what}: {e}")))?;
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .status()
        .map_err(|e| HarnessError::Cluster(format!("{what}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        let output = std::fs::read_to_string(log).unwrap_or_default();
        Err(HarnessError::Cluster(format!(
            "{what} failed ({status}): {output}"
        )))
    }
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(|e| cluster_error(.., e))`
fn cluster_error(what: &str, e: std::io::Error) -> HarnessError {
    HarnessError::Cluster(format!("{what}: {e}"))
}

/// A new cluster directory (owned by the `postgres` user when running as root, removed by a
/// watchdog when this process exits), with the binaries' directory and the user to run them as.
type ClusterDir = (PathBuf, PathBuf, Option<(u32, u32)>);

fn cluster_dir() -> Result<ClusterDir, HarnessError> {
    let bin = find_binaries().ok_or(HarnessError::NoBinaries)?;
    let dir = tempfile::Builder::new()
        .prefix("leasewright-pg-")
        .tempdir()
        .map_err(|e| cluster_error("temporary directory", e))?
        .keep();
    // PostgreSQL refuses to run as root: run it as the `postgres` user then.
    let running_as_root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    let run_as = if running_as_root {
        let user = postgres_user().ok_or_else(|| {
            HarnessError::Cluster("running as root, and there is no `postgres` OS user".into())
        })?;
        std::os::unix::fs::chown(&dir, Some(user.0), Some(user.1))
            .map_err(|e| cluster_error("chown of the cluster directory", e))?;
        Some(user)
    } else {
        None
    };
    // Clean up when this process exits, however it exits.
    spawn_watchdog(&dir).map_err(|e| cluster_error("watchdog", e))?;
    Ok((dir, bin, run_as))
}

/// `program` of the PostgreSQL binaries, run in `dir` (as the `postgres` user when root).
/// `program` is looked for beside `initdb` and `pg_ctl`, then beside what `pg_ctl` links to (a
/// PATH that holds links to a few of a version's binaries: `pg_basebackup` is in the version's
/// own directory).
fn as_postgres(bin: &Path, dir: &Path, run_as: Option<(u32, u32)>, program: &str) -> Command {
    let mut path = bin.join(program);
    if !path.is_file() {
        if let Some(own) = std::fs::canonicalize(bin.join("pg_ctl"))
            .ok()
            .and_then(|pg_ctl| Some(pg_ctl.parent()?.join(program)))
            .filter(|own| own.is_file())
        {
            path = own;
        }
    }
    let mut command = Command::new(path);
    command
        .current_dir(dir)
        .env_remove("PGDATA")
        .process_group(0);
    if let Some((uid, gid)) = run_as {
        command.uid(uid).gid(gid);
    }
    command
}

fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|e| cluster_error("free port", e))
        .map(|addr| addr.port())
}

/// `pg_ctl start` of the cluster in `dir/data` on `port` (fsync off: a throwaway cluster).
fn start_server(
    bin: &Path,
    dir: &Path,
    run_as: Option<(u32, u32)>,
    port: u16,
) -> Result<(), HarnessError> {
    let options = format!(
        "-p {port} -h 127.0.0.1 -k {} -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off -c max_connections=300",
        dir.display()
    );
    run(
        as_postgres(bin, dir, run_as, "pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(dir.join("data"))
            .arg("-l")
            .arg(dir.join("postgres.log"))
            .arg("-o")
            .arg(options),
        &dir.join("pg_ctl.out"),
        "pg_ctl start",
    )
}

fn start_cluster() -> Result<Cluster, HarnessError> {
    let (dir, bin, run_as) = cluster_dir()?;
    let as_postgres = |program: &str| as_postgres(&bin, &dir, run_as, program);
    let data = dir.join("data");
    run(
        as_postgres("initdb").arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]),
        &dir.join("initdb.out"),
        "initdb",
    )?;
    let port = free_port()?;
    start_server(&bin, &dir, run_as, port)?;
    Ok(Cluster {
        port,
        dir,
        bin,
        run_as,
    })
}

/// A detached shell that waits for this process to exit, then stops the cluster (immediate
/// shutdown) and deletes its directory.
fn spawn_watchdog(dir: &Path) -> std::io::Result<()> {
    let script = r#"
        while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
        pm=$(head -n 1 "$2/data/postmaster.pid" 2>/dev/null)
        if [ -n "$pm" ]; then
            kill -QUIT "$pm" 2>/dev/null
            i=0
            while kill -0 "$pm" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
        fi
        rm -rf "$2"
    "#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("leasewright-pg-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| after_scheme + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// A fresh, empty database for one test. Dropped with the `TestDatabase` when it lives on a
/// `DATABASE_URL` server; the throwaway cluster disappears with the process.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    name: String,
    /// The server URL to drop the database through (`DATABASE_URL` only).
    drop_through: Option<String>,
    _cluster: Option<Arc<Cluster>>,
}

impl TestDatabase {
    /// Create a fresh database: on `DATABASE_URL` if it is set, else on the process's throwaway
    /// cluster.
    pub async fn create() -> Result<TestDatabase, HarnessError> {
        let external = std::env::var("DATABASE_URL")
            .ok()
            .filter(|url| !url.is_empty());
        Self::create_on(external.as_deref()).await
    }

    /// Create a fresh database on the server at `server_url` (dropped with the `TestDatabase`),
    /// or, with `None`, on the process's throwaway cluster.
    pub async fn create_on(server_url: Option<&str>) -> Result<TestDatabase, HarnessError> {
        let (server_url, cluster) = match server_url {
            Some(url) => (url.to_owned(), None),
            None => {
                let cluster = tokio::task::spawn_blocking(throwaway_cluster)
                    .await
                    .map_err(|e| HarnessError::Cluster(e.to_string()))??;
                (cluster.url("postgres"), Some(cluster))
            }
        };
        let name = format!("lw_test_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server_url)
            .await
            .map_err(|e| HarnessError::Database(e.to_string()))?;
        admin
            .execute(format!("CREATE DATABASE {name} TEMPLATE template0").as_str())
            .await
            .map_err(|e| HarnessError::Database(e.to_string()))?;
        let _ = admin.close().await;
        Ok(TestDatabase {
            url: with_search_path(&with_database(&server_url, &name), crate::DEFAULT_SCHEMA),
            drop_through: cluster.is_none().then_some(server_url),
            name,
            _cluster: cluster,
        })
    }

    /// The database's URL. It selects the default schema ([`crate::DEFAULT_SCHEMA`]) on every
    /// connection, so a test or tool that connects with it reads the tables a [`Store`] made.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keep the database when this is dropped (for a user to inspect or audit it), and return its
    /// URL. On the throwaway cluster it still goes with the process.
    pub fn keep(mut self) -> String {
        self.drop_through = None;
        self.url.clone()
    }

    /// A [`Store`] on this database (migrations applied).
    pub async fn store(&self, clock: Arc<dyn Clock>, config: StoreConfig) -> Result<Store, Error> {
        Store::connect(&self.url, clock, config).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(server_url) = self.drop_through.take() else {
            return;
        };
        let Ok(options) = server_url.parse() else {
            tracing::warn!(database = %self.name, "could not drop the test database");
            return;
        };
        let name = &self.name;
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if !execute_from_drop(options, sql) {
            tracing::warn!(database = %self.name, "could not drop the test database");
        }
    }
}

/// Runs `sql` on a new connection made with `options`, from a `Drop` that may run inside a
/// runtime (a thread with a runtime of its own, joined): whether it ran. For a harness's cleanup
/// (a test database, a conformance trace's schema).
pub fn execute_from_drop(options: sqlx::postgres::PgConnectOptions, sql: String) -> bool {
    let ran = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let mut connection = PgConnection::connect_with(&options).await.ok()?;
            connection.execute(sql.as_str()).await.ok()?;
            connection.close().await.ok()
        })
    })
    .join();
    matches!(ran, Ok(Some(())))
}

/// `url` with `search_path` set to `schema` on every connection (sqlx's `options[...]`).
pub fn with_search_path(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options[search_path]={schema}")
}

#[cfg(test)]
mod tests {
    use super::{with_database, with_search_path};

    #[test]
    fn a_search_path_is_added_to_a_url() {
        assert_eq!(
            with_search_path("postgres://h/x", "lw"),
            "postgres://h/x?options[search_path]=lw"
        );
        assert_eq!(
            with_search_path("postgres://h/x?sslmode=disable", "lw"),
            "postgres://h/x?sslmode=disable&options[search_path]=lw"
        );
    }

    #[test]
    fn a_database_url_gets_the_test_database_name() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
    }
}
