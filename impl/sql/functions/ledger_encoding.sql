-- function: ledger_encoding
-- The ledger's canonical encoding (docs/audit.md, "The canonical encoding"), which the chain's
-- hashes are computed over (ledger_chain.sql, claim.sql and
-- impl/sql/attempt_commit_result(s)_if_current.sql); `leasewright audit` recomputes it
-- independently (audit/src/chain.rs). A record is a sequence of
-- fields, each NULL (one byte 0) or present (one byte 1, its length as a 4-byte big-endian
-- integer, its bytes). A field's bytes: text as UTF-8; uuid as its 16 bytes; bigint as 8 bytes
-- big-endian (chain_seq too); timestamptz as 8 bytes big-endian, microseconds since
-- 2000-01-01 00:00:00 UTC (PostgreSQL's binary format). The first field is the record's kind.
-- History: migration 0015; since then in this file alone: STABLE, not IMMUTABLE.
-- Every function here is STABLE, so that PostgreSQL inlines it into the statement that calls it
-- (docs/impl.md, "No SQL function is called at run time on the hot path"). It inlines a SQL
-- function only if the body is no more volatile than the function is declared, and the text
-- field's convert_to is STABLE: declared IMMUTABLE, ledger_field(text) was called once per field
-- and row (every result's outcome and payload) with its body planned again in every statement.
-- And an IMMUTABLE function whose arguments are all constants is run, body planned, while the
-- calling statement is planned (every custom plan of a heartbeat or result), where a STABLE
-- one is inlined and its constant parts folded without a call. The bytes are the same.
CREATE OR REPLACE FUNCTION ledger_field(b bytea) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN b IS NULL THEN '\x00'::bytea ELSE '\x01'::bytea || int4send(length(b)) || b END;

CREATE OR REPLACE FUNCTION ledger_field(t text) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN ledger_field(convert_to(t, 'UTF8'));

CREATE OR REPLACE FUNCTION ledger_field(u uuid) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN ledger_field(uuid_send(u));

CREATE OR REPLACE FUNCTION ledger_field(i bigint) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN ledger_field(int8send(i));

CREATE OR REPLACE FUNCTION ledger_field(t timestamptz) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN ledger_field(timestamptz_send(t));

-- The two encodings a statement also computes (the claim's attempt, the result's observation:
-- claim.sql, impl/sql/attempt_commit_result(s)_if_current.sql), and the trigger with them
-- (ledger_chain.sql).
CREATE OR REPLACE FUNCTION ledger_claim_hash(head bytea, seq integer, id uuid, job_id uuid,
    project_id uuid, ledger_seq bigint, runner_id uuid, lease_id uuid, fence bigint,
    slot_token bigint, claimed_at timestamptz, claim_lease_expiry timestamptz) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(head || ledger_field('claim'::text) || ledger_field(seq::bigint)
    || ledger_field(id) || ledger_field(job_id) || ledger_field(project_id)
    || ledger_field(ledger_seq) || ledger_field(runner_id) || ledger_field(lease_id)
    || ledger_field(fence) || ledger_field(slot_token) || ledger_field(claimed_at)
    || ledger_field(claim_lease_expiry));

CREATE OR REPLACE FUNCTION ledger_observation_hash(head bytea, seq integer, id bigint, named_job_id uuid,
    ledger_seq bigint, sender_runner_id uuid, kind text, named_attempt_id uuid,
    named_lease_id uuid, named_fence bigint, attempt_id uuid, received_at timestamptz,
    runner_time timestamptz, verdict text, reason text, outcome text, payload_sha256 text,
    lease_expiry timestamptz) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(head || ledger_field('observation'::text) || ledger_field(seq::bigint)
    || ledger_field(id) || ledger_field(named_job_id) || ledger_field(ledger_seq)
    || ledger_field(sender_runner_id) || ledger_field(kind) || ledger_field(named_attempt_id)
    || ledger_field(named_lease_id) || ledger_field(named_fence) || ledger_field(attempt_id)
    || ledger_field(received_at) || ledger_field(runner_time) || ledger_field(verdict)
    || ledger_field(reason) || ledger_field(outcome) || ledger_field(payload_sha256)
    || ledger_field(lease_expiry));
