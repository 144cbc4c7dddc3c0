-- name: claim
-- Rule R1 `claim` and the batch claim (up to K jobs), the accept path in one statement (one
-- round trip, one transaction): the server-side function `claim`
-- (impl/sql/functions/claim.sql, the one place it is defined), whose one
-- statement locks the K earliest queued jobs of the runner's project that no other claimer holds,
-- keeps those whose target slot is free and, only when some were not, picks the earliest jobs
-- with a free slot after them; then reserves the slots and issues the slot tokens (one update of
-- each slot's row), starts the jobs and inserts their `active` attempts. The function keeps one
-- plan per session, made with settings that make every lookup an index lookup whatever the
-- statistics say (docs/impl.md, "The claim's plan"): no planning per claim.
-- Zero rows: nothing was changed. The store then tells `unknown_runner` from `no_queued_job`, and
-- picks again past jobs whose slot was taken concurrently, in a transaction of its own.
-- $1 runner, $2 K (at most this many jobs), $3 now, $4 lease expiry
SELECT job_id, attempt_id, lease_id, fence, slot_token, source_revision, source_digest, command,
    target, target_kind
FROM claim($1, $2, $3, $4)
