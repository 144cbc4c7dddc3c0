//! The demonstration targets' record (`target_mutations`, `targets`; docs/protocol.md §8.4, rule
//! R9) against their own rules and against the ledger.
//!
//! A target is outside the control plane: it judges a mutation by the slot token it carries, never
//! by the ledger. Its record is replayed per slot in its own order (the `id` of a slot's mutations
//! is drawn while the slot's `targets` row is locked, so it is the order the target judged them):
//!
//! - a `fenced` slot applies a token only if it is not below the highest token it applied before
//!   (invariant 7), and refuses it (`stale_fence`) otherwise; its `highest_slot_token` is not
//!   below a token it applied;
//! - an `idempotent` slot applies each deployment id at most once (invariant 8), and acknowledges
//!   a repeat;
//! - an `unfenced` slot applies everything;
//! - every *applied* mutation carries a token the ledger issued: the slot token of the claim of
//!   the attempt it names, an attempt of the job it names, a job naming that slot, and it reached
//!   the target after that claim (within the receipt-time tolerance). A token below one issued
//!   later is applied by design until the later holder's first mutation (§8.5): not a violation.
//!
//! The rows carry no `ledger_seq`: every run, `--since` too, reads them all (they are one row per
//! mutation of the demonstration targets only).

use super::{Kind, Violation};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

type Time = DateTime<Utc>;

/// One mutation that reached a demonstration target, with what the ledger says about the attempt
/// it names.
#[derive(Clone, Debug)]
pub struct MutationRow {
    pub id: i64,
    pub slot: String,
    /// The slot's kind (`targets.kind`).
    pub kind: String,
    pub job: Uuid,
    pub attempt: Uuid,
    pub slot_token: i64,
    pub deployment_id: String,
    pub verdict: String,
    pub reason: Option<String>,
    pub applied: bool,
    pub received_at: Time,
    /// The named attempt's job, slot token and claim time (`None`: no such attempt).
    pub attempt_job: Option<Uuid>,
    pub attempt_token: Option<i64>,
    pub attempt_claimed_at: Option<Time>,
    /// The slot the named job names (`None`: no such job) and its project.
    pub job_target: Option<String>,
    pub job_project: Option<Uuid>,
}

/// A demonstration target's row.
#[derive(Clone, Debug)]
pub struct TargetRow {
    pub slot: String,
    pub kind: String,
    pub highest_slot_token: Option<i64>,
}

/// What the targets recorded: every mutation, in slot and target order, every target row, and
/// whether a prune may have deleted some (an audit watermark is recorded: a prune deletes a
/// finished job's mutations with it).
#[derive(Default)]
pub struct Record {
    pub mutations: Vec<MutationRow>,
    pub targets: Vec<TargetRow>,
    pub pruned: bool,
}

/// The targets' record. Empty when the schema has no `target_mutations` table.
pub async fn read(conn: &mut PgConnection) -> Result<Record, sqlx::Error> {
    let exists: bool = sqlx::query_scalar(
        "SELECT to_regclass('target_mutations') IS NOT NULL AND to_regclass('targets') IS NOT NULL",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !exists {
        return Ok(Record::default());
    }
    let rows = sqlx::query(
        "SELECT m.id, m.slot, t.kind, m.job_id, m.attempt_id, m.slot_token, m.deployment_id, \
                m.verdict, m.reason, m.applied, m.received_at, a.job_id AS attempt_job, \
                a.slot_token AS attempt_token, a.claimed_at AS attempt_claimed_at, \
                j.target AS job_target, j.project_id AS job_project \
         FROM target_mutations AS m \
         JOIN targets AS t ON t.slot = m.slot \
         LEFT JOIN attempts AS a ON a.id = m.attempt_id \
         LEFT JOIN jobs AS j ON j.id = m.job_id \
         ORDER BY m.slot, m.id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mutations = rows
        .iter()
        .map(|r| {
            Ok(MutationRow {
                id: r.try_get("id")?,
                slot: r.try_get("slot")?,
                kind: r.try_get("kind")?,
                job: r.try_get("job_id")?,
                attempt: r.try_get("attempt_id")?,
                slot_token: r.try_get("slot_token")?,
                deployment_id: r.try_get("deployment_id")?,
                verdict: r.try_get("verdict")?,
                reason: r.try_get("reason")?,
                applied: r.try_get("applied")?,
                received_at: r.try_get("received_at")?,
                attempt_job: r.try_get("attempt_job")?,
                attempt_token: r.try_get("attempt_token")?,
                attempt_claimed_at: r.try_get("attempt_claimed_at")?,
                job_target: r.try_get("job_target")?,
                job_project: r.try_get("job_project")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let targets = sqlx::query("SELECT slot, kind, highest_slot_token FROM targets ORDER BY slot")
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| {
            Ok(TargetRow {
                slot: r.try_get("slot")?,
                kind: r.try_get("kind")?,
                highest_slot_token: r.try_get("highest_slot_token")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let pruned = super::order::pruned_through(conn).await?.is_some();
    Ok(Record {
        mutations,
        targets,
        pruned,
    })
}

fn violation(m: &MutationRow, detail: String) -> Violation {
    Violation {
        kind: Kind::TargetMutation,
        job: m.job,
        project: m.job_project.unwrap_or_default(),
        record: format!("target mutation #{} (slot `{}`)", m.id, m.slot),
        detail,
        steps: Vec::new(),
    }
}

/// The violations the targets' record shows. `project`: only mutations naming a job of it (every
/// slot's history is still replayed whole). After a prune (`record.pruned`) a refusal the rule
/// does not explain is not reported: the applied mutation behind it may have been pruned (an
/// applied mutation the rule refuses still is: a prune only removes what came before).
/// `tolerance`: of receipt times ([`super::time::Policy::tolerance`]).
pub fn check(
    record: &Record,
    project: Option<Uuid>,
    tolerance: chrono::Duration,
) -> Vec<Violation> {
    let (mutations, targets) = (&record.mutations, &record.targets);
    let mut out = Vec::new();
    // Per slot: the highest token applied so far (and by which mutation), the deployment ids
    // applied so far.
    let mut highest: HashMap<&str, (i64, i64)> = HashMap::new();
    let mut deployed: HashSet<(&str, &str)> = HashSet::new();
    for m in mutations {
        let shown = project.is_none_or(|p| m.job_project == Some(p));
        let mut found = |detail: String| {
            if shown {
                out.push(violation(m, detail));
            }
        };
        let recorded = match &m.reason {
            Some(reason) => format!("{} ({reason})", m.verdict),
            None => m.verdict.clone(),
        };
        // The target's own rule.
        let expected: (&str, Option<&str>) = match m.kind.as_str() {
            "fenced" => match highest.get(m.slot.as_str()) {
                Some(&(top, _)) if m.slot_token < top => ("rejected", Some("stale_fence")),
                _ => ("accepted", None),
            },
            "idempotent" if deployed.contains(&(m.slot.as_str(), m.deployment_id.as_str())) => {
                ("acknowledged", None)
            }
            _ => ("accepted", None),
        };
        let refusal_unexplained = expected.0 == "accepted" && m.verdict != "accepted";
        let disagrees = (m.verdict.as_str(), m.reason.as_deref()) != expected
            || m.applied != (m.verdict == "accepted");
        if disagrees && !(record.pruned && refusal_unexplained) {
            let why = match (m.kind.as_str(), highest.get(m.slot.as_str())) {
                ("fenced", Some((top, by))) => format!(
                    "the slot had applied slot token {top} (target mutation #{by}); a fenced \
                     target refuses a lower token (invariant 7)"
                ),
                ("fenced", None) => "the slot had applied no token yet".to_string(),
                ("idempotent", _) if expected.0 == "acknowledged" => format!(
                    "deployment {} was already applied at the slot (invariant 8)",
                    m.deployment_id
                ),
                (kind, _) => format!("the slot is {kind}"),
            };
            found(format!(
                "slot token {} recorded {recorded}{}, the {} target's rule gives {}: {why}",
                m.slot_token,
                if m.applied { ", applied" } else { "" },
                m.kind,
                match expected.1 {
                    Some(reason) => format!("{} ({reason})", expected.0),
                    None => expected.0.to_string(),
                }
            ));
        }
        if m.applied {
            // Provenance: a token the ledger issued to the attempt the mutation names.
            let why = if m.attempt_job.is_none() {
                Some(format!(
                    "attempt {} does not exist in the ledger",
                    m.attempt
                ))
            } else if m.attempt_job != Some(m.job) {
                Some(format!(
                    "attempt {} is not an attempt of job {}",
                    m.attempt, m.job
                ))
            } else if m.job_target.as_deref() != Some(m.slot.as_str()) {
                Some(format!(
                    "job {} names slot `{}`, not this one",
                    m.job,
                    m.job_target.as_deref().unwrap_or("none")
                ))
            } else if m.attempt_token != Some(m.slot_token) {
                Some(format!(
                    "the claim of attempt {} issued slot token {}",
                    m.attempt,
                    m.attempt_token.unwrap_or_default()
                ))
            } else if m
                .attempt_claimed_at
                .is_some_and(|claimed| m.received_at + tolerance < claimed)
            {
                Some(format!(
                    "it reached the target at {}, before the claim that issued the token (at {})",
                    m.received_at.format("%Y-%m-%d %H:%M:%S%.6f"),
                    m.attempt_claimed_at
                        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
                        .unwrap_or_default()
                ))
            } else {
                None
            };
            if let Some(why) = why {
                found(format!(
                    "applied with slot token {}, a token the ledger never issued to attempt {}: \
                     {why}",
                    m.slot_token, m.attempt
                ));
            }
            let top = highest
                .entry(m.slot.as_str())
                .or_insert((m.slot_token, m.id));
            if m.slot_token >= top.0 {
                *top = (m.slot_token, m.id);
            }
            deployed.insert((m.slot.as_str(), m.deployment_id.as_str()));
        }
    }
    for t in targets {
        let Some(&(top, by)) = highest.get(t.slot.as_str()) else {
            continue;
        };
        if t.kind == "fenced" && t.highest_slot_token.is_none_or(|h| h < top) {
            let shown = project.is_none_or(|p| {
                mutations
                    .iter()
                    .any(|m| m.id == by && m.job_project == Some(p))
            });
            if let Some(m) = mutations.iter().find(|m| m.id == by).filter(|_| shown) {
                out.push(Violation {
                    kind: Kind::TargetMutation,
                    job: m.job,
                    project: m.job_project.unwrap_or_default(),
                    record: format!("target `{}` (row)", t.slot),
                    detail: format!(
                        "the fenced target's highest applied slot token is {}, below token {top} \
                         it applied (target mutation #{by}): a stale token would be applied again",
                        t.highest_slot_token
                            .map_or("none".to_string(), |h| h.to_string())
                    ),
                    steps: Vec::new(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{check, MutationRow, Record, TargetRow};
    use crate::time::TOLERANCE;
    use crate::Kind;
    use chrono::{TimeZone, Utc};
    use uuid::Uuid;

    fn mutation(id: i64, kind: &str, token: i64, deployment: &str, verdict: &str) -> MutationRow {
        let job = Uuid::from_u128(1);
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, id as u32).unwrap();
        MutationRow {
            id,
            slot: "s".into(),
            kind: kind.into(),
            job,
            attempt: Uuid::from_u128(10 + token as u128),
            slot_token: token,
            deployment_id: deployment.into(),
            verdict: verdict.into(),
            reason: (verdict == "rejected").then(|| "stale_fence".to_string()),
            applied: verdict == "accepted",
            received_at: at,
            attempt_job: Some(job),
            attempt_token: Some(token),
            attempt_claimed_at: Some(at),
            job_target: Some("s".into()),
            job_project: Some(Uuid::nil()),
        }
    }

    #[test]
    fn an_idempotent_target_applies_a_deployment_once_and_acknowledges_repeats() {
        let target = |kind: &str| TargetRow {
            slot: "s".into(),
            kind: kind.into(),
            highest_slot_token: None,
        };
        let clean = [
            mutation(1, "idempotent", 1, "d", "accepted"),
            mutation(2, "idempotent", 2, "d", "acknowledged"),
            mutation(3, "idempotent", 2, "e", "accepted"),
        ];
        let record = |mutations: &[MutationRow], kind: &str| Record {
            mutations: mutations.to_vec(),
            targets: vec![target(kind)],
            pruned: false,
        };
        assert!(check(&record(&clean, "idempotent"), None, TOLERANCE).is_empty());
        let twice = [
            mutation(1, "idempotent", 1, "d", "accepted"),
            mutation(2, "idempotent", 2, "d", "accepted"),
        ];
        let found = check(&record(&twice, "idempotent"), None, TOLERANCE);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].kind, Kind::TargetMutation);
        assert!(found[0].record.starts_with("target mutation #2 "));
        // Unfenced: everything applied, a lower token too.
        let unfenced = [
            mutation(1, "unfenced", 2, "d", "accepted"),
            mutation(2, "unfenced", 1, "d", "accepted"),
        ];
        assert!(check(&record(&unfenced, "unfenced"), None, TOLERANCE).is_empty());
        // After a prune, a repeat acknowledged without its first application is not reported.
        let pruned = Record {
            pruned: true,
            ..record(&clean[1..], "idempotent")
        };
        assert!(check(&pruned, None, TOLERANCE).is_empty());
        assert_eq!(
            check(&record(&clean[1..], "idempotent"), None, TOLERANCE).len(),
            1
        );
    }
}
