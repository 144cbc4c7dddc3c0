//! Reductions of the exhaustive check (`LeaseModel::for_checking`) that change no verdict
//! (docs/model.md, "Configurations": what each reduction saves).

use crate::model::LeaseModel;
use crate::state::*;
use crate::types::*;

impl LeaseModel {
    /// A rejoin is answered at receipt, like a heartbeat, instead of going in flight: only when
    /// checking the protocol exhaustively with disconnects and without the stored ledger. Under
    /// the protocol an accepted rejoin changes nothing (its answer, continue/cancel/stop, is not
    /// modelled: the runner's choices are nondeterministic anyway) and a rejected one changes
    /// nothing either, so a rejoin in flight changes the state only by being there; what it is
    /// for is its verdict and record, which the properties check as a probe in every state
    /// where it could be in flight ([`LeaseModel::rejoins_in_play`]). Conformance
    /// ([`LeaseModel::new`]) and every flawed variant (`rejoin-resurrects-lease` gives a rejoin
    /// an effect) keep rejoins in flight; with the stored ledger a receipt adds a record.
    pub(crate) fn rejoins_at_receipt(&self) -> bool {
        self.skip_no_ops
            && self.config.disconnects
            && self.config.variant == Variant::None
            && self.config.ledger == 0
    }

    /// With [`LeaseModel::rejoins_at_receipt`]: every rejoin that could be in flight in `s` had
    /// rejoins gone in flight: the rejoin of each attempt by its own runner with its exact tuple,
    /// for each attempt its runner still holds or that is its job's current attempt of a job not
    /// finished (any other rejoin in flight is one [`LeaseModel`]'s loss of messages that can no
    /// longer matter drops; with a failover every attempt, since nothing is dropped then). A
    /// superset of the rejoins in flight: a rejoin is probed even where its runner never lost
    /// contact, which under the protocol is a genuine message all the same.
    pub(crate) fn rejoins_in_play<'a>(
        &'a self,
        s: &'a State,
    ) -> impl Iterator<Item = Message> + 'a {
        let on = self.rejoins_at_receipt();
        s.attempts
            .iter()
            .enumerate()
            .filter(move |_| on)
            .filter_map(move |(a, attempt)| {
                let a = a as AttemptId;
                let held = s.runners.get(attempt.runner as usize)?.holds(a);
                let job = s.jobs.get(attempt.job as usize)?;
                let live = held
                    || self.config.failover
                    || (job.current == Some(a) && !job.state.is_terminal());
                live.then_some(Message {
                    kind: MessageKind::Rejoin,
                    sender: attempt.runner,
                    job: attempt.job,
                    attempt: a,
                    lease: attempt.lease,
                    fence: attempt.fence,
                    runner_time: 0,
                    digest: 0,
                    token: 0,
                })
            })
    }
}
