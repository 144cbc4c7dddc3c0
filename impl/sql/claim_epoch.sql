-- name: claim_epoch
-- Rule R1 `claim`, the job-by-job path: the epoch this claim issues its fences and slot tokens in
-- (docs/protocol.md §2, "Epochs"), or NULL while claims wait after an epoch change (the claim
-- then takes nothing and answers `no_queued_job`). The server-side function of impl/sql/functions/claim.sql,
-- which the statement `claim` calls too; the first claim of a new epoch records the epoch's
-- start here.
-- $1 now
SELECT claim_epoch($1) AS epoch
