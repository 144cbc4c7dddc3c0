-- The schema of docs/protocol.md. State names are exactly the spec's; every invariant that a row
-- (or a pair of rows) can carry is a named constraint, so a violation names the rule it breaks.
-- Time columns are written from the injected clock, never from now(): the server's receipt time
-- is a parameter of every statement that decides anything.

CREATE TABLE projects (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT projects_name_unique UNIQUE (name),
    CONSTRAINT projects_name_not_empty CHECK (name <> '')
);

-- A runner belongs to exactly one project. Only the SHA-256 of its bearer token is stored.
CREATE TABLE runners (
    id           uuid        PRIMARY KEY,
    project_id   uuid        NOT NULL REFERENCES projects (id),
    name         text        NOT NULL,
    token_sha256 bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    CONSTRAINT runners_name_unique_per_project UNIQUE (project_id, name),
    CONSTRAINT runners_token_hash_is_sha256 CHECK (octet_length(token_sha256) = 32),
    CONSTRAINT runners_id_project_unique UNIQUE (id, project_id)
);

CREATE TABLE jobs (
    id                 uuid        PRIMARY KEY,
    project_id         uuid        NOT NULL REFERENCES projects (id),
    -- Submission order: claim takes the earliest-submitted queued job.
    submitted_seq      bigint      GENERATED ALWAYS AS IDENTITY,
    submitted_at       timestamptz NOT NULL,
    -- The immutable source identity.
    source_revision    text        NOT NULL,
    source_digest      text        NOT NULL,
    command            text        NOT NULL,
    -- The deployment target slot the job reserves from claim until reconciliation or outcome.
    target             text        NOT NULL,
    target_kind        text        NOT NULL,
    state              text        NOT NULL DEFAULT 'queued',
    fence              bigint      NOT NULL DEFAULT 0,
    current_attempt_id uuid,
    cancel_requested   boolean     NOT NULL DEFAULT false,
    outcome            text,
    result_digest      text,
    finished_at        timestamptz,
    CONSTRAINT jobs_submitted_seq_unique UNIQUE (submitted_seq),
    CONSTRAINT jobs_id_project_unique UNIQUE (id, project_id),
    CONSTRAINT jobs_state_known CHECK (state IN
        ('queued', 'running', 'cancelling', 'uncertain', 'passed', 'failed', 'cancelled', 'aborted')),
    CONSTRAINT jobs_target_kind_known CHECK (target_kind IN ('fenced', 'idempotent', 'unfenced')),
    CONSTRAINT jobs_fence_not_negative CHECK (fence >= 0),
    -- A terminal job carries its committed outcome, and only a terminal job has one.
    CONSTRAINT jobs_terminal_has_outcome CHECK (
        (state IN ('passed', 'failed', 'cancelled', 'aborted')) = (outcome IS NOT NULL)
        AND (outcome IS NULL OR outcome = state)
        AND (outcome IS NULL) = (finished_at IS NULL)),
    -- The leased states and uncertain always name the attempt they are about.
    CONSTRAINT jobs_leased_or_uncertain_has_current_attempt CHECK (
        state NOT IN ('running', 'cancelling', 'uncertain') OR current_attempt_id IS NOT NULL),
    -- A queued job has no current attempt: the next claim creates one.
    CONSTRAINT jobs_queued_has_no_current_attempt CHECK (
        state <> 'queued' OR current_attempt_id IS NULL),
    -- cancelling is reached only through a cancel request, and the flag is never cleared.
    CONSTRAINT jobs_cancelling_has_cancel_requested CHECK (
        state <> 'cancelling' OR cancel_requested),
    -- A passed or failed job got its outcome from its current attempt (result or adoption).
    CONSTRAINT jobs_passed_or_failed_has_current_attempt CHECK (
        state NOT IN ('passed', 'failed') OR current_attempt_id IS NOT NULL)
);

CREATE INDEX jobs_queued_by_submission ON jobs (project_id, submitted_seq) WHERE state = 'queued';
CREATE INDEX jobs_leased ON jobs (state) WHERE state IN ('running', 'cancelling');

-- The per-attempt ledger.
CREATE TABLE attempts (
    id            uuid        PRIMARY KEY,
    job_id        uuid        NOT NULL,
    project_id    uuid        NOT NULL,
    runner_id     uuid        NOT NULL,
    lease_id      uuid        NOT NULL,
    fence         bigint      NOT NULL,
    state         text        NOT NULL DEFAULT 'active',
    lease_expiry  timestamptz NOT NULL,
    outcome       text,
    result_digest text,
    claimed_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    CONSTRAINT attempts_job_of_project FOREIGN KEY (job_id, project_id)
        REFERENCES jobs (id, project_id),
    -- A runner only ever holds attempts of its own project's jobs (invariant 12).
    CONSTRAINT attempts_runner_of_job_project FOREIGN KEY (runner_id, project_id)
        REFERENCES runners (id, project_id),
    CONSTRAINT attempts_id_job_unique UNIQUE (id, job_id),
    -- A lease id is fresh: never reused, by any attempt of any job.
    CONSTRAINT attempts_lease_id_unique UNIQUE (lease_id),
    -- Fences of one job are distinct (they strictly increase: fence = job.fence + 1 at claim).
    CONSTRAINT attempts_fence_unique_per_job UNIQUE (job_id, fence),
    CONSTRAINT attempts_fence_positive CHECK (fence >= 1),
    CONSTRAINT attempts_state_known CHECK (state IN
        ('active', 'uncertain', 'passed', 'failed', 'cancelled', 'stopped')),
    -- passed, failed and cancelled attempts hold the committed outcome; no other attempt has one.
    CONSTRAINT attempts_committed_has_outcome CHECK (
        (state IN ('passed', 'failed', 'cancelled')) = (outcome IS NOT NULL)
        AND (outcome IS NULL OR outcome = state)),
    CONSTRAINT attempts_ended_has_end_time CHECK (
        (state IN ('active', 'uncertain')) = (ended_at IS NULL))
);

-- At most one attempt of a job may be executing (active or uncertain) at a time (invariants 1, 6).
CREATE UNIQUE INDEX attempts_one_current_per_job ON attempts (job_id)
    WHERE state IN ('active', 'uncertain');

-- The job's current attempt is an attempt of this job.
ALTER TABLE jobs ADD CONSTRAINT jobs_current_attempt_of_this_job
    FOREIGN KEY (current_attempt_id, id) REFERENCES attempts (id, job_id)
    DEFERRABLE INITIALLY DEFERRED;

-- Every runner message received, accepted or rejected. attempt_id is the attribution of
-- docs/protocol.md §7: set when checks 1-5 pass (the attempt exists, belongs to the named job and
-- was claimed by the sender), otherwise NULL. The named tuple is kept as it was received.
CREATE TABLE observations (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sender_runner_id  uuid        NOT NULL,
    kind              text        NOT NULL,
    named_job_id      uuid        NOT NULL,
    named_attempt_id  uuid        NOT NULL,
    named_lease_id    uuid        NOT NULL,
    named_fence       bigint      NOT NULL,
    attempt_id        uuid        REFERENCES attempts (id),
    received_at       timestamptz NOT NULL,
    runner_time       timestamptz,
    verdict           text        NOT NULL,
    reason            text,
    outcome           text,
    payload_sha256    text,
    CONSTRAINT observations_kind_known CHECK (kind IN ('heartbeat', 'result', 'rejoin',
        'source_fetch', 'log_append', 'artifact_put', 'artifact_get', 'cache_get', 'cache_put')),
    CONSTRAINT observations_verdict_known CHECK (verdict IN ('accepted', 'acknowledged', 'rejected')),
    CONSTRAINT observations_rejected_has_reason CHECK ((verdict = 'rejected') = (reason IS NOT NULL)),
    CONSTRAINT observations_outcome_only_on_result CHECK (
        outcome IS NULL OR (kind = 'result' AND outcome IN ('passed', 'failed', 'cancelled')))
);

CREATE INDEX observations_by_attempt ON observations (attempt_id, id);
CREATE INDEX observations_by_named_job ON observations (named_job_id, id);

-- Every reconciliation asked for, accepted or rejected.
CREATE TABLE reconciliations (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id   uuid        NOT NULL,
    job_id       uuid        NOT NULL,
    attempt_id   uuid        REFERENCES attempts (id),
    finding      text        NOT NULL,
    decision     text        NOT NULL,
    verdict      text        NOT NULL,
    reason       text,
    decided_at   timestamptz NOT NULL,
    CONSTRAINT reconciliations_finding_known CHECK (finding IN
        ('stopped', 'still_running', 'observed_passed', 'observed_failed')),
    CONSTRAINT reconciliations_decision_known CHECK (decision IN ('retry', 'abort', 'adopt')),
    CONSTRAINT reconciliations_verdict_known CHECK (verdict IN ('accepted', 'rejected')),
    CONSTRAINT reconciliations_rejected_has_reason CHECK ((verdict = 'rejected') = (reason IS NOT NULL))
);

CREATE INDEX reconciliations_by_job ON reconciliations (job_id, id);

-- The control plane's protection of a deployment target: held from claim until a reconciliation
-- or a committed outcome releases it; no claim takes a job whose target is reserved.
CREATE TABLE target_reservations (
    project_id  uuid        NOT NULL,
    target      text        NOT NULL,
    job_id      uuid        NOT NULL,
    attempt_id  uuid        NOT NULL,
    reserved_at timestamptz NOT NULL,
    CONSTRAINT target_reservations_one_holder_per_target PRIMARY KEY (project_id, target),
    CONSTRAINT target_reservations_one_per_job UNIQUE (job_id),
    CONSTRAINT target_reservations_job_of_project FOREIGN KEY (job_id, project_id)
        REFERENCES jobs (id, project_id),
    CONSTRAINT target_reservations_attempt_of_job FOREIGN KEY (attempt_id, job_id)
        REFERENCES attempts (id, job_id) DEFERRABLE INITIALLY DEFERRED
);

-- Log chunks, idempotent per (attempt, sequence number).
CREATE TABLE logs (
    attempt_id     uuid        NOT NULL REFERENCES attempts (id),
    seq            bigint      NOT NULL,
    content        bytea       NOT NULL,
    content_sha256 text        NOT NULL,
    appended_at    timestamptz NOT NULL,
    CONSTRAINT logs_one_chunk_per_attempt_seq PRIMARY KEY (attempt_id, seq),
    CONSTRAINT logs_seq_not_negative CHECK (seq >= 0)
);

-- Artifacts of an attempt, by name. A put of an existing name replaces its content.
CREATE TABLE artifacts (
    attempt_id     uuid        NOT NULL REFERENCES attempts (id),
    name           text        NOT NULL,
    content        bytea       NOT NULL,
    content_sha256 text        NOT NULL,
    stored_at      timestamptz NOT NULL,
    CONSTRAINT artifacts_one_per_attempt_name PRIMARY KEY (attempt_id, name)
);

-- The project's build cache, by key.
CREATE TABLE cache_entries (
    project_id        uuid        NOT NULL REFERENCES projects (id),
    key               text        NOT NULL,
    content           bytea       NOT NULL,
    content_sha256    text        NOT NULL,
    stored_by_attempt uuid        NOT NULL REFERENCES attempts (id),
    stored_at         timestamptz NOT NULL,
    CONSTRAINT cache_entries_one_per_project_key PRIMARY KEY (project_id, key)
);

-- Demonstration deployment targets (docs/protocol.md §8). Each checks only its own rule.
CREATE TABLE targets (
    slot          text   PRIMARY KEY,
    kind          text   NOT NULL,
    highest_fence bigint,
    applied_count bigint NOT NULL DEFAULT 0,
    CONSTRAINT targets_kind_known CHECK (kind IN ('fenced', 'idempotent', 'unfenced')),
    CONSTRAINT targets_only_fenced_has_fence CHECK (kind = 'fenced' OR highest_fence IS NULL)
);

-- Every mutation that reached a target, applied or not.
CREATE TABLE target_mutations (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slot          text        NOT NULL REFERENCES targets (slot),
    job_id        uuid        NOT NULL,
    attempt_id    uuid        NOT NULL,
    fence         bigint      NOT NULL,
    deployment_id text        NOT NULL,
    verdict       text        NOT NULL,
    reason        text,
    applied       boolean     NOT NULL,
    received_at   timestamptz NOT NULL,
    CONSTRAINT target_mutations_verdict_known CHECK (verdict IN ('accepted', 'acknowledged', 'rejected')),
    CONSTRAINT target_mutations_applied_iff_accepted CHECK (applied = (verdict = 'accepted'))
);

-- The idempotent target's memory: each deployment id applied at most once per slot (invariant 8).
CREATE TABLE target_applied_deployments (
    slot          text        NOT NULL REFERENCES targets (slot),
    deployment_id text        NOT NULL,
    applied_at    timestamptz NOT NULL,
    CONSTRAINT target_applied_deployments_once PRIMARY KEY (slot, deployment_id)
);
