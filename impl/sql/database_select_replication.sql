-- name: database_select_replication
-- What a session knows of the database it reached (docs/reliability.md, "The server knows its
-- database"): whether the server is a standby (in recovery), whether this session accepts writes
-- by default (libpq's read-write test), the durability this session asks for, the synchronous
-- standbys a commit waits for (NULL when this role may not see pg_stat_replication's sync_state:
-- it needs pg_read_all_stats), and the epoch: the WAL timeline - 1, read from the current WAL
-- insert position (the first 8 hex digits of its file name are the timeline), which a promotion
-- raises at once (pg_control_checkpoint() shows the new timeline only after a checkpoint). On a
-- standby: the timeline it receives, NULL when it receives none (or the role may not see it).
SELECT pg_is_in_recovery() AS in_recovery,
    current_setting('transaction_read_only') = 'on' AS read_only,
    current_setting('synchronous_commit') AS synchronous_commit,
    current_setting('synchronous_standby_names') AS synchronous_standby_names,
    (SELECT CASE WHEN bool_or(r.sync_state IS NULL) THEN NULL
                 ELSE count(*) FILTER (WHERE r.sync_state IN ('sync', 'quorum')) END
     FROM pg_stat_replication r) AS synchronous_standbys,
    CASE WHEN pg_is_in_recovery()
         THEN (SELECT w.received_tli::bigint FROM pg_stat_wal_receiver w)
         ELSE ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint
    END - 1 AS epoch
