//! Infrastructure failures. Rejections are not errors: they are [`crate::Verdict::Rejected`].

/// An infrastructure failure. Its `Display` never contains database text; the underlying error is
/// kept as the `source` (and logged with `tracing`) for operators.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database could not be reached or failed to run a statement.
    #[error("database unavailable")]
    Database(#[source] sqlx::Error),
    /// The schema migrations could not be applied.
    #[error("database migration failed")]
    Migration(#[source] sqlx::migrate::MigrateError),
    /// A project with this name exists already (`projects_name_unique`).
    #[error("a project with this name exists already")]
    ProjectNameTaken,
    /// The project has a runner with this name already (`runners_name_unique_per_project`).
    #[error("the project has a runner with this name already")]
    RunnerNameTaken,
    /// The project named does not exist.
    #[error("unknown project")]
    UnknownProject,
    /// A job named a target slot that is registered with another kind
    /// (`jobs_target_kind_is_the_slots`, docs/protocol.md §8.1: a slot has one kind).
    #[error("the target slot exists with another kind")]
    TargetKindMismatch,
    /// A named constraint of the schema refused a write: a bug in a rule, never a runner's fault.
    #[error("constraint violated: {constraint}")]
    Constraint {
        /// The constraint's name from impl/migrations (ours, never database text).
        constraint: String,
    },
    /// The store found its own state inconsistent (a bug).
    #[error("internal invariant broken: {0}")]
    Invariant(&'static str),
    /// The write would make the attempt hold more bytes than its quota
    /// ([`crate::Store::with_attempt_quota`]); nothing was written or recorded.
    #[error("the attempt's storage quota of {quota} bytes would be exceeded")]
    QuotaExceeded {
        /// The quota, in bytes.
        quota: i64,
    },
    /// The schema cannot be used as it is: it holds another application's tables, or (without
    /// migrating) it lacks migrations. The message is ours and says what to do.
    #[error("{0}")]
    Schema(String),
    /// The caller passed an argument no message can carry.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The database role lacks a privilege the statement needs (SQLSTATE 42501): the
    /// deployment's grants, not an outage. The source is the database's own sentence (which
    /// object), shown to an operator's command line, never in an HTTP answer.
    #[error(
        "the database role lacks a privilege this needs (docs/roles.md: the owner migrates, a \
         data-only role serves and prunes, a read-only role audits)"
    )]
    Permission(#[source] DatabaseSaid),
    /// A step would create an epoch, fence or slot token past what a token can hold
    /// ([`crate::epoch::MAX_EPOCH`]); nothing was written. The message is ours and names the
    /// value.
    #[error("{0}")]
    OutOfRange(String),
}

/// What the database said, once (its own message, without the SQLSTATE or a repeat): the source
/// of an [`Error`] an operator must act on.
#[derive(Debug)]
pub struct DatabaseSaid(pub String);

impl std::fmt::Display for DatabaseSaid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DatabaseSaid {}

/// PostgreSQL's SQLSTATE for a missing privilege.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        if let sqlx::Error::Database(database_error) = &error {
            if database_error.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE) {
                tracing::error!(error = %error, "permission denied");
                return Error::Permission(DatabaseSaid(database_error.message().to_owned()));
            }
            if let Some(constraint) = database_error.constraint() {
                let constraint = constraint.to_owned();
                tracing::warn!(%constraint, error = %error, "constraint violated");
                return match constraint.as_str() {
                    "projects_name_unique" => Error::ProjectNameTaken,
                    "runners_name_unique_per_project" => Error::RunnerNameTaken,
                    "runners_project_id_fkey" => Error::UnknownProject,
                    "jobs_project_id_fkey" => Error::UnknownProject,
                    "jobs_target_kind_is_the_slots" => Error::TargetKindMismatch,
                    _ => Error::Constraint { constraint },
                };
            }
        }
        tracing::error!(error = %error, "database error");
        Error::Database(error)
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        tracing::error!(error = %error, "migration failed");
        Error::Migration(error)
    }
}
