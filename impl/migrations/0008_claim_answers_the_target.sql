-- Rule R1 `claim` also answers each lease's target slot and its kind (docs/impl.md, "The claim's
-- plan"; docs/benchmarks.md, "The HTTP claim in two round trips"). No rule, predicate, verdict or
-- plan setting changes: the function is migration 0007's with two more columns, `target` and
-- `target_kind`, which the job row the claim starts already holds. Before, the HTTP claim read the
-- whole job view once per lease to put them in the lease it answers: a round trip per lease.
-- A function's result type cannot be changed in place, so it is dropped and created again in this
-- migration's transaction (no claim runs without it). Everything 0007 says of the settings and of
-- the statement holds here unchanged.
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
AS $claim$
#variable_conflict use_column
BEGIN
RETURN QUERY
-- In order:
--   runner:       the sender and its project (§6.2 check 1);
--   picked:       up to K queued jobs of the project whose target slot is free (reserved by no
--                 job of any project, §8.2), earliest submitted first, each locked; jobs that
--                 concurrent claimers hold locked are skipped, so no two claimers get one job;
--   one_per_slot: of the picked jobs naming one slot, only the earliest (a batch takes at most
--                 one job per slot), each with a new attempt id;
--   reserved:     each job's slot reserved for its attempt, under a transaction-scoped advisory
--                 try-lock keyed by the slot name: a slot another claim is reserving right now is
--                 skipped, never waited for (no deadlock between batch claims over shared slots),
--                 and a slot reserved since this statement's snapshot is skipped by the conflict;
--   issued:       the slot token, the slot's counter + 1 (§8.3), for each reserved slot;
--   started:      each reserved job becomes `running` with fence + 1 and the new current attempt;
--   attempted:    the `active` attempts, with a fresh lease id, lease_expiry = now + lease_ttl
--                 (kept in claim_lease_expiry too) and the slot token issued.
WITH runner AS (
    SELECT id, project_id FROM runners WHERE id = $1
), picked AS (
    SELECT j.id, j.project_id, j.target, j.submitted_seq
    FROM jobs AS j
    WHERE j.project_id = (SELECT project_id FROM runner)
      AND j.state = 'queued'
      AND NOT EXISTS (
          SELECT 1 FROM target_reservations AS t
          WHERE t.target = j.target)
    ORDER BY j.submitted_seq
    LIMIT $2
    FOR NO KEY UPDATE OF j SKIP LOCKED
), one_per_slot AS (
    SELECT DISTINCT ON (p.target) p.id, p.project_id, p.target, p.submitted_seq,
        gen_random_uuid() AS attempt_id
    FROM picked AS p
    ORDER BY p.target, p.submitted_seq
), reserved AS (
    INSERT INTO target_reservations (project_id, target, job_id, attempt_id, reserved_at)
    SELECT o.project_id, o.target, o.id, o.attempt_id, $3
    FROM one_per_slot AS o
    WHERE pg_try_advisory_xact_lock(hashtextextended('leasewright slot ' || o.target, 0))
    ON CONFLICT ON CONSTRAINT target_reservations_one_holder_per_slot DO NOTHING
    RETURNING job_id, attempt_id, target
), issued AS (
    UPDATE target_slots AS s
    SET slot_token = s.slot_token + 1
    FROM reserved AS r
    WHERE s.slot = r.target
    RETURNING s.slot, s.slot_token
), started AS (
    UPDATE jobs AS j
    SET state = 'running', fence = j.fence + 1, current_attempt_id = r.attempt_id
    FROM reserved AS r
    WHERE j.id = r.job_id
      AND j.state = 'queued'
    RETURNING j.id, j.project_id, j.submitted_seq, j.target, j.target_kind, j.fence,
        j.source_revision, j.source_digest, j.command, r.attempt_id
), attempted AS (
    INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state,
        lease_expiry, claim_lease_expiry, claimed_at, slot_token)
    SELECT st.attempt_id, st.id, st.project_id, $1, gen_random_uuid(), st.fence, 'active',
        $4, $4, $3, i.slot_token
    FROM started AS st
    JOIN issued AS i ON i.slot = st.target
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
