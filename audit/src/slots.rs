//! The target slots' rows (`target_slots`) against the ledger: each slot's counter is at least
//! every slot token a claim of the slot issued (invariant 15 for the claims still to come), and
//! each holder is a job naming the slot with one of its own attempts (the ledger can lead only
//! there; whether it leads to *that* attempt is the holder job's replay, `gap`).

use super::read::{JobLedger, SlotRow};
use super::{Kind, Violation};
use std::collections::HashMap;
use uuid::Uuid;

/// The largest slot token issued per slot by the claims read, with its job and attempt.
#[derive(Clone, Debug, Default)]
pub struct Issued {
    highest: HashMap<String, (i64, Uuid, Uuid)>,
}

impl Issued {
    /// Note every claim of one job (whatever its replay found).
    pub fn read(&mut self, jl: &JobLedger) {
        for a in &jl.attempts {
            self.note(&jl.job.target, a.slot_token, jl.job.id, a.id);
        }
    }

    /// Note one claim of `slot`: the token it issued, its job and attempt.
    pub fn note(&mut self, slot: &str, token: i64, job: Uuid, attempt: Uuid) {
        match self.highest.get_mut(slot) {
            Some(top) if token > top.0 => *top = (token, job, attempt),
            Some(_) => {}
            None => {
                self.highest.insert(slot.to_string(), (token, job, attempt));
            }
        }
    }

    /// The violations the slot rows show. A counter is compared with every claim noted: with the
    /// chain (migration 0015) every claim of every job, read by the chain pass in every run, full
    /// or `--since`; without it, the claims of the jobs replayed.
    pub fn check(&self, rows: &[SlotRow]) -> Vec<Violation> {
        let mut out = Vec::new();
        for row in rows {
            let record = format!("target slot `{}` (row)", row.slot);
            if let Some((token, job, attempt)) = self.highest.get(&row.slot) {
                if *token > row.slot_token {
                    out.push(Violation {
                        kind: Kind::SlotCounter,
                        job: *job,
                        project: Uuid::nil(),
                        record: record.clone(),
                        detail: format!(
                            "the slot's counter is {}, below slot token {token} issued by the \
                             claim of attempt {attempt}: the next claim would issue a token \
                             already issued",
                            row.slot_token
                        ),
                        steps: Vec::new(),
                    });
                }
            }
            let Some(holder) = row.holder_job else {
                continue;
            };
            let why = if row.holder_job_target.is_none() {
                Some("a job that does not exist".to_string())
            } else if row.holder_job_target.as_deref() != Some(row.slot.as_str()) {
                Some(format!(
                    "a job naming slot `{}`",
                    row.holder_job_target.as_deref().unwrap_or_default()
                ))
            } else if row.holder_attempt_job != Some(holder) {
                Some(format!(
                    "attempt {} that is not one of the job's",
                    row.holder_attempt
                        .map_or("none".to_string(), |a| a.to_string())
                ))
            } else {
                None
            };
            if let Some(why) = why {
                out.push(Violation {
                    kind: Kind::SlotHolder,
                    job: holder,
                    project: Uuid::nil(),
                    record,
                    detail: format!(
                        "the slot is held by job {holder} (its holder columns), {why}: no claim \
                         in the ledger leads there, and the slot stays blocked"
                    ),
                    steps: Vec::new(),
                });
            }
        }
        out
    }
}
