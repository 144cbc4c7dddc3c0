-- Runner listing and revocation (issue 30, item 4; docs/protocol.md §6.1, docs/http.md
-- "Runners"). A revoked runner's token authenticates nothing: `runner_select_token_hash` reads
-- only runners that are not revoked, and the token hashes a server keeps in memory are read again
-- after a bounded time (impl Store::authenticate), so every replica refuses the token within that
-- bound. The token hash itself is never changed. No rule, predicate or verdict changes: the
-- protocol's checks (`unknown_runner`, `runner_mismatch`, …) do not read `revoked_at`, and a
-- revoked runner's leases are left to run out and be swept like any lost runner's.
--
-- `revoked_at`: the server time of the revocation (NULL: not revoked). Set once.
-- `listed_seq`: the listing order of a project's runners (creation order for new runners), the
-- cursor of `GET /v1/projects/{p}/runners` as `submitted_seq` is the jobs list's.
ALTER TABLE runners
    ADD COLUMN revoked_at timestamptz,
    ADD COLUMN listed_seq bigint GENERATED ALWAYS AS IDENTITY;

CREATE UNIQUE INDEX runners_by_project_in_listed_order ON runners (project_id, listed_seq);
