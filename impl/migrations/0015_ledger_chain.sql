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

-- The two encodings a statement also computes (the claim's attempt, the result's observation:
-- claim() below, impl/sql/attempt_commit_result(s)_if_current.sql), and the trigger with them.
CREATE FUNCTION ledger_claim_hash(head bytea, seq integer, id uuid, job_id uuid, project_id uuid,
    ledger_seq bigint, runner_id uuid, lease_id uuid, fence bigint, slot_token bigint,
    claimed_at timestamptz, claim_lease_expiry timestamptz) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN sha256(head || ledger_field('claim'::text) || ledger_field(seq::bigint)
    || ledger_field(id) || ledger_field(job_id) || ledger_field(project_id)
    || ledger_field(ledger_seq) || ledger_field(runner_id) || ledger_field(lease_id)
    || ledger_field(fence) || ledger_field(slot_token) || ledger_field(claimed_at)
    || ledger_field(claim_lease_expiry));

CREATE FUNCTION ledger_observation_hash(head bytea, seq integer, id bigint, named_job_id uuid,
    ledger_seq bigint, sender_runner_id uuid, kind text, named_attempt_id uuid,
    named_lease_id uuid, named_fence bigint, attempt_id uuid, received_at timestamptz,
    runner_time timestamptz, verdict text, reason text, outcome text, payload_sha256 text,
    lease_expiry timestamptz) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN sha256(head || ledger_field('observation'::text) || ledger_field(seq::bigint)
    || ledger_field(id) || ledger_field(named_job_id) || ledger_field(ledger_seq)
    || ledger_field(sender_runner_id) || ledger_field(kind) || ledger_field(named_attempt_id)
    || ledger_field(named_lease_id) || ledger_field(named_fence) || ledger_field(attempt_id)
    || ledger_field(received_at) || ledger_field(runner_time) || ledger_field(verdict)
    || ledger_field(reason) || ledger_field(outcome) || ledger_field(payload_sha256)
    || ledger_field(lease_expiry));

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

-- claim() as migration 0012 defined it, except that the claim chains its own attempt: the
-- `started` update of the job (which the claim makes anyway) advances the job's chain, and the
-- attempt is inserted chained, so the trigger writes no second version of the job's row
-- (docs/benchmarks.md, "The ledger's chain"). Kept last in this file: impl/src/sql.rs reads the
-- claim's statement from here (CLAIM_FUNCTION_MIGRATION).
DROP FUNCTION claim(uuid, bigint, timestamptz, timestamptz);

CREATE FUNCTION claim(uuid, bigint, timestamptz, timestamptz)
RETURNS TABLE (job_id uuid, attempt_id uuid, lease_id uuid, fence bigint, slot_token bigint,
    source_revision text, source_digest text, command text, target text, target_kind text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
-- In order:
--   epoch:        the epoch base (epoch * 2^32) the claim issues its tokens in, NULL while the
--                 claims wait after an epoch change (claim_epoch);
--   runner:       the sender and its project (§6.2 check 1); none while the claims wait;
--   head:         the K earliest queued jobs of the project that no concurrent claimer holds
--                 locked, each locked (jobs other claimers hold locked are skipped, so no two
--                 claimers get one job), whatever their slots;
--   head_free:    of those, the jobs whose target slot is free (its row names no holder:
--                 reserved by no job of any project, §8.2);
--   beyond:       only when some of the head's slots were not free: the earliest queued jobs
--                 after it whose slot is free, locked, as many as the head fell short of K;
--   picked:       both: up to K queued jobs of the project whose slot is free, earliest
--                 submitted first, skipping jobs other claimers hold locked (docs/protocol.md,
--                 R1 and "Batch claim");
--   one_per_slot: of the picked jobs naming one slot, only the earliest (a batch takes at most
--                 one job per slot), each with a new attempt id;
--   free:         their slots' rows, locked, that are still free: a slot another claim holds
--                 locked (it is reserving it right now) is skipped, never waited for, and one
--                 reserved since this statement's snapshot fails the recheck;
--   reserved:     each free slot reserved for its job's attempt and its slot token issued,
--                 greatest(the slot's counter + 1, epoch base + 1) (§8.3), in one update of the
--                 slot's row; the attempt's lease id and ledger position drawn (under the job's
--                 row lock, taken in head or beyond);
--   started:      each reserved job becomes `running` with fence greatest(fence + 1, epoch base
--                 + 1) and the new current attempt, and its chain advances to the attempt's
--                 record (migration 0015: ledger_claim_hash, in the job's one update);
--   attempted:    the `active` attempts, with a fresh lease id, lease_expiry = now + lease_ttl
--                 (kept in claim_lease_expiry too) and the slot token issued, chained (the
--                 trigger leaves a chained record as it is).
WITH epoch AS MATERIALIZED (
    SELECT claim_epoch($3) * 4294967296 AS base
), runner AS (
    SELECT id, project_id FROM runners
    WHERE id = $1
      AND (SELECT base FROM epoch) IS NOT NULL
), head AS (
    SELECT j.id, j.project_id, j.target, j.submitted_seq
    FROM jobs AS j
    WHERE j.project_id = (SELECT project_id FROM runner)
      AND j.state = 'queued'
    ORDER BY j.submitted_seq
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
), head_free AS (
    SELECT h.id, h.project_id, h.target, h.submitted_seq
    FROM head AS h
    JOIN target_slots AS s ON s.slot = h.target
    WHERE s.holder_job_id IS NULL
), beyond AS (
    SELECT q.id, q.project_id, q.target, q.submitted_seq
    FROM jobs AS q
    JOIN target_slots AS s ON s.slot = q.target
    WHERE (SELECT count(*) FROM head_free) < $2
      AND q.project_id = (SELECT project_id FROM runner)
      AND q.state = 'queued'
      AND s.holder_job_id IS NULL
      AND q.id <> ALL (ARRAY(SELECT id FROM head))
    ORDER BY q.submitted_seq
    LIMIT $2 - (SELECT count(*) FROM head_free)
    FOR NO KEY UPDATE OF q SKIP LOCKED
), picked AS (
    SELECT id, project_id, target, submitted_seq FROM head_free
    UNION ALL
    SELECT id, project_id, target, submitted_seq FROM beyond
), one_per_slot AS (
    SELECT DISTINCT ON (p.target) p.id, p.project_id, p.target, p.submitted_seq,
        gen_random_uuid() AS attempt_id
    FROM picked AS p
    ORDER BY p.target, p.submitted_seq
), free AS MATERIALIZED (
    SELECT s.slot
    FROM one_per_slot AS o
    JOIN target_slots AS s ON s.slot = o.target
    WHERE s.holder_job_id IS NULL
    FOR NO KEY UPDATE OF s SKIP LOCKED
), reserved AS (
    UPDATE target_slots AS s
    SET holder_project_id = o.project_id, holder_job_id = o.id,
        holder_attempt_id = o.attempt_id, reserved_at = $3,
        slot_token = greatest(s.slot_token + 1, (SELECT base FROM epoch) + 1)
    FROM one_per_slot AS o
    WHERE s.slot = o.target
      AND s.slot IN (SELECT slot FROM free)
      AND s.holder_job_id IS NULL
    RETURNING o.id AS job_id, o.attempt_id, s.slot, s.slot_token,
        gen_random_uuid() AS lease_id, nextval('ledger_seq') AS ledger_seq
), started AS (
    UPDATE jobs AS j
    SET state = 'running', fence = greatest(j.fence + 1, (SELECT base FROM epoch) + 1),
        current_attempt_id = r.attempt_id,
        chain_seq = j.chain_seq + 1,
        chain_head = ledger_claim_hash(j.chain_head, j.chain_seq + 1, r.attempt_id, j.id,
            j.project_id, r.ledger_seq, $1, r.lease_id,
            greatest(j.fence + 1, (SELECT base FROM epoch) + 1), r.slot_token, $3, $4)
    FROM reserved AS r
    WHERE j.id = r.job_id
      AND j.state = 'queued'
    RETURNING j.id, j.project_id, j.submitted_seq, j.target, j.target_kind, j.fence,
        j.source_revision, j.source_digest, j.command, r.attempt_id, r.slot_token,
        r.lease_id, r.ledger_seq, j.chain_seq, j.chain_head
), attempted AS (
    INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state,
        lease_expiry, claim_lease_expiry, claimed_at, slot_token, ledger_seq, chain_seq,
        chain_hash)
    SELECT st.attempt_id, st.id, st.project_id, $1, st.lease_id, st.fence, 'active',
        $4, $4, $3, st.slot_token, st.ledger_seq, st.chain_seq, st.chain_head
    FROM started AS st
    RETURNING id, job_id, lease_id, fence, slot_token
)
SELECT st.id AS job_id, a.id AS attempt_id, a.lease_id, a.fence, a.slot_token,
    st.source_revision, st.source_digest, st.command, st.target, st.target_kind
FROM started AS st
JOIN attempted AS a ON a.job_id = st.id
ORDER BY st.submitted_seq
;
END
$claim$;
