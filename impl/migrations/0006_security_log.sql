-- A project's security log (docs/protocol.md §7): the messages its runners sent naming a job of
-- another project, or no job. They are unattributed; this index finds them by sender without
-- adding a write to the attributed observations, the ones a running job sends.
CREATE INDEX observations_unattributed_by_sender ON observations (sender_runner_id, id)
    WHERE attempt_id IS NULL;
