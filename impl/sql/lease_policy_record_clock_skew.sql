-- name: lease_policy_record_clock_skew
-- A server's max_clock_skew (δ, docs/protocol.md §3.1), recorded when it starts: the row keeps the
-- largest δ any server of this database was started with. The expiry sweep acts only once
-- now >= lease_expiry + 2δ, and claims wait after an epoch change until began_at + the largest
-- lease ttl + 2δ (migration 0016). Writes only when δ is larger than the recorded one.
-- $1 lease ttl in microseconds (the row's ttl when the row is new), $2 δ in microseconds
INSERT INTO lease_policy (id, max_lease_ttl, max_clock_skew)
VALUES (true, $1 * interval '1 microsecond', $2 * interval '1 microsecond')
ON CONFLICT (id) DO UPDATE SET max_clock_skew = EXCLUDED.max_clock_skew
WHERE lease_policy.max_clock_skew < EXCLUDED.max_clock_skew
