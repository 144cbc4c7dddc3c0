-- A ledger that shows its own edits (issue 27 item 2; docs/audit.md, "The chain"). Every record of
-- a job carries a per-job sequence number (`chain_seq`: 1 for the job's submission, then 2, 3, ...
-- in the order the records were written under the job's row lock) and a hash chained to the job's
-- previous record (`chain_hash` = sha256(previous hash || the record's canonical encoding)); the
-- job's row carries the last of them (`chain_seq`, `chain_head`). `leasewright audit` recomputes
-- every chain from the records' fields (its own implementation of the encoding, audit/src/chain.rs):
-- a deleted record is a gap in the sequence, a copied one a duplicate, an edited field a broken
-- hash, and the watermark it prints commits to every job's chain head (a digest), so a later
-- `--since` run detects an edit of a job it does not replay. No rule, predicate or verdict changes.
--
-- The chained records: the job's row (its submission, seq 1), attempts (claims), observations
-- naming an existing job (every runner message about it, accepted or rejected), reconciliations,
-- cancels and expiry sweeps. Not chained: observations naming no existing job (the security log's
-- unknown_job / unknown_runner rows: no job to chain them to), log chunks, artifacts and cache
-- entries (side effects; artifacts and cache entries are replaced in place by a later put, so they
-- are state, not append-only records), target mutations (the targets' record, written under the
-- slot's lock, not the job's), and jobs submitted before this migration (their chain is NULL; the
-- audit counts them as unchained).
--
-- The writer is one trigger per record table, BEFORE INSERT: it advances the job's chain in its
-- row (an UPDATE under the row lock the statement holds already, or takes) and stamps the record.
-- No statement of impl/sql changes, except the sweep's (its job update now comes before its
-- record, as every other statement's does: a trigger must never update a job row that its own
-- statement updates afterwards).

-- The canonical encoding (docs/audit.md, "The canonical encoding"): a record is a sequence of
-- fields, each NULL (one byte 0) or present (one byte 1, its length as a 4-byte big-endian
-- integer, its bytes). A field's bytes: text as UTF-8; uuid as its 16 bytes; bigint as 8 bytes
-- big-endian (chain_seq too); timestamptz as 8 bytes big-endian, microseconds since
-- 2000-01-01 00:00:00 UTC (PostgreSQL's binary format). The first field is the record's kind.
CREATE FUNCTION ledger_field(b bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN b IS NULL THEN '\x00'::bytea ELSE '\x01'::bytea || int4send(length(b)) || b END;

CREATE FUNCTION ledger_field(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ledger_field(convert_to(t, 'UTF8'));

CREATE FUNCTION ledger_field(u uuid) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ledger_field(uuid_send(u));

CREATE FUNCTION ledger_field(i bigint) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ledger_field(int8send(i));

CREATE FUNCTION ledger_field(t timestamptz) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ledger_field(timestamptz_send(t));

ALTER TABLE jobs ADD COLUMN chain_seq integer, ADD COLUMN chain_head bytea;
-- The ledger position is drawn by the triggers below, after the job's row lock (no longer by the
-- column default, which was drawn before it): one value per record, as before.
ALTER TABLE jobs ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE attempts ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE observations ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE reconciliations ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE cancels ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE expiry_sweeps ALTER COLUMN ledger_seq DROP DEFAULT;
ALTER TABLE attempts ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE observations ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE reconciliations ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE cancels ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;
ALTER TABLE expiry_sweeps ADD COLUMN chain_seq integer, ADD COLUMN chain_hash bytea;

-- The submission: seq 1, hash = sha256(the job's encoding) (no previous hash). Only the fields a
-- job is submitted with: the rest of its row changes with every transition (the replay checks it).
CREATE FUNCTION ledger_chain_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.ledger_seq := nextval('ledger_seq');
    NEW.chain_seq := 1;
    NEW.chain_head := sha256(ledger_field('job'::text) || ledger_field(1::bigint)
        || ledger_field(NEW.id) || ledger_field(NEW.project_id) || ledger_field(NEW.ledger_seq)
        || ledger_field(NEW.submitted_at) || ledger_field(NEW.source_revision)
        || ledger_field(NEW.source_digest) || ledger_field(NEW.command)
        || ledger_field(NEW.target) || ledger_field(NEW.target_kind));
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_chain BEFORE INSERT ON jobs
FOR EACH ROW EXECUTE FUNCTION ledger_chain_job();

-- A record: the job's next seq, hash = sha256(the job's head || the record's encoding, which
-- starts with its kind and its seq). The job's row is updated under its row lock (taken here if
-- the statement has not taken it). A job without a chain (submitted before this migration) or
-- that does not exist leaves the record unchained (NULL).
CREATE FUNCTION ledger_chain_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job uuid;
    seq integer;
    head bytea;
BEGIN
    -- Each branch is its own statement: a trigger's expression may name only its table's fields.
    IF TG_TABLE_NAME = 'observations' THEN
        job := NEW.named_job_id;
    ELSE
        job := NEW.job_id;
    END IF;
    SELECT j.chain_seq + 1, j.chain_head INTO seq, head
    FROM jobs AS j WHERE j.id = job AND j.chain_seq IS NOT NULL
    FOR NO KEY UPDATE;
    -- The record's ledger position, drawn under its job's row lock: along a job's chain the
    -- positions rise (the audit checks it), and a position written by hand is overwritten.
    NEW.ledger_seq := nextval('ledger_seq');
    IF seq IS NULL THEN
        RETURN NEW;
    END IF;
    IF TG_TABLE_NAME = 'attempts' THEN
        head := sha256(head || ledger_field('claim'::text) || ledger_field(seq::bigint)
            || ledger_field(NEW.id) || ledger_field(NEW.job_id) || ledger_field(NEW.project_id)
            || ledger_field(NEW.ledger_seq) || ledger_field(NEW.runner_id)
            || ledger_field(NEW.lease_id) || ledger_field(NEW.fence)
            || ledger_field(NEW.slot_token) || ledger_field(NEW.claimed_at)
            || ledger_field(NEW.claim_lease_expiry));
    ELSIF TG_TABLE_NAME = 'observations' THEN
        head := sha256(head || ledger_field('observation'::text) || ledger_field(seq::bigint)
            || ledger_field(NEW.id) || ledger_field(NEW.named_job_id)
            || ledger_field(NEW.ledger_seq) || ledger_field(NEW.sender_runner_id)
            || ledger_field(NEW.kind) || ledger_field(NEW.named_attempt_id)
            || ledger_field(NEW.named_lease_id) || ledger_field(NEW.named_fence)
            || ledger_field(NEW.attempt_id) || ledger_field(NEW.received_at)
            || ledger_field(NEW.runner_time) || ledger_field(NEW.verdict)
            || ledger_field(NEW.reason) || ledger_field(NEW.outcome)
            || ledger_field(NEW.payload_sha256) || ledger_field(NEW.lease_expiry));
    ELSIF TG_TABLE_NAME = 'reconciliations' THEN
        head := sha256(head || ledger_field('reconciliation'::text) || ledger_field(seq::bigint)
            || ledger_field(NEW.id) || ledger_field(NEW.job_id) || ledger_field(NEW.ledger_seq)
            || ledger_field(NEW.project_id) || ledger_field(NEW.attempt_id)
            || ledger_field(NEW.finding) || ledger_field(NEW.decision)
            || ledger_field(NEW.verdict) || ledger_field(NEW.reason)
            || ledger_field(NEW.decided_at));
    ELSIF TG_TABLE_NAME = 'cancels' THEN
        head := sha256(head || ledger_field('cancel'::text) || ledger_field(seq::bigint)
            || ledger_field(NEW.id) || ledger_field(NEW.job_id) || ledger_field(NEW.ledger_seq)
            || ledger_field(NEW.project_id) || ledger_field(NEW.attempt_id)
            || ledger_field(NEW.verdict) || ledger_field(NEW.reason)
            || ledger_field(NEW.requested_at));
    ELSE -- expiry_sweeps
        head := sha256(head || ledger_field('sweep'::text) || ledger_field(seq::bigint)
            || ledger_field(NEW.id) || ledger_field(NEW.job_id) || ledger_field(NEW.ledger_seq)
            || ledger_field(NEW.attempt_id) || ledger_field(NEW.swept_at));
    END IF;
    UPDATE jobs SET chain_seq = seq, chain_head = head WHERE id = job;
    NEW.chain_seq := seq;
    NEW.chain_hash := head;
    RETURN NEW;
END
$$;

CREATE TRIGGER attempts_chain BEFORE INSERT ON attempts
FOR EACH ROW EXECUTE FUNCTION ledger_chain_record();
CREATE TRIGGER observations_chain BEFORE INSERT ON observations
FOR EACH ROW EXECUTE FUNCTION ledger_chain_record();
CREATE TRIGGER reconciliations_chain BEFORE INSERT ON reconciliations
FOR EACH ROW EXECUTE FUNCTION ledger_chain_record();
CREATE TRIGGER cancels_chain BEFORE INSERT ON cancels
FOR EACH ROW EXECUTE FUNCTION ledger_chain_record();
CREATE TRIGGER expiry_sweeps_chain BEFORE INSERT ON expiry_sweeps
FOR EACH ROW EXECUTE FUNCTION ledger_chain_record();

-- A pruned job's last chain head (`leasewright prune`, `serve --retain-finished-jobs`): a later
-- `audit --since W` verifies W's digest over every job's head as of W; a job pruned since is
-- found here instead of being reported deleted. `job_ledger_seq`: the job's own (its submission's)
-- ledger sequence value (a watermark below it did not know the job); `max_ledger_seq`: the
-- largest of its records' (its head is its head as of any watermark at or above it).
CREATE TABLE ledger_pruned (
    job_id         uuid        PRIMARY KEY,
    chain_seq      integer     NOT NULL,
    chain_head     bytea       NOT NULL,
    job_ledger_seq bigint      NOT NULL,
    max_ledger_seq bigint      NOT NULL
);
