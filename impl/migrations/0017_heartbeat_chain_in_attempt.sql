-- The accepted heartbeat no longer writes a version of the job's row (issue 27 item 2's cost;
-- docs/audit.md, "The chain"; docs/benchmarks.md, "The heartbeat's chain"). Migration 0015 chained
-- the heartbeat's observation through the trigger, which advances the job's head in the (wide)
-- jobs row: one row version more per heartbeat. Now, while an attempt is current, the accepted
-- heartbeat (impl/sql/attempt_heartbeat_if_current.sql, the one-statement accept path) advances
-- the job's chain in the attempt's row, which it updates anyway (the lease expiry):
--   attempts.job_chain_seq, attempts.job_chain_head: the job's chain seq and head after the
--       last accepted heartbeat of this attempt (NULL before its first). Not the attempt's own
--       record's place in the chain (attempts.chain_seq / chain_hash, unchanged).
-- The job's head is the later of the job row's (jobs.chain_seq / chain_head) and its current
-- attempt's (ledger_later_seq / ledger_later_head below): every writer of a chained record takes
-- it so and writes the next head into the job's row (the trigger below, the results'
-- statements) or, for a heartbeat, into the attempt's. The job's row catches up with the first
-- record after the heartbeats; it is never behind when the current attempt changes: a claim
-- takes only queued jobs, which have no current attempt (submitted, or requeued with
-- current_attempt_id cleared, after the expiry sweep's record), so claim() is unchanged (it
-- stays last in 0015: impl/src/sql.rs reads it from there). The canonical encoding is unchanged.
-- Readers of the head: the trigger below, attempt_commit_result(s)_if_current.sql,
-- job_delete_with_ledger.sql (the prune's tombstone), audit/src/chain.rs (the stored head and the
-- watermark's digest), benches/src/floor.rs.

ALTER TABLE attempts ADD COLUMN job_chain_seq integer, ADD COLUMN job_chain_head bytea;

-- The later of two heads: the attempt's when it is ahead of the job row's, else the job row's
-- (NULL for a job without a chain: submitted before 0015).
CREATE FUNCTION ledger_later_seq(job_seq integer, attempt_seq integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN attempt_seq > job_seq THEN attempt_seq ELSE job_seq END;

CREATE FUNCTION ledger_later_head(job_seq integer, job_head bytea, attempt_seq integer,
    attempt_head bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN attempt_seq > job_seq THEN attempt_head ELSE job_head END;

-- ledger_chain_record() as 0015 defined it, except that the job's head is the later of its row's
-- and its current attempt's (the triggers themselves are unchanged).
CREATE OR REPLACE FUNCTION ledger_chain_record() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job uuid;
    seq integer;
    head bytea;
    current_attempt uuid;
BEGIN
    -- A record its own statement chained (the claim's attempt, the result's observation: their
    -- statements advance the job's chain in the job update they make anyway) is left as it is.
    IF NEW.chain_seq IS NOT NULL THEN
        RETURN NEW;
    END IF;
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
