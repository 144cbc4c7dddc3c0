//! The fenced-lease protocol of docs/protocol.md on PostgreSQL.
