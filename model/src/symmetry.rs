//! Symmetry reduction over the runners of project 0: they are interchangeable, so a state and the
//! same state with those runners renamed are equivalent. The representative is the least state
//! (by `Ord`) over every renaming, so it is canonical. Use it with `spawn_dfs` (`spawn_bfs` and the
//! Explorer ignore symmetry).

use crate::state::*;
use crate::types::RunnerId;
use stateright::{Representative, RewritePlan};

type Plan = RewritePlan<RunnerId, Vec<RunnerId>>;

fn plan(permutation: Vec<RunnerId>) -> Plan {
    RewritePlan::new(permutation, |r, p| {
        p.get(*r as usize).copied().unwrap_or(*r)
    })
}

fn message(m: &Message, p: &Plan) -> Message {
    Message {
        sender: p.rewrite(&m.sender),
        ..*m
    }
}

impl State {
    /// This state with every runner id `r` renamed to `permutation[r]` (ids beyond the
    /// permutation, e.g. the outsider, are kept).
    pub fn rename_runners(&self, permutation: &[RunnerId]) -> State {
        let p = plan(permutation.to_vec());
        let mut runners = self.runners.clone();
        for (old, runner) in self.runners.iter().enumerate() {
            runners[p.rewrite(&(old as RunnerId)) as usize] = runner.clone();
        }
        State {
            clock: self.clock,
            jobs: self
                .jobs
                .iter()
                .map(|j| Job {
                    completed_by: j.completed_by.map(|(a, r)| (a, p.rewrite(&r))),
                    ..j.clone()
                })
                .collect(),
            attempts: self
                .attempts
                .iter()
                .map(|a| Attempt {
                    runner: p.rewrite(&a.runner),
                    ..a.clone()
                })
                .collect(),
            runners,
            in_flight: self.in_flight.iter().map(|m| message(m, &p)).collect(),
            targets: self.targets.clone(),
        }
    }
}

/// Every permutation of `0..n`, in lexicographic order.
fn permutations(n: u8) -> Vec<Vec<RunnerId>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for pos in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(pos, n - 1);
            out.push(p);
        }
    }
    out.sort();
    out
}

impl Representative for State {
    fn representative(&self) -> Self {
        let symmetric = self.runners.iter().filter(|r| r.project == 0).count() as u8;
        permutations(symmetric)
            .iter()
            .map(|p| self.rename_runners(p))
            .min()
            .expect("at least the identity permutation")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_of_three_runners_are_the_six_orders() {
        let all = permutations(3);
        assert_eq!(all.len(), 6);
        assert_eq!(all[0], vec![0, 1, 2]);
        assert_eq!(all[5], vec![2, 1, 0]);
    }
}
