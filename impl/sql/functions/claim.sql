-- function: claim
-- Rule R1 `claim` (docs/protocol.md, R1 and "Batch claim"; docs/impl.md, "The claim's plan"): the
-- two server-side functions the claim statements call (impl/sql/claim.sql, the batch claim in one
-- round trip; impl/sql/claim_epoch.sql, the job-by-job path's first step).
--
-- claim_epoch(now): the epoch (epoch.sql) a claim received at `now` issues its fences and slot
-- tokens in, or NULL while the claims wait after an epoch change: when the current epoch has no
-- row yet (the first claim after the change) it inserts one with began_at = now; while
-- now < began_at + the largest lease ttl + 2 * max_clock_skew (lease_policy, recorded by every
-- server as it starts: docs/protocol.md §3.1) it answers NULL, and the claim takes nothing
-- (`no_queued_job`: the wait looks like an empty queue).
--
-- claim($1 runner, $2 K, $3 now, $4 lease expiry): up to K jobs, one statement. Why a function:
-- PL/pgSQL prepares the statement once per session and keeps its plan, so a claim does not pay
-- for planning (0.7-0.8 ms when it was sent unnamed and planned afresh each time). A cached plan
-- is only safe if it cannot depend on the statistics it was made with (a generic plan made while
-- the slots were analyzed empty once turned the free-slot check into a sequential scan). The
-- settings below are in force while the function plans and runs, and only then:
--   plan_cache_mode = force_generic_plan: one plan per session, made at the first call (and again
--     after an invalidation, e.g. an ANALYZE), never a custom plan per call;
--   enable_seqscan, enable_bitmapscan, enable_hashjoin, enable_mergejoin, enable_material = off:
--     every table is reached through an index and every join is a nested loop whose inner side is
--     looked up afresh for each outer row, so the free-slot check looks the slot up by its key
--     once per candidate job whatever the statistics say.
-- The test store::claim::tests::the_claims_pick_looks_slots_up_by_key_even_after_an_empty_analyze
-- plans this body with these settings against an empty, analyzed table and asserts the shape.
-- The body refers to its parameters as $1..$4 so that it is a statement verbatim (the `mutants`
-- build sends it, changed, as a statement of its own: impl/src/mutants.rs reads it from this
-- file, which therefore ends with claim). Unqualified names resolve in the connection's
-- search_path, the installation's schema (impl/src/schema.rs).
-- History: migrations 0007 (the function), 0008 (its target columns), 0009 (the reservation in
-- the slot row), 0011 (the pick that locks the head first), 0012 (the epoch), 0015 (the attempt's
-- chain advanced in the claim's own update of the job), 0016 (the clock-skew wait), 0018 (an
-- epoch out of range refused); since then in this file alone (functions are re-applied from
-- it): the epoch's row joined in `started`, so that the chain's hash is inlined.
CREATE OR REPLACE FUNCTION claim_epoch(timestamptz) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $claim_epoch$
DECLARE
    epoch_now bigint := current_epoch();
    began timestamptz;
BEGIN
    -- An epoch past 2^31 - 1 cannot be carried by a token (epoch * 2^32 + generation in a
    -- bigint): refused before anything is written, with a deterministic error (migration 0018).
    IF epoch_now > 2147483647 THEN
        RAISE EXCEPTION 'the epoch % is past the largest a token can carry (2147483647)',
            epoch_now
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'the WAL timeline or the epoch_offset row is past the range of epochs';
    END IF;
    SELECT e.began_at INTO began FROM epochs AS e WHERE e.epoch = epoch_now;
    IF NOT FOUND THEN
        -- The first claim of a new epoch: the wait begins now (a concurrent first claim inserts
        -- the same epoch: the later one keeps the earlier's row).
        INSERT INTO epochs (epoch, began_at) VALUES (epoch_now, $1) ON CONFLICT (epoch) DO NOTHING;
        RETURN NULL;
    END IF;
    IF $1 < began + coalesce((SELECT p.max_lease_ttl + 2 * p.max_clock_skew
                              FROM lease_policy AS p WHERE p.id),
                             interval '0') THEN
        RETURN NULL;
    END IF;
    RETURN epoch_now;
END
$claim_epoch$;

CREATE OR REPLACE FUNCTION claim(uuid, bigint, timestamptz, timestamptz)
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
--                 claimers get one job), whatever their slots (`queued`, the state's
--                 generated column, is what the queued indexes name: migration 0020);
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
--                 record (ledger_claim_hash, ledger_encoding.sql, in the job's one update; the
--                 epoch's row is joined, not sub-selected, so that the planner inlines the hash:
--                 a sub-select in an argument that the encoding reads more than once keeps
--                 PostgreSQL from inlining a SQL function, which then parses and plans its
--                 body on every claim);
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
      AND j.queued
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
      AND q.queued
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
    SET state = 'running', fence = greatest(j.fence + 1, e.base + 1),
        current_attempt_id = r.attempt_id,
        chain_seq = j.chain_seq + 1,
        chain_head = ledger_claim_hash(j.chain_head, j.chain_seq + 1, r.attempt_id, j.id,
            j.project_id, r.ledger_seq, $1, r.lease_id,
            greatest(j.fence + 1, e.base + 1), r.slot_token, $3, $4)
    FROM reserved AS r, epoch AS e
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
