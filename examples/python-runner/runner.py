#!/usr/bin/env python3
"""A second runner for Leasewright, in Python (standard library only): the proof that
`leasewright runner-suite --runner-cmd` checks a runner it did not write (docs/runner-suite.md).

It keeps the runner's duties of docs/protocol.md §6.4: it reckons its lease from when it *sent*
the claim or heartbeat that granted it, cuts every heartbeat at the lease's end, stops its
command's whole process group at once on a rejection or a 401 and at the lease's end when nothing
renewed it, keeps its result until the control plane decides it, and never exits while a command
it started runs (SIGTERM, SIGINT, a 401 on a claim).

Settings, all from the environment (the suite's contract):
  LEASEWRIGHT_SERVER          the control plane's base URL
  LEASEWRIGHT_RUNNER_TOKEN    the runner's bearer token
  LEASEWRIGHT_CAPACITY        jobs at once (default 1)
  LEASEWRIGHT_MAX_JOBS        exit after this many jobs (default: never)
  LEASEWRIGHT_WORKDIR         where the workspaces go (default: a temporary directory)
  RUNNER_BUG                  a seeded bug, to see the suite catch it: `ignore-401` (a 401 on a
                              heartbeat is logged and ignored) or `reckon-from-answer` (the lease
                              reckoned from when the heartbeat's answer came), or `never-run`
                              (claims and reports, never runs a command: the suite judges
                              nothing and says so, exit 2)

What it leaves out (an example, not a product): log streaming (the command's output is sent as
one log chunk after it ends), artifacts, batch results, target URLs.
"""

import base64
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("LEASEWRIGHT_SERVER", "").rstrip("/")
TOKEN = os.environ.get("LEASEWRIGHT_RUNNER_TOKEN", "")
CAPACITY = int(os.environ.get("LEASEWRIGHT_CAPACITY", "1"))
MAX_JOBS = int(os.environ["LEASEWRIGHT_MAX_JOBS"]) if os.environ.get("LEASEWRIGHT_MAX_JOBS") else None
WORKDIR = os.environ.get("LEASEWRIGHT_WORKDIR") or tempfile.mkdtemp(prefix="python-runner-")
BUG = os.environ.get("RUNNER_BUG", "")
REQUEST_TIMEOUT = 10.0
POLL = 0.05

shutdown = threading.Event()
# Set by the signal handler, which takes no lock (an `Event.set()` there can deadlock when the
# signal lands while the main thread holds that event's lock); `stopping()` reads both.
signalled = False


def stopping():
    if signalled and not shutdown.is_set():
        shutdown.set()
    return shutdown.is_set()


def log(*parts):
    print("python-runner:", *parts, file=sys.stderr, flush=True)


def post(path, body, timeout):
    """(status, body bytes, Retry-After seconds or None); status None: no answer."""
    request = urllib.request.Request(
        SERVER + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=max(timeout, 0.01)) as response:
            return response.status, response.read(), None
    except urllib.error.HTTPError as error:
        retry_after = error.headers.get("Retry-After") if error.headers else None
        try:
            retry_after = min(float(retry_after), 60.0) if retry_after else None
        except ValueError:
            retry_after = None
        return error.code, error.read(), retry_after
    except (urllib.error.URLError, OSError, ValueError) as error:
        return None, str(error).encode(), None


def code_of(body):
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "unknown"


def transient(status):
    """No decision: no answer, 408, 429, any 5xx."""
    return status is None or status in (408, 429) or 500 <= status <= 599


def manifest_digest(root):
    lines = []
    for directory, _, files in os.walk(root):
        for name in files:
            full = os.path.join(directory, name)
            path = os.path.relpath(full, root).replace(os.sep, "/")
            mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
            with open(full, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
            lines.append((path, mode, sha))
    digest = hashlib.sha256()
    for path, mode, sha in sorted(lines):
        digest.update(path.encode() + b"\0" + format(mode, "o").encode() + b"\0" + sha.encode() + b"\n")
    return digest.hexdigest()


class Job:
    def __init__(self, lease, claim_sent):
        self.lease = lease
        self.ttl = lease["lease_ttl_ms"] / 1000.0
        self.lease_end = claim_sent + self.ttl  # reckoned from the claim's sending
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.stop_reason = None
        self.done = threading.Event()
        self.connected = True

    def tuple(self):
        lease = self.lease
        return {
            "job": lease["job"],
            "attempt": lease["attempt"],
            "lease_id": lease["lease_id"],
            "fence": lease["fence"],
            "runner_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def left(self):
        with self.lock:
            return self.lease_end - time.monotonic()

    def stop(self, reason):
        with self.lock:
            if self.stop_reason is None:
                self.stop_reason = reason
                log(self.lease["job"], "stopping the work:", reason)
        self.stopped.set()

    def renewed(self, sent):
        with self.lock:
            self.lease_end = max(self.lease_end, sent + self.ttl)

    def limit(self):
        """A heartbeat's limit: the request timeout, a third of the lease, and the lease's end."""
        return min(REQUEST_TIMEOUT, self.ttl / 3, max(self.left(), 0.0))

    def heartbeats(self):
        interval = max(self.ttl / 6, 0.05)
        while True:
            if self.done.wait(max(min(interval, self.left()), 0.0)) or self.stopped.is_set():
                return
            if not self.renew():
                return

    def renew(self):
        """One renewal, retried while the lease can be valid; False: stop the heartbeats."""
        backoff = min(0.1, self.ttl / 24)
        while True:
            if self.left() <= 0:
                self.stop("lease ran out without renewal")
                return False
            path = "/v1/runner/heartbeat" if self.connected else "/v1/runner/rejoin"
            sent = time.monotonic()
            status, body, retry_after = post(path, self.tuple(), self.limit())
            if status == 200:
                answer = json.loads(body)
                if path.endswith("rejoin"):
                    self.connected = True
                    if answer.get("instruction") == "cancel":
                        self.stop("cancel")
                        return False
                    continue  # then the heartbeat, at once
                self.renewed(time.monotonic() if BUG == "reckon-from-answer" else sent)
                if answer.get("cancel_requested"):
                    self.stop("cancel")
                    return False
                return True
            if status == 409:
                reason = code_of(body)
                self.stop("cancel" if reason == "cancel_requested" else reason)
                return False
            if status == 401 and BUG != "ignore-401":
                self.stop("unauthorized (401)")
                return False
            if not transient(status):
                return True  # another 4xx: a decision, not retried; the lease runs out
            self.connected = False
            wait = max(backoff, retry_after or 0.0)
            backoff = min(backoff * 2, self.ttl / 6)
            left = self.left()
            margin = self.ttl / 60
            if wait >= left:
                if left <= margin:
                    self.stop("lease ran out without renewal")
                    return False
                wait = left - margin
            if self.done.wait(wait):
                return False

    def deliver(self, path, body, once=False):
        """Send until the control plane decides (or once); the final status."""
        backoff = 0.1
        while True:
            status, answer, retry_after = post(path, body, REQUEST_TIMEOUT)
            if not transient(status) or once or stopping():
                return status, answer
            time.sleep(max(backoff, retry_after or 0.0))
            backoff = min(backoff * 2, 5.0)

    def run(self, live):
        lease = self.lease
        heart = threading.Thread(target=self.heartbeats, daemon=True)
        heart.start()
        workspace = os.path.join(WORKDIR, lease["job"], lease["lease_id"])
        src = os.path.join(workspace, "src")
        os.makedirs(src, exist_ok=True)
        exit_code = None
        output = b""
        status, archive = self.deliver("/v1/runner/source", self.tuple())
        if status != 200:
            log(lease["job"], "source fetch failed:", status)
        elif hashlib.sha256(archive).hexdigest() != lease.get("source_blob_sha256"):
            log(lease["job"], "refusing to execute: the source blob digest differs")
        else:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                tar.extractall(src, filter="data")
            if manifest_digest(src) != lease["source_digest"]:
                log(lease["job"], "refusing to execute: the manifest digest differs")
            elif not (self.stopped.is_set() or stopping()) and BUG != "never-run":
                exit_code, output = self.execute(src, live)
        reason = self.stop_reason
        if reason == "cancel":
            outcome = "cancelled"
        elif reason is None and exit_code == 0:
            outcome = "passed"
        else:
            outcome = "failed"
        log_sha = hashlib.sha256(output).hexdigest()
        if reason in (None, "cancel") and output:
            self.deliver("/v1/runner/logs", dict(self.tuple(), seq=0,
                                                content_base64=base64.b64encode(output).decode()))
        body = dict(self.tuple(), outcome=outcome,
                    result_digest=hashlib.sha256(f"exit={exit_code}\nlog_sha256={log_sha}\n".encode()).hexdigest())
        final = reason is not None and reason.startswith("unauthorized")
        status, _ = self.deliver("/v1/runner/result", body, once=final)
        log(lease["job"], "reported", outcome, "->", status)
        self.done.set()
        heart.join()

    def execute(self, src, live):
        """Run the command in its own process group; kill the whole group on a stop."""
        out = tempfile.TemporaryFile()
        with live:
            if stopping():
                return None, b""
            process = subprocess.Popen(["sh", "-c", self.lease["command"]], cwd=src, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            live.count += 1
        try:
            while process.poll() is None:
                if self.stopped.is_set() or stopping():
                    if stopping():
                        self.stop("the runner is shutting down")
                    break
                self.stopped.wait(POLL)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            with live:
                live.count -= 1
                live.notify_all()
        out.seek(0)
        return process.returncode, out.read()


class Live(threading.Condition):
    """How many commands this runner started are running."""

    def __init__(self):
        super().__init__()
        self.count = 0


def main():
    if not SERVER or not TOKEN:
        log("LEASEWRIGHT_SERVER and LEASEWRIGHT_RUNNER_TOKEN must be set")
        return 2
    live = Live()
    def on_signal(*_):
        global signalled
        signalled = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    slots = threading.Semaphore(CAPACITY)
    threads = []
    started = 0
    code = 0
    while not stopping():
        if MAX_JOBS is not None and started >= MAX_JOBS:
            break
        if not slots.acquire(timeout=POLL):
            continue
        claim_sent = time.monotonic()
        status, body, _ = post("/v1/runner/claim", {"capacity": 1}, REQUEST_TIMEOUT)
        if status == 200:
            for lease in json.loads(body)["leases"]:
                started += 1
                job = Job(lease, claim_sent)

                def work(job=job):
                    try:
                        job.run(live)
                    finally:
                        slots.release()

                thread = threading.Thread(target=work)
                thread.start()
                threads.append(thread)
            continue
        slots.release()
        if status == 401:
            log("the server refused the runner token (401): stopping every command, then exiting")
            shutdown.set()
            code = 2
            break
        time.sleep(POLL * 4)
    # Never exit while a command runs: every job stops its command on `stopping()`, and the jobs
    # are waited for (a signal while waiting sets `signalled`, which the jobs poll).
    for thread in threads:
        while thread.is_alive() and not stopping():
            thread.join(POLL)
    # Every wait of the main thread is short: a signal delivered to another thread runs its
    # handler only when the main thread next runs Python code.
    if stopping():
        with live:
            while live.count:
                live.wait(POLL)
        deadline = time.monotonic() + REQUEST_TIMEOUT
        for thread in threads:
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(POLL)
    return code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every command is dead by now; nothing is left to wait for at the interpreter's exit.
    os._exit(code)
