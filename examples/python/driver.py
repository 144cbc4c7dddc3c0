#!/usr/bin/env python3
"""The driver of lease_server.py: speaks the language-neutral driver protocol of
docs/conformance.md ("The driver protocol", version 5) on stdin and stdout, one JSON object per
line, so that `leasewright conform --driver-cmd "python3 examples/python/driver.py"` replays the
model's traces against the in-memory implementation.

The driver's one job is mapping: the harness names everything with the model's abstract ids
(runner 0, job 1, attempt 2, lease 3, slot 0), the implementation with its own UUIDs. An index the
trace never created (a runner or job beyond those `open` made, an attempt no claim made) stands
for an id no one created: the same fresh UUID for the same index within a trace, and reported
back by that index. Time is the harness's: `tick` moves the server clock by one, and every call
passes `now`; with replica clocks (version 4) `now` is the clock of the replica serving the step,
`offset` ticks off the true clock (`replica_clock`).

Fences and slot tokens are the one thing the driver translates besides ids: the harness says
them in the model's form (`epoch × 32 + generation`, the epoch counted from the trace's open), the
implementation keeps them as the specification does (`epoch × 2^32 + generation`). A failover
(version 5) promotes the copy the last `replicate` step took: what the implementation committed
since is lost, as on an asynchronous standby.
"""

import json
import os
import sys
import uuid

from lease_server import EPOCH_SHIFT, ControlPlane, Rejected

PROTOCOL = "leasewright-driver"
# LEASEWRIGHT_EXAMPLE_VERSION=1 speaks version 1 (no rule details), =2 version 2 (no shared
# slots, outsider jobs, side effects or unknown ids), =3 version 3 (one server clock), to test
# the harness's handling of an older driver, =4 version 4 (no failover).
VERSION = int(os.environ.get("LEASEWRIGHT_EXAMPLE_VERSION", "5"))
# The model's tokens: `epoch × MODEL_EPOCH_BASE + generation`.
MODEL_EPOCH_BASE = 32
SIDE_EFFECTS = ("source_fetch", "log_append", "artifact_put", "artifact_get", "cache_put",
                "cache_get")


def to_model(token):
    """An implementation's fence or slot token in the model's form."""
    return (token >> EPOCH_SHIFT) * MODEL_EPOCH_BASE + (token & ((1 << EPOCH_SHIFT) - 1))


def to_implementation(token):
    """A fence or slot token of the harness's (the model's form) in the implementation's."""
    return ((token // MODEL_EPOCH_BASE) << EPOCH_SHIFT) + token % MODEL_EPOCH_BASE


class Namespace:
    """One trace's world: a fresh control plane, its projects, runners and jobs."""

    def __init__(self, config):
        # Version 4: δ, the largest skew between the replicas' clocks (0: one clock).
        self.cp = ControlPlane(lease_ttl=config["lease_ttl"],
                               max_clock_skew=config.get("max_clock_skew", 0))
        self.ticks = 0  # the true clock
        self.offset = 0  # how far the clock of the replica serving the next steps is off it
        self.projects = [self.cp.create_project("trace"), self.cp.create_project("outsider")]
        self.runners = [self.cp.create_runner(self.projects[0], f"runner-{r}")
                        for r in range(config["runners"])]
        if config["outsider"]:
            self.runners.append(self.cp.create_runner(self.projects[1], "outsider"))
        self.slot_names = {}
        self.jobs = []
        for j in config["jobs"]:
            # Jobs naming one slot share it (version 3: `slot` is the trace's slot name).
            name = self.slot_names.setdefault(j["slot"], f"slot-{j['slot']}-{uuid.uuid4().hex}")
            project = self.projects[j.get("project", 0)]
            self.jobs.append(self.cp.submit(project, name, j["target_kind"]))
        self.attempts = {}  # abstract attempt -> UUID
        self.leases = {}  # abstract lease -> UUID
        self.unknown = {}  # (what, index) -> the UUID no one created that stands for it
        self.seen = 0  # observations already reported
        self.pruned = set()  # version 4: the jobs a prune deleted
        self.standby = None  # version 5: what the standby holds (the last `replicate`)

    @property
    def now(self):
        """The receipt time: the clock of the replica serving the step."""
        return self.ticks + self.offset

    def made_up(self, what, index):
        return self.unknown.setdefault((what, index), uuid.uuid4())

    def runner(self, r):
        return self.runners[r] if r < len(self.runners) else self.made_up("runner", r)

    def job(self, j):
        return self.jobs[j] if j < len(self.jobs) else self.made_up("job", j)

    def attempt(self, a):
        # An attempt the harness never named in a claim is one no claim made.
        return self.attempts.get(a) or self.made_up("attempt", a)

    def lease(self, lease):
        # A lease the harness never named in a claim (0: the forger's) is one no claim issued.
        return self.leases.get(lease) or uuid.uuid4()

    def step(self, s):
        """Applies one step. Returns (verdict, reason, answer): `answer` is the value the rule
        returned (version 2), or None."""
        action = s["action"]
        if action == "tick":
            self.ticks += 1
            return None, None, None
        if action == "replica_clock":
            self.offset = s["offset"]
            return None, None, None
        if action == "audit_mark":
            # An audit of everything recorded so far passed: its watermark.
            self.cp.audit_mark()
            return None, None, None
        if action == "replicate":
            self.standby = self.cp.standby()
            return None, None, None
        if action == "failover":
            self.fail_over()
            return None, None, None
        if action == "prune":
            return None, None, {"prune": self.prune()}
        if action == "runner_revoke":
            self.cp.revoke_runner(self.projects[s["project"]], self.runners[s["runner"]])
            return None, None, None
        if (action == "claim" or action in ("heartbeat", "result", "rejoin") + SIDE_EFFECTS) \
                and s["runner"] < len(self.runners) \
                and not self.cp.authenticates(self.runners[s["runner"]]):
            # A revoked runner's credential: refused before any check, recorded nowhere.
            return "rejected", "unknown_runner", None
        if action == "claim" and s.get("limit") is not None:
            # A batch claim: the jobs taken, in submission order, take the attempts named
            # attempt, attempt + 1, ... and the leases named in `leases`, in that order.
            try:
                taken = self.cp.claim_batch(self.runners[s["runner"]], s["limit"], self.now)
            except Rejected as r:
                return "rejected", r.reason, None
            leases = s.get("leases") or []
            for i, created in enumerate(taken):
                self.attempts[s["attempt"] + i] = created.id
                if i < len(leases):
                    self.leases[leases[i]] = created.lease_id
            return "accepted", None, {"claim_batch": {"leases": [{
                "job": self.jobs.index(created.job),
                "fence": to_model(created.fence),
                "lease_ticks": created.lease_expiry - self.now,
                "slot_token": to_model(created.slot_token),
            } for created in taken]}}
        if action == "claim":
            try:
                created = self.cp.claim(self.runner(s["runner"]), self.now)
            except Rejected as r:
                return "rejected", r.reason, None
            self.attempts[s["attempt"]] = created.id
            if s["lease"] is not None:
                self.leases[s["lease"]] = created.lease_id
            return "accepted", None, {"claim": {
                "job": self.jobs.index(created.job),
                "fence": to_model(created.fence),
                "lease_ticks": created.lease_expiry - self.now,
                "slot_token": to_model(created.slot_token),
            }}
        if action in ("heartbeat", "result", "rejoin") + SIDE_EFFECTS:
            args = (self.runner(s["runner"]), self.job(s["job"]), self.attempt(s["attempt"]),
                    self.lease(s["lease"]), to_implementation(s["fence"]))
            if action in SIDE_EFFECTS:
                verdict, reason, served = self.cp.side_effect(
                    action, *args, now=self.now, runner_time=s["runner_time"], seq=s.get("seq"),
                    name=s.get("name", s.get("key")), content=s.get("content"))
                answer = None if served is None else {"served": {"content": served}}
                return verdict, reason, answer
            if action == "heartbeat":
                verdict, reason, granted = self.cp.heartbeat(*args, now=self.now,
                                                             runner_time=s["runner_time"])
                answer = None
                if granted is not None:
                    expiry, cancel_requested = granted
                    answer = {"heartbeat": {"lease_ticks": expiry - self.now,
                                            "cancel_requested": cancel_requested}}
                return verdict, reason, answer
            if action == "result":
                verdict, reason = self.cp.result(*args, s["outcome"], s["digest"], now=self.now,
                                                 runner_time=s["runner_time"])
                return verdict, reason, None
            verdict, reason, instruction = self.cp.rejoin(*args, now=self.now,
                                                          runner_time=s["runner_time"])
            return verdict, reason, {"rejoin": {"instruction": instruction}}
        if action == "target_mutation":
            verdict, reason = self.cp.target_mutation(
                self.slot_names[s["slot"]], to_implementation(s["slot_token"]),
                str(self.jobs[s["deployment"]]),
                self.job(s["job"]))
            return verdict, reason, None
        if action == "expiry_sweep":
            # Version 3 names no project: the sweep over every project, as a server's sweeper
            # runs it.
            project = s.get("project")
            verdict, swept = self.cp.expiry_sweep(
                self.now, None if project is None else self.projects[project])
            return verdict, None, {"sweep": {"uncertain": sorted(self.jobs.index(j)
                                                                 for j in swept)}}
        if action in ("cancel", "reconcile"):
            project, job = self.projects[s["project"]], self.jobs[s["job"]]
            try:
                if action == "cancel":
                    return self.cp.cancel(project, job), None, None
                return (self.cp.reconcile(project, job, s["finding"], s["decision"]), None,
                        None)
            except Rejected as r:
                return "rejected", r.reason, None
        raise ValueError(f"unknown action {action}")

    def abstract(self, mapping, concrete, what=None):
        for k, v in mapping.items():
            if v == concrete:
                return k
        for (w, k), v in self.unknown.items():
            if w == what and v == concrete:
                return k
        raise ValueError(f"the implementation shows an id the harness never named: {concrete}")

    def abstract_lease(self, lease_id):
        # A lease id no claim issued is the forger's, which the harness names 0.
        for k, v in self.leases.items():
            if v == lease_id:
                return k
        return 0

    def mark(self):
        self.seen = len(self.cp.observations)

    def prune(self):
        """The implementation's prune of audited jobs: the jobs it deleted, and how many finished
        jobs it kept."""
        pruned, kept, positions = self.cp.prune()
        self.seen -= sum(1 for p in positions if p < self.seen)
        gone = [self.jobs.index(j) for j in pruned]
        self.pruned.update(gone)
        return {"pruned": sorted(gone), "kept_unaudited": kept}

    def fail_over(self):
        """The standby is promoted in place of the implementation: what was committed since the
        last `replicate` is lost, and the epoch rises. Runners poll, so the new epoch's first
        claim comes at once; it must take nothing (it starts the wait)."""
        if self.standby is None:
            raise ValueError("a failover with no standby brought up to date before it")
        self.cp, self.standby = self.standby.promote(self.cp), None
        self.mark()
        live = [r for r in self.runners if self.cp.authenticates(r)]
        if not live:
            return
        try:
            taken = self.cp.claim(live[0], self.now)
        except Rejected as r:
            if r.reason != "no_queued_job":
                raise ValueError(f"the new epoch's first claim was rejected {r.reason}, "
                                 "not no_queued_job") from None
            return
        raise ValueError(f"the new epoch's first claim took a job ({taken.job}): it must wait")

    def project(self):
        runners = dict(enumerate(self.runners))
        jobs = []
        for j, job_id in enumerate(self.jobs):
            if j in self.pruned:
                # Gone: the harness compares a pruned job on neither side.
                jobs.append({"state": "passed", "current_attempt": None, "fence": 0,
                             "cancel_requested": False, "target_reserved": False, "ledger": []})
                continue
            job = self.cp.jobs[job_id]
            ledger = []
            for a in job.attempts:
                attempt = self.cp.attempts[a]
                ledger.append({
                    "attempt": self.abstract(self.attempts, a),
                    "runner": self.abstract(runners, attempt.runner),
                    "fence": to_model(attempt.fence),
                    "state": attempt.state,
                })
            jobs.append({
                "state": job.state,
                "current_attempt": None if job.current_attempt is None
                else self.abstract(self.attempts, job.current_attempt),
                "fence": to_model(job.fence),
                "cancel_requested": job.cancel_requested,
                "target_reserved": self.cp.target_reserved(job_id),
                "ledger": ledger,
            })
        slots = []
        for slot in sorted(self.slot_names):
            target = self.cp.targets[self.slot_names[slot]]
            slots.append({"applied": target.applied,
                          "highest_token": to_model(target.highest_token)})
        observations = []
        for o in self.cp.observations[self.seen:]:
            observations.append({
                "attempt": None if o.attempt is None else self.abstract(self.attempts, o.attempt),
                "runner": self.abstract(runners, o.sender, "runner"),
                "kind": o.kind,
                "job": self.abstract(dict(enumerate(self.jobs)), o.job, "job"),
                "named_attempt": self.abstract(self.attempts, o.named_attempt, "attempt"),
                "verdict": o.verdict,
                "reason": o.reason,
                # Version 2: the rest of what the observation recorded.
                "lease": self.abstract_lease(o.named_lease_id),
                "fence": to_model(o.named_fence),
                "outcome": o.outcome,
                "runner_time": o.runner_time,
                "digest": o.digest,
            })
        self.mark()
        return {"jobs": jobs, "slots": slots, "observations": observations}


def answer(request, ns):
    kind = request.get("type")
    if kind == "hello":
        return {"type": "hello_ok", "protocol": PROTOCOL, "version": VERSION,
                "implementation": "python-example"}, ns
    if kind == "open":
        return {"type": "opened"}, Namespace(request["config"])
    if ns is None:
        raise ValueError(f"`{kind}` before any `open`")
    if kind == "step":
        verdict, reason, answer = ns.step(request["step"])
        reply = {"type": "verdict", "verdict": verdict, "reason": reason}
        if VERSION >= 2:
            reply["answer"] = answer
        return reply, ns
    if kind == "project":
        projection = ns.project()
        if VERSION < 2:
            for o in projection["observations"]:
                for field in ("lease", "fence", "outcome", "runner_time", "digest"):
                    del o[field]
        return dict(type="projection", **projection), ns
    if kind == "mark":
        ns.mark()
        return {"type": "marked"}, ns
    raise ValueError(f"unknown request type {kind}")


def main():
    ns = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply, ns = answer(request, ns)
        except Exception as e:  # reported to the harness, which stops the trace
            reply = {"type": "error", "message": f"{type(e).__name__}: {e}"}
        reply["in_reply_to"] = request.get("id")
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
