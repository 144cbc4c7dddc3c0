-- Fewer index entries per job (docs/benchmarks.md, "Write amplification"; docs/impl.md, "Schema").
--
-- Every claim and every result rewrites a `jobs` row and an `attempts` row, and neither update can
-- be HOT (each changes `state`, which partial indexes name), so each writes an entry in every
-- index of its table. Three of those indexes served no query of the hot path (idx_scan 0 for the
-- plain keys, or only lookups the primary keys serve as well) and existed for one constraint each:
--
-- * jobs_submitted_seq_unique: submitted_seq is GENERATED ALWAYS AS IDENTITY, so PostgreSQL
--   assigns every value from the column's sequence and refuses a supplied one (no statement of
--   ours uses OVERRIDING SYSTEM VALUE): the values are distinct without an index. The claim reads
--   queued jobs in this order through the partial indexes of 0001 and 0002.
-- * jobs_id_project_unique, attempts_id_job_unique: composite keys that existed only as targets of
--   composite foreign keys: attempts_job_of_project (an attempt's project is its job's),
--   jobs_current_attempt_of_this_job (a job's current attempt is an attempt of this job) and the
--   reservation's target_reservations_job_of_project and _attempt_of_job. The plain primary keys,
--   jobs_pkey and attempts_pkey, already make `id` unique. The replacements reference the primary
--   keys, so every referenced row still exists (`*_exists`, same deferral); that it is of the same
--   project or job is what the claim statement writes (it copies the job's id and project into
--   the attempt and the reservation and makes the attempt it inserts the job's current one; no
--   other statement changes those columns), and a test checks it after every kind of rule
--   (impl/tests/protocol.rs, `every_attempt_and_reservation_is_of_its_job_and_project`).
--
-- Saved per job (claim and result): six index entries (two per dropped index), and two at submission.

ALTER TABLE attempts
    DROP CONSTRAINT attempts_job_of_project,
    ADD CONSTRAINT attempts_job_exists FOREIGN KEY (job_id) REFERENCES jobs (id);

ALTER TABLE target_reservations
    DROP CONSTRAINT target_reservations_job_of_project,
    ADD CONSTRAINT target_reservations_job_exists FOREIGN KEY (job_id) REFERENCES jobs (id),
    DROP CONSTRAINT target_reservations_attempt_of_job,
    ADD CONSTRAINT target_reservations_attempt_exists FOREIGN KEY (attempt_id)
        REFERENCES attempts (id) DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_current_attempt_of_this_job,
    ADD CONSTRAINT jobs_current_attempt_exists FOREIGN KEY (current_attempt_id)
        REFERENCES attempts (id) DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE jobs DROP CONSTRAINT jobs_id_project_unique;
ALTER TABLE attempts DROP CONSTRAINT attempts_id_job_unique;
ALTER TABLE jobs DROP CONSTRAINT jobs_submitted_seq_unique;
