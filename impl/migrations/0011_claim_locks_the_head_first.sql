-- The claim locks the head of the queue before it looks at slots (issue 14, the batch claim;
-- docs/benchmarks.md, "The batch claim locks the head first (migration 0011)"). No rule,
-- predicate or verdict changes: the claim still takes, of the project's queued jobs whose slot is
-- free, the K earliest that no concurrent claimer holds locked (docs/protocol.md, R1 and "Batch
-- claim").
--
-- Until now the pick joined every candidate job to its slot's row before it tried the job's row
-- lock (`... JOIN target_slots ... FOR NO KEY UPDATE OF j SKIP LOCKED`: PostgreSQL locks above
-- the join). Concurrent batch claimers start at the same head of the queue, so a claimer walked
-- past the up to 15 x 16 jobs the others held locked and looked each one's slot up (an index
-- descent) only to skip it. The pick is now two steps:
--
--   head:   the K earliest queued jobs that no one holds locked, locked first (no slot lookup for
--           a job another claimer holds);
--   beyond: only when some of those jobs' slots are not free, the earliest queued jobs after
--           them whose slot is free, picked as before (slot checked, then locked), as many as
--           the head fell short of K.
--
-- Their union is what the old pick took: every queued job not held by another claimer and before
-- the last one taken is in the head or was looked at by `beyond`. The price: a job of the head
-- whose slot is busy stays locked by this claim until its statement ends (concurrent claimers
-- skip it, as they skip any locked job: it is not claimable anyway), at most K of them, one row
-- lock record each; a claim on a queue blocked behind busy slots still walks the rest of it
-- read-only, as before. A lock-first pick with no bound would lock every blocked job it walked
-- past, on every empty poll.
--
-- `jit = off` joins the function's plan settings. With `enable_*` off, a plan that must use a
-- disabled node costs more than `jit_above_cost`, and PostgreSQL then compiles the statement's
-- expressions at every execution: a draft of this pick whose plan had such a node ran at 73 ms a
-- claim with JIT and 1.2 ms without. No claim plan benefits from JIT (each touches a handful of
-- rows).
--
-- Rule R1 `claim`, as migration 0009 defined it (the same parameters, result columns, settings,
-- cached and robust plan, free-slot locking and reservation in the slot row), with the pick
-- above. Dropped and created again in this migration's transaction, as 0008 and 0009 did.
-- $1 runner, $2 K (at most this many jobs), $3 now, $4 lease expiry
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
--   runner:       the sender and its project (§6.2 check 1);
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
--   reserved:     each free slot reserved for its job's attempt and its slot token issued, the
--                 slot's counter + 1 (§8.3), in one update of the slot's row;
--   started:      each reserved job becomes `running` with fence + 1 and the new current attempt;
--   attempted:    the `active` attempts, with a fresh lease id, lease_expiry = now + lease_ttl
--                 (kept in claim_lease_expiry too) and the slot token issued.
WITH runner AS (
    SELECT id, project_id FROM runners WHERE id = $1
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
        holder_attempt_id = o.attempt_id, reserved_at = $3, slot_token = s.slot_token + 1
    FROM one_per_slot AS o
    WHERE s.slot = o.target
      AND s.slot IN (SELECT slot FROM free)
      AND s.holder_job_id IS NULL
    RETURNING o.id AS job_id, o.attempt_id, s.slot, s.slot_token
), started AS (
    UPDATE jobs AS j
    SET state = 'running', fence = j.fence + 1, current_attempt_id = r.attempt_id
    FROM reserved AS r
    WHERE j.id = r.job_id
      AND j.state = 'queued'
    RETURNING j.id, j.project_id, j.submitted_seq, j.target, j.target_kind, j.fence,
        j.source_revision, j.source_digest, j.command, r.attempt_id, r.slot_token
), attempted AS (
    INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state,
        lease_expiry, claim_lease_expiry, claimed_at, slot_token)
    SELECT st.attempt_id, st.id, st.project_id, $1, gen_random_uuid(), st.fence, 'active',
        $4, $4, $3, st.slot_token
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
