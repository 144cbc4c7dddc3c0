-- name: job_select_source
-- Rule R8 `source fetch`: the job's immutable source identity and command.
-- $1 job
SELECT source_revision, source_digest, command FROM jobs WHERE id = $1
