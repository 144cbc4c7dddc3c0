"""An in-memory control plane of the fenced-lease protocol, written from docs/protocol.md.

This is a second, independent implementation of the specification (Python, standard library only),
made to show that the conformance suite can test an implementation it knows nothing about: it
shares no code with the Rust implementation, and it is driven only through driver.py, which speaks
the language-neutral driver protocol (docs/conformance.md, "The driver protocol").

Section numbers (§6.1, R3, ...) refer to docs/protocol.md. Identifiers are opaque UUIDs; time is
the server's receipt time `now`, passed into every operation (an integer clock here).

`SEEDED_BUG` (from the environment variable LEASEWRIGHT_EXAMPLE_BUG) switches on one deliberate
departure from the specification, so that a test can show the conformance suite catching it:

    expired-before-not-current   §6.1 checks 11 (`lease_expired`) before 8 (`not_current`): a late
                                 report of an attempt that a reconciliation ended is told its
                                 lease expired instead of that it is no longer current.
    rejoin-misses-cancel         R5: a rejoin accepted while a cancel is requested answers
                                 `continue` instead of `cancel` (the verdict is right; only the
                                 rule's returned value is wrong).
    token-across-jobs            §8.4: a fenced target compares a mutation's slot token with the
                                 highest token of the mutation's own job instead of its slot's:
                                 a stale token of one job is applied after another job on the
                                 same slot applied a higher one. Only a slot shared by several
                                 jobs can show it (with a slot of its own, a job's highest token
                                 is its slot's).
    sweep-without-skew-margin    §3.1: the expiry sweep acts δ past a lease's expiry instead of
                                 2δ: a replica whose clock runs δ ahead sweeps a lease that a
                                 replica δ behind has just renewed, or that its runner still holds
                                 by the slowest clock. Only replica clocks (δ > 0) can show it.
    prune-ignores-audit          retention: a prune deletes every finished job, audited or not,
                                 as only an unaudited prune may.
    failover-without-epoch       §2 "Epochs": fences and slot tokens do not carry the epoch (a
                                 claim issues the counter + 1 only): after a failover that lost a
                                 claim, the next claim issues the lost claim's fence again. Only a
                                 failover can show it.
    failover-without-wait        §2 "Epochs": the new epoch's first claim records the epoch and
                                 takes nothing, but the claims after it do not wait for the
                                 earlier epoch's leases to expire. Only a failover can show it.
    failover-wait-without-skew   §2 "Epochs", §3.1: the wait after a failover lasts the lease ttl
                                 only, not ttl + 2δ: a replica whose clock runs behind still
                                 renews a lease of the earlier epoch when the claims resume. Only
                                 a failover with replica clocks (δ > 0) can show it.
"""

import copy
import hashlib
import os
import uuid

SEEDED_BUG = os.environ.get("LEASEWRIGHT_EXAMPLE_BUG", "")

TERMINAL = ("passed", "failed", "cancelled", "aborted")
# §2 "Epochs": a fence or slot token is `epoch × 2^32 + generation`.
EPOCH_SHIFT = 32
LEASED = ("running", "cancelling")


class Rejected(Exception):
    """A rejection: nothing changes except the observation record (§5)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Project:
    def __init__(self, name):
        self.id = uuid.uuid4()
        self.name = name


class Runner:
    def __init__(self, project, name):
        self.id = uuid.uuid4()
        self.project = project
        self.name = name
        self.revoked = False


class Job:
    def __init__(self, project, slot, seq):
        self.id = uuid.uuid4()
        self.project = project
        self.slot = slot
        self.seq = seq  # submission order
        self.state = "queued"
        self.fence = 0
        self.current_attempt = None
        self.cancel_requested = False
        self.attempts = []  # the ledger, in claim order
        self.last_position = 0  # where the last change to what the server holds of it is


class Attempt:
    def __init__(self, job, runner, fence, lease_expiry, slot_token):
        self.id = uuid.uuid4()
        self.job = job
        self.runner = runner
        self.lease_id = uuid.uuid4()
        self.fence = fence
        self.lease_expiry = lease_expiry
        self.state = "active"
        self.slot_token = slot_token
        self.digest = None  # the committed result's digest (None: none, or adopted)


class Slot:
    """A target slot (§8): one global namespace of names; reserved by at most one attempt."""

    def __init__(self, name, kind):
        self.name = name
        self.kind = kind
        self.token = 0  # the slot token counter (§8.3)
        self.holder = None  # the attempt holding the reservation (§8.2)


class Observation:
    """The record of one received runner message (§2)."""

    def __init__(self, seq, sender, kind, job, attempt, named_attempt, named_lease_id,
                 named_fence, now, runner_time, verdict, reason, outcome=None, digest=None):
        self.seq = seq
        self.sender = sender
        self.kind = kind
        self.job = job
        self.attempt = attempt  # attributed attempt (checks 1-5 passed), or None
        self.named_attempt = named_attempt
        self.named_lease_id = named_lease_id
        self.named_fence = named_fence
        self.now = now
        self.runner_time = runner_time
        self.verdict = verdict
        self.reason = reason
        self.outcome = outcome  # a result's reported outcome
        self.digest = digest  # a result's payload digest


class Target:
    """A deployment target behind a slot, with the target's own rule (§8.4)."""

    def __init__(self, kind):
        self.kind = kind
        self.highest_token = 0
        self.deployments = set()
        self.applied = 0
        self.highest_by_job = {}  # only for the seeded bug `token-across-jobs`

    def mutate(self, slot_token, deployment, job=None):
        if self.kind == "fenced":
            highest = self.highest_token
            if SEEDED_BUG == "token-across-jobs":
                highest = self.highest_by_job.get(job, 0)
            if slot_token < highest:
                return ("rejected", "stale_fence")
            self.highest_by_job[job] = max(self.highest_by_job.get(job, 0), slot_token)
            self.highest_token = max(self.highest_token, slot_token)
        elif self.kind == "idempotent":
            if deployment in self.deployments:
                return ("acknowledged", None)
            self.deployments.add(deployment)
        self.applied += 1
        return ("accepted", None)


class ControlPlane:
    def __init__(self, lease_ttl, max_clock_skew=0):
        self.lease_ttl = lease_ttl
        # δ (§3.1): the replicas' clocks are at most this far apart; the sweep acts 2δ late.
        self.max_clock_skew = max_clock_skew
        self.projects = {}
        self.runners = {}
        self.jobs = {}
        self.attempts = {}
        self.slots = {}
        self.targets = {}  # slot name -> the target it stands for
        self.observations = []
        self._seq = 0
        # R8's stores (§7.1): log chunks by (attempt, seq), artifacts by (attempt, name), the
        # cache by (project, key) with the attempt that stored each entry.
        self.logs = {}
        self.artifacts = {}
        self.cache = {}
        # §2 "Epochs": the database's epoch (the WAL timeline's, which no failover forgets: a
        # promoted standby's is one past its primary's), and when each later epoch's first claim
        # came (the first epoch never waits).
        self.epoch = 0
        self.epoch_began = {}
        # Retention: every change to what the server holds of a job takes the next position; an
        # audit that passed marks the position it read through (a prune of audited jobs deletes
        # only finished jobs whose last change is at or below it).
        self._position = 0
        self.audited_through = None

    # -- set-up --------------------------------------------------------------------------------

    def create_project(self, name):
        p = Project(name)
        self.projects[p.id] = p
        return p.id

    def create_runner(self, project, name):
        r = Runner(project, name)
        self.runners[r.id] = r
        return r.id

    def revoke_runner(self, project, runner_id):
        """An operator of `project` revokes its runner (§6.1 check 1): its credential
        authenticates nothing from now on. No job, attempt or lease changes."""
        runner = self.runners.get(runner_id)
        if runner is None or runner.project != project:
            raise Rejected("unknown_runner")
        runner.revoked = True

    def authenticates(self, runner_id):
        """Whether a created runner's credential still authenticates it (over HTTP, a token
        that does not is refused 401 before any check, and recorded nowhere: §7)."""
        runner = self.runners.get(runner_id)
        return runner is not None and not runner.revoked

    def submit(self, project, slot, kind):
        """Submits a job naming target slot `slot` of `kind` (§8.1: a slot has one kind)."""
        existing = self.slots.get(slot)
        if existing is not None and existing.kind != kind:
            raise Rejected("target_kind_mismatch")
        if existing is None:
            self.slots[slot] = Slot(slot, kind)
            self.targets[slot] = Target(kind)
        self._seq += 1
        job = Job(project, slot, self._seq)
        self.jobs[job.id] = job
        return job.id

    # -- R1 claim ------------------------------------------------------------------------------

    def claim(self, runner_id, now):
        """Returns the new attempt, or raises Rejected (§6.2)."""
        return self.claim_batch(runner_id, 1, now)[0]

    def claim_batch(self, runner_id, limit, now):
        """R1 as a set ("Batch claim"): of the `limit` earliest queued jobs of the runner's
        project whose slot is free, the earliest job of each slot. Returns the new attempts in
        submission order, or raises Rejected when it takes none (§6.2)."""
        runner = self.runners.get(runner_id)
        if runner is None:
            raise Rejected("unknown_runner")
        if self.epoch > 0 and self.epoch not in self.epoch_began:
            # The first claim at an epoch not seen before records it and takes nothing.
            self.epoch_began[self.epoch] = now
            raise Rejected("no_queued_job")
        began = self.epoch_began.get(self.epoch)
        margin = 0 if SEEDED_BUG == "failover-wait-without-skew" else 2 * self.max_clock_skew
        if began is not None and SEEDED_BUG != "failover-without-wait" \
                and now < began + self.lease_ttl + margin:
            # Until every lease of the earlier epochs has expired by every replica's clock, the
            # wait looks like an empty queue.
            raise Rejected("no_queued_job")
        queued = sorted(
            (j for j in self.jobs.values()
             if j.project == runner.project and j.state == "queued"
             and self.slots[j.slot].holder is None),
            key=lambda j: j.seq,
        )
        taken, slots = [], set()
        for job in queued[:limit]:
            if job.slot not in slots:
                slots.add(job.slot)
                taken.append(self._start(job, runner_id, now))
        if not taken:
            raise Rejected("no_queued_job")
        return taken

    def _start(self, job, runner_id, now):
        """R1's effect on one job: a new attempt holding the job's slot."""
        slot = self.slots[job.slot]
        # At least the epoch's first token (the seeded bug: the counter + 1 only).
        floor = 1 if SEEDED_BUG == "failover-without-epoch" else (self.epoch << EPOCH_SHIFT) + 1
        slot.token = max(slot.token + 1, floor)
        attempt = Attempt(job.id, runner_id, max(job.fence + 1, floor), now + self.lease_ttl,
                          slot.token)
        self.attempts[attempt.id] = attempt
        slot.holder = attempt.id
        job.fence = attempt.fence
        job.current_attempt = attempt.id
        job.state = "running"
        job.attempts.append(attempt.id)
        self._touch(job.id)
        return attempt

    # -- §6.1 the ownership tuple --------------------------------------------------------------

    def _check(self, kind, sender, job_id, attempt_id, lease_id, fence, now, outcome=None,
               digest=None):
        """Runs §6.1's checks in order. Returns (verdict, reason, attributed attempt)."""
        runner = self.runners.get(sender)
        if runner is None:
            return ("rejected", "unknown_runner", None)
        job = self.jobs.get(job_id)
        if job is None:
            return ("rejected", "unknown_job", None)
        if job.project != runner.project:
            return ("rejected", "wrong_project", None)
        attempt = self.attempts.get(attempt_id)
        if attempt is None or attempt.job != job.id:
            return ("rejected", "unknown_attempt", None)
        if attempt.runner != sender:
            return ("rejected", "runner_mismatch", None)
        # Checks 1-5 passed: the observation is attributed to the attempt (§7 notes).
        if attempt.lease_id != lease_id:
            return ("rejected", "lease_mismatch", attempt)
        if attempt.fence != fence:
            return ("rejected", "fence_mismatch", attempt)
        expired = attempt.state == "uncertain" or now >= attempt.lease_expiry
        if SEEDED_BUG == "expired-before-not-current" and expired \
                and attempt.state not in ("passed", "failed", "cancelled"):
            return ("rejected", "lease_expired", attempt)
        if job.current_attempt != attempt.id:
            return ("rejected", "not_current", attempt)
        if kind == "result" and attempt.state in ("passed", "failed", "cancelled"):
            identical = attempt.state == outcome and (
                attempt.digest is None or attempt.digest == digest)
            if identical:
                return ("acknowledged", None, attempt)
            return ("rejected", "conflicting_result", attempt)
        if job.state in TERMINAL:
            return ("rejected", "job_finished", attempt)
        if expired:
            return ("rejected", "lease_expired", attempt)
        if job.state == "cancelling" and kind not in ("heartbeat", "rejoin") \
                and not (kind == "result" and outcome == "cancelled"):
            return ("rejected", "cancel_requested", attempt)
        if kind == "result" and outcome == "cancelled" and job.state == "running":
            return ("rejected", "cancel_not_requested", attempt)
        return ("accepted", None, attempt)

    def _record(self, kind, sender, job_id, attempt_id, lease_id, fence, attributed, now,
                runner_time, verdict, reason, outcome=None, digest=None):
        self._touch(job_id)
        self._seq += 1
        self.observations.append(Observation(
            self._seq, sender, kind, job_id, attributed.id if attributed else None, attempt_id,
            lease_id, fence, now, runner_time, verdict, reason, outcome, digest))

    # -- R2 heartbeat, R3 result, R5 rejoin ----------------------------------------------------

    def heartbeat(self, sender, job_id, attempt_id, lease_id, fence, now, runner_time=None):
        """Returns (verdict, reason, answer): an accepted heartbeat answers the new lease
        expiry and whether a cancel is requested (R2)."""
        verdict, reason, attempt = self._check(
            "heartbeat", sender, job_id, attempt_id, lease_id, fence, now)
        answer = None
        if verdict == "accepted":
            attempt.lease_expiry = now + self.lease_ttl
            answer = (attempt.lease_expiry, self.jobs[job_id].cancel_requested)
        self._record("heartbeat", sender, job_id, attempt_id, lease_id, fence, attempt, now,
                     runner_time, verdict, reason)
        return verdict, reason, answer

    def result(self, sender, job_id, attempt_id, lease_id, fence, outcome, digest, now,
               runner_time=None):
        verdict, reason, attempt = self._check(
            "result", sender, job_id, attempt_id, lease_id, fence, now, outcome, digest)
        if verdict == "accepted":
            job = self.jobs[job_id]
            attempt.state = outcome
            attempt.digest = digest
            job.state = outcome
            self._release(job)
        self._record("result", sender, job_id, attempt_id, lease_id, fence, attempt, now,
                     runner_time, verdict, reason, outcome, digest)
        return verdict, reason

    def rejoin(self, sender, job_id, attempt_id, lease_id, fence, now, runner_time=None):
        """Read-only: the heartbeat's verdict, with an instruction (R5)."""
        verdict, reason, attempt = self._check(
            "rejoin", sender, job_id, attempt_id, lease_id, fence, now)
        self._record("rejoin", sender, job_id, attempt_id, lease_id, fence, attempt, now,
                     runner_time, verdict, reason)
        if verdict != "accepted":
            return verdict, reason, "stop"
        # The second seeded bug: the rejoin's verdict is right, its instruction is not.
        if self.jobs[job_id].cancel_requested and SEEDED_BUG != "rejoin-misses-cancel":
            return verdict, reason, "cancel"
        return verdict, reason, "continue"

    # -- R8 side effects (§7.1) ---------------------------------------------------------------

    def side_effect(self, kind, sender, job_id, attempt_id, lease_id, fence, now, runner_time=None,
                    seq=None, name=None, content=None):
        """`source_fetch`, `log_append(seq, content)`, `artifact_put(name, content)`,
        `artifact_get(name)`, `cache_put(name, content)` or `cache_get(name)` (a cache's key is
        its `name`). Checked by §6.1 checks 1-13, then 14 (`log_append`) and 15 (the gets).
        Returns (verdict, reason, served): `served` is the content an accepted get serves."""
        verdict, reason, attempt = self._check(
            kind, sender, job_id, attempt_id, lease_id, fence, now)
        served = None
        if verdict == "accepted":
            project = self.jobs[job_id].project
            if kind == "log_append":
                stored = self.logs.get((attempt.id, seq))
                if stored is None:
                    self.logs[(attempt.id, seq)] = content
                elif stored == content:
                    verdict = "acknowledged"
                else:
                    verdict, reason = "rejected", "sequence_conflict"
            elif kind == "artifact_put":
                self.artifacts[(attempt.id, name)] = content
            elif kind == "cache_put":
                self.cache[(project, name)] = (content, attempt.id)
            elif kind in ("artifact_get", "cache_get"):
                entry = (self.artifacts.get((attempt.id, name)) if kind == "artifact_get"
                         else (self.cache.get((project, name)) or (None,))[0])
                if entry is None:
                    verdict, reason = "rejected", "not_found"
                else:
                    served = entry
        # The payload digest: of the content sent, of the name a get names; a fetch has none.
        payload = content if content is not None else name
        digest = None if payload is None else \
            "sha256:" + hashlib.sha256(payload.encode()).hexdigest()
        self._record(kind, sender, job_id, attempt_id, lease_id, fence, attempt, now,
                     runner_time, verdict, reason, digest=digest)
        return verdict, reason, served

    # -- R4 expiry sweep -----------------------------------------------------------------------

    def expiry_sweep(self, now, project=None):
        """Returns the verdict and the jobs it made uncertain (R4)."""
        swept = []
        for job in self.jobs.values():
            if project is not None and job.project != project:
                continue
            if job.state not in LEASED:
                continue
            attempt = self.attempts[job.current_attempt]
            # §3.1: 2δ past the expiry, so that no replica's clock (each within δ of the true
            # one) still counts the lease valid.
            margin = self.max_clock_skew * (1 if SEEDED_BUG == "sweep-without-skew-margin" else 2)
            if now >= attempt.lease_expiry + margin:
                self._touch(job.id)
                job.state = "uncertain"
                attempt.state = "uncertain"  # the slot stays reserved (§8.2)
                swept.append(job.id)
        return ("uncertain" if swept else "accepted"), swept

    # -- R6 cancel, R7 reconcile ---------------------------------------------------------------

    def cancel(self, project, job_id):
        job = self.jobs.get(job_id)
        if job is None:
            raise Rejected("unknown_job")
        if job.project != project:
            raise Rejected("wrong_project")
        if job.state in TERMINAL:
            raise Rejected("job_finished")
        if job.state == "uncertain":
            raise Rejected("reconcile_required")
        if job.state == "cancelling":
            return "acknowledged"
        self._touch(job_id)
        if job.state == "queued":
            job.state = "cancelled"
        else:  # running, whether or not its lease has expired unswept (§6.3)
            job.state = "cancelling"
            job.cancel_requested = True
        return "accepted"

    def reconcile(self, project, job_id, finding, decision):
        job = self.jobs.get(job_id)
        if job is None:
            raise Rejected("unknown_job")
        if job.project != project:
            raise Rejected("wrong_project")
        if job.state != "uncertain":
            raise Rejected("not_uncertain")
        if finding == "still_running":
            raise Rejected("execution_not_stopped")
        if decision == "adopt" and finding == "stopped":
            raise Rejected("nothing_to_adopt")
        if decision == "retry" and job.cancel_requested:
            raise Rejected("cancel_requested")
        attempt = self.attempts[job.current_attempt]
        self._touch(job_id)
        if decision == "adopt":
            outcome = {"observed_passed": "passed", "observed_failed": "failed"}[finding]
            attempt.state = outcome
            job.state = outcome
        else:
            attempt.state = "stopped"
            job.current_attempt = None
            if decision == "retry":
                job.state = "queued"
            else:
                job.state = "cancelled" if job.cancel_requested else "aborted"
        self._release(job)
        return "accepted"

    def _release(self, job):
        slot = self.slots[job.slot]
        if slot.holder is not None and self.attempts[slot.holder].job == job.id:
            slot.holder = None

    # -- failover (§2 "Epochs", §12) -------------------------------------------------------------

    def standby(self):
        """What a standby that has received every commit so far holds: a copy."""
        return copy.deepcopy(self)

    def promote(self, primary):
        """This standby becomes the database in place of `primary`, which may have committed
        more since the copy was taken (those commits are lost). Its epoch is one past the
        primary's: a promotion starts a timeline never used before."""
        self.epoch = primary.epoch + 1
        # The deployment targets are outside the database: a failover changes nothing there.
        self.targets = primary.targets
        return self

    # -- R9 target mutation (runner -> target, not through the control plane) -----------------

    def target_mutation(self, slot, slot_token, deployment, job=None):
        return self.targets[slot].mutate(slot_token, deployment, job)

    # -- reads ---------------------------------------------------------------------------------

    # -- retention: pruning finished jobs ------------------------------------------------------

    def _touch(self, job_id):
        """What the server holds of `job_id` (if it is a job) changed: its last position."""
        self._position += 1
        job = self.jobs.get(job_id)
        if job is not None:
            job.last_position = self._position

    def audit_mark(self):
        """An audit of everything recorded so far passed: its watermark."""
        self.audited_through = self._position

    def prune(self, unaudited=False):
        """Deletes the finished jobs whose last change the audit's watermark covers (every
        finished job with `unaudited`), with everything that names them. Returns the jobs
        deleted, how many finished jobs it kept, and the positions (in receipt order) of the
        observations that went."""
        finished = [j for j in self.jobs.values() if j.state in TERMINAL]
        mark = self.audited_through
        audited = [j.id for j in finished
                   if unaudited or SEEDED_BUG == "prune-ignores-audit"
                   or mark is not None and j.last_position <= mark]
        return audited, len(finished) - len(audited), self._delete(set(audited))

    def _delete(self, job_ids):
        """Deletes finished jobs with everything that names them: their attempts, the log chunks
        and artifacts those stored, and every observation naming them (both projects'). Returns
        the positions (in receipt order) of the observations that went."""
        gone_attempts = set()
        for job_id in job_ids:
            job = self.jobs.pop(job_id)
            assert job.state in TERMINAL, "only a finished job is pruned"
            gone_attempts.update(job.attempts)
            for a in job.attempts:
                del self.attempts[a]
        for store in (self.logs, self.artifacts):
            for key in [k for k in store if k[0] in gone_attempts]:
                del store[key]
        positions = [i for i, o in enumerate(self.observations) if o.job in job_ids]
        self.observations = [o for o in self.observations if o.job not in job_ids]
        return positions

    def target_reserved(self, job_id):
        job = self.jobs[job_id]
        holder = self.slots[job.slot].holder
        return holder is not None and self.attempts[holder].job == job_id
