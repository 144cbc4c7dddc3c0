//! The operator routes of projects and runners.

use super::error::{created, db_error, ok, ApiError, ApiResult};
use super::extract::{
    identifier, parse_uuid, JsonBody, OperatorAuth, OptionalJsonBody, QueryParams, Segments,
};
use super::jobs::{page, EmptyRequest, PageQuery};
use super::AppState;
use crate::wire::{
    CreateProjectRequest, CreateRunnerRequest, ErrorBody, ProjectResponse, RunnerBody, RunnerList,
    RunnerResponse,
};
use axum::extract::State;
use leasewright_impl::{ProjectId, RunnerId, RunnerView};
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

fn runner_body(view: RunnerView) -> RunnerBody {
    RunnerBody {
        runner: view.id.0,
        name: view.name,
        created_at: view.created_at,
        revoked_at: view.revoked_at,
    }
}

/// A project's runners.
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/runners",
    tag = "operator",
    security(("operator_token" = [])),
    params(
        ("project" = Uuid, Path, description = "the project id"),
        ("limit" = Option<i64>, Query, description = "at most this many runners (1 to 1000, default 100)"),
        ("after" = Option<i64>, Query, description = "the cursor: a previous page's `next`")
    ),
    responses(
        (status = 200, description = "the project's runners in creation order, revoked ones too (with `revoked_at`)", body = RunnerList),
        (status = 404, description = "`unknown_project`", body = ErrorBody)
    )
)]
pub(super) async fn list_runners(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments(project): Segments<String>,
    QueryParams(query): QueryParams<PageQuery>,
) -> ApiResult {
    let (after, limit) = query.bounds()?;
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let rows = state
        .0
        .store
        .runners_page(project, after, limit + 1)
        .await?;
    let (rows, next) = page(rows, limit, |r| r.listed_seq);
    ok(RunnerList {
        runners: rows.into_iter().map(runner_body).collect(),
        next,
    })
}

/// Revoke a runner of a project: its token authenticates nothing from now on (docs/http.md,
/// "Runners"). Its leases are not touched: they run out and the expiry sweep makes their jobs
/// `uncertain`, as for any lost runner.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/runners/{runner}/revoke",
    tag = "operator",
    security(("operator_token" = [])),
    params(
        ("project" = Uuid, Path, description = "the project id"),
        ("runner" = Uuid, Path, description = "the runner id")
    ),
    request_body(content = Option<EmptyRequest>, description = "`{}` or no body"),
    responses(
        (status = 200, description = "the revoked runner (revoking it again answers the first revocation's time)", body = RunnerBody),
        (status = 404, description = "`unknown_project`, or `unknown_runner` (a runner of another project too)", body = ErrorBody)
    )
)]
pub(super) async fn revoke_runner(
    State(state): State<AppState>,
    _: OperatorAuth,
    Segments((project, runner)): Segments<(String, String)>,
    OptionalJsonBody(EmptyRequest {}): OptionalJsonBody<EmptyRequest>,
) -> ApiResult {
    let project = project_exists(&state, parse_uuid(&project, "project")?).await?;
    let runner = RunnerId(parse_uuid(&runner, "runner")?);
    match state.0.store.revoke_runner(project, runner).await? {
        Some(view) => {
            tracing::info!(runner = %runner.0, project = %project.0, "runner revoked");
            ok(runner_body(view))
        }
        None => Err(ApiError::not_found(
            "unknown_runner",
            "no such runner in this project",
        )),
    }
}
