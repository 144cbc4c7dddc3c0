//! Prometheus metrics: a handful of counters, gauges (the queue depth per project and state read
//! at scrape time) and latency histograms (per route, the claim's, a job's from claim to outcome),
//! kept and written in the Prometheus text format (version 0.0.4) by `prometheus-client`.

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

const BUCKETS_SECONDS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// A job's run, claim to outcome: a second to a day.
const JOB_BUCKETS_SECONDS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 10800.0, 43200.0, 86400.0,
];

/// The most projects the queue depth names one by one (the deepest first); the others are summed
/// in the series without a `project` label value (`project=""`, a name no project can have).
pub const MAX_DEPTH_PROJECTS: usize = 100;

/// The states the queue depth counts: every state a job is not finished in.
pub const DEPTH_STATES: [&str; 4] = ["queued", "running", "cancelling", "uncertain"];

/// The outcome label of a claim: `leased` (one lease or more), `none` (no job to lease) or
/// `error` (refused or failed).
#[derive(Clone, Copy, Debug)]
pub enum ClaimOutcome {
    Leased,
    None,
    Error,
}

impl ClaimOutcome {
    fn as_str(self) -> &'static str {
        match self {
            ClaimOutcome::Leased => "leased",
            ClaimOutcome::None => "none",
            ClaimOutcome::Error => "error",
        }
    }
}

/// The label of an HTTP method: one of the standard methods, else `other`.
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    kind: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    project: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    outcome: &'static str,
}

fn job_histogram() -> Histogram {
    Histogram::new(JOB_BUCKETS_SECONDS)
}

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS_SECONDS)
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    claims: Counter,
    leases_granted: Counter,
    rejections: Family<RejectionLabels, Counter>,
    uncertain_jobs: Gauge,
    lease_expiries: Counter,
    sweeps: Counter,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    database_primary: Gauge,
    database_synchronous_standbys: Gauge,
    database_epoch: Gauge,
    database_primary_changes: Counter,
    queue_depth: Family<DepthLabels, Gauge>,
    claim_latency: Family<ClaimLabels, Histogram>,
    job_duration: Family<JobLabels, Histogram>,
    pruned_jobs: Counter,
    pruned_unaudited_jobs: Counter,
    payload_in_flight: Gauge,
    requests_in_flight: Gauge,
    clock_offset: Gauge<f64, std::sync::atomic::AtomicU64>,
    clock_within_bound: Gauge,
    policy_max_clock_skew: Gauge<f64, std::sync::atomic::AtomicU64>,
    policy_max_lease_ttl: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let claims = Counter::default();
        let leases_granted = Counter::default();
        let rejections = Family::<RejectionLabels, Counter>::default();
        let uncertain_jobs = Gauge::default();
        let lease_expiries = Counter::default();
        let sweeps = Counter::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let database_primary = Gauge::default();
        let database_synchronous_standbys = Gauge::default();
        let database_epoch = Gauge::default();
        let policy_max_clock_skew = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let policy_max_lease_ttl = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let database_primary_changes = Counter::default();
        let queue_depth = Family::<DepthLabels, Gauge>::default();
        let claim_latency = Family::<ClaimLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let job_duration = Family::<JobLabels, Histogram>::new_with_constructor(
            job_histogram as fn() -> Histogram,
        );
        let pruned_jobs = Counter::default();
        let pruned_unaudited_jobs = Counter::default();
        let payload_in_flight = Gauge::default();
        let requests_in_flight = Gauge::default();
        let clock_offset = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let clock_within_bound = Gauge::default();
        // Counters are registered without `_total`: the encoder appends it.
        registry.register("leasewright_claims", "Accepted claims", claims.clone());
        registry.register(
            "leasewright_leases_granted",
            "Leases granted by accepted claims",
            leases_granted.clone(),
        );
        registry.register(
            "leasewright_rejections",
            "Protocol rejections by message kind and reason",
            rejections.clone(),
        );
        registry.register(
            "leasewright_uncertain_jobs",
            "Jobs now uncertain (awaiting reconciliation)",
            uncertain_jobs.clone(),
        );
        registry.register(
            "leasewright_lease_expiries",
            "Jobs the expiry sweep made uncertain",
            lease_expiries.clone(),
        );
        registry.register("leasewright_sweeps", "Expiry sweeps run", sweeps.clone());
        registry.register(
            "leasewright_http_requests",
            "HTTP requests",
            requests.clone(),
        );
        registry.register(
            "leasewright_http_request_duration_seconds",
            "HTTP request latency",
            latency.clone(),
        );
        registry.register(
            "leasewright_database_primary",
            "1 when the server's database is a primary, 0 when it is a standby",
            database_primary.clone(),
        );
        registry.register(
            "leasewright_database_synchronous_standbys",
            "Standbys a commit waits for (sync or quorum); -1 when the role may not see them",
            database_synchronous_standbys.clone(),
        );
        registry.register(
            "leasewright_database_epoch",
            "The database's epoch (WAL timeline - 1); -1 when unknown",
            database_epoch.clone(),
        );
        registry.register(
            "leasewright_database_max_clock_skew_seconds",
            "The max_clock_skew the database records (the largest any server recorded; the sweep \
             acts twice this past a lease); -1 when none is recorded",
            policy_max_clock_skew.clone(),
        );
        registry.register(
            "leasewright_database_max_lease_ttl_seconds",
            "The largest lease ttl the database records (the wait after an epoch change); -1 \
             when none is recorded",
            policy_max_lease_ttl.clone(),
        );
        registry.register(
            "leasewright_database_primary_changes",
            "Times the server followed the primary to another host of its database URL",
            database_primary_changes.clone(),
        );
        registry.register(
            "leasewright_queue_depth",
            "Jobs not finished, by project and state (read at scrape time)",
            queue_depth.clone(),
        );
        registry.register(
            "leasewright_claim_duration_seconds",
            "Server-side time of the claim route, by outcome",
            claim_latency.clone(),
        );
        registry.register(
            "leasewright_job_duration_seconds",
            "A job's run from the claim of the attempt that finished it to its accepted result",
            job_duration.clone(),
        );
        registry.register(
            "leasewright_pruned_jobs",
            "Finished jobs the retention pruned",
            pruned_jobs.clone(),
        );
        registry.register(
            "leasewright_pruned_unaudited_jobs",
            "Of the pruned jobs, those whose ledgers were not audited",
            pruned_unaudited_jobs.clone(),
        );
        registry.register(
            "leasewright_payload_in_flight_bytes",
            "Payload bytes the requests being received hold of the payload budget",
            payload_in_flight.clone(),
        );
        registry.register(
            "leasewright_requests_in_flight",
            "Requests to /v1/ routes admitted and not yet answered (the request slots held)",
            requests_in_flight.clone(),
        );
        registry.register(
            "leasewright_clock_offset_seconds",
            "The database server's clock minus this replica's, as last measured (docs/protocol.md §3.1)",
            clock_offset.clone(),
        );
        registry.register(
            "leasewright_clock_within_bound",
            "1 while this replica's clock is within --max-clock-skew of the database's (it serves), 0 while not (it answers 503 clock_skew_exceeded)",
            clock_within_bound.clone(),
        );
        Self {
            registry,
            payload_in_flight,
            requests_in_flight,
            clock_offset,
            clock_within_bound,
            queue_depth,
            claim_latency,
            job_duration,
            pruned_jobs,
            pruned_unaudited_jobs,
            claims,
            leases_granted,
            rejections,
            uncertain_jobs,
            lease_expiries,
            sweeps,
            requests,
            latency,
            database_primary,
            database_synchronous_standbys,
            database_epoch,
            policy_max_clock_skew,
            policy_max_lease_ttl,
            database_primary_changes,
        }
    }
}

impl Metrics {
    /// An accepted claim that granted `leases` leases.
    pub fn claim(&self, leases: usize) {
        self.claims.inc();
        self.leases_granted.inc_by(leases as u64);
    }

    /// A protocol rejection of a message of `kind` with `reason`.
    pub fn rejection(&self, kind: &str, reason: &str) {
        self.rejections
            .get_or_create(&RejectionLabels {
                kind: kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// An expiry sweep that made `expired` jobs uncertain.
    pub fn sweep(&self, expired: usize) {
        self.sweeps.inc();
        self.lease_expiries.inc_by(expired as u64);
    }

    /// One HTTP request. `route` must come from a bounded set (the router's matched paths, or
    /// `unmatched`); `method` is reduced to one here: every label value of a series comes from
    /// a bounded set, or a client could make `/metrics` grow without end.
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method_label(method),
                route: route.into(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// What the server's database is, read at scrape time: primary or standby, the synchronous
    /// standbys (`None`: not visible to the role) and the epoch (`None`: unknown); -1 stands for
    /// unknown.
    pub fn database(&self, primary: bool, synchronous_standbys: Option<i64>, epoch: Option<i64>) {
        self.database_primary.set(i64::from(primary));
        self.database_synchronous_standbys
            .set(synchronous_standbys.unwrap_or(-1));
        self.database_epoch.set(epoch.unwrap_or(-1));
    }

    /// The lease policy the database records (read at scrape time; `None`: no row).
    pub fn lease_policy(&self, max_lease_ttl: Option<Duration>, max_clock_skew: Option<Duration>) {
        self.policy_max_lease_ttl
            .set(max_lease_ttl.map_or(-1.0, |d| d.as_secs_f64()));
        self.policy_max_clock_skew
            .set(max_clock_skew.map_or(-1.0, |d| d.as_secs_f64()));
    }

    /// The last measurement of this replica's clock against the database's: the offset
    /// (database minus replica) and whether it is within the bound.
    pub fn clock(&self, offset: Duration, ahead_of_replica: bool, within_bound: bool) {
        let seconds = offset.as_secs_f64();
        self.clock_offset
            .set(if ahead_of_replica { seconds } else { -seconds });
        self.clock_within_bound.set(i64::from(within_bound));
    }

    /// The server followed the primary to another host.
    pub fn primary_change(&self) {
        self.database_primary_changes.inc();
    }

    /// One claim that took `elapsed` on the server.
    pub fn claim_latency(&self, outcome: ClaimOutcome, elapsed: Duration) {
        self.claim_latency
            .get_or_create(&ClaimLabels {
                outcome: outcome.as_str(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// An accepted result: the job ran `elapsed` from its attempt's claim. `outcome` is
    /// `passed`, `failed` or `cancelled` (anything else is counted as `other`).
    pub fn job_finished(&self, outcome: &str, elapsed: Duration) {
        let outcome = ["passed", "failed", "cancelled"]
            .into_iter()
            .find(|known| *known == outcome)
            .unwrap_or("other");
        self.job_duration
            .get_or_create(&JobLabels { outcome })
            .observe(elapsed.as_secs_f64());
    }

    /// Request slots taken (positive) or given back (negative).
    pub fn requests_in_flight(&self, n: i64) {
        self.requests_in_flight.inc_by(n);
    }

    /// Payload bytes taken from (positive) or given back to (negative) the payload budget.
    pub fn payload_in_flight(&self, bytes: i64) {
        self.payload_in_flight.inc_by(bytes);
    }

    /// A prune's report.
    pub fn prune(&self, report: &leasewright_impl::PruneReport) {
        self.pruned_jobs.inc_by(report.jobs);
        self.pruned_unaudited_jobs.inc_by(report.unaudited);
    }

    /// The queue depth read at scrape time: `(project, state, jobs)` rows. Every series is
    /// replaced (a project whose jobs all finished disappears); states outside [`DEPTH_STATES`]
    /// are ignored; past [`MAX_DEPTH_PROJECTS`] projects (the deepest kept) the rest are summed
    /// under `project=""`.
    pub fn set_queue_depth(&self, rows: &[(String, String, i64)]) {
        let mut per_project: std::collections::BTreeMap<&str, i64> = Default::default();
        for (project, _, jobs) in rows {
            *per_project.entry(project.as_str()).or_default() += jobs;
        }
        let mut deepest: Vec<(&str, i64)> = per_project.into_iter().collect();
        deepest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let named: std::collections::BTreeSet<&str> = deepest
            .iter()
            .take(MAX_DEPTH_PROJECTS)
            .map(|(p, _)| *p)
            .collect();
        self.queue_depth.clear();
        for (project, state, jobs) in rows {
            let Some(state) = DEPTH_STATES.into_iter().find(|s| s == state) else {
                continue;
            };
            let project = if named.contains(project.as_str()) {
                project.clone()
            } else {
                String::new()
            };
            self.queue_depth
                .get_or_create(&DepthLabels { project, state })
                .inc_by(*jobs);
        }
    }

    /// The exposition text; `uncertain_jobs` is read from the database at scrape time.
    pub fn render(&self, uncertain_jobs: i64) -> String {
        self.uncertain_jobs.set(uncertain_jobs);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;
    use std::collections::BTreeMap;
    use std::time::Duration;

    /// The series of an exposition text, by name, each with its labels and value; every line
    /// must be a comment or `name{labels} value`, and every series must follow its family's
    /// `# TYPE` line.
    fn parse(text: &str) -> BTreeMap<String, Vec<(String, f64)>> {
        let mut series: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        let mut typed: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                typed.push(name.to_owned());
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (head, value) = line.rsplit_once(' ').expect("name value");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            let (name, labels) = match head.split_once('{') {
                Some((name, labels)) => (name, labels.strip_suffix('}').expect("closed labels")),
                None => (head, ""),
            };
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "{line}"
            );
            let family = typed.last().expect("a series after its # TYPE");
            assert!(name.starts_with(family.as_str()), "{line} under {family}");
            series
                .entry(name.to_owned())
                .or_default()
                .push((labels.to_owned(), value));
        }
        series
    }

    #[test]
    fn the_exposition_keeps_its_names_labels_and_values() {
        let metrics = Metrics::default();
        metrics.claim(3);
        metrics.rejection("heartbeat", "lease_expired");
        metrics.rejection("heartbeat", "lease_expired");
        metrics.sweep(2);
        metrics.request("GET", "/healthz", 200, Duration::from_millis(3));
        metrics.request("BREW", "unmatched", 405, Duration::from_secs(7));
        metrics.database(true, None, Some(3));
        metrics.lease_policy(
            Some(Duration::from_secs(30)),
            Some(Duration::from_millis(500)),
        );
        metrics.primary_change();
        let text = metrics.render(4);
        let series = parse(&text);
        let value = |name: &str, labels: &str| {
            series[name]
                .iter()
                .find(|(l, _)| l == labels)
                .unwrap_or_else(|| panic!("{name}{{{labels}}} in\n{text}"))
                .1
        };
        let latency = "leasewright_http_request_duration_seconds";
        let expected: [(&str, &str, f64); 20] = [
            ("leasewright_database_primary", "", 1.0),
            ("leasewright_database_max_lease_ttl_seconds", "", 30.0),
            ("leasewright_database_max_clock_skew_seconds", "", 0.5),
            ("leasewright_database_synchronous_standbys", "", -1.0),
            ("leasewright_database_epoch", "", 3.0),
            ("leasewright_database_primary_changes_total", "", 1.0),
            ("leasewright_claims_total", "", 1.0),
            ("leasewright_leases_granted_total", "", 3.0),
            (
                "leasewright_rejections_total",
                "kind=\"heartbeat\",reason=\"lease_expired\"",
                2.0,
            ),
            ("leasewright_uncertain_jobs", "", 4.0),
            ("leasewright_lease_expiries_total", "", 2.0),
            ("leasewright_sweeps_total", "", 1.0),
            (
                "leasewright_http_requests_total",
                "method=\"GET\",route=\"/healthz\",status=\"200\"",
                1.0,
            ),
            (
                "leasewright_http_requests_total",
                "method=\"other\",route=\"unmatched\",status=\"405\"",
                1.0,
            ),
            ("_bucket", "route=\"/healthz\",le=\"0.001\"", 0.0),
            ("_bucket", "route=\"/healthz\",le=\"0.005\"", 1.0),
            ("_bucket", "route=\"unmatched\",le=\"5\"", 0.0),
            ("_bucket", "route=\"unmatched\",le=\"+Inf\"", 1.0),
            ("_count", "route=\"unmatched\"", 1.0),
            ("_sum", "route=\"unmatched\"", 7.0),
        ];
        for (name, labels, want) in expected {
            let name = match name.strip_prefix('_') {
                Some(suffix) => format!("{latency}_{suffix}"),
                None => name.to_owned(),
            };
            assert_eq!(value(&name, labels), want, "{name}{{{labels}}}");
        }
        assert!(
            text.contains("# TYPE leasewright_http_request_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("# HELP leasewright_claims_total Accepted claims."),
            "{text}"
        );
    }
}
