#!/usr/bin/env python3
"""Replays the conformance suite's replay form against any driver-protocol command, without Rust.

    leasewright conform --export DIR --export-format jsonl-gz      # once, where Rust is
    python3 examples/python/replay.py DIR                          # anywhere with Python 3
    python3 examples/python/replay.py DIR --driver-cmd "my-driver --flag"

DIR holds traces.jsonl or traces.jsonl.gz (docs/conformance.md, "The replay form"): a header line,
then one trace per line with the requests the harness sends over the driver protocol
(docs/conformance.md, "The driver protocol") and the verdict and projection the model expects
after each step. This script is the harness's comparison (conformance/src/replay.rs and
conformance/src/drivers/cmd.rs) in Python's standard library: it starts the command (through
`sh -c`), says hello, opens each trace, sends each step, compares the verdict at every step and
the projection where the record has one, and stops a trace at its first divergence. A trace
whose requests the driver's protocol version cannot say (each record names the oldest version
that can: 4 for replica clocks, 5 for a failover) is left out and counted. It prints a summary
and exits 0 when every trace agrees, 1 on any divergence, 2 when it cannot run (no corpus, a
command that is not a driver), 3 when no trace diverged but some were left out (incomplete, as
`leasewright conform` says it).

The driver command defaults to this directory's driver.py (the Python example implementation).
"""

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import time

PROTOCOL = "leasewright-driver"
HERE = os.path.dirname(os.path.abspath(__file__))


class DriverFailed(Exception):
    """The driver did not answer as the protocol says (a divergence of kind `driver`)."""


class Driver:
    """One driver process, one request and one answer at a time."""

    def __init__(self, command, speaks):
        self.command = command
        self.proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.next_id = 1
        hello = self.call({"type": "hello", "protocol": PROTOCOL, "version": speaks})
        if hello.get("type") != "hello_ok" or hello.get("protocol") != PROTOCOL:
            raise DriverFailed(f"not a hello_ok of {PROTOCOL}: {hello}")
        self.version = hello.get("version")
        if self.version not in range(1, speaks + 1):
            raise DriverFailed(f"speaks version {self.version}; this corpus needs 1 to {speaks}")
        self.implementation = hello.get("implementation", "?")

    def call(self, request):
        request = dict(request, id=self.next_id)
        self.next_id += 1
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise DriverFailed(f"the driver exited instead of reading `{request['type']}`")
        line = self.proc.stdout.readline()
        if not line:
            raise DriverFailed(f"the driver closed its output instead of answering "
                               f"`{request['type']}`")
        try:
            answer = json.loads(line)
        except ValueError as e:
            raise DriverFailed(f"the answer to `{request['type']}` is not JSON ({e}): {line}")
        if answer.get("in_reply_to") != request["id"]:
            raise DriverFailed(f"the answer to `{request['type']}` (id {request['id']}) names "
                               f"in_reply_to {answer.get('in_reply_to')}")
        if answer.get("type") == "error":
            raise DriverFailed(f"the driver answered `{request['type']}` with an error: "
                               f"{answer.get('message')}")
        return answer

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


# -- the harness's comparison form (conformance/src/driver.rs `Projection`) ------------------

SIDE_EFFECT_NAMES = {"source_fetch": "source fetch", "log_append": "log append",
                     "artifact_put": "artifact put", "artifact_get": "artifact get",
                     "cache_put": "cache put", "cache_get": "cache get"}
KINDS = dict({"heartbeat": "heartbeat", "result": "result", "rejoin": "rejoin"},
             **SIDE_EFFECT_NAMES)
INSTRUCTIONS = ("continue", "cancel", "stop")


class Trace:
    """One trace's replay: the state the comparison keeps between steps."""

    def __init__(self, record, reasons, version):
        self.record = record
        self.reasons = reasons
        self.version = version
        self.target_kind = (record["open"]["config"]["jobs"] or [{}])[0].get("target_kind")
        self.payloads = {}  # payload label -> the digest first recorded for it
        self.answer = None
        self.sent_payload = None

    def observed(self, verdict):
        if verdict.get("verdict") is None:
            return None
        reason = verdict.get("reason")
        # A reason the spec does not name is a rejection without a known reason.
        return {"verdict": verdict["verdict"], "reason": reason if reason in self.reasons else None}

    def label(self, digest):
        """The payload label the model expects for a recorded digest (driver.rs
        `PayloadDigests`): one payload, one digest; two payloads, two digests."""
        if digest is None:
            return None
        sent = self.sent_payload
        if sent is None:
            return f"a digest ({digest}) of no payload"
        first = self.payloads.get(sent)
        if first is not None:
            return sent if first == digest else \
                f"{sent}, with a digest other than its first ({first})"
        for other, d in self.payloads.items():
            if d == digest:
                return f"{sent}, with the digest of {other}"
        self.payloads[sent] = digest
        return sent

    def convert_answer(self, answer, request):
        if not answer:
            return None
        [(kind, value)] = answer.items()
        if kind == "claim":
            return {"claim": {"job": value["job"], "fence": value["fence"],
                              "lease_ticks": value["lease_ticks"],
                              "slot_token": value.get("slot_token") or 0}}
        if kind == "claim_batch":
            return {"claim_batch": {"leases": [
                {"job": lease["job"], "fence": lease["fence"],
                 "lease_ticks": lease["lease_ticks"], "slot_token": lease.get("slot_token") or 0}
                for lease in value["leases"]]}}
        if kind == "heartbeat":
            return {"heartbeat": {"lease_ticks": value["lease_ticks"],
                                  "cancel_requested": value["cancel_requested"]}}
        if kind == "rejoin":
            instruction = value["instruction"]
            if instruction not in INSTRUCTIONS:
                instruction = "(an instruction the spec does not name)"
            return {"rejoin": {"instruction": instruction}}
        if kind == "sweep":
            return {"sweep": {"uncertain": sorted(value["uncertain"])}}
        if kind == "served":
            content = value["content"]
            action = (request or {}).get("action")
            if action not in ("artifact_get", "cache_get"):
                return {"served": {"content": f"content served by a step that is no get: "
                                              f"{json.dumps(content)}"}}
            what = "artifact" if action == "artifact_get" else "cache"
            if content not in (f"{what} content 0", f"{what} content 1"):
                content = f"{len(content.encode())} bytes no step stored"
            return {"served": {"content": content}}
        raise DriverFailed(f"an answer of a kind the protocol does not name: {kind}")

    def convert_projection(self, wire):
        open_config = self.record["open"]["config"]
        if len(wire["jobs"]) != len(open_config["jobs"]):
            raise DriverFailed(f"the projection shows {len(wire['jobs'])} jobs; the trace "
                               f"submitted {len(open_config['jobs'])}")
        slots = len({j["slot"] for j in open_config["jobs"]})
        if len(wire["slots"]) != slots:
            raise DriverFailed(f"the projection shows {len(wire['slots'])} slots; the trace "
                               f"named {slots}")
        fenced = self.target_kind == "fenced"
        jobs = []
        for job in wire["jobs"]:
            ledger = sorted(({"attempt": a["attempt"], "runner": a["runner"],
                              "fence": a["fence"], "state": a["state"]} for a in job["ledger"]),
                            key=lambda a: a["attempt"])
            holder = None
            if job["current_attempt"] is not None and job["state"] in ("running", "cancelling"):
                holder = next((a["runner"] for a in ledger
                               if a["attempt"] == job["current_attempt"]), None)
            jobs.append({"state": job["state"], "current_attempt": job["current_attempt"],
                         "fence": job["fence"], "lease_holder": holder,
                         "cancel_requested": job["cancel_requested"],
                         "target_reserved": job["target_reserved"], "ledger": ledger})
        targets = [{"applied": min(s["applied"], 1 if fenced else 2),
                    "highest_fence": min(s["highest_token"], 255) if fenced else 0}
                   for s in wire["slots"]]
        observations = wire["observations"]
        if len(observations) > 1:
            raise DriverFailed(f"one step recorded {len(observations)} observations")
        observation = details_observation = None
        if observations:
            o = observations[0]
            if o["kind"] not in KINDS:
                raise DriverFailed(f"an observation of kind `{o['kind']}` in a trace that "
                                   f"sends none")
            observation = {"attempt": o["attempt"], "sender": o["runner"],
                           "kind": KINDS[o["kind"]], "job": o["job"],
                           "named_attempt": o["named_attempt"], "verdict": o["verdict"],
                           "reason": o.get("reason")}
            if self.version >= 2:
                details_observation = {
                    "lease": 255 if o.get("lease") is None else o["lease"],
                    "fence": 255 if o.get("fence") is None else o["fence"],
                    "outcome": o.get("outcome"), "runner_time": o.get("runner_time"),
                    "payload": self.label(o.get("digest"))}
        details = None
        if self.version >= 2:
            details = {"observation": details_observation, "answer": self.answer}
        return {"jobs": jobs, "targets": targets, "observation": observation,
                "details": details}


def diff(path, want, got, out):
    """One line per leaf where `want` (the model) and `got` (the implementation) differ."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            diff(f"{path}.{k}", want.get(k), got.get(k), out)
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (x, y) in enumerate(zip(want, got)):
            diff(f"{path}[{i}]", x, y, out)
    elif want != got:
        out.append(f"{path}: expected {json.dumps(want)}, observed {json.dumps(got)}")


def show(v):
    if v is None:
        return "no verdict (a step the server does not see)"
    return v["verdict"] + (f" {v['reason']}" if v.get("reason") else "")


def replay(driver, record, reasons):
    """Replays one trace. Returns None, or the divergence: (step, kind, differences)."""
    trace = Trace(record, reasons, driver.version)
    try:
        answer = driver.call(record["open"])
        if answer.get("type") != "opened":
            raise DriverFailed(f"expected an `opened` answer, got type {answer.get('type')}")
    except DriverFailed as e:
        return 0, "driver", [f"the driver could not open a namespace: {e}"]
    for i, step in enumerate(record["steps"], 1):
        try:
            if step.get("mark"):
                if driver.call({"type": "mark"}).get("type") != "marked":
                    raise DriverFailed("expected a `marked` answer")
            if step.get("replicate"):
                # Version 5: the standby a later failover promotes holds everything so far.
                answer = driver.call({"type": "step", "step": {"action": "replicate"}})
                if answer.get("type") != "verdict":
                    raise DriverFailed(f"expected a `verdict` answer to `replicate`, got type "
                                       f"{answer.get('type')}")
            trace.answer = None
            trace.sent_payload = step.get("payload")
            request = step["request"]
            observed = None
            if request is not None:
                if driver.version < 3 and request["action"] == "expiry_sweep":
                    request = dict(request, project=0)
                verdict = driver.call({"type": "step", "step": request})
                if verdict.get("type") != "verdict":
                    raise DriverFailed(f"expected a `verdict` answer, got type "
                                       f"{verdict.get('type')}")
                trace.answer = trace.convert_answer(verdict.get("answer"), request)
                observed = trace.observed(verdict)
            if observed != step["expected"]:
                return i, "verdict", [f"verdict: expected {show(step['expected'])}, observed "
                                      f"{show(observed)}"]
            want = step.get("projection")
            if want is None:
                continue
            wire = driver.call({"type": "project"})
            if wire.get("type") != "projection":
                raise DriverFailed(f"expected a `projection` answer, got type {wire.get('type')}")
            got = trace.convert_projection(wire)
        except (DriverFailed, KeyError, TypeError, ValueError) as e:
            return i, "driver", [f"the driver could not apply the step: {e}"]
        if got["details"] is None:
            want = dict(want, details=None)  # a version 1 driver reports no details
        if got.get("stored") is None:
            # What side effects stored and who stored it is compared only where the driver can
            # read it back (the in-process driver); the driver protocol has no such read.
            want = {k: v for k, v in want.items() if k != "stored"}
            got = {k: v for k, v in got.items() if k != "stored"}
        if want != got:
            differences = []
            diff("state", want, got, differences)
            return i, "state", differences
    return None


def read_corpus(directory):
    for name, opener in (("traces.jsonl.gz", gzip.open), ("traces.jsonl", open)):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path, opener(path, "rt", encoding="utf-8")
    raise FileNotFoundError(f"no traces.jsonl or traces.jsonl.gz in {directory} (write one with "
                            f"`leasewright conform --export {directory} --export-format jsonl-gz`)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="the directory `conform --export DIR --export-format "
                                       "jsonl|jsonl-gz` wrote")
    parser.add_argument("--driver-cmd", default="python3 " + shlex.quote(
        os.path.join(HERE, "driver.py")), help="the driver command (default: the Python example)")
    parser.add_argument("--show", type=int, default=3, help="divergences shown in full")
    args = parser.parse_args()
    try:
        path, lines = read_corpus(args.corpus)
        header = json.loads(lines.readline())
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if header.get("format") != "leasewright-replay" or header.get("version") not in (1, 2):
        print(f"error: {path} is not version 1 or 2 of the replay form: {header}",
              file=sys.stderr)
        return 2
    reasons = set(header["reasons"])
    try:
        driver = Driver(args.driver_cmd, header["driver_protocol"])
    except (DriverFailed, OSError) as e:
        print(f"error: the driver command `{args.driver_cmd}` did not answer the protocol's "
              f"hello: {e}", file=sys.stderr)
        return 2
    print(f"replaying {path} against `{args.driver_cmd}` ({driver.implementation}, driver "
          f"protocol v{driver.version})")
    started = time.monotonic()
    traces = steps = 0
    divergences = []
    left_out = {}  # the driver protocol version a left-out trace needs -> how many
    for line in lines:
        record = json.loads(line)
        needs = record.get("driver_protocol", 1)
        if needs > driver.version:
            left_out[needs] = left_out.get(needs, 0) + 1
            continue
        traces += 1
        steps += len(record["steps"])
        divergence = replay(driver, record, reasons)
        if divergence is not None:
            divergences.append((record, divergence))
            if divergence[1] == "driver":
                # Out of step with the driver: start a fresh process for the next trace.
                driver.close()
                driver = Driver(args.driver_cmd, header["driver_protocol"])
    driver.close()
    elapsed = time.monotonic() - started
    print(f"  traces          {traces}")
    print(f"  steps           {steps}")
    print(f"  time            {elapsed:.1f} s")
    print(f"  divergences     {len(divergences)}")
    for needs, count in sorted(left_out.items()):
        print(f"  left out        {count} traces that need driver protocol version {needs} or "
              f"later (the driver speaks {driver.version})")
    divergences.sort(key=lambda d: (d[1][0], d[0]["trace"]))
    for record, (step, kind, differences) in divergences[:args.show]:
        print(f"divergence in {record['trace']} at step {step} ({kind}):")
        for d in differences:
            print(f"  {d}")
        print("trace prefix:")
        for i, s in enumerate(record["steps"][:step], 1):
            expected = f"  => {show(s['expected'])}" if s["expected"] else ""
            print(f"  {'>>' if i == step else '  '} {i:>3}. {s['describe']}{expected}")
    return 1 if divergences else 3 if left_out else 0


if __name__ == "__main__":
    sys.exit(main())
