//! What a slot was bound by, measured while it runs: where the database's backends spent their
//! time (sampled from `pg_stat_activity`), and how much CPU the server's backends, the benchmark
//! process (with any control planes it started) and the whole machine used.
//!
//! The samples are counts of backend states, not timings: every `SAMPLE_EVERY` the sampler reads
//! the state and wait event of every other backend of the benchmark's database, so a share is
//! the fraction of backend-samples in that state. Idle backends (no transaction open: a pooled
//! connection nobody uses, or a client between transactions) are not counted, so the shares are
//! of backends inside a transaction. `active` with no wait event is a backend on the CPU (or
//! waiting for one); `idle in transaction` waiting for `ClientRead` is a transaction open while
//! its client thinks or the next statement travels (round trips); `Lock:*` are row and
//! transaction lock waits (the rows
//! `pg_locks` shows as not granted); `LWLock:WALWrite`, `IO:WALSync` are the commit's WAL flush.
//!
//! CPU comes from `/proc` (Linux, a server on this machine readable by this user): the
//! backends' `utime + stime` (their pids from `pg_stat_activity`), this process's and its
//! children's, and the machine's busy share from `/proc/stat`. When `/proc` does not show the
//! server (a remote server), the server's CPU is `None`.

use serde::Serialize;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the sampler reads `pg_stat_activity`.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// Backend-state samples of one or more slots.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Waits {
    /// Backend-samples taken.
    pub samples: u64,
    /// Samples per state (`active:CPU`, `active:Lock:transactionid`, `idle in
    /// transaction:Client:ClientRead`, ...; idle backends are not sampled).
    pub counts: BTreeMap<String, u64>,
}

impl Waits {
    /// Adds another slot's samples.
    pub fn add(&mut self, other: &Waits) {
        self.samples += other.samples;
        for (state, n) in &other.counts {
            *self.counts.entry(state.clone()).or_default() += n;
        }
    }

    /// The states by share, largest first, as `(state, share)`.
    pub fn shares(&self) -> Vec<(String, f64)> {
        let mut shares: Vec<(String, f64)> = self
            .counts
            .iter()
            .map(|(state, n)| (state.clone(), *n as f64 / self.samples.max(1) as f64))
            .collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        shares
    }

    /// The `n` largest shares as `state 12%` separated by commas.
    pub fn top(&self, n: usize) -> String {
        self.shares()
            .iter()
            .take(n)
            .map(|(state, share)| format!("{state} {:.0}%", share * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// CPU seconds used during one or more slots.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Cpu {
    /// The benchmark database's backends (`None`: not visible in this machine's `/proc`).
    pub server_seconds: Option<f64>,
    /// This process and the control planes it started.
    pub client_seconds: f64,
    /// The whole machine's busy CPU seconds (every core, every process).
    pub machine_busy_seconds: f64,
    /// The whole machine's CPU seconds (cores times wall time).
    pub machine_seconds: f64,
}

impl Cpu {
    /// Adds another slot's CPU.
    pub fn add(&mut self, other: &Cpu) {
        self.server_seconds = match (self.server_seconds, other.server_seconds) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.client_seconds += other.client_seconds;
        self.machine_busy_seconds += other.machine_busy_seconds;
        self.machine_seconds += other.machine_seconds;
    }

    /// The machine's busy share over the slots.
    pub fn machine_busy(&self) -> f64 {
        if self.machine_seconds > 0.0 {
            self.machine_busy_seconds / self.machine_seconds
        } else {
            0.0
        }
    }
}

/// A running sampler of one database's backends; [`Sampler::stop`] returns what it saw.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<Waits, sqlx::Error>>,
}

impl Sampler {
    /// Starts sampling on `pool` (a pool of its own: its one connection is left out).
    pub fn start(pool: &PgPool) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let pool = pool.clone();
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut waits = Waits::default();
            while !stopped.load(Ordering::Relaxed) {
                let rows: Vec<(String,)> = sqlx::query_as(
                    "SELECT coalesce(state, '?') ||
                            CASE WHEN state = 'idle' THEN ''
                                 WHEN wait_event_type IS NULL THEN ':CPU'
                                 ELSE ':' || wait_event_type || ':' || wait_event END
                     FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()
                       AND backend_type = 'client backend' AND state <> 'idle'",
                )
                .fetch_all(&pool)
                .await?;
                for (state,) in rows {
                    waits.samples += 1;
                    *waits.counts.entry(state).or_default() += 1;
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            Ok(waits)
        });
        Sampler { stop, task }
    }

    /// Stops and returns the samples.
    pub async fn stop(self) -> Result<Waits, sqlx::Error> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the sampler panicked")
    }
}

/// The sampler's own pool (one connection).
pub async fn sampler_pool(url: &str) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new().max_connections(1).connect(url).await
}

/// CPU counters at one moment.
#[derive(Clone, Debug)]
pub struct CpuSnapshot {
    server: Option<BTreeMap<i32, f64>>,
    client: f64,
    machine_busy: f64,
    machine_total: f64,
}

impl CpuSnapshot {
    /// Reads the counters: the backends of `pool`'s database (but the sampler's own: give the
    /// sampler's pool), this process and `children`.
    pub async fn take(pool: &PgPool, children: &[u32]) -> Result<CpuSnapshot, sqlx::Error> {
        let pids: Vec<(i32,)> = sqlx::query_as(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND backend_type = 'client backend'
               AND pid <> pg_backend_pid()",
        )
        .fetch_all(pool)
        .await?;
        let mut server = BTreeMap::new();
        for (pid,) in &pids {
            if let Some(seconds) = process_cpu_seconds(&format!("/proc/{pid}/stat")) {
                server.insert(*pid, seconds);
            }
        }
        let mut client = process_cpu_seconds("/proc/self/stat").unwrap_or(0.0);
        for child in children {
            client += process_cpu_seconds(&format!("/proc/{child}/stat")).unwrap_or(0.0);
        }
        let (machine_busy, machine_total) = machine_cpu_seconds().unwrap_or((0.0, 0.0));
        Ok(CpuSnapshot {
            server: (!server.is_empty()).then_some(server),
            client,
            machine_busy,
            machine_total,
        })
    }

    /// What was used from `self` to `later` (backends that exist in both).
    pub fn until(&self, later: &CpuSnapshot) -> Cpu {
        let server_seconds = match (&self.server, &later.server) {
            (Some(a), Some(b)) => Some(
                b.iter()
                    .filter_map(|(pid, t)| a.get(pid).map(|t0| (t - t0).max(0.0)))
                    .sum(),
            ),
            _ => None,
        };
        Cpu {
            server_seconds,
            client_seconds: (later.client - self.client).max(0.0),
            machine_busy_seconds: (later.machine_busy - self.machine_busy).max(0.0),
            machine_seconds: (later.machine_total - self.machine_total).max(0.0),
        }
    }
}

/// `utime + stime` of a `/proc/PID/stat` file, in seconds.
fn process_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
    // state (3), ..., utime (14), stime (15).
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// The machine's busy and total CPU seconds since boot (`/proc/stat`'s `cpu` line).
fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest times are inside user).
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0.0);
    Some(((total - idle) / TICKS_PER_SECOND, total / TICKS_PER_SECOND))
}

/// The load average (`/proc/loadavg`: 1, 5 and 15 minutes), if readable.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut parts = text.split_whitespace().map(|p| p.parse::<f64>().ok());
    Some([parts.next()??, parts.next()??, parts.next()??])
}

#[cfg(test)]
mod tests {
    use super::{process_cpu_seconds, sampler_pool, Sampler, Waits, SAMPLE_EVERY};

    /// The sampler counts a backend that sits inside a transaction for the whole window (the
    /// curves' `waits`; a benchmark's own slots are too short and too fast to be sure to catch
    /// one, so `cli/tests/bench.rs` checks only that the samples are reported).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sampler_sees_a_backend_inside_a_transaction() {
        let db = leasewright_impl::database::TestDatabase::create()
            .await
            .expect("a test database");
        let pool = sqlx::PgPool::connect(db.url()).await.expect("connect");
        let mut open = pool.begin().await.expect("begin");
        sqlx::query("SELECT 1")
            .execute(&mut *open)
            .await
            .expect("a statement inside the transaction");
        let sampler = Sampler::start(&sampler_pool(db.url()).await.expect("the sampler's pool"));
        tokio::time::sleep(SAMPLE_EVERY * 8).await;
        let waits = sampler.stop().await.expect("the samples");
        open.rollback().await.expect("rollback");
        assert!(waits.samples > 0, "{waits:?}");
        assert!(
            waits
                .counts
                .keys()
                .any(|state| state.starts_with("idle in transaction")),
            "{waits:?}"
        );
    }

    #[test]
    fn shares_are_sorted_and_add_up() {
        let mut waits = Waits {
            samples: 4,
            ..Waits::default()
        };
        waits.counts.insert("active:CPU".into(), 1);
        waits.counts.insert("idle".into(), 3);
        let shares = waits.shares();
        assert_eq!(shares[0].0, "idle");
        assert!((shares[0].1 - 0.75).abs() < 1e-9);
        assert_eq!(waits.top(1), "idle 75%");
        let mut more = Waits::default();
        more.add(&waits);
        more.add(&waits);
        assert_eq!(more.samples, 8);
        assert_eq!(more.counts["active:CPU"], 2);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        // Linux only: the benchmark's CPU figures need /proc.
        assert!(process_cpu_seconds("/proc/self/stat").is_some());
        assert!(process_cpu_seconds("/proc/0/no-such-file").is_none());
    }
}
