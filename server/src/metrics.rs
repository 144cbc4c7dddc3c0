//! Prometheus metrics in the text exposition format, without a metrics library: a handful of
//! counters and one latency histogram.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

const BUCKETS_SECONDS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// The label of an HTTP method: one of the standard methods, else `other`.
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS_SECONDS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Inner {
    claims: u64,
    leases_granted: u64,
    rejections: BTreeMap<(String, String), u64>,
    lease_expiries: u64,
    sweeps: u64,
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// An accepted claim that granted `leases` leases.
    pub fn claim(&self, leases: usize) {
        self.with(|m| {
            m.claims += 1;
            m.leases_granted += leases as u64;
        });
    }

    /// A protocol rejection of a message of `kind` with `reason`.
    pub fn rejection(&self, kind: &str, reason: &str) {
        self.with(|m| {
            *m.rejections
                .entry((kind.into(), reason.into()))
                .or_default() += 1
        });
    }

    /// An expiry sweep that made `expired` jobs uncertain.
    pub fn sweep(&self, expired: usize) {
        self.with(|m| {
            m.sweeps += 1;
            m.lease_expiries += expired as u64;
        });
    }

    /// One HTTP request. `route` must come from a bounded set (the router's matched paths, or
    /// `unmatched`); `method` is reduced to one here: every label value of a series comes from
    /// a bounded set, or a client could make `/metrics` grow without end.
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let method = method_label(method);
        self.with(|m| {
            *m.requests
                .entry((method.into(), route.into(), status))
                .or_default() += 1;
            let histogram = m.latency.entry(route.into()).or_default();
            let seconds = elapsed.as_secs_f64();
            for (i, bound) in BUCKETS_SECONDS.iter().enumerate() {
                if seconds <= *bound {
                    histogram.buckets[i] += 1;
                }
            }
            histogram.count += 1;
            histogram.sum += seconds;
        });
    }

    /// The exposition text; `uncertain_jobs` is read from the database at scrape time.
    pub fn render(&self, uncertain_jobs: i64) -> String {
        self.with(|m| {
            let mut out = String::new();
            let _ = writeln!(out, "# HELP leasewright_claims_total Accepted claims.");
            let _ = writeln!(out, "# TYPE leasewright_claims_total counter");
            let _ = writeln!(out, "leasewright_claims_total {}", m.claims);
            let _ = writeln!(
                out,
                "# HELP leasewright_leases_granted_total Leases granted by accepted claims."
            );
            let _ = writeln!(out, "# TYPE leasewright_leases_granted_total counter");
            let _ = writeln!(out, "leasewright_leases_granted_total {}", m.leases_granted);
            let _ = writeln!(
                out,
                "# HELP leasewright_rejections_total Protocol rejections by message kind and reason."
            );
            let _ = writeln!(out, "# TYPE leasewright_rejections_total counter");
            for ((kind, reason), n) in &m.rejections {
                let _ = writeln!(
                    out,
                    "leasewright_rejections_total{{kind=\"{kind}\",reason=\"{reason}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "# HELP leasewright_uncertain_jobs Jobs now uncertain (awaiting reconciliation)."
            );
            let _ = writeln!(out, "# TYPE leasewright_uncertain_jobs gauge");
            let _ = writeln!(out, "leasewright_uncertain_jobs {uncertain_jobs}");
            let _ = writeln!(
                out,
                "# HELP leasewright_lease_expiries_total Jobs the expiry sweep made uncertain."
            );
            let _ = writeln!(out, "# TYPE leasewright_lease_expiries_total counter");
            let _ = writeln!(out, "leasewright_lease_expiries_total {}", m.lease_expiries);
            let _ = writeln!(out, "# HELP leasewright_sweeps_total Expiry sweeps run.");
            let _ = writeln!(out, "# TYPE leasewright_sweeps_total counter");
            let _ = writeln!(out, "leasewright_sweeps_total {}", m.sweeps);
            let _ = writeln!(out, "# HELP leasewright_http_requests_total HTTP requests.");
            let _ = writeln!(out, "# TYPE leasewright_http_requests_total counter");
            for ((method, route, status), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "leasewright_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "# HELP leasewright_http_request_duration_seconds HTTP request latency."
            );
            let _ = writeln!(
                out,
                "# TYPE leasewright_http_request_duration_seconds histogram"
            );
            for (route, h) in &m.latency {
                for (bound, n) in BUCKETS_SECONDS.iter().zip(h.buckets) {
                    let _ = writeln!(
                        out,
                        "leasewright_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {n}"
                    );
                }
                let _ = writeln!(
                    out,
                    "leasewright_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "leasewright_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "leasewright_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                    h.count
                );
            }
            out
        })
    }
}
