-- function: lease_policy_history
-- The lease policy's history on the record (docs/audit.md; table: migration 0019): every change of
-- `lease_policy.max_lease_ttl` (its writer is impl/sql/lease_policy_record.sql) appends the new value
-- with a ledger position drawn from the ledger's sequence, so the audit judges each claim's ttl
-- against the policy in force at its position. A trigger, so that no statement changes.
CREATE OR REPLACE FUNCTION lease_policy_history_record() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.max_lease_ttl IS DISTINCT FROM OLD.max_lease_ttl THEN
        INSERT INTO lease_policy_history (max_lease_ttl) VALUES (NEW.max_lease_ttl);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER lease_policy_history AFTER INSERT OR UPDATE ON lease_policy
FOR EACH ROW EXECUTE FUNCTION lease_policy_history_record();
