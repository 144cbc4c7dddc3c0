-- Retention (issue 30; docs/http.md, "Retention"): a job the protocol's prune deletes
-- (impl/sql/job_delete_with_ledger.sql) takes the server's rows of it along, and its source
-- snapshot when no other job uses it.

-- The submission key and the spec of a job go with the job. server_submissions had no index
-- leading with job_id: deleting a job would read the whole table to find its key.
CREATE INDEX server_submissions_by_job ON server_submissions (job_id);
ALTER TABLE server_submissions
    DROP CONSTRAINT server_submissions_job_id_fkey,
    ADD CONSTRAINT server_submissions_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES jobs (id) ON DELETE CASCADE;
ALTER TABLE server_job_specs
    DROP CONSTRAINT server_job_specs_job_id_fkey,
    ADD CONSTRAINT server_job_specs_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES jobs (id) ON DELETE CASCADE;

-- A source snapshot is content-addressed and shared by every job that submitted the same bytes:
-- it goes when the last spec naming it goes. The foreign key makes a submission that names a
-- blob while the prune deletes it fail (and the prune's batch, if the submission came first)
-- instead of leaving a spec without its source; the index finds a blob's other users.
CREATE INDEX server_job_specs_by_blob ON server_job_specs (blob_sha256);
ALTER TABLE server_job_specs
    ADD CONSTRAINT server_job_specs_blob_exists FOREIGN KEY (blob_sha256)
        REFERENCES server_source_blobs (sha256);

CREATE FUNCTION server_source_blob_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM server_source_blobs AS b
    WHERE b.sha256 = OLD.blob_sha256
      AND NOT EXISTS (SELECT 1 FROM server_job_specs AS s WHERE s.blob_sha256 = OLD.blob_sha256);
    RETURN NULL;
END
$$;

CREATE TRIGGER server_job_specs_release_blob AFTER DELETE ON server_job_specs
    FOR EACH ROW EXECUTE FUNCTION server_source_blob_release();
