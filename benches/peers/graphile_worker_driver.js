// graphile-worker through its documented API (runMigrations, run with a task list, the SQL
// function graphile_worker.add_jobs for bulk enqueue), with a no-op task, for `leasewright bench
// peers` (benches/src/peers). One phase per process:
//
//   setup    runMigrations (graphile-worker's schema)
//   enqueue  top the queue up to LW_PEER_JOBS + LW_PEER_DEPTH jobs (add_jobs, in chunks)
//   work     run(concurrency = LW_PEER_WORKERS) until LW_PEER_JOBS tasks have run (or
//            LW_PEER_MAX_SECONDS passed), then runner.stop(), which lets running jobs complete
//
// The database comes from LW_PEER_DSN (environment, never the command line). The last line on
// stdout is the phase's JSON answer; progress goes to stderr. Modules resolve through NODE_PATH
// (the cache directory `bench peers` installed graphile-worker into).
"use strict";
const { run, runMigrations } = require("graphile-worker");
const { Client } = require("pg");

const env = (name) => Number(process.env[name]);
const connectionString = process.env.LW_PEER_DSN;
const quiet = { logger: undefined };
const { Logger } = require("@graphile/logger");
quiet.logger = new Logger(() => (level, message) => {
  if (level === "error") process.stderr.write(`graphile-worker: ${message}\n`);
});

async function setup() {
  await runMigrations({ connectionString, logger: quiet.logger });
  return { version: require("graphile-worker/package.json").version };
}

async function enqueue() {
  const want = env("LW_PEER_JOBS") + env("LW_PEER_DEPTH");
  const client = new Client({ connectionString });
  await client.connect();
  const have = Number(
    (await client.query("SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL"))
      .rows[0].count,
  );
  const missing = Math.max(0, want - have);
  const payload = "x".repeat(env("LW_PEER_PAYLOAD_BYTES"));
  const started = process.hrtime.bigint();
  for (let at = 0; at < missing; at += 5000) {
    const n = Math.min(5000, missing - at);
    await client.query(
      `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
         SELECT ROW('bench_noop', json_build_object('p', $1::text), NULL, NULL, NULL, NULL, NULL, NULL)
                ::graphile_worker.job_spec
         FROM generate_series(1, $2::int)))`,
      [payload, n],
    );
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await client.end();
  return { enqueued: missing, seconds };
}

async function work() {
  const jobs = env("LW_PEER_JOBS");
  const workers = env("LW_PEER_WORKERS");
  const maxSeconds = env("LW_PEER_MAX_SECONDS");
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const started = process.hrtime.bigint();
  const runner = await run({
    connectionString,
    concurrency: workers,
    noHandleSignals: true,
    logger: quiet.logger,
    taskList: {
      bench_noop: async () => {
        done += 1;
        if (done >= jobs) finish();
      },
    },
  });
  const cap = setTimeout(finish, maxSeconds * 1000);
  await finished;
  clearTimeout(cap);
  await runner.stop();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { done, seconds, settings: `concurrency=${workers}` };
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
