-- The ledger `leasewright audit` replays through the model (docs/audit.md). Every state change of
-- a job leaves an append-only record in the transaction that makes the change, with the server's
-- receipt time; this migration adds what the tables of 0001 did not record. No rule, predicate or
-- verdict changes.

-- One order over every record of every job. A job's rules are serialized by its row lock, so the
-- values its records draw from this sequence are in the order their transactions committed: a
-- replay needs no guess about two records with the same receipt time (a manual clock, a busy
-- microsecond). Drawn by a column default: no statement, no extra row.
CREATE SEQUENCE ledger_seq;

-- Submission (a job's first record), claims (an attempt's row is its claim's record), runner
-- messages, reconciliations.
ALTER TABLE jobs ADD COLUMN ledger_seq bigint NOT NULL DEFAULT nextval('ledger_seq');
ALTER TABLE attempts ADD COLUMN ledger_seq bigint NOT NULL DEFAULT nextval('ledger_seq');
ALTER TABLE observations ADD COLUMN ledger_seq bigint NOT NULL DEFAULT nextval('ledger_seq');
ALTER TABLE reconciliations ADD COLUMN ledger_seq bigint NOT NULL DEFAULT nextval('ledger_seq');

-- The lease a claim granted. attempts.lease_expiry is rewritten by every accepted heartbeat, so
-- without this the first lease of an attempt with a heartbeat is lost. NULL only on rows older
-- than this migration.
ALTER TABLE attempts ADD COLUMN claim_lease_expiry timestamptz;

-- The lease an accepted heartbeat granted (now + lease_ttl, server time): a replay checks every
-- later message against it, and that it came from the receipt time, not the runner's clock.
ALTER TABLE observations ADD COLUMN lease_expiry timestamptz;
ALTER TABLE observations ADD CONSTRAINT observations_lease_expiry_only_on_accepted_heartbeat
    CHECK (lease_expiry IS NULL OR (kind = 'heartbeat' AND verdict = 'accepted'));

-- Every cancel asked for, accepted, acknowledged or rejected (R6). jobs.cancel_requested and
-- finished_at say that a job was cancelled, not when: a replay needs the cancel's place among
-- the job's messages (a `cancelled` result is accepted only after it).
CREATE TABLE cancels (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_seq   bigint      NOT NULL DEFAULT nextval('ledger_seq'),
    project_id   uuid        NOT NULL,
    job_id       uuid        NOT NULL,
    attempt_id   uuid        REFERENCES attempts (id),
    verdict      text        NOT NULL,
    reason       text,
    requested_at timestamptz NOT NULL,
    CONSTRAINT cancels_verdict_known CHECK (verdict IN ('accepted', 'acknowledged', 'rejected')),
    CONSTRAINT cancels_rejected_has_reason CHECK ((verdict = 'rejected') = (reason IS NOT NULL))
);

CREATE INDEX cancels_by_job ON cancels (job_id, ledger_seq);

-- Every job the expiry sweep made uncertain (R4), with its attempt and the sweep's time. An
-- uncertain attempt has no end time, so nothing else says when the control plane lost evidence.
CREATE TABLE expiry_sweeps (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_seq bigint      NOT NULL DEFAULT nextval('ledger_seq'),
    job_id     uuid        NOT NULL,
    attempt_id uuid        NOT NULL REFERENCES attempts (id),
    swept_at   timestamptz NOT NULL
);

CREATE INDEX expiry_sweeps_by_job ON expiry_sweeps (job_id, ledger_seq);
