//! Demo targets (rule R9: not the control plane; the target applies only its own rule).

use super::error::{db_error, ok, plain_verdict, ApiError, ApiResult};
use super::extract::{identifier, JsonBody, OperatorAuth, Segments};
use super::AppState;
use crate::wire::{DeployRequest, ErrorBody, TargetBody, VerdictResponse};
use axum::extract::State;
use axum::http::StatusCode;
use leasewright_impl::{AttemptId, JobId, TargetAdapter, TargetKind, TargetMutation, Verdict};
use sqlx::Row;

/// R9: a demonstration target (no authentication: it stands for a system outside the control plane).
#[utoipa::path(
    post,
    path = "/v1/targets/{slot}/deploy",
    tag = "targets",
    params(("slot" = String, Path, description = "the target slot")),
    request_body = DeployRequest,
    responses(
        (status = 200, description = "accepted or acknowledged", body = VerdictResponse),
        (status = 409, description = "rejected: `stale_fence`; or `target_kind_mismatch`", body = ErrorBody)
    )
)]
pub(super) async fn target_deploy(
    State(state): State<AppState>,
    Segments(slot): Segments<String>,
    JsonBody(body): JsonBody<DeployRequest>,
) -> ApiResult {
    let kind = TargetKind::from_code(&body.kind)
        .ok_or_else(|| ApiError::bad_request("kind must be fenced, idempotent or unfenced"))?;
    identifier(&slot, "the target slot")?;
    identifier(&body.deployment_id, "deployment_id")?;
    // A claim issues slot tokens from 1 (protocol §8.3): nothing else is a slot token.
    if body.slot_token < 1 {
        return Err(ApiError::bad_request("slot_token must be at least 1"));
    }
    let target = state
        .0
        .store
        .demo_target(kind, &slot)
        .await
        .map_err(|e| match e {
            leasewright_impl::Error::InvalidArgument(_) => ApiError::new(
                StatusCode::CONFLICT,
                "target_kind_mismatch",
                "the target slot exists with another kind",
            ),
            other => other.into(),
        })?;
    let verdict = target
        .mutate(&TargetMutation {
            job: JobId(body.job),
            attempt: AttemptId(body.attempt),
            slot_token: body.slot_token,
            deployment_id: body.deployment_id,
        })
        .await?;
    match verdict {
        Verdict::Accepted(()) => plain_verdict(Some(()), "accepted"),
        Verdict::Acknowledged => plain_verdict(None::<()>, "acknowledged"),
        Verdict::Rejected(reason) => Err(state.reject("target_mutation", reason)),
    }
}

pub(super) async fn target_state(
    state: &AppState,
    slot: &str,
) -> Result<Option<TargetBody>, ApiError> {
    let row =
        sqlx::query("SELECT kind, highest_slot_token, applied_count FROM targets WHERE slot = $1")
            .bind(slot)
            .fetch_optional(state.0.store.pool())
            .await
            .map_err(db_error)?;
    row.map(|row| {
        Ok(TargetBody {
            slot: slot.to_owned(),
            kind: row.try_get("kind").map_err(db_error)?,
            highest_slot_token: row.try_get("highest_slot_token").map_err(db_error)?,
            applied_count: row.try_get("applied_count").map_err(db_error)?,
        })
    })
    .transpose()
}

/// A demo target slot's state.
#[utoipa::path(
    get,
    path = "/v1/targets/{slot}",
    tag = "targets",
    security(("operator_token" = [])),
    params(("slot" = String, Path, description = "the target slot")),
    responses(
        (status = 200, description = "the demo target's state", body = TargetBody),
        (status = 404, description = "`unknown_target`", body = ErrorBody)
    )
)]
pub(super) async fn target_get(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(slot): Segments<String>,
) -> ApiResult {
    identifier(&slot, "the target slot")?;
    match target_state(&state, &slot).await? {
        Some(body) => ok(body),
        None => Err(ApiError::not_found(
            "unknown_target",
            "no mutation has reached this target slot",
        )),
    }
}
