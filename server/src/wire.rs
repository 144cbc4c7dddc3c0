//! The JSON bodies of the HTTP API (docs/http.md), shared by the server, the runner agent and the
//! operator client.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// The ownership tuple as a runner names it (the runner itself is the bearer token), plus the
/// runner's observed time (diagnostic only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TupleBody {
    pub job: Uuid,
    pub attempt: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_time: Option<DateTime<Utc>>,
}

/// `POST /v1/runner/claim`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ClaimRequest {
    /// How many jobs the runner can take at once (batch claim); default 1.
    #[serde(default)]
    pub capacity: Option<u32>,
    #[serde(default)]
    pub runner_time: Option<DateTime<Utc>>,
}

/// One lease of an accepted claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaseBody {
    pub job: Uuid,
    pub attempt: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
    pub lease_expiry: DateTime<Utc>,
    /// The server's lease time-to-live, in milliseconds (the runner heartbeats every sixth of it).
    pub lease_ttl_ms: u64,
    pub source_revision: String,
    /// The manifest digest of the source identity.
    pub source_digest: String,
    /// The SHA-256 of the source snapshot blob.
    pub source_blob_sha256: Option<String>,
    pub command: String,
    /// Paths (relative to the workspace) the runner uploads as artifacts after the command.
    pub artifacts: Vec<String>,
    pub target: String,
    pub target_kind: String,
    /// The slot token the claim issued for `target` (docs/protocol.md §8.3): carried on every
    /// target mutation of this attempt. The fence stays the authority for control-plane messages.
    pub slot_token: i64,
}

impl LeaseBody {
    /// The tuple to name in every message about this lease.
    pub fn tuple(&self, runner_time: Option<DateTime<Utc>>) -> TupleBody {
        TupleBody {
            job: self.job,
            attempt: self.attempt,
            lease_id: self.lease_id,
            fence: self.fence,
            runner_time,
        }
    }
}

/// Answer to an accepted claim.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimResponse {
    pub verdict: String,
    pub leases: Vec<LeaseBody>,
}

/// Answer to an accepted or acknowledged message.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct VerdictResponse {
    /// `accepted` or `acknowledged` (a rejection is an error body with status 409).
    pub verdict: String,
}

/// Answer to an accepted heartbeat.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatResponse {
    pub verdict: String,
    pub lease_expiry: DateTime<Utc>,
    pub cancel_requested: bool,
}

/// Answer to an accepted rejoin (`continue` or `cancel`); `stop` is a 409 error body.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RejoinResponse {
    pub verdict: String,
    pub instruction: String,
}

/// `POST /v1/runner/logs`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct LogAppendRequest {
    #[serde(flatten)]
    pub tuple: TupleBody,
    pub seq: i64,
    /// The chunk, base64 (standard alphabet, padded).
    pub content_base64: String,
}

/// `POST /v1/runner/artifacts/put` and `/v1/runner/cache/put`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct PutRequest {
    #[serde(flatten)]
    pub tuple: TupleBody,
    /// The artifact name (artifacts) or the cache key (cache).
    pub name: String,
    pub content_base64: String,
}

/// `POST /v1/runner/artifacts/get` and `/v1/runner/cache/get`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct GetRequest {
    #[serde(flatten)]
    pub tuple: TupleBody,
    pub name: String,
}

/// Answer to an accepted get.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct GetResponse {
    pub verdict: String,
    pub content_base64: String,
}

/// `POST /v1/runner/result`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ResultRequest {
    #[serde(flatten)]
    pub tuple: TupleBody,
    /// `passed`, `failed` or `cancelled`.
    pub outcome: String,
    pub result_digest: String,
}

/// `POST /v1/runner/results`: several results at once (a batch result), each exactly what
/// `POST /v1/runner/result` carries.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ResultsRequest {
    pub results: Vec<ResultRequest>,
}

/// One item's answer in a batch result: the verdict a single result would get, and its reason
/// when rejected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResultAnswer {
    /// `accepted`, `acknowledged` or `rejected`.
    pub verdict: String,
    /// The rejection's reason code (docs/protocol.md §6.1), only when rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Answer to `POST /v1/runner/results`: one answer per item, in the items' order.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ResultsResponse {
    pub results: Vec<ResultAnswer>,
}

/// `POST /v1/targets/{slot}/deploy`: a mutation a runner (or its command) sends to a demo target.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeployRequest {
    /// The target's kind: `fenced`, `idempotent` or `unfenced` (the slot keeps its first kind).
    pub kind: String,
    pub job: Uuid,
    pub attempt: Uuid,
    /// The slot token of the attempt's reservation ([`LeaseBody::slot_token`]); a fenced target
    /// compares it, never a job fence (docs/protocol.md §8.4).
    pub slot_token: i64,
    pub deployment_id: String,
}

/// A target's state.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TargetBody {
    pub slot: String,
    pub kind: String,
    pub highest_slot_token: Option<i64>,
    pub applied_count: i64,
}

/// `POST /v1/projects`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateProjectRequest {
    pub name: String,
}

/// A created project.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectResponse {
    pub project: Uuid,
    pub name: String,
}

/// `POST /v1/projects/{project}/runners`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateRunnerRequest {
    pub name: String,
}

/// A created runner; the token is shown once and never again.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunnerResponse {
    pub runner: Uuid,
    pub token: String,
}

/// A runner of a project as an operator lists it (its token is never shown again).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunnerBody {
    pub runner: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// When it was revoked (server time); absent while its token authenticates. Not recorded:
    /// when it was last seen (that would be a write per runner message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A page of a project's runners (`GET /v1/projects/{project}/runners`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunnerList {
    pub runners: Vec<RunnerBody>,
    /// The cursor of the next page (pass it as `?after=`), absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// `POST /v1/projects/{project}/jobs`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SubmitJobRequest {
    /// The shell command (`sh -c`), run in the extracted source.
    pub command: String,
    /// The git revision of the source identity (free text, e.g. a commit id or `unversioned`).
    pub source_revision: String,
    /// The source as a gzip-compressed tar, base64; re-snapshotted deterministically on receipt.
    pub source_archive_base64: String,
    /// Paths, relative to the workspace, uploaded as artifacts after the command.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// The deployment target slot; default: the job's own slot (its id).
    #[serde(default)]
    pub target: Option<String>,
    /// `fenced`, `idempotent` or `unfenced` (default).
    #[serde(default)]
    pub target_kind: Option<String>,
}

/// A submitted job.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SubmitJobResponse {
    pub job: Uuid,
    pub source_revision: String,
    pub source_digest: String,
    pub source_blob_sha256: String,
    pub file_count: usize,
}

/// `POST /v1/projects/{project}/jobs/{job}/reconcile`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReconcileRequest {
    /// `stopped`, `still_running`, `observed_passed` or `observed_failed`.
    pub finding: String,
    /// `retry`, `abort` or `adopt`.
    pub decision: String,
}

/// `POST /v1/sweep` (the body may also be empty).
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct SweepRequest {
    /// Sweep only this project's jobs; absent: every project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<Uuid>,
}

/// Answer to the expiry sweep.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SweepResponse {
    /// `uncertain` (these jobs became uncertain) or `accepted` (nothing expired).
    pub verdict: String,
    pub jobs: Vec<Uuid>,
}

/// The request header that gives one request a time of its own on a server started with
/// `--manual-clock` (RFC 3339; docs/http.md, "Test clock"): a replay runs several traces on one
/// server at once, each at its trace's time. A server without a manual clock ignores it.
pub const TEST_TIME_HEADER: &str = "leasewright-test-time";

/// `POST /v1/test/clock` (only with `--manual-clock`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ClockRequest {
    #[serde(default)]
    pub set: Option<DateTime<Utc>>,
    #[serde(default)]
    pub advance_ms: Option<i64>,
}

/// The server's time.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ClockResponse {
    pub now: DateTime<Utc>,
}

/// Answer to `POST /v1/test/replicate`: the epoch, and until when claims wait after its change
/// (none before the epoch's first claim, which starts the wait).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplicateResponse {
    pub epoch: i64,
    pub claims_wait_until: Option<DateTime<Utc>>,
}

/// Answer to `POST /v1/test/failover`: the epoch before it and after it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct FailoverResponse {
    pub epoch_before: i64,
    pub epoch: i64,
}

/// Answer to `POST /v1/test/audit`: what the whole audit found (nothing: clean), and the
/// watermark it recorded (only when clean).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditHookResponse {
    pub clean: bool,
    pub findings: Vec<String>,
    pub watermark: Option<i64>,
}

/// Answer to `POST /v1/test/prune`: the jobs it deleted, the finished jobs it kept (a record
/// past the watermark), and what the audit `--since` the watermark after it found.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct PruneHookResponse {
    pub pruned: u64,
    pub kept: u64,
    pub clean: bool,
    pub findings: Vec<String>,
}

/// A job as the operator sees it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobBody {
    pub job: Uuid,
    pub project: Uuid,
    pub state: String,
    pub current_attempt: Option<Uuid>,
    pub fence: i64,
    pub cancel_requested: bool,
    pub outcome: Option<String>,
    pub result_digest: Option<String>,
    pub source_revision: String,
    pub source_digest: String,
    pub source_blob_sha256: Option<String>,
    pub command: String,
    pub artifacts: Vec<String>,
    pub target: String,
    pub target_kind: String,
    /// The attempt holding the job's target reservation, if any.
    pub target_reserved_by: Option<Uuid>,
    pub submitted_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// `GET /v1/projects/{project}/jobs`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobBody>,
    /// The cursor of the next page (pass it as `?after=`), absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// An attempt of the ledger.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptBody {
    pub attempt: Uuid,
    pub job: Uuid,
    pub runner: Uuid,
    pub lease_id: Uuid,
    pub fence: i64,
    pub slot_token: i64,
    pub state: String,
    pub lease_expiry: DateTime<Utc>,
    pub outcome: Option<String>,
    pub result_digest: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// `GET .../attempts`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptList {
    pub attempts: Vec<AttemptBody>,
    /// The cursor of the next page (pass it as `?after=`), absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// One recorded runner message.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ObservationBody {
    pub id: i64,
    pub kind: String,
    pub runner: Uuid,
    /// The job the message named (in a job's ledger, that job).
    pub named_job: Uuid,
    pub named_attempt: Uuid,
    pub named_lease_id: Uuid,
    pub named_fence: i64,
    /// The attempt it is attributed to (checks 1-5 passed).
    pub attempt: Option<Uuid>,
    pub received_at: DateTime<Utc>,
    pub runner_time: Option<DateTime<Utc>>,
    pub verdict: String,
    pub reason: Option<String>,
    pub outcome: Option<String>,
    pub payload_sha256: Option<String>,
}

/// `GET .../observations`, and `GET /v1/projects/{project}/security-log`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ObservationList {
    pub observations: Vec<ObservationBody>,
    /// The cursor of the next page (pass it as `?after=`), absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// One reconciliation.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReconciliationBody {
    pub id: i64,
    pub attempt: Option<Uuid>,
    pub finding: String,
    pub decision: String,
    pub verdict: String,
    pub reason: Option<String>,
    pub decided_at: DateTime<Utc>,
}

/// `GET .../reconciliations`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReconciliationList {
    pub reconciliations: Vec<ReconciliationBody>,
    /// The cursor of the next page (pass it as `?after=`), absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// `GET /v1/projects/{project}/cache/{key}`: a cache entry with who stored it last.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CacheEntryBody {
    pub key: String,
    pub content_base64: String,
    /// The hex SHA-256 of the content, recorded when it was stored.
    pub sha256: String,
    /// The attempt whose `cache put` stored it last.
    pub stored_by_attempt: Uuid,
    /// That attempt's job; `null` once the job has been pruned (the entry outlives it).
    pub stored_by_job: Option<Uuid>,
    pub stored_at: DateTime<Utc>,
}

/// One log chunk of an attempt (`GET .../jobs/{job}/log-chunks`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct LogChunkBody {
    pub seq: i64,
    pub content_base64: String,
    /// The hex SHA-256 of the content.
    pub sha256: String,
}

/// The error body of every non-2xx answer.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
    /// `rejected` for a protocol rejection (status 409), absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// `stop` for a rejected rejoin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// The stable code and a human message.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// `invalid_source` only: the extraction rule the archive broke (docs/http.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `invalid_source` only: the offending entry's path, when the rule is about one entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Raw bytes, not JSON (the source snapshot, an artifact): only its OpenAPI schema is used.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct BinaryBody(pub Vec<u8>);

/// `GET /healthz`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// `ok`.
    pub status: String,
    /// What the server's database is now (absent from servers before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseHealth>,
    /// This replica's clock against the database's (docs/protocol.md §3.1); absent on a manual
    /// clock (nothing is checked) and from servers before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockHealth>,
}

/// `GET /healthz`'s `clock`: the last measurement of this replica's clock against the database
/// server's (docs/http.md).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ClockHealth {
    /// The database's clock minus this replica's, in milliseconds (positive: the database is
    /// ahead); null before the first measurement.
    pub offset_ms: Option<f64>,
    /// The round trip of the measuring query, in milliseconds: the offset is uncertain by half.
    pub round_trip_ms: Option<f64>,
    /// The bound (`serve --max-clock-skew`), in milliseconds.
    pub max_clock_skew_ms: f64,
    /// Whether |offset| + round trip / 2 <= the bound: false while the server answers
    /// `503 clock_skew_exceeded`.
    pub within_bound: bool,
}

/// `GET /healthz`'s `database`: the server the control plane writes to (docs/http.md).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct DatabaseHealth {
    /// `primary` or `standby` (`pg_is_in_recovery()`).
    pub role: String,
    /// The `synchronous_commit` of the server's sessions (`on`, whatever the server's default).
    pub synchronous_commit: String,
    /// Standbys whose commit acknowledgement a commit waits for now (`pg_stat_replication`
    /// `sync_state` `sync` or `quorum`); null when the role may not see it
    /// (`pg_read_all_stats`).
    pub synchronous_standbys: Option<i64>,
    /// The server's `synchronous_standby_names` (empty: commits wait for no standby).
    pub synchronous_standby_names: String,
    /// The WAL timeline - 1: it rises by one at every promotion; null when unknown (a standby
    /// receiving nothing).
    pub epoch: Option<i64>,
    /// The largest lease ttl the database records (`lease_policy`: the wait after an epoch
    /// change), in milliseconds; null when none is recorded.
    #[serde(default)]
    pub max_lease_ttl_ms: Option<i64>,
    /// The `max_clock_skew` the database records (the largest any server recorded, or what
    /// `migrate --set-max-clock-skew-ms` set; the sweep acts twice this past a lease), in
    /// milliseconds; null when none is recorded.
    #[serde(default)]
    pub max_clock_skew_ms: Option<i64>,
}
