//! Rule R8, the side effects a lease entitles to (docs/protocol.md §7.1), as message kinds of the
//! model's runners: `source fetch`, `log append(seq, chunk)`, `artifact put(name, content)`,
//! `artifact get(name)`, `cache put(key, content)` and `cache get(key)`.
//!
//! Only with [`Config::side_effects`] (off in the default configuration, so `check`'s default
//! state space does not grow). The domains are bounded: log sequence numbers 0 and 1, two chunk
//! contents, one artifact name, one cache key, two contents. Each attempt keeps its log chunks
//! and its artifact ([`Attempt::log`], [`Attempt::artifact`]); each project keeps its cache entry
//! with the attempt that stored it ([`State::cache`]).
//!
//! A side effect is checked by §6.1 checks 1–13 exactly as a heartbeat is (check 12 included: it is
//! not a heartbeat, a rejoin or a result of `cancelled`), then by check 14 (`sequence_conflict`,
//! `log append` only) and check 15 (`not_found`, `artifact get` and `cache get` only).

use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;
use serde::{Deserialize, Serialize};

/// One side-effect message (R8) with its payload, in the model's bounded domains.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffect {
    /// `source fetch`: serve the job's immutable source snapshot.
    SourceFetch,
    /// `log append(seq, chunk)`: `seq` in {0, 1}, `chunk` one of two contents {0, 1}.
    LogAppend { seq: u8, chunk: u8 },
    /// `artifact put(name, content)` of the one artifact name, `content` in {0, 1}.
    ArtifactPut { content: u8 },
    /// `artifact get(name)` of the one artifact name.
    ArtifactGet,
    /// `cache put(key, content)` of the one cache key, `content` in {0, 1}.
    CachePut { content: u8 },
    /// `cache get(key)` of the one cache key.
    CacheGet,
}

impl SideEffect {
    /// Every side effect of the bounded domains.
    pub const ALL: [SideEffect; 11] = [
        SideEffect::SourceFetch,
        SideEffect::LogAppend { seq: 0, chunk: 0 },
        SideEffect::LogAppend { seq: 0, chunk: 1 },
        SideEffect::LogAppend { seq: 1, chunk: 0 },
        SideEffect::LogAppend { seq: 1, chunk: 1 },
        SideEffect::ArtifactPut { content: 0 },
        SideEffect::ArtifactPut { content: 1 },
        SideEffect::ArtifactGet,
        SideEffect::CachePut { content: 0 },
        SideEffect::CachePut { content: 1 },
        SideEffect::CacheGet,
    ];

    /// One side effect of each message kind: what a forged tuple is probed with.
    pub const EACH_KIND: [SideEffect; 6] = [
        SideEffect::SourceFetch,
        SideEffect::LogAppend { seq: 0, chunk: 0 },
        SideEffect::ArtifactPut { content: 0 },
        SideEffect::ArtifactGet,
        SideEffect::CachePut { content: 0 },
        SideEffect::CacheGet,
    ];

    /// The protocol's name of the message (§7.1).
    pub fn name(self) -> &'static str {
        match self {
            Self::SourceFetch => "source fetch",
            Self::LogAppend { .. } => "log append",
            Self::ArtifactPut { .. } => "artifact put",
            Self::ArtifactGet => "artifact get",
            Self::CachePut { .. } => "cache put",
            Self::CacheGet => "cache get",
        }
    }

    /// The message and its payload in one line: `log append(seq 1, chunk 0)`.
    pub fn describe(self) -> String {
        match self {
            Self::LogAppend { seq, chunk } => format!("log append(seq {seq}, chunk {chunk})"),
            Self::ArtifactPut { content } => format!("artifact put(content {content})"),
            Self::CachePut { content } => format!("cache put(content {content})"),
            other => other.name().to_string(),
        }
    }

    /// A distinct small number for each value (below 16), for the state's hash.
    pub fn code(self) -> u8 {
        Self::ALL.iter().position(|e| *e == self).unwrap_or(15) as u8
    }

    /// It may store something (a get or a fetch changes no state).
    pub fn stores(self) -> bool {
        matches!(
            self,
            Self::LogAppend { .. } | Self::ArtifactPut { .. } | Self::CachePut { .. }
        )
    }

    /// It serves a stored content (`artifact get`, `cache get`): `not_found` when there is none.
    pub fn serves(self) -> bool {
        matches!(self, Self::ArtifactGet | Self::CacheGet)
    }
}

/// A project's cache entry (of the one cache key): its content and the attempt that stored it.
#[derive(
    Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct CacheEntry {
    /// The content stored (0 or 1).
    pub content: u8,
    /// The attempt whose `cache put` stored it (last writer wins).
    pub stored_by: AttemptId,
}

/// The cache, by project (0: the checked project, 1: the outsider's).
pub type Cache = [Option<CacheEntry>; 2];

/// The chunk stored at `seq` in an attempt's [`Attempt::log`], if any.
pub fn chunk_at(log: u8, seq: u8) -> Option<u8> {
    let stored = (log >> (2 * seq.min(3))) & 3;
    stored.checked_sub(1)
}

/// `log` with `chunk` stored at `seq`.
fn with_chunk(log: u8, seq: u8, chunk: u8) -> u8 {
    let shift = 2 * seq.min(3);
    (log & !(3 << shift)) | (((chunk & 1) + 1) << shift)
}

/// The content of an attempt's [`Attempt::artifact`], if it stored one.
pub fn artifact_of(artifact: u8) -> Option<u8> {
    artifact.checked_sub(1)
}

impl LeaseModel {
    /// The project whose cache a side effect naming `job` reads and writes: the job's (the
    /// flawed `cache-shared-across-projects` keys the cache by key alone: one cache for all).
    fn cache_project(&self, s: &State, job: JobId) -> ProjectId {
        if self.config.variant == Variant::CacheSharedAcrossProjects {
            0
        } else {
            Self::project_of(s, job)
        }
    }

    /// §6.1 checks 14 and 15 for `effect` by attempt `a` (checks 1–13 passed): `sequence_conflict`
    /// for a log append of a `seq` stored with other content (`acknowledged` with the same
    /// content), `not_found` for a get of nothing stored; otherwise `accepted`.
    pub(crate) fn side_effect_verdict(
        &self,
        s: &State,
        m: &Message,
        effect: SideEffect,
        a: AttemptId,
    ) -> Expected {
        let attempt = &s.attempts[a as usize];
        match effect {
            SideEffect::LogAppend { seq, chunk } => match chunk_at(attempt.log, seq) {
                Some(stored) if stored == chunk => Expected::ACKNOWLEDGED,
                Some(_) => Expected::rejected(Reason::SequenceConflict),
                None => Expected::ACCEPTED,
            },
            SideEffect::ArtifactGet if attempt.artifact == 0 => {
                Expected::rejected(Reason::NotFound)
            }
            SideEffect::CacheGet if s.cache[self.cache_project(s, m.job) as usize].is_none() => {
                Expected::rejected(Reason::NotFound)
            }
            _ => Expected::ACCEPTED,
        }
    }

    /// The content an accepted `artifact get` or `cache get` serves in `s` (`None` for any other
    /// message, or when it is not accepted).
    pub fn served(&self, s: &State, m: &Message) -> Option<u8> {
        let MessageKind::SideEffect(effect) = m.kind else {
            return None;
        };
        if !effect.serves() || self.delivery_verdict(s, m) != Expected::ACCEPTED {
            return None;
        }
        match effect {
            SideEffect::ArtifactGet => artifact_of(s.attempts.get(m.attempt as usize)?.artifact),
            _ => s.cache[self.cache_project(s, m.job) as usize].map(|e| e.content),
        }
    }

    /// The effect of an accepted side effect `m` (§7.1): store the chunk, the artifact or the
    /// cache entry. A fetch and a get change nothing.
    pub(crate) fn apply_side_effect(&self, s: &mut State, m: &Message, effect: SideEffect) {
        match effect {
            SideEffect::LogAppend { seq, chunk } => {
                let attempt = &mut s.attempts[m.attempt as usize];
                attempt.log = with_chunk(attempt.log, seq, chunk);
            }
            SideEffect::ArtifactPut { content } => {
                s.attempts[m.attempt as usize].artifact = content + 1;
            }
            SideEffect::CachePut { content } => {
                let project = self.cache_project(s, m.job);
                s.cache[project as usize] = Some(CacheEntry {
                    content,
                    stored_by: m.attempt,
                });
            }
            SideEffect::SourceFetch | SideEffect::ArtifactGet | SideEffect::CacheGet => {}
        }
    }

    /// The side effects an executing, connected `runner` sends about the attempt it holds. A
    /// runner keeps its log numbering gapless (§7.1): it appends `seq 1` only after `seq 0` was
    /// stored, each chunk first with content 0; it may send a stored `seq` again with the other
    /// content (`sequence_conflict`). An exhaustive check leaves out the fetch and the gets, which
    /// change nothing (the properties check their verdicts as probes in every state). The
    /// outsider's project's runner uses only its project's cache (the one store shared beyond an
    /// attempt): its log and artifact are its own attempt's, as project 0's are, and would only
    /// multiply the states.
    pub(crate) fn side_effect_actions(&self, s: &State, runner: RunnerId, out: &mut Vec<Action>) {
        let Some(r) = s.runners.get(runner as usize) else {
            return;
        };
        let Some(a) = r.holding else {
            return;
        };
        let cache_only = r.project != 0;
        let log = s.attempts[a as usize].log;
        let next = (0..2).find(|&seq| chunk_at(log, seq).is_none());
        for effect in SideEffect::ALL {
            let cache = matches!(effect, SideEffect::CachePut { .. } | SideEffect::CacheGet);
            let offered = (cache || !cache_only)
                && match effect {
                    SideEffect::LogAppend { seq, chunk } => match chunk_at(log, seq) {
                        None => Some(seq) == next && chunk == 0,
                        Some(stored) => stored != chunk && !self.skip_no_ops,
                    },
                    other => other.stores() || !self.skip_no_ops,
                };
            if offered {
                out.push(Action::SideEffect { runner, effect });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_keeps_each_sequence_number_apart() {
        let log = with_chunk(with_chunk(0, 1, 0), 0, 1);
        assert_eq!(chunk_at(log, 0), Some(1));
        assert_eq!(chunk_at(log, 1), Some(0));
        assert_eq!(chunk_at(0, 1), None);
        assert_eq!(chunk_at(with_chunk(log, 0, 0), 0), Some(0));
    }

    #[test]
    fn every_side_effect_has_its_own_code() {
        let mut codes: Vec<u8> = SideEffect::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), SideEffect::ALL.len());
        assert!(codes.iter().all(|&c| c < 15));
    }
}
