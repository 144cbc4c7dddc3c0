-- function: ledger_chain
-- The ledger's chain (docs/audit.md, "The chain"): every record of a job carries a per-job
-- sequence number (`chain_seq`: 1 for the job's submission, then 2, 3, ... in the order the records
-- were written under the job's row lock) and a hash chained to the job's previous record
-- (`chain_hash` = sha256(previous hash || the record's canonical encoding, ledger_encoding.sql)).
-- The job's head (its last seq and hash) is the later of the job row's (`jobs.chain_seq`,
-- `chain_head`) and its current attempt's (`attempts.job_chain_seq`, `job_chain_head`, which the
-- accepted heartbeat advances in the attempt's row it updates anyway:
-- impl/sql/attempt_heartbeat_if_current.sql). Every other writer of a chained record takes the
-- later head and writes the next one into the job's row: the triggers below, the claim's own
-- update (claim.sql) and the results' statements.
--
-- The chained records: the job's row (its submission, seq 1), attempts (claims), observations
-- naming an existing job (every runner message about it, accepted or rejected), reconciliations,
-- cancels and expiry sweeps. Not chained: observations naming no existing job (the security log),
-- log chunks, artifacts and cache entries (side effects, replaced in place), target mutations
-- (written under the slot's lock, not the job's), and jobs submitted before migration 0015 (their
-- chain is NULL; the audit counts them as unchained). The writer is one trigger per record
-- table, BEFORE INSERT. History: migrations 0015 (the chain) and 0017 (the head in the attempt);
-- since then in this file alone: the triggers' WHEN (NEW.chain_seq IS NULL).

-- The later of two heads: the attempt's when it is ahead of the job row's, else the job row's
-- (NULL for a job without a chain).
CREATE OR REPLACE FUNCTION ledger_later_seq(job_seq integer, attempt_seq integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN attempt_seq > job_seq THEN attempt_seq ELSE job_seq END;

CREATE OR REPLACE FUNCTION ledger_later_head(job_seq integer, job_head bytea, attempt_seq integer,
    attempt_head bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN attempt_seq > job_seq THEN attempt_head ELSE job_head END;

-- The submission: seq 1, hash = sha256(the job's encoding) (no previous hash). Only the fields a
-- job is submitted with: the rest of its row changes with every transition (the replay checks it).
CREATE OR REPLACE FUNCTION ledger_chain_job() RETURNS trigger
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

CREATE OR REPLACE TRIGGER jobs_chain BEFORE INSERT ON jobs
FOR EACH ROW EXECUTE FUNCTION ledger_chain_job();
-- A record: the job's next seq, hash = sha256(the job's head || the record's encoding, which
-- starts with its kind and its seq). Called only for a record that arrives unchained (the
-- triggers' WHEN below): a record its own statement chained (the claim's attempt, the result's
-- observation: their statements advance the job's chain in the job update they make anyway) is
-- left as it is without calling the function at all, which spares the hot path a PL/pgSQL call
-- per row (docs/benchmarks.md, "What a claim costs before its jobs"). The job's row is updated
-- under its row lock (taken here if the statement has not taken it). A job without a chain or
-- that does not exist leaves the record unchained (NULL).
CREATE OR REPLACE FUNCTION ledger_chain_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job uuid;
    seq integer;
    head bytea;
    current_attempt uuid;
BEGIN
    -- Each branch is its own statement: a trigger's expression may name only its table's fields.
    IF TG_TABLE_NAME = 'observations' THEN
        job := NEW.named_job_id;
    ELSE
        job := NEW.job_id;
    END IF;
    SELECT j.chain_seq, j.chain_head, j.current_attempt_id INTO seq, head, current_attempt
    FROM jobs AS j WHERE j.id = job AND j.chain_seq IS NOT NULL
    FOR NO KEY UPDATE;
    -- The head is the later of the job row's and its current attempt's (the accepted heartbeats
    -- advance the attempt's). A statement of its own, after the lock: it reads every heartbeat
    -- committed before the lock was granted (a join in the locking statement would read the
    -- attempt's row as of the statement's start).
    SELECT ledger_later_seq(seq, a.job_chain_seq) + 1,
        ledger_later_head(seq, head, a.job_chain_seq, a.job_chain_head)
    INTO seq, head
    FROM (VALUES (1)) AS one LEFT JOIN attempts AS a ON a.id = current_attempt;
    -- The record's ledger position, drawn under its job's row lock: along a job's chain the
    -- positions rise (the audit checks it), and a position written by hand is overwritten.
    NEW.ledger_seq := nextval('ledger_seq');
    IF seq IS NULL THEN
        RETURN NEW;
    END IF;
    IF TG_TABLE_NAME = 'attempts' THEN
        head := ledger_claim_hash(head, seq, NEW.id, NEW.job_id, NEW.project_id, NEW.ledger_seq,
            NEW.runner_id, NEW.lease_id, NEW.fence, NEW.slot_token, NEW.claimed_at,
            NEW.claim_lease_expiry);
    ELSIF TG_TABLE_NAME = 'observations' THEN
        head := ledger_observation_hash(head, seq, NEW.id, NEW.named_job_id, NEW.ledger_seq,
            NEW.sender_runner_id, NEW.kind, NEW.named_attempt_id, NEW.named_lease_id,
            NEW.named_fence, NEW.attempt_id, NEW.received_at, NEW.runner_time, NEW.verdict,
            NEW.reason, NEW.outcome, NEW.payload_sha256, NEW.lease_expiry);
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

CREATE OR REPLACE TRIGGER attempts_chain BEFORE INSERT ON attempts
FOR EACH ROW WHEN (NEW.chain_seq IS NULL) EXECUTE FUNCTION ledger_chain_record();
CREATE OR REPLACE TRIGGER observations_chain BEFORE INSERT ON observations
FOR EACH ROW WHEN (NEW.chain_seq IS NULL) EXECUTE FUNCTION ledger_chain_record();
CREATE OR REPLACE TRIGGER reconciliations_chain BEFORE INSERT ON reconciliations
FOR EACH ROW WHEN (NEW.chain_seq IS NULL) EXECUTE FUNCTION ledger_chain_record();
CREATE OR REPLACE TRIGGER cancels_chain BEFORE INSERT ON cancels
FOR EACH ROW WHEN (NEW.chain_seq IS NULL) EXECUTE FUNCTION ledger_chain_record();
CREATE OR REPLACE TRIGGER expiry_sweeps_chain BEFORE INSERT ON expiry_sweeps
FOR EACH ROW WHEN (NEW.chain_seq IS NULL) EXECUTE FUNCTION ledger_chain_record();