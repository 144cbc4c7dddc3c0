//! `unrecorded_message`: the observations of a job against its answered runner messages.

use super::*;

/// The verdict key of an answered runner message: (verdict, reason).
pub(super) fn message_verdict(answer: &Answer) -> Option<(&'static str, Option<&'static str>)> {
    Some(match answer {
        Answer::Extended { .. }
        | Answer::Accepted
        | Answer::Continue
        | Answer::CancelInstruction => ("accepted", None),
        Answer::Acknowledged => ("acknowledged", None),
        Answer::Rejected(reason) => ("rejected", Some(reason.as_str())),
        _ => return None,
    })
}

/// `unrecorded_message`: the observations of the job against its answered runner messages.
pub(super) fn check_observations(
    job: JobId,
    ops: &[Op],
    observations: &[imp::ObservationView],
    out: &mut Vec<Violation>,
) {
    type Key = (AttemptId, &'static str);
    let mut recorded: HashMap<Key, BTreeMap<(&'static str, Option<&'static str>), usize>> =
        HashMap::new();
    for o in observations {
        let verdict = (
            o.verdict.as_str(),
            o.verdict.reason().map(imp::Reason::as_str),
        );
        *recorded
            .entry((o.named.attempt, o.kind.as_str()))
            .or_default()
            .entry(verdict)
            .or_insert(0) += 1;
    }
    let mut answered: HashMap<Key, BTreeMap<(&'static str, Option<&'static str>), usize>> =
        HashMap::new();
    let mut maybe: HashMap<Key, usize> = HashMap::new();
    for op in ops {
        let kind = match op.call {
            Call::Heartbeat { .. } => "heartbeat",
            Call::Rejoin { .. } => "rejoin",
            Call::Result { .. } => "result",
            _ => continue,
        };
        let Some(tuple) = op.call.tuple() else {
            continue;
        };
        match op.answer.as_ref().and_then(message_verdict) {
            Some(verdict) => {
                *answered
                    .entry((tuple.attempt, kind))
                    .or_default()
                    .entry(verdict)
                    .or_insert(0) += 1;
            }
            None => *maybe.entry((tuple.attempt, kind)).or_insert(0) += 1,
        }
    }
    let mut keys: HashSet<Key> = recorded.keys().copied().collect();
    keys.extend(answered.keys().copied());
    for key in keys {
        let empty = BTreeMap::new();
        let got = recorded.get(&key).unwrap_or(&empty);
        let want = answered.get(&key).unwrap_or(&empty);
        let mut extra = 0usize;
        for (verdict, n) in want {
            let have = got.get(verdict).copied().unwrap_or(0);
            if have < *n {
                out.push(violation(
                    ViolationKind::UnrecordedMessage,
                    job,
                    format!(
                        "{n} {} of attempt {} answered {:?} but {have} such observations recorded",
                        key.1,
                        short_attempt(&key.0),
                        verdict
                    ),
                ));
            }
        }
        for (verdict, n) in got {
            extra += n.saturating_sub(want.get(verdict).copied().unwrap_or(0));
        }
        let unknown = maybe.get(&key).copied().unwrap_or(0);
        if extra > unknown {
            out.push(violation(
                ViolationKind::UnrecordedMessage,
                job,
                format!(
                    "{extra} observations of {} of attempt {} match no answered call, and only \
                     {unknown} calls had an unknown outcome",
                    key.1,
                    short_attempt(&key.0)
                ),
            ));
        }
    }
}
