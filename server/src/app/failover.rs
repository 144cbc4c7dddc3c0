//! The test hooks that replay a failover (only with `serve --manual-clock`, like the test clock):
//! `POST /v1/test/replicate` (the standby catches up now) and `POST /v1/test/failover` (the
//! database goes back to what the standby holds, as a promoted standby that never received the
//! commits since; then the epoch advances and the server records its lease policy, as after a
//! real failover). The conformance harness's HTTP driver replays the model's failover traces with
//! them (docs/conformance.md, "Failovers over HTTP"). The copy is `leasewright_impl::standby`'s,
//! in a schema beside the server's (`<schema>_standby`).

use super::error::{db_error, ok, ApiError, ApiResult};
use super::extract::{OperatorAuth, OptionalJsonBody};
use super::jobs::EmptyRequest;
use super::AppState;
use crate::wire::{ErrorBody, FailoverResponse, ReplicateResponse};
use axum::extract::State;
use leasewright_impl::standby;

/// The server's schema (its connections' search path) and its copy's name.
async fn schemas(state: &AppState) -> Result<(String, String), ApiError> {
    super::time::manual_clock(state)?;
    let schema: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(state.0.store.pool())
        .await
        .map_err(db_error)?;
    let copy = standby::copy_name(&schema);
    Ok((schema, copy))
}

/// The test hook: the standby catches up with everything committed so far (a copy of every
/// table of the server's schema, replacing the last one). Answers the epoch and until when claims
/// wait after its change, so that a driver connecting to a server an earlier replay failed over
/// can run its traces after that wait.
#[utoipa::path(
    post,
    path = "/v1/test/replicate",
    tag = "test",
    security(("operator_token" = [])),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "the standby holds everything committed so far", body = ReplicateResponse),
        (status = 404, description = "`not_found`: the server does not run with `--manual-clock`", body = ErrorBody)
    )
)]
pub(super) async fn test_replicate(
    State(state): State<AppState>,
    _: OperatorAuth,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    let (schema, copy) = schemas(&state).await?;
    let pool = state.0.store.pool();
    standby::replicate(pool, &schema, &copy).await?;
    let epoch = leasewright_impl::epoch::current_epoch(pool).await?;
    let claims_wait_until = standby::claims_wait_until(pool).await?;
    ok(ReplicateResponse {
        epoch,
        claims_wait_until,
    })
}

/// The test hook: the failover. The database goes back to the standby's copy (what was committed
/// after the last `POST /v1/test/replicate` is lost), the epoch advances as the operator's step
/// after a restore does (`migrate --advance-epoch`), and the server records its lease policy as
/// on a new connection. The new epoch's first claim starts the wait.
#[utoipa::path(
    post,
    path = "/v1/test/failover",
    tag = "test",
    security(("operator_token" = [])),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "the epoch before and after", body = FailoverResponse),
        (status = 404, description = "`not_found`: the server does not run with `--manual-clock`, or `no_standby`: nothing was replicated yet", body = ErrorBody)
    )
)]
pub(super) async fn test_failover(
    State(state): State<AppState>,
    _: OperatorAuth,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    let (schema, copy) = schemas(&state).await?;
    let pool = state.0.store.pool();
    if !standby::has_copy(pool, &copy).await? {
        return Err(ApiError::not_found(
            "no_standby",
            "nothing was replicated yet: POST /v1/test/replicate first",
        ));
    }
    standby::restore(pool, &schema, &copy).await?;
    let advance = leasewright_impl::epoch::advance_epoch(pool).await?;
    state.0.store.record_lease_policy(None).await?;
    ok(FailoverResponse {
        epoch_before: advance.before,
        epoch: advance.after,
    })
}
