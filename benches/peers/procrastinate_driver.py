"""procrastinate through its documented worker API (App, a task, batch_defer_async,
run_worker_async), with a no-op task, for `leasewright bench peers` (benches/src/peers). One phase
per process:

  setup    apply procrastinate's schema (schema_manager.apply_schema_async) unless it is there
  enqueue  top the queue up to LW_PEER_JOBS + LW_PEER_DEPTH `todo` jobs (batch_defer_async)
  work     run one worker of LW_PEER_WORKERS concurrency until LW_PEER_JOBS tasks have run (or
           LW_PEER_MAX_SECONDS passed), then
           stop it gracefully (cancelling run_worker_async, as its documentation says)

The database comes from LW_PEER_DSN (environment, never the command line). The last line on
stdout is the phase's JSON answer; progress goes to stderr.
"""

import asyncio
import json
import os
import sys
import time

import procrastinate
import psycopg


def env_int(name):
    return int(os.environ[name])


DSN = os.environ["LW_PEER_DSN"]
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DSN))
state = {"done": 0, "target": 0, "finished": None}


@app.task(name="bench_noop")
async def bench_noop(p):
    state["done"] += 1
    if state["done"] >= state["target"] and state["finished"] is not None:
        state["finished"].set()


async def scalar(query):
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        cur = await conn.execute(query)
        return (await cur.fetchone())[0]


async def setup():
    if not await scalar("SELECT to_regclass('procrastinate_jobs') IS NOT NULL"):
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
    from importlib.metadata import version

    return {"version": version("procrastinate")}


async def enqueue():
    want = env_int("LW_PEER_JOBS") + env_int("LW_PEER_DEPTH")
    have = await scalar("SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'")
    missing = max(0, want - have)
    payload = "x" * env_int("LW_PEER_PAYLOAD_BYTES")
    started = time.monotonic()
    async with app.open_async():
        chunk = 5000
        for at in range(0, missing, chunk):
            n = min(chunk, missing - at)
            await bench_noop.batch_defer_async(*[{"p": payload}] * n)
    return {"enqueued": missing, "seconds": time.monotonic() - started}


async def work():
    state["target"] = env_int("LW_PEER_JOBS")
    state["finished"] = asyncio.Event()
    workers = env_int("LW_PEER_WORKERS")
    async with app.open_async():
        started = time.monotonic()
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=workers, install_signal_handlers=False)
        )
        done_waiting = asyncio.create_task(state["finished"].wait())
        await asyncio.wait(
            {worker, done_waiting},
            timeout=env_int("LW_PEER_MAX_SECONDS"),
            return_when=asyncio.FIRST_COMPLETED,
        )
        done_waiting.cancel()
        worker.cancel()
        try:
            await worker
        except asyncio.CancelledError:
            pass
        seconds = time.monotonic() - started
    return {"done": state["done"], "seconds": seconds, "settings": f"concurrency={workers}"}


def main():
    phase = sys.argv[1]
    answer = asyncio.run({"setup": setup, "enqueue": enqueue, "work": work}[phase]())
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
