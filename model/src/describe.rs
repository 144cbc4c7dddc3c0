//! Human-readable descriptions of actions and paths: numbered steps and Mermaid sequence diagrams.

use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;

/// A runner's display name: `R0`, `R1`, … (`R<n>` is the outsider when there is one).
pub fn runner(r: RunnerId) -> String {
    format!("R{r}")
}

/// A message's tuple as `(job J, attempt A, lease L, fence F)`, with the slot token of a target
/// mutation.
pub fn tuple(m: &Message) -> String {
    let token = if m.kind == MessageKind::TargetMutation {
        format!(", slot token {}", m.token)
    } else {
        String::new()
    };
    format!(
        "(job {}, attempt {}, lease {}, fence {}{token})",
        m.job, m.attempt, m.lease, m.fence
    )
}

/// Which attempt of a runner's batch a step names: nothing for the one it holds.
fn of(attempt: &Option<AttemptId>) -> String {
    attempt.map_or(String::new(), |a| format!(" for attempt {a}"))
}

fn result(outcome: Outcome, digest: Digest) -> String {
    if digest == 0 {
        format!("result({outcome})")
    } else {
        format!("result({outcome}, digest {digest})")
    }
}

fn kind_of(m: &Message) -> String {
    match m.kind {
        MessageKind::Result(o) => result(o, m.digest),
        MessageKind::SideEffect(effect) => effect.describe(),
        other => other.name().to_string(),
    }
}

/// One action in a line.
pub fn action(a: &Action) -> String {
    match a {
        Action::Claim { runner: r } => format!("{} claims", runner(*r)),
        Action::ClaimBatch { runner: r, limit } => {
            format!("{} claims a batch of up to {limit}", runner(*r))
        }
        Action::Heartbeat {
            runner: r,
            runner_time: skew,
            attempt,
        } => {
            format!(
                "{} sends heartbeat{} (runner time {skew})",
                runner(*r),
                of(attempt)
            )
        }
        Action::Result {
            runner: r,
            outcome,
            runner_time: skew,
            digest,
            attempt,
        } => {
            format!(
                "{} sends {}{} (runner time {skew})",
                runner(*r),
                result(*outcome, *digest),
                of(attempt)
            )
        }
        Action::TargetMutation { runner: r, attempt } => {
            format!("{} sends a target mutation{}", runner(*r), of(attempt))
        }
        Action::SideEffect { runner: r, effect } => {
            format!("{} sends {}", runner(*r), effect.describe())
        }
        Action::StopExecuting { runner: r, attempt } => {
            format!("{} stops executing{}", runner(*r), of(attempt))
        }
        Action::Disconnect { runner: r } => format!("{} disconnects", runner(*r)),
        Action::RunnerRevoke { runner: r } => {
            format!("an operator revokes {} (runner_revoke)", runner(*r))
        }
        Action::Rejoin {
            runner: r,
            runner_time: skew,
        } => {
            format!(
                "{} reconnects and sends rejoin (runner time {skew})",
                runner(*r)
            )
        }
        Action::Replay {
            runner: r,
            message,
            forge,
        } => {
            let how = match forge {
                Forge::AsIs => "under its own identity".to_string(),
                Forge::WrongLease => "with a forged lease id".to_string(),
                Forge::WrongFence => "with a forged fence".to_string(),
                Forge::OtherAttempt { attempt } => format!("naming attempt {attempt}'s tuple"),
            };
            format!(
                "{} replays {}'s {} {} {how}",
                runner(*r),
                runner(message.sender),
                kind_of(message),
                tuple(message)
            )
        }
        Action::Deliver { message } => {
            let to = if message.kind == MessageKind::TargetMutation {
                "target"
            } else {
                "server"
            };
            format!(
                "{to} receives {}'s {} {}",
                runner(message.sender),
                kind_of(message),
                tuple(message)
            )
        }
        Action::Tick => "tick (server time passes)".to_string(),
        Action::Failover => "the database fails over: the server's last committed transition is lost, the epoch rises".to_string(),
        Action::ReplicaClock { offset } => format!("a replica whose clock reads server time {offset:+} serves the next steps"),
        Action::ExpirySweep => "server runs the expiry sweep".to_string(),
        Action::ServerStarts => "a second server with a larger lease ttl starts and records its lease policy".to_string(),
        Action::Cancel { job } => format!("operator cancels job {job}"),
        Action::Reconcile {
            job,
            finding,
            decision,
        } => {
            format!("operator reconciles job {job}: finding {finding}, decision {decision}")
        }
        Action::OutsiderCancel { job } => format!("the outsider's operator cancels job {job}"),
        Action::OutsiderReconcile {
            job,
            finding,
            decision,
        } => format!(
            "the outsider's operator reconciles job {job}: finding {finding}, decision {decision}"
        ),
    }
}

/// The part of a state a reader needs: jobs, attempts (with the ticks left on an active lease),
/// targets. Time is relative to now, so there is no clock to show.
pub fn state(s: &State) -> String {
    let jobs: Vec<String> = s
        .jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let current = job.current.map_or("-".to_string(), |a| a.to_string());
            format!(
                "job {j} {} (fence {}, current {current})",
                job.state, job.fence
            )
        })
        .collect();
    let attempts: Vec<String> = s
        .attempts
        .iter()
        .enumerate()
        .map(|(a, at)| {
            let exec = match at.execution {
                Execution::Executing => "executing".to_string(),
                Execution::Stopped => "stopped executing".to_string(),
                Execution::Finished(o) => format!("finished {o}"),
            };
            let lease = match at.state {
                AttemptState::Active if at.lease_expiry > s.clock => {
                    format!("lease valid for {} tick(s), ", at.lease_expiry - s.clock)
                }
                AttemptState::Active => "lease expired, ".to_string(),
                _ => String::new(),
            };
            format!(
                "attempt {a} of job {} by {} fence {} slot token {} {} ({lease}{exec})",
                at.job,
                runner(at.runner),
                at.fence,
                at.token,
                at.state,
            )
        })
        .collect();
    let mut out = jobs.join("; ");
    if !attempts.is_empty() {
        out.push_str("; ");
        out.push_str(&attempts.join("; "));
    }
    let targets: Vec<String> = s
        .targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.applied > 0 || t.holder.is_some())
        .map(|(slot, t)| {
            let holder = t
                .holder
                .map_or("free".to_string(), |j| format!("reserved by job {j}"));
            format!(
                "slot {slot} {holder}, applied {}x (last from slot token {})",
                t.applied, t.last_applied
            )
        })
        .collect();
    if !targets.is_empty() {
        out.push_str("; ");
        out.push_str(&targets.join("; "));
    }
    out
}

/// Numbered steps a person can follow: what happened, the verdict, and the resulting state.
pub fn steps(model: &LeaseModel, path: &[(State, Option<Action>)]) -> Vec<String> {
    let mut out = vec![format!("0. initial state: {}", state(&path[0].0))];
    for (i, window) in path.windows(2).enumerate() {
        let (before, Some(act)) = (&window[0].0, &window[0].1) else {
            continue;
        };
        let after = &window[1].0;
        let verdict = model
            .expected(before, act)
            .map(|e| format!(" -> {e}"))
            .unwrap_or_default();
        out.push(format!(
            "{}. {}{verdict}\n   => {}",
            i + 1,
            action(act),
            state(after)
        ));
    }
    out
}

/// A Mermaid `sequenceDiagram` of a path.
pub fn mermaid(model: &LeaseModel, path: &[(State, Option<Action>)]) -> String {
    let mut out = String::from("sequenceDiagram\n");
    let runners = path[0].0.runners.len() as RunnerId;
    for r in 0..runners {
        out.push_str(&format!("    participant {}\n", runner(r)));
    }
    out.push_str("    participant Server\n    participant Target\n    participant Operator\n");
    for window in path.windows(2) {
        let (before, Some(act)) = (&window[0].0, &window[0].1) else {
            continue;
        };
        let verdict = model
            .expected(before, act)
            .map(|e| e.to_string())
            .unwrap_or_default();
        let line = match act {
            Action::Claim { runner: r } => {
                format!(
                    "{}->>Server: claim\n    Server-->>{}: {verdict}",
                    runner(*r),
                    runner(*r)
                )
            }
            Action::ClaimBatch { runner: r, limit } => {
                format!(
                    "{}->>Server: claim (batch of up to {limit})\n    Server-->>{}: {verdict}",
                    runner(*r),
                    runner(*r)
                )
            }
            Action::Heartbeat { runner: r, .. } => {
                format!(
                    "{}->>Server: heartbeat\n    Server-->>{}: {verdict}",
                    runner(*r),
                    runner(*r)
                )
            }
            Action::SideEffect { runner: r, effect } => {
                format!(
                    "{}->>Server: {}\n    Server-->>{}: {verdict}",
                    runner(*r),
                    effect.describe(),
                    runner(*r)
                )
            }
            Action::Result { runner: r, .. }
            | Action::Rejoin { runner: r, .. }
            | Action::TargetMutation { runner: r, .. } => {
                let to = if matches!(act, Action::TargetMutation { .. }) {
                    "Target"
                } else {
                    "Server"
                };
                format!(
                    "{}-)Server: {} (in flight to {to})",
                    runner(*r),
                    action(act)
                )
                .replace("-)Server", &format!("-){to}"))
            }
            Action::StopExecuting { runner: r, .. } | Action::Disconnect { runner: r } => {
                format!("Note over {}: {}", runner(*r), action(act))
            }
            Action::Replay { runner: r, .. } => format!("{}-)Server: {}", runner(*r), action(act)),
            Action::Deliver { message } => {
                let to = if message.kind == MessageKind::TargetMutation {
                    "Target"
                } else {
                    "Server"
                };
                format!(
                    "Note over {to}: receives {}'s {} {}: {verdict}",
                    runner(message.sender),
                    kind_of(message),
                    tuple(message)
                )
            }
            Action::Tick => "Note over Server: tick (server time passes)".to_string(),
            Action::RunnerRevoke { runner: r } => {
                format!("Operator->>Server: runner_revoke {}", runner(*r))
            }
            Action::Failover => {
                "Note over Server: failover: the last committed transition is lost, the epoch rises"
                    .to_string()
            }
            Action::ExpirySweep => format!("Note over Server: expiry sweep: {verdict}"),
            Action::ServerStarts => {
                "Note over Server: a second server starts and records its lease policy".to_string()
            }
            Action::ReplicaClock { offset } => {
                format!("Note over Server: a replica whose clock reads {offset:+} serves")
            }
            Action::Cancel { .. }
            | Action::Reconcile { .. }
            | Action::OutsiderCancel { .. }
            | Action::OutsiderReconcile { .. } => {
                format!(
                    "Operator->>Server: {}\n    Server-->>Operator: {verdict}",
                    action(act)
                )
            }
        };
        out.push_str("    ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}
