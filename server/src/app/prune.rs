//! The test hooks that prune between a replay's jobs (only with `serve --manual-clock`, like the
//! test clock): `POST /v1/test/audit` (a whole `leasewright audit` of the server's schema; when it
//! is clean, its watermark recorded as `prune --audited-through` records it) and
//! `POST /v1/test/prune` (every finished job the audit covered deleted, as `leasewright prune`
//! does without `--unaudited`, then `audit --since` that watermark with its witness). What an
//! operator does between jobs (docs/audit.md, "Retention"), so that the conformance harness's
//! HTTP driver replays the model's walks pruned between their jobs (docs/conformance.md,
//! "Pruning over HTTP").

use super::error::{ok, ApiError, ApiResult};
use super::extract::{OperatorAuth, OptionalJsonBody};
use super::jobs::EmptyRequest;
use super::AppState;
use crate::wire::{AuditHookResponse, ErrorBody, PruneHookResponse};
use axum::extract::State;
use leasewright_audit::{chain, witness, AuditOptions, AuditReport};

/// The watermark and witness of the last clean `POST /v1/test/audit`.
pub(super) type Audited = Option<(chain::Watermark, witness::Witness)>;

/// A whole audit of the server's schema (`--since` a watermark with its witness when given).
async fn audit(
    state: &AppState,
    since: Option<(chain::Watermark, witness::Witness)>,
) -> Result<AuditReport, ApiError> {
    let connect = state.0.store.pool().connect_options().as_ref().clone();
    leasewright_audit::audit_connecting(&connect, &AuditOptions::whole(since), |_| {})
        .await
        .map(|(report, _)| report)
        .map_err(|e| super::error::internal_error(&e))
}

/// The test hook: a whole audit of the ledger; when it is clean, its watermark is recorded (as
/// `leasewright prune --audited-through` records it) and kept, with its witness, for the next
/// `POST /v1/test/prune`.
#[utoipa::path(
    post,
    path = "/v1/test/audit",
    tag = "test",
    security(("operator_token" = [])),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "what the audit found (nothing: clean) and the watermark it recorded", body = AuditHookResponse),
        (status = 404, description = "`not_found`: the server does not run with `--manual-clock`", body = ErrorBody)
    )
)]
pub(super) async fn test_audit(
    State(state): State<AppState>,
    _: OperatorAuth,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    super::time::manual_clock(&state)?;
    let report = audit(&state, None).await?;
    let findings = report.findings();
    let token = report
        .since
        .as_deref()
        .and_then(|t| t.parse::<chain::Since>().ok());
    let watermark = match (findings.is_empty(), token, report.witness) {
        (true, Some(chain::Since::Token(token)), Some(witness)) => {
            state.0.store.record_audit_watermark(token.position).await?;
            let position = token.position;
            *state.0.audited.lock().expect("the audited watermark") = Some((token, witness));
            Some(position)
        }
        _ => None,
    };
    ok(AuditHookResponse {
        clean: findings.is_empty(),
        findings,
        watermark,
    })
}

/// The test hook: the prune between jobs. Every job finished before the request's time that
/// the last clean `POST /v1/test/audit` covered is deleted with its ledger (`leasewright prune`
/// without `--unaudited`), then the ledger is audited `--since` that audit's watermark with its
/// witness. Answers how many jobs it deleted, how many finished ones it kept (past the
/// watermark), and what the audit after it found. Before any clean audit nothing is audited: it
/// deletes nothing, and the audit after it is a whole one.
#[utoipa::path(
    post,
    path = "/v1/test/prune",
    tag = "test",
    security(("operator_token" = [])),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "the jobs deleted and kept, and what the audit after the prune found", body = PruneHookResponse),
        (status = 404, description = "`not_found`: the server does not run with `--manual-clock`", body = ErrorBody)
    )
)]
pub(super) async fn test_prune(
    State(state): State<AppState>,
    _: OperatorAuth,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    super::time::manual_clock(&state)?;
    // Before any clean audit nothing is audited: the prune deletes nothing (as `leasewright
    // prune` with no watermark recorded) and the audit after it is a whole one.
    let since = state
        .0
        .audited
        .lock()
        .expect("the audited watermark")
        .clone();
    let finished_before = state.0.store_clock_now() + chrono::Duration::milliseconds(1);
    let report = state
        .0
        .store
        .prune_finished_jobs(leasewright_impl::PrunePolicy {
            finished_before,
            unaudited: false,
            batch: 100,
            max_batches: None,
        })
        .await?;
    let kept = state
        .0
        .store
        .unaudited_finished_jobs(finished_before)
        .await?;
    let findings = audit(&state, since).await?.findings();
    ok(PruneHookResponse {
        pruned: report.jobs,
        kept,
        clean: findings.is_empty(),
        findings,
    })
}
