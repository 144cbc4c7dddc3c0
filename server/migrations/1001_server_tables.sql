-- The server's own tables (docs/http.md, "Immutable source"): the content-addressed source store,
-- the idempotency keys of submissions and the job specs. IF NOT EXISTS: a database whose tables
-- the server created before they were migrations takes this migration without change.
CREATE TABLE IF NOT EXISTS server_source_blobs (
    sha256          text        PRIMARY KEY,
    manifest_digest text        NOT NULL,
    content         bytea       NOT NULL,
    stored_at       timestamptz NOT NULL,
    CONSTRAINT server_source_blobs_sha256_is_hex CHECK (sha256 ~ '^[0-9a-f]{64}$')
);
CREATE INDEX IF NOT EXISTS server_source_blobs_by_manifest ON server_source_blobs (manifest_digest);
CREATE TABLE IF NOT EXISTS server_submissions (
    project_id      uuid NOT NULL REFERENCES projects (id),
    idempotency_key text NOT NULL,
    job_id          uuid NOT NULL REFERENCES jobs (id),
    request_sha256  text NOT NULL,
    CONSTRAINT server_submissions_one_job_per_key PRIMARY KEY (project_id, idempotency_key)
);
CREATE TABLE IF NOT EXISTS server_job_specs (
    job_id      uuid   PRIMARY KEY REFERENCES jobs (id),
    blob_sha256 text   NOT NULL,
    artifacts   text[] NOT NULL
);
