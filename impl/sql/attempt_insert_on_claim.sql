-- name: attempt_insert_on_claim
-- Rule R1 `claim`: a new `active` attempt with a fresh lease id, lease_expiry = now + lease_ttl
-- (kept in claim_lease_expiry too: heartbeats rewrite lease_expiry, the audit replays the first lease),
-- and the slot token its reservation issued.
-- $1 attempt, $2 job, $3 project, $4 runner, $5 lease id, $6 fence, $7 lease expiry, $8 now,
-- $9 slot token
INSERT INTO attempts (id, job_id, project_id, runner_id, lease_id, fence, state, lease_expiry,
    claim_lease_expiry, claimed_at, slot_token)
VALUES ($1, $2, $3, $4, $5, $6, 'active', $7, $7, $8, $9)
