//! Demo targets (rule R9: not the control plane; the target applies only its own rule).
//!
//! A demonstration, opt-in (`serve --demo-targets`; off by default the deploy route answers
//! 404). Its record (`target_mutations`) lives in the ledger's database and `audit` reads it, so
//! the route takes no credential but records only what a runner of the job could have sent: a
//! mutation naming an attempt the database issued, of the job it names, on that job's slot and
//! kind, carrying exactly the slot token the database issued that attempt (docs/http.md, "Routes
//! that take no credential"). Anything else is refused before anything is written, a `targets`
//! row included. At most [`MAX_TARGET_MUTATIONS_PER_ATTEMPT`] mutations are recorded per attempt,
//! and they are pruned with their job.

use super::error::{db_error, ok, plain_verdict, ApiError, ApiResult};
use super::extract::{identifier, JsonBody, OperatorAuth, Segments};
use super::AppState;
use crate::wire::{DeployRequest, ErrorBody, TargetBody, VerdictResponse};
use axum::extract::State;
use axum::http::StatusCode;
use leasewright_impl::{AttemptId, JobId, TargetAdapter, TargetKind, TargetMutation, Verdict};
use sqlx::Row;

/// The most mutations the demonstration targets record for one attempt: a command deploys once
/// or a few times; past it a deploy is refused `429 target_mutation_limit` and nothing is
/// recorded (concurrent deploys of one attempt may pass it by as many as the requests served at
/// once).
pub const MAX_TARGET_MUTATIONS_PER_ATTEMPT: i64 = 64;

/// What the database issued to the attempt a mutation names: its slot token, its job's slot
/// kind, and how many mutations the targets recorded for it already. No row: no attempt of
/// that job on that slot.
const ISSUED: &str = "SELECT a.slot_token, j.target_kind, \
        (SELECT count(*) FROM target_mutations AS m WHERE m.attempt_id = a.id) AS recorded \
     FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id \
     WHERE a.id = $1 AND a.job_id = $2 AND j.target = $3";

/// R9: a demonstration target (no credential: it stands for a system outside the control plane;
/// it records only a mutation carrying a slot token the database issued to the attempt named).
#[utoipa::path(
    post,
    path = "/v1/targets/{slot}/deploy",
    tag = "targets",
    params(("slot" = String, Path, description = "the target slot")),
    request_body = DeployRequest,
    responses(
        (status = 200, description = "accepted or acknowledged", body = VerdictResponse),
        (status = 403, description = "`slot_token_not_issued`: no attempt of the job on the slot holds that slot token; nothing recorded", body = ErrorBody),
        (status = 404, description = "`not_found`: the server was started without `--demo-targets`", body = ErrorBody),
        (status = 409, description = "rejected: `stale_fence`; or `target_kind_mismatch`", body = ErrorBody),
        (status = 429, description = "`target_mutation_limit`: the attempt's mutations are recorded up to the limit", body = ErrorBody)
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
    // Nothing is written for a mutation no runner of the job could have sent.
    let issued = sqlx::query(ISSUED)
        .bind(body.attempt)
        .bind(body.job)
        .bind(&slot)
        .fetch_optional(state.0.store.pool())
        .await
        .map_err(db_error)?;
    let Some(issued) = issued else {
        return Err(not_issued());
    };
    let issued_token: i64 = issued.try_get("slot_token").map_err(db_error)?;
    let issued_kind: String = issued.try_get("target_kind").map_err(db_error)?;
    let recorded: i64 = issued.try_get("recorded").map_err(db_error)?;
    if issued_token != body.slot_token {
        return Err(not_issued());
    }
    if issued_kind != kind.as_str() {
        return Err(kind_mismatch());
    }
    if recorded >= MAX_TARGET_MUTATIONS_PER_ATTEMPT {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "target_mutation_limit",
            format!(
                "the demonstration targets recorded {MAX_TARGET_MUTATIONS_PER_ATTEMPT} mutations \
                 of this attempt already; nothing was recorded"
            ),
        ));
    }
    let target = state
        .0
        .store
        .demo_target(kind, &slot)
        .await
        .map_err(|e| match e {
            leasewright_impl::Error::InvalidArgument(_) => kind_mismatch(),
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

fn not_issued() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "slot_token_not_issued",
        "no attempt of the job on this slot was issued this slot token; nothing was recorded",
    )
}

fn kind_mismatch() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "target_kind_mismatch",
        "the target slot exists with another kind",
    )
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
