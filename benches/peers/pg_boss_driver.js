// pg-boss through its documented API (start, createQueue, insert, work, stop), with a no-op
// handler, for `leasewright bench peers` (benches/src/peers). One phase per process:
//
//   setup    start() (installs pg-boss's schema), createQueue
//   enqueue  top the queue up to LW_PEER_JOBS + LW_PEER_DEPTH created jobs (insert, in chunks)
//   work     LW_PEER_WORKERS work() loops (batchSize 1, pollingIntervalSeconds 0.5, its minimum)
//            until LW_PEER_JOBS handlers have run (or LW_PEER_MAX_SECONDS passed), then a graceful
//            stop() that waits for them
//
// pg-boss's worker waits out its polling interval after every fetch, jobs found or not, so its
// rate is bounded by workers x batchSize / interval. The database comes from LW_PEER_DSN
// (environment, never the command line). The last line on stdout is the phase's JSON answer.
"use strict";
const PgBoss = require("pg-boss");

const env = (name) => Number(process.env[name]);
const QUEUE = "bench_noop";

function boss(max) {
  const b = new PgBoss({
    connectionString: process.env.LW_PEER_DSN,
    max,
    supervise: false,
    schedule: false,
    migrate: true,
  });
  b.on("error", (error) => process.stderr.write(`pg-boss: ${error.message}\n`));
  return b;
}

async function setup() {
  const b = boss(2);
  await b.start();
  await b.createQueue(QUEUE);
  await b.stop({ graceful: false, wait: true });
  return { version: require("pg-boss/package.json").version };
}

async function enqueue() {
  const b = boss(2);
  await b.start();
  const want = env("LW_PEER_JOBS") + env("LW_PEER_DEPTH");
  const have = await b.getQueueSize(QUEUE);
  const missing = Math.max(0, want - have);
  const data = { p: "x".repeat(env("LW_PEER_PAYLOAD_BYTES")) };
  const started = process.hrtime.bigint();
  for (let at = 0; at < missing; at += 5000) {
    const n = Math.min(5000, missing - at);
    await b.insert(Array.from({ length: n }, () => ({ name: QUEUE, data })));
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await b.stop({ graceful: false, wait: true });
  return { enqueued: missing, seconds };
}

async function work() {
  const jobs = env("LW_PEER_JOBS");
  const workers = env("LW_PEER_WORKERS");
  const maxSeconds = env("LW_PEER_MAX_SECONDS");
  const b = boss(workers + 2);
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const started = process.hrtime.bigint();
  await b.start();
  for (let w = 0; w < workers; w += 1) {
    await b.work(QUEUE, { batchSize: 1, pollingIntervalSeconds: 0.5 }, async () => {
      done += 1;
      if (done >= jobs) finish();
    });
  }
  const cap = setTimeout(finish, maxSeconds * 1000);
  await finished;
  clearTimeout(cap);
  await b.stop({ graceful: true, wait: true });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { done, seconds, settings: `${workers} work() x batchSize=1, pollingIntervalSeconds=0.5` };
}

const phases = { setup, enqueue, work };
phases[process.argv[2]]()
  .then((answer) => {
    process.stdout.write(JSON.stringify(answer) + "\n");
    process.exit(0);
  })
  .catch((error) => {
    process.stderr.write(`${error.stack || error}\n`);
    process.exit(1);
  });
