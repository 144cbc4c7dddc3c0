//! What side effects stored (`logs`, `artifacts`, `cache_entries`) against the accepted messages
//! behind them: every stored row has an accepted `log_append`, `artifact_put` or `cache_put`
//! observation of its attempt with its content digest and its time (the rule stores and records in
//! one transaction, with one `now`), and every accepted `log_append` its chunk. An artifact put
//! of an existing name replaces the row, so an accepted `artifact_put` without its row is allowed;
//! a cache entry's key is overwritten across attempts the same way.

use super::read::{JobLedger, StoredRow};
use super::{Kind, Violation};

/// The first stored row without its accepted message, or accepted `log_append` without its chunk.
pub fn check(jl: &JobLedger, stored: &[StoredRow]) -> Option<Violation> {
    let accepted = |kind: &str, row: &StoredRow| {
        jl.observations.iter().any(|o| {
            o.kind == kind
                && o.verdict == "accepted"
                && o.attributed == Some(row.attempt)
                && o.payload_sha256.as_deref() == Some(row.content_sha256.as_str())
                && o.received_at == row.stored_at
        })
    };
    let violation = |record: String, detail: String| Violation {
        kind: Kind::SideEffectRecord,
        job: jl.job.id,
        project: jl.job.project,
        record,
        detail,
        steps: Vec::new(),
    };
    for row in stored {
        let kind = match row.table {
            "logs" => "log_append",
            "artifacts" => "artifact_put",
            _ => "cache_put",
        };
        if !accepted(kind, row) {
            return Some(violation(
                format!("{} row {} of attempt {}", row.table, row.key, row.attempt),
                format!(
                    "stored at {} with content {}, but no accepted {kind} of the attempt with that \
                     digest and time is recorded",
                    row.stored_at.format("%Y-%m-%d %H:%M:%S%.6f"),
                    row.content_sha256
                ),
            ));
        }
    }
    for o in &jl.observations {
        if o.kind != "log_append" || o.verdict != "accepted" {
            continue;
        }
        let found = stored.iter().any(|row| {
            row.table == "logs"
                && Some(row.attempt) == o.attributed
                && Some(row.content_sha256.as_str()) == o.payload_sha256.as_deref()
                && row.stored_at == o.received_at
        });
        if !found {
            return Some(violation(
                format!("observation #{} (ledger {})", o.id, o.ledger_seq),
                "an accepted log_append whose chunk is not in `logs` (a chunk is never replaced)"
                    .to_string(),
            ));
        }
    }
    None
}
