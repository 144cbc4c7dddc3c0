#!/usr/bin/env python3
"""A fenced deployment target that lives outside the control plane's database.

One process of its own, for ha/failover-test. `POST /deploy` with a JSON body
`{"slot", "job", "attempt", "fence", "token"}`: per slot it keeps the highest token applied and
refuses a lower one (409), as protocol §8.4's fenced target does (a token equal to the highest is
applied: §8.4 refuses only t < highest). Every mutation it sees is appended to the log file as one
JSON line (slot, job, attempt, fence, token, the highest before it, applied or refused, the time),
so that the harness can tell, after a failover, which tokens were handed to two attempts and which
went backwards. `GET /log` answers the log so far. Standard library only.

    fenced_target.py --port PORT --log FILE
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Target:
    def __init__(self, log_path):
        self.lock = threading.Lock()
        self.highest = {}
        self.log = open(log_path, "a", encoding="utf-8")

    def mutate(self, body):
        slot = str(body["slot"])
        token = int(body["token"])
        with self.lock:
            highest = self.highest.get(slot)
            applied = highest is None or token >= highest
            if applied:
                self.highest[slot] = token
            record = {
                "t": time.time(),
                "slot": slot,
                "job": str(body["job"]),
                "attempt": str(body["attempt"]),
                "fence": int(body["fence"]),
                "token": token,
                "highest_before": highest,
                "verdict": "applied" if applied else "refused",
            }
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        return applied, highest


def handler_for(target):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, payload):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/healthz":
                self.answer(200, {"status": "ok"})
            else:
                self.answer(404, {"error": "not_found"})

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/deploy":
                    return self.answer(404, {"error": "not_found"})
                applied, highest = target.mutate(body)
            except (KeyError, ValueError, TypeError) as error:
                return self.answer(400, {"error": "bad_request", "message": str(error)})
            if applied:
                self.answer(200, {"verdict": "accepted"})
            else:
                self.answer(409, {"verdict": "rejected", "error": "stale_fence", "highest": highest})

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(Target(args.log)))
    server.daemon_threads = True
    print(f"fenced target on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
