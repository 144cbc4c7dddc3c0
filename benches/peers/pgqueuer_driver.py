"""pgqueuer through its documented worker API (PgQueuer, an entrypoint, Queries.enqueue), with a
no-op handler, for `leasewright bench peers` (benches/src/peers). One phase per process:

  setup    install pgqueuer's schema (Queries.install) unless it is there
  enqueue  top the queue up to LW_PEER_JOBS + LW_PEER_DEPTH queued jobs (Queries.enqueue, lists)
  work     run one worker until LW_PEER_JOBS handlers have run (or LW_PEER_MAX_SECONDS passed),
           then shut it down gracefully

The database comes from LW_PEER_DSN (environment, never the command line). The last line on
stdout is the phase's JSON answer; progress goes to stderr.
"""

import asyncio
import json
import os
import sys
import time

import asyncpg
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver

ENTRYPOINT = "bench_noop"


def env_int(name):
    return int(os.environ[name])


async def connect():
    return await asyncpg.connect(os.environ["LW_PEER_DSN"])


async def setup():
    conn = await connect()
    exists = await conn.fetchval("SELECT to_regclass('pgqueuer') IS NOT NULL")
    if not exists:
        await Queries(AsyncpgDriver(conn)).install()
    await conn.close()
    from importlib.metadata import version

    return {"version": version("pgqueuer")}


async def enqueue():
    conn = await connect()
    queries = Queries(AsyncpgDriver(conn))
    want = env_int("LW_PEER_JOBS") + env_int("LW_PEER_DEPTH")
    have = sum(s.count for s in await queries.queue_size() if s.status == "queued")
    payload = ("x" * env_int("LW_PEER_PAYLOAD_BYTES")).encode()
    missing = max(0, want - have)
    started = time.monotonic()
    chunk = 5000
    for at in range(0, missing, chunk):
        n = min(chunk, missing - at)
        await queries.enqueue([ENTRYPOINT] * n, [payload] * n, [0] * n)
    seconds = time.monotonic() - started
    await conn.close()
    return {"enqueued": missing, "seconds": seconds}


async def work():
    jobs = env_int("LW_PEER_JOBS")
    workers = env_int("LW_PEER_WORKERS")
    # pgqueuer's own defaults, as its documentation runs a worker: batch_size 10 and no cap on
    # concurrent tasks (max_concurrent_tasks, whose minimum would be twice the batch). Capping it
    # at `workers` (batch workers / 2) made it about 1.6x slower here; with fewer than 10 workers
    # the batch is the workers, so fewer workers still means less work in flight.
    batch = max(1, min(10, workers))
    conn = await connect()
    pgq = PgQueuer(AsyncpgDriver(conn))
    done = 0

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job):
        nonlocal done
        done += 1
        if done >= jobs:
            pgq.shutdown.set()

    started = time.monotonic()
    asyncio.get_running_loop().call_later(env_int("LW_PEER_MAX_SECONDS"), pgq.shutdown.set)
    await pgq.run(batch_size=batch)
    seconds = time.monotonic() - started
    if not conn.is_closed():
        await conn.close()
    return {"done": done, "seconds": seconds, "settings": f"batch_size={batch}, max_concurrent_tasks unset (its default)"}


def main():
    phase = sys.argv[1]
    answer = asyncio.run({"setup": setup, "enqueue": enqueue, "work": work}[phase]())
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
