//! The witness a watermark commits to (docs/audit.md, "The witness"): what `--since` compares a
//! ledger with, kept by the operator in a file beside the token (`--witness FILE`).
//!
//! The jobs are split into buckets by id. For each bucket, two digests as of the watermark's
//! position: `chain`, over each job's chain head (its tombstone's for a pruned job), and `state`,
//! over the state each job holds in rows (the job's row, its attempts' rows, the slot row it
//! holds: `state_entry`). Beside them: each job's own state digest, the jobs unfinished at the
//! position, every runner's revocation, and the lease policy's history up to the position. The
//! token carries the bucket count, the root of the chain digests (recomputable from the ledger
//! alone: a `--since` run without the file still verifies every head) and the root of the rest
//! (the file must match it). A mismatch is narrowed to a bucket, whose jobs are replayed in full
//! and named, or to one job.
//!
//! What a `--since W` run can and cannot recompute: every job's chain head as of W (the chain),
//! so every bucket's `chain` digest; a bucket's `state` digest only when none of its jobs has a
//! record after W or was pruned after W (otherwise its rows moved on legitimately). In such a
//! bucket each job without a record after W is compared on its own state digest (the replay
//! judges a row only as far as the records lead, so an edit of a field it does not compare would
//! pass); the jobs with a record after W are replayed in full.

use chrono::{DateTime, Utc};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

type Time = DateTime<Utc>;

/// A witness file of the first version (no job digests, no lease policy history): still read.
const MAGIC_1: &[u8] = b"leasewright-witness-1\n";
const MAGIC: &[u8] = b"leasewright-witness-2\n";

/// A `lease_policy_history` row (migration 0019): its ledger position, the ttl and the time it was
/// recorded (microseconds, the latter since 2000-01-01).
pub type PolicyRow = (i64, i64, i64);

/// What a watermark commits to beyond its chain root.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Witness {
    /// A power of two.
    pub buckets: u32,
    pub chain: Vec<[u8; 32]>,
    pub state: Vec<[u8; 32]>,
    /// Jobs neither passed, failed, cancelled nor aborted at the position, in id order.
    pub unfinished: Vec<Uuid>,
    /// Every runner and its revocation time (microseconds since 2000-01-01), in id order.
    pub runners: Vec<(Uuid, Option<i64>)>,
    /// Each job's own state digest (`job_digest`), in id order: the jobs of the `state` digests.
    /// `None`: a file of the first version.
    pub jobs: Option<Vec<(Uuid, [u8; 32])>>,
    /// The lease policy's history up to the position, in position order (empty in a file of the
    /// first version, or without migration 0019).
    pub policy: Vec<PolicyRow>,
}

/// One job's state digest: sha256 of its id and its state entry.
pub fn job_digest(job: Uuid, entry: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(job.as_bytes());
    h.update(entry);
    h.finalize().into()
}

/// The bucket count for `jobs` jobs: about four jobs a bucket, at least 16, at most 65,536 (a
/// witness file of at most 4 MB).
pub fn bucket_count(jobs: usize) -> u32 {
    ((jobs / 4).max(16).next_power_of_two() as u32).min(1 << 16)
}

/// The bucket of `job` among `buckets` (a power of two): the job id's last four bytes (random in
/// every UUID version the project issues).
pub fn bucket_of(job: Uuid, buckets: u32) -> usize {
    let b = job.as_bytes();
    (u32::from_be_bytes([b[12], b[13], b[14], b[15]]) & (buckets - 1)) as usize
}

/// Per-bucket digests of `entries` (job id order), each entry `job id || bytes`.
pub fn bucket_digests<'a>(
    buckets: u32,
    entries: impl IntoIterator<Item = (Uuid, &'a [u8])>,
) -> Vec<[u8; 32]> {
    let mut hashers: Vec<Sha256> = (0..buckets).map(|_| Sha256::new()).collect();
    for (job, bytes) in entries {
        let h = &mut hashers[bucket_of(job, buckets)];
        h.update(job.as_bytes());
        h.update((bytes.len() as u32).to_be_bytes());
        h.update(bytes);
    }
    hashers.into_iter().map(|h| h.finalize().into()).collect()
}

/// A chain entry's bytes: the chain seq and the head.
pub fn chain_entry(seq: i64, head: &[u8]) -> Vec<u8> {
    let mut out = seq.to_be_bytes().to_vec();
    out.extend_from_slice(head);
    out
}

/// The root of the chain digests (what the token carries).
pub fn chain_root(buckets: u32, chain: &[[u8; 32]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"chain");
    h.update(buckets.to_be_bytes());
    for d in chain {
        h.update(d);
    }
    h.finalize().into()
}

impl Witness {
    /// The root of everything but the chain digests (what the token carries).
    pub fn state_root(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"state");
        h.update(self.buckets.to_be_bytes());
        for d in &self.state {
            h.update(d);
        }
        h.update((self.unfinished.len() as u64).to_be_bytes());
        for j in &self.unfinished {
            h.update(j.as_bytes());
        }
        h.update((self.runners.len() as u64).to_be_bytes());
        for (r, revoked) in &self.runners {
            h.update(r.as_bytes());
            match revoked {
                None => h.update([0]),
                Some(t) => {
                    h.update([1]);
                    h.update(t.to_be_bytes());
                }
            }
        }
        if let Some(jobs) = &self.jobs {
            h.update(b"jobs");
            h.update((jobs.len() as u64).to_be_bytes());
            for (j, d) in jobs {
                h.update(j.as_bytes());
                h.update(d);
            }
            h.update((self.policy.len() as u64).to_be_bytes());
            for (seq, ttl, at) in &self.policy {
                h.update(seq.to_be_bytes());
                h.update(ttl.to_be_bytes());
                h.update(at.to_be_bytes());
            }
        }
        h.finalize().into()
    }

    pub fn chain_root(&self) -> [u8; 32] {
        chain_root(self.buckets, &self.chain)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = if self.jobs.is_some() { MAGIC } else { MAGIC_1 }.to_vec();
        out.extend_from_slice(&self.buckets.to_be_bytes());
        for d in self.chain.iter().chain(&self.state) {
            out.extend_from_slice(d);
        }
        out.extend_from_slice(&(self.unfinished.len() as u64).to_be_bytes());
        for j in &self.unfinished {
            out.extend_from_slice(j.as_bytes());
        }
        out.extend_from_slice(&(self.runners.len() as u64).to_be_bytes());
        for (r, revoked) in &self.runners {
            out.extend_from_slice(r.as_bytes());
            out.extend_from_slice(&revoked.unwrap_or(i64::MIN).to_be_bytes());
        }
        if let Some(jobs) = &self.jobs {
            out.extend_from_slice(&(jobs.len() as u64).to_be_bytes());
            for (j, d) in jobs {
                out.extend_from_slice(j.as_bytes());
                out.extend_from_slice(d);
            }
            out.extend_from_slice(&(self.policy.len() as u64).to_be_bytes());
            for (seq, ttl, at) in &self.policy {
                for n in [seq, ttl, at] {
                    out.extend_from_slice(&n.to_be_bytes());
                }
            }
        }
        out
    }

    /// A witness file read back (`None`: not one).
    pub fn from_bytes(bytes: &[u8]) -> Option<Witness> {
        let (mut rest, second) = match bytes.strip_prefix(MAGIC) {
            Some(rest) => (rest, true),
            None => (bytes.strip_prefix(MAGIC_1)?, false),
        };
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
            rest = tail;
            Some(head)
        };
        let buckets = u32::from_be_bytes(take(4)?.try_into().ok()?);
        if !buckets.is_power_of_two() || buckets > 1 << 16 {
            return None;
        }
        let mut digests = |n: u32| -> Option<Vec<[u8; 32]>> {
            (0..n).map(|_| take(32)?.try_into().ok()).collect()
        };
        let chain = digests(buckets)?;
        let state = digests(buckets)?;
        let count = |b: &[u8]| usize::try_from(u64::from_be_bytes(b.try_into().ok()?)).ok();
        let n = count(take(8)?)?;
        let unfinished = (0..n)
            .map(|_| Uuid::from_slice(take(16)?).ok())
            .collect::<Option<Vec<_>>>()?;
        let n = count(take(8)?)?;
        let runners = (0..n)
            .map(|_| {
                let id = Uuid::from_slice(take(16)?).ok()?;
                let t = i64::from_be_bytes(take(8)?.try_into().ok()?);
                Some((id, (t != i64::MIN).then_some(t)))
            })
            .collect::<Option<Vec<_>>>()?;
        let int = |b: &[u8]| Some(i64::from_be_bytes(b.try_into().ok()?));
        let (jobs, policy) = if second {
            let n = count(take(8)?)?;
            let jobs = (0..n)
                .map(|_| {
                    Some((
                        Uuid::from_slice(take(16)?).ok()?,
                        take(32)?.try_into().ok()?,
                    ))
                })
                .collect::<Option<Vec<_>>>()?;
            let n = count(take(8)?)?;
            let policy = (0..n)
                .map(|_| Some((int(take(8)?)?, int(take(8)?)?, int(take(8)?)?)))
                .collect::<Option<Vec<_>>>()?;
            (Some(jobs), policy)
        } else {
            (None, Vec::new())
        };
        take(1).is_none().then_some(Witness {
            buckets,
            chain,
            state,
            unfinished,
            runners,
            jobs,
            policy,
        })
    }
}

/// A pruned job's tombstone (`ledger_pruned`).
#[derive(Clone, Debug)]
pub struct Tombstone {
    pub job: Uuid,
    pub chain_seq: i64,
    pub chain_head: Vec<u8>,
    pub job_ledger_seq: i64,
    pub max_ledger_seq: i64,
    /// The prune's own ledger position (migration 0019; `None`: written before it).
    pub pruned_seq: Option<i64>,
}

/// What the ledger shows now, for comparing with a witness as of `since`.
pub struct Now<'a> {
    pub since: i64,
    /// Every job's chain entry as of `since` (tombstones included), in id order.
    pub chain_at_since: &'a BTreeMap<Uuid, Vec<u8>>,
    /// Every existing job's state entry now, with its submission's position.
    pub state: &'a BTreeMap<Uuid, (i64, Vec<u8>)>,
    /// Jobs with a record after `since`.
    pub moved: &'a BTreeSet<Uuid>,
    pub tombstones: &'a [Tombstone],
    pub runners: &'a BTreeMap<Uuid, Option<i64>>,
    /// The lease policy's history now, in position order.
    pub policy: &'a [PolicyRow],
}

/// One difference between a witness and the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// A bucket whose chain heads (`chain`) or rows (`state`) are not those witnessed: its jobs
    /// (existing and tombstoned) are the suspects.
    Bucket {
        bucket: usize,
        what: &'static str,
        jobs: Vec<Uuid>,
        tombstoned: Vec<Uuid>,
    },
    /// A job unfinished at the watermark with no record after it, now gone behind a tombstone: a
    /// prune deletes only finished jobs.
    UnfinishedPruned(Uuid),
    /// A job without a record after the watermark whose rows are not those witnessed, in a
    /// bucket whose digest could not be compared (another job of it moved on).
    Job(Uuid),
    /// A `lease_policy_history` row at or below the watermark added, removed or edited since:
    /// the row witnessed and the row now at `position`.
    Policy {
        position: i64,
        then: Option<PolicyRow>,
        now: Option<PolicyRow>,
    },
    /// A runner revoked at the watermark whose revocation now differs, or a runner gone.
    Revocation {
        runner: Uuid,
        then: Option<i64>,
        now: Option<Option<i64>>,
    },
}

/// What `--since` must replay beyond the jobs with a new record, and what differs.
#[derive(Clone, Debug, Default)]
pub struct Compared {
    pub differences: Vec<Difference>,
    /// Jobs to replay in full: the suspects of every bucket that differs, and every job of a
    /// bucket whose rows cannot be compared (a job of it moved on or was pruned since).
    pub replay: BTreeSet<Uuid>,
}

/// `w` (as of `now.since`) against the ledger now.
pub fn compare(w: &Witness, now: &Now<'_>) -> Compared {
    let buckets = w.buckets;
    let mut out = Compared::default();
    let mut members: Vec<Vec<Uuid>> = vec![Vec::new(); buckets as usize];
    for (&job, &(seq, _)) in now.state {
        if seq <= now.since {
            members[bucket_of(job, buckets)].push(job);
        }
    }
    let mut tombstoned: Vec<Vec<Uuid>> = vec![Vec::new(); buckets as usize];
    let mut unknown_state = vec![false; buckets as usize];
    let mut unknown_chain = vec![false; buckets as usize];
    for t in now.tombstones {
        if t.job_ledger_seq > now.since {
            continue;
        }
        let b = bucket_of(t.job, buckets);
        tombstoned[b].push(t.job);
        // Pruned with records after the position: its head as of it is gone (reported on its
        // own, `unverifiable_at_since`).
        if t.max_ledger_seq > now.since {
            unknown_chain[b] = true;
            unknown_state[b] = true;
        }
        // Pruned after the position: its rows as of it are gone.
        if t.pruned_seq.is_some_and(|p| p > now.since) {
            unknown_state[b] = true;
        }
    }
    for job in now.moved {
        unknown_state[bucket_of(*job, buckets)] = true;
    }
    let chain = bucket_digests(
        buckets,
        now.chain_at_since.iter().map(|(j, e)| (*j, &e[..])),
    );
    let state = bucket_digests(
        buckets,
        now.state
            .iter()
            .filter(|(_, (seq, _))| *seq <= now.since)
            .map(|(j, (_, e))| (*j, &e[..])),
    );
    let mut differs = vec![false; buckets as usize];
    for b in 0..buckets as usize {
        let what = if !unknown_chain[b] && chain[b] != w.chain[b] {
            Some("chain heads")
        } else if !unknown_state[b] && state[b] != w.state[b] {
            Some("rows")
        } else {
            None
        };
        if let Some(what) = what {
            out.differences.push(Difference::Bucket {
                bucket: b,
                what,
                jobs: members[b].clone(),
                tombstoned: tombstoned[b].clone(),
            });
        }
        differs[b] = what.is_some();
        if what.is_some() || unknown_state[b] {
            out.replay.extend(members[b].iter().copied());
        }
    }
    // In a bucket whose rows could not be compared (and that differs in nothing else), each job
    // that did not move on is compared on its own digest (a file of the first version has none).
    for (job, then) in w.jobs.iter().flatten() {
        let b = bucket_of(*job, buckets);
        let Some((seq, entry)) = now.state.get(job) else {
            continue;
        };
        if unknown_state[b]
            && !differs[b]
            && *seq <= now.since
            && !now.moved.contains(job)
            && job_digest(*job, entry) != *then
        {
            out.differences.push(Difference::Job(*job));
        }
    }
    let policy_now: BTreeMap<i64, PolicyRow> = now
        .policy
        .iter()
        .filter(|r| r.0 <= now.since)
        .map(|r| (r.0, *r))
        .collect();
    let policy_then: BTreeMap<i64, PolicyRow> = w.policy.iter().map(|r| (r.0, *r)).collect();
    if w.jobs.is_some() {
        let positions: BTreeSet<i64> = policy_now
            .keys()
            .chain(policy_then.keys())
            .copied()
            .collect();
        for position in positions {
            let (then, now) = (policy_then.get(&position), policy_now.get(&position));
            if then != now {
                out.differences.push(Difference::Policy {
                    position,
                    then: then.copied(),
                    now: now.copied(),
                });
            }
        }
    }
    let unfinished: BTreeSet<Uuid> = w.unfinished.iter().copied().collect();
    for t in now.tombstones {
        if unfinished.contains(&t.job) && t.max_ledger_seq <= now.since {
            out.differences.push(Difference::UnfinishedPruned(t.job));
        }
    }
    for (runner, then) in &w.runners {
        let now_revoked = now.runners.get(runner).copied();
        let changed = match (then, now_revoked) {
            (_, None) => true,
            (Some(t), Some(n)) => n != Some(*t),
            (None, Some(_)) => false,
        };
        if changed {
            out.differences.push(Difference::Revocation {
                runner: *runner,
                then: *then,
                now: now_revoked,
            });
        }
    }
    out
}

/// A time as the witness keeps it: microseconds since 2000-01-01 00:00:00 UTC.
pub fn micros(t: Time) -> i64 {
    use chrono::TimeZone as _;
    let base = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    (t - base).num_microseconds().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_witness_reads_back_as_itself_and_a_cut_file_is_refused() {
        let w = Witness {
            buckets: 16,
            chain: vec![[1; 32]; 16],
            state: vec![[2; 32]; 16],
            unfinished: vec![Uuid::from_u128(7)],
            runners: vec![(Uuid::from_u128(1), None), (Uuid::from_u128(2), Some(-5))],
            jobs: Some(vec![(Uuid::from_u128(7), [3; 32])]),
            policy: vec![(4, 30_000_000, 9)],
        };
        let first = Witness {
            jobs: None,
            policy: Vec::new(),
            ..w.clone()
        };
        assert_eq!(Witness::from_bytes(&first.to_bytes()), Some(first.clone()));
        assert_ne!(first.state_root(), w.state_root());
        let bytes = w.to_bytes();
        assert_eq!(Witness::from_bytes(&bytes), Some(w.clone()));
        assert_eq!(Witness::from_bytes(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Witness::from_bytes(&longer), None);
        let mut other = w.clone();
        other.runners[0].1 = Some(0);
        assert_ne!(other.state_root(), w.state_root());
        let mut other = w.clone();
        other.policy[0].1 += 1;
        assert_ne!(other.state_root(), w.state_root());
    }

    #[test]
    fn buckets_hold_about_four_jobs_within_bounds() {
        assert_eq!(bucket_count(0), 16);
        assert_eq!(bucket_count(1000), 256);
        assert_eq!(bucket_count(100_000_000), 65536);
        assert!(bucket_of(Uuid::from_u128(u128::MAX), 16) < 16);
    }
}
