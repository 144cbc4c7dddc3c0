//! The side effects of rule R8 (docs/protocol.md §7.1) on the wire: the bytes the drivers send for
//! the model's bounded payloads, the labels the payload digests and the served contents are
//! compared as, and the implementation's message kind codes.
//!
//! Every payload is its own byte string (a log chunk's content never equals an artifact's), so
//! that one payload always has one digest and two payloads two digests
//! ([`crate::driver::PayloadDigests`]).

use leasewright_model::{MessageKind, SideEffect};

/// The one artifact name the model's attempts store.
pub const ARTIFACT_NAME: &str = "out.txt";
/// The one cache key the model's projects store.
pub const CACHE_KEY: &str = "deps";

/// The bytes of a log chunk, an artifact or a cache entry of the model's content `content`.
pub fn content_bytes(what: &str, content: u8) -> Vec<u8> {
    format!("{what} content {content}").into_bytes()
}

/// The bytes `effect` sends as its payload (a chunk or a content), if it sends one.
pub fn payload_bytes(effect: SideEffect) -> Option<Vec<u8>> {
    match effect {
        SideEffect::LogAppend { chunk, .. } => Some(content_bytes("log chunk", chunk)),
        SideEffect::ArtifactPut { content } => Some(content_bytes("artifact", content)),
        SideEffect::CachePut { content } => Some(content_bytes("cache", content)),
        _ => None,
    }
}

/// The label of the payload digest the implementation records for `effect` (the digest of the
/// content it sends; a get's is its name's or key's; a source fetch records none).
pub fn payload_label(effect: SideEffect) -> Option<String> {
    match effect {
        SideEffect::SourceFetch => None,
        SideEffect::ArtifactGet => Some(format!("artifact name {ARTIFACT_NAME}")),
        SideEffect::CacheGet => Some(format!("cache key {CACHE_KEY}")),
        other => payload_bytes(other).map(|b| String::from_utf8_lossy(&b).into_owned()),
    }
}

/// The label of the content an accepted get served: the model's content as it was sent, or what
/// no step of a trace sends.
pub fn served_label(effect: SideEffect, bytes: &[u8]) -> String {
    let what = if effect == SideEffect::ArtifactGet {
        "artifact"
    } else {
        "cache"
    };
    (0..2)
        .find(|&c| content_bytes(what, c) == bytes)
        .map(|c| model_served_label(effect, c))
        .unwrap_or_else(|| format!("{} bytes no step stored", bytes.len()))
}

/// The label of the model's content `content` served by `effect`.
pub fn model_served_label(effect: SideEffect, content: u8) -> String {
    let what = if effect == SideEffect::ArtifactGet {
        "artifact"
    } else {
        "cache"
    };
    format!("{what} content {content}")
}

/// The model's name of the implementation's message kind code `code` (`log_append` → `log
/// append`), for the kinds the traces send.
pub fn kind_name(code: &str) -> Option<&'static str> {
    let kinds = [
        MessageKind::Heartbeat,
        MessageKind::Result(leasewright_model::Outcome::Passed),
        MessageKind::Rejoin,
    ]
    .into_iter()
    .chain(SideEffect::EACH_KIND.map(MessageKind::SideEffect));
    kinds
        .map(|k| k.name())
        .find(|n| n.replace(' ', "_") == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payload_has_its_own_bytes() {
        let mut labels: Vec<String> = SideEffect::ALL
            .iter()
            .filter_map(|&e| payload_label(e))
            .collect();
        labels.sort();
        labels.dedup();
        // Two chunks, two artifact contents, two cache contents, a name and a key.
        assert_eq!(labels.len(), 8);
        assert_eq!(kind_name("log_append"), Some("log append"));
        assert_eq!(kind_name("result"), Some("result"));
        assert_eq!(kind_name("target_mutation"), None);
    }

    #[test]
    fn a_served_content_is_named_by_what_was_stored() {
        let get = SideEffect::CacheGet;
        assert_eq!(
            served_label(get, &content_bytes("cache", 1)),
            "cache content 1"
        );
        assert_eq!(served_label(get, b"other"), "5 bytes no step stored");
    }
}
