//! The operator routes of projects and runners.

use super::error::{created, db_error, ApiError, ApiResult};
use super::extract::{identifier, parse_uuid, JsonBody, OperatorAuth, Segments};
use super::AppState;
use crate::wire::{
    CreateProjectRequest, CreateRunnerRequest, ErrorBody, ProjectResponse, RunnerResponse,
};
use axum::extract::State;
use leasewright_impl::ProjectId;
use uuid::Uuid;

/// Create a project.
#[utoipa::path(
    post,
    path = "/v1/projects",
    tag = "operator",
    security(("operator_token" = [])),
    request_body = CreateProjectRequest,
    responses(
        (status = 201, description = "the project", body = ProjectResponse),
        (status = 409, description = "`project_name_taken`", body = ErrorBody)
    )
)]
pub(super) async fn create_project(
    State(state): State<AppState>,
    _: OperatorAuth,
    JsonBody(body): JsonBody<CreateProjectRequest>,
) -> ApiResult {
    if body.name.is_empty() {
        return Err(ApiError::bad_request("name must not be empty"));
    }
    identifier(&body.name, "name")?;
    let project = state.0.store.create_project(&body.name).await?;
    created(ProjectResponse {
        project: project.0,
        name: body.name,
    })
}

pub(super) async fn project_exists(state: &AppState, project: Uuid) -> Result<ProjectId, ApiError> {
    let exists: Option<Uuid> = sqlx::query_scalar("SELECT id FROM projects WHERE id = $1")
        .bind(project)
        .fetch_optional(state.0.store.pool())
        .await
        .map_err(db_error)?;
    exists
        .map(ProjectId)
        .ok_or_else(|| ApiError::not_found("unknown_project", "no such project"))
}

/// Create a runner of a project.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/runners",
    tag = "operator",
    security(("operator_token" = [])),
    params(("project" = Uuid, Path, description = "the project id")),
    request_body = CreateRunnerRequest,
    responses(
        (status = 201, description = "the runner and its token, shown once (only its hash is kept)", body = RunnerResponse),
        (status = 404, description = "`unknown_project`", body = ErrorBody),
        (status = 409, description = "`runner_name_taken`", body = ErrorBody)
    )
)]
pub(super) async fn create_runner(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    JsonBody(body): JsonBody<CreateRunnerRequest>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    if body.name.is_empty() {
        return Err(ApiError::bad_request("name must not be empty"));
    }
    identifier(&body.name, "name")?;
    let (runner, token) = state.0.store.create_runner(project, &body.name).await?;
    created(RunnerResponse {
        runner: runner.0,
        token,
    })
}
