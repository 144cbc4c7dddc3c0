-- name: lease_policy_record
-- A store's lease ttl, recorded when it connects: the row keeps the largest ttl any store of this
-- database was created with, which is how long claims wait after an epoch change (migration
-- 0012, docs/protocol.md §2 "Epochs"). Writes only when the ttl is larger than the recorded one.
-- $1 lease ttl in microseconds
INSERT INTO lease_policy (id, max_lease_ttl)
VALUES (true, $1 * interval '1 microsecond')
ON CONFLICT (id) DO UPDATE SET max_lease_ttl = EXCLUDED.max_lease_ttl
WHERE lease_policy.max_lease_ttl < EXCLUDED.max_lease_ttl
