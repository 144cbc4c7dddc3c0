-- name: target_mutation_record
-- Every mutation that reached a target, applied or not.
-- $1 slot, $2 job, $3 attempt, $4 slot token, $5 deployment id, $6 verdict, $7 reason, $8 applied,
-- $9 now
INSERT INTO target_mutations (slot, job_id, attempt_id, slot_token, deployment_id, verdict, reason,
    applied, received_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
