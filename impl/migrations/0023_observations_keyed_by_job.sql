-- Every runner message writes one index entry fewer (issue 35 item 2; docs/benchmarks.md, "WAL
-- per job"; docs/impl.md, "Schema"). No rule, predicate or verdict changes.
--
-- Every observation wrote an entry in two indexes, `observations_pkey` (id) and
-- `observations_by_named_job` (named_job_id, id): about 64 WAL bytes each on every heartbeat,
-- result and side effect. No statement reads an observation by its id alone (every read goes
-- through the job it names, or through its sender for the unattributed ones:
-- `leasewright bench writes` counts 0 scans of `observations_pkey`), and no foreign key references
-- it. The id is drawn from the table's identity sequence (the result's statement draws it from the
-- same sequence, `OVERRIDING SYSTEM VALUE`), so it is fresh by construction, as an attempt's and a
-- lease's ids are (0021); the order of a job's records is its observations' ids, which the key
-- (named_job_id, id) keeps unique and in order. So the key is now (named_job_id, id), and the
-- index the job's ledger is read by is the table's one index beside the sender's.
CREATE UNIQUE INDEX observations_keyed_by_job ON observations (named_job_id, id);
ALTER TABLE observations DROP CONSTRAINT observations_pkey;
ALTER TABLE observations ADD CONSTRAINT observations_pkey PRIMARY KEY USING INDEX observations_keyed_by_job;
DROP INDEX observations_by_named_job;
