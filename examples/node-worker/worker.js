#!/usr/bin/env node
// A Runwick worker in Node.js, written from the repository's .proto files alone
// (protos/runwick/v1/worker_service.proto documents the protocol it follows).
//
// It runs two job types:
//   examples.greet  payload {"name": "Ada"}  -> output {"greeting": "Hello, Ada!"};
//                   an empty name fails permanently with code `name_missing`.
//   examples.wait   payload {"seconds": 5}   -> waits, then outputs {"waited": 5};
//                   stops early when the job is cancelled (or times out).
//
// Configuration (environment):
//   RUNWICK_TARGET       host:port of the coordinator (default 127.0.0.1:7233)
//   RUNWICK_TOKEN        a token with the `work` scope (none: a coordinator with auth off)
//   RUNWICK_CA           PEM file of the CA that signed the coordinator's certificate (TLS)
//   RUNWICK_QUEUES       comma-separated queues (default: the `default` queue)
//   RUNWICK_CONCURRENCY  jobs run at once (default 4)
//   RUNWICK_LEASE_MS     lease asked for each claim (default 60000)
//   RUNWICK_EXIT_AFTER   exit 0 once this many results were acknowledged (default: never)
//   RUNWICK_PROTOS       the protos/ folder (default: ../../protos from this file)
//
// SIGTERM or Ctrl-C drains: no more credit, unstarted claims released, running jobs
// get RUNWICK_DRAIN_MS (30000) to finish, the rest are reported interrupted.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const timers = require('node:timers/promises');

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const env = process.env;
const PROTOS = env.RUNWICK_PROTOS || path.resolve(__dirname, '..', '..', 'protos');
const TARGET = env.RUNWICK_TARGET || '127.0.0.1:7233';
const CONCURRENCY = Number(env.RUNWICK_CONCURRENCY || 4);
const LEASE_MS = Number(env.RUNWICK_LEASE_MS || 60000);
const HEARTBEAT_MS = Math.floor(LEASE_MS / 3);
const DRAIN_MS = Number(env.RUNWICK_DRAIN_MS || 30000);
const CANCELLATION_GRACE_MS = 10000;
const EXIT_AFTER = env.RUNWICK_EXIT_AFTER ? Number(env.RUNWICK_EXIT_AFTER) : Infinity;
const WORKER_ID = `${os.hostname()}-node-${process.pid}-${crypto.randomBytes(3).toString('hex')}`;
// Statuses that reconnecting cannot mend: the configuration is wrong.
const FATAL = new Set([
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.INVALID_ARGUMENT,
  grpc.status.FAILED_PRECONDITION,
  grpc.status.UNIMPLEMENTED,
]);

function log(message) {
  process.stderr.write(`node-worker ${new Date().toISOString()} ${message}\n`);
}

// -- job types ---------------------------------------------------------------------

// A failure that must not be retried (OUTCOME_PERMANENT_FAILURE with its code).
class PermanentFailure extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'PermanentFailure';
    this.code = code;
  }
}

const handlers = {
  'examples.greet': async (payload) => {
    if (!payload.name) {
      throw new PermanentFailure('name_missing', 'the payload has no "name"');
    }
    return { greeting: `Hello, ${payload.name}!` };
  },
  'examples.wait': async (payload, ctx) => {
    // Rejects with an AbortError as soon as ctx.signal fires (cancel, timeout, lost lease).
    await timers.setTimeout(Number(payload.seconds || 0) * 1000, undefined, { signal: ctx.signal });
    return { waited: payload.seconds };
  },
};

// -- wire helpers --------------------------------------------------------------------

function loadService() {
  const definition = protoLoader.loadSync(path.join(PROTOS, 'runwick', 'v1', 'worker_service.proto'), {
    includeDirs: [PROTOS],
    keepCase: true, // field names as in the .proto (attempt_id, not attemptId)
    longs: String,
    enums: String, // enum values by name: 'OUTCOME_SUCCEEDED'
    defaults: true,
    oneofs: true, // `kind` names the field set in a oneof
  });
  return grpc.loadPackageDefinition(definition).runwick.v1.WorkerService;
}

function duration(ms) {
  return { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 };
}

function durationMs(value) {
  return value ? Number(value.seconds) * 1000 + Math.round(value.nanos / 1e6) : null;
}

// -- the worker ------------------------------------------------------------------

class Worker {
  constructor(Service) {
    const credentials = env.RUNWICK_CA
      ? grpc.credentials.createSsl(fs.readFileSync(env.RUNWICK_CA))
      : grpc.credentials.createInsecure();
    this.client = new Service(TARGET, credentials, {
      'grpc.keepalive_time_ms': 30000,
      'grpc.keepalive_timeout_ms': 10000,
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
    });
    this.runs = new Map(); // attempt_id -> run: {assignment, phase, deadline, controller, cause}
    this.unacked = new Map(); // attempt_id -> the Result message, until its ResultAck
    this.credit = 0; // credit sent on this stream and not yet used by an assignment
    this.acknowledged = 0;
    this.call = null;
    this.heartbeat = null; // {sentAt, ids} of the heartbeat awaiting its answer
    this.draining = false;
    this.stopping = false;
    this.backoffMs = 100;
    this.timer = setInterval(() => this.beat(), HEARTBEAT_MS);
  }

  // Opens a stream: Hello first, then everything the last stream may have lost.
  connect() {
    const metadata = new grpc.Metadata();
    if (env.RUNWICK_TOKEN) {
      metadata.set('authorization', `Bearer ${env.RUNWICK_TOKEN}`);
    }
    const call = this.client.Connect(metadata);
    this.call = call;
    this.credit = 0; // credit belongs to its stream
    this.heartbeat = null;
    call.on('data', (message) => this.onMessage(call, message));
    call.on('error', (error) => this.onClosed(call, error));
    call.on('end', () => this.onClosed(call, null));
    call.write({
      hello: {
        worker_id: WORKER_ID, // the same on every reconnect: attempts are held by it
        queues: env.RUNWICK_QUEUES ? env.RUNWICK_QUEUES.split(',') : [],
        wire_names: Object.keys(handlers), // empty would mean: no work at all
        capacity: CONCURRENCY,
        lease: duration(LEASE_MS),
        host: os.hostname(), // optional: shown on the dashboard's workers page
        sdk: 'runwick-node-example/0.1.0',
      },
    });
  }

  send(message) {
    if (this.call) {
      this.call.write(message);
    }
  }

  onMessage(call, message) {
    if (call !== this.call) {
      return; // a stream we already left
    }
    switch (message.kind) {
      case 'welcome':
        log(`connected to ${message.welcome.coordinator_id} as ${WORKER_ID}`);
        this.backoffMs = 100;
        for (const result of this.unacked.values()) {
          this.send({ result }); // idempotent: a repeat gets the first answer
        }
        for (const run of this.runs.values()) {
          if (run.phase === 'starting') {
            this.send({ start: { attempt_id: run.assignment.attempt_id } });
          }
        }
        this.replenish();
        this.beat();
        break;
      case 'assignment':
        this.onAssignment(message.assignment);
        break;
      case 'start_answer':
        this.onStartAnswer(message.start_answer);
        break;
      case 'heartbeat_answer':
        this.onHeartbeatAnswer(message.heartbeat_answer);
        break;
      case 'result_ack':
        this.onResultAck(message.result_ack);
        break;
      case 'cancel':
        this.stop(message.cancel.attempt_id, 'cancelled');
        break;
      case 'drain':
        log(`coordinator asked to drain within ${durationMs(message.drain.deadline)} ms`);
        this.drain(Math.min(durationMs(message.drain.deadline) ?? DRAIN_MS, DRAIN_MS)).then(() => {
          if (!this.stopping && call === this.call) {
            this.draining = false;
            call.end(); // reconnect, perhaps to another replica
          }
        });
        break;
      default:
        break; // a kind this worker does not know: ignore it
    }
  }

  onAssignment(assignment) {
    this.credit = Math.max(0, this.credit - 1);
    const attemptId = assignment.attempt_id;
    if (this.runs.has(attemptId)) {
      return; // a repeat
    }
    if (this.draining || !handlers[assignment.wire_name]) {
      this.send({ release: { attempt_id: attemptId } }); // no charge, available again at once
      return;
    }
    // The lease is counted from here, on this process's clock, whatever the skew.
    this.runs.set(attemptId, { assignment, phase: 'starting', deadline: Date.now() + LEASE_MS });
    this.send({ start: { attempt_id: attemptId } });
  }

  onStartAnswer(answer) {
    const run = this.runs.get(answer.attempt_id);
    if (!run || run.phase !== 'starting') {
      return;
    }
    if (!answer.granted || Date.now() >= run.deadline) {
      if (answer.granted) {
        log(`attempt ${answer.attempt_id}: lease lapsed before the start; not running it`);
      } else {
        log(`start of attempt ${answer.attempt_id} refused (${answer.reason})`);
      }
      this.runs.delete(answer.attempt_id); // no result: the coordinator recovers the job
      this.replenish();
      return;
    }
    run.phase = 'running';
    run.controller = new AbortController();
    if (run.cause) {
      run.controller.abort(); // a cancel arrived first
    }
    this.execute(run, answer.execution_number);
  }

  async execute(run, executionNumber) {
    const { assignment } = run;
    const ctx = {
      jobId: assignment.job_id,
      attemptId: assignment.attempt_id,
      executionNumber,
      parentOutputs: Object.fromEntries(assignment.parent_outputs.map((p) => [p.job_id, p.output])),
      signal: run.controller.signal,
    };
    const timeoutMs = durationMs(assignment.execution_timeout);
    let timeout = null;
    if (timeoutMs !== null) {
      // The worker enforces the execution timeout; the coordinator only sees the lease.
      timeout = setTimeout(() => this.stop(assignment.attempt_id, 'timeout'), timeoutMs);
    }
    let result;
    try {
      let payload;
      try {
        payload = JSON.parse(Buffer.from(assignment.payload).toString('utf8') || '{}');
      } catch (error) {
        throw new PermanentFailure('payload_undecodable', `payload is not UTF-8 JSON: ${error.message}`);
      }
      const output = await handlers[assignment.wire_name](payload, ctx);
      result = { outcome: 'OUTCOME_SUCCEEDED', output: Buffer.from(JSON.stringify(output ?? null)) };
    } catch (error) {
      result = failure(error);
    } finally {
      clearTimeout(timeout);
    }
    // Whatever the handler did, a stop decides the outcome (a timeout even if it then returned).
    if (run.cause === 'cancelled' && result.outcome !== 'OUTCOME_SUCCEEDED') {
      result = { outcome: 'OUTCOME_CANCELLED', error_code: 'cancelled' };
    } else if (run.cause === 'timeout') {
      result = { outcome: 'OUTCOME_TIMED_OUT', error_code: 'timeout' };
    } else if (run.cause === 'shutdown' && result.outcome !== 'OUTCOME_SUCCEEDED') {
      result = { outcome: 'OUTCOME_INTERRUPTED', error_code: 'worker_shutdown' };
    }
    this.runs.delete(assignment.attempt_id);
    if (run.cause !== 'lost') {
      // A lost attempt is the coordinator's again: it gets no result.
      const message = { attempt_id: assignment.attempt_id, ...result };
      this.unacked.set(assignment.attempt_id, message);
      this.send({ result: message });
    }
    this.replenish();
  }

  // Stops a run: a user cancel, the execution timeout, a lost lease or shutdown.
  stop(attemptId, cause) {
    const run = this.runs.get(attemptId);
    if (!run || run.cause) {
      return; // unknown, or already stopping (cancels are repeated until the run ends)
    }
    log(`attempt ${attemptId}: stopping (${cause})`);
    run.cause = cause;
    if (run.controller) {
      run.controller.abort();
    }
    if (cause === 'timeout' || cause === 'shutdown') {
      // A handler that ignores the signal past the grace: stop renewing its lease and
      // send no result; the coordinator records it abandoned when the lease lapses.
      setTimeout(() => {
        if (this.runs.get(attemptId) === run) {
          log(`attempt ${attemptId}: still running after the grace; abandoning it`);
          run.cause = 'lost';
        }
      }, CANCELLATION_GRACE_MS).unref();
    }
  }

  beat() {
    if (!this.call) {
      return;
    }
    if (this.heartbeat) {
      if (Date.now() - this.heartbeat.sentAt >= LEASE_MS / 2) {
        log('no heartbeat answer within half a lease; reconnecting');
        this.call.cancel(); // the stream is dead: renew the leases on a new one
      }
      return;
    }
    const ids = [...this.runs.values()].filter((r) => r.cause !== 'lost').map((r) => r.assignment.attempt_id);
    if (ids.length > 0) {
      this.heartbeat = { sentAt: Date.now(), ids };
      this.send({ heartbeat: { attempt_ids: ids, lease: duration(LEASE_MS) } });
    }
  }

  onHeartbeatAnswer(answer) {
    const lost = new Set(answer.lost_attempt_ids);
    if (this.heartbeat) {
      for (const id of this.heartbeat.ids) {
        const run = this.runs.get(id);
        if (run && !lost.has(id)) {
          run.deadline = Math.max(run.deadline, this.heartbeat.sentAt + LEASE_MS);
        }
      }
    }
    this.heartbeat = null;
    for (const id of lost) {
      const run = this.runs.get(id);
      if (!run) {
        continue;
      }
      log(`attempt ${id}: the coordinator no longer recognises it; dropping it`);
      if (run.phase === 'running') {
        this.stop(id, 'lost');
      } else {
        this.runs.delete(id);
      }
    }
    this.replenish();
  }

  onResultAck(ack) {
    const sent = this.unacked.get(ack.attempt_id);
    if (!sent) {
      return;
    }
    this.unacked.delete(ack.attempt_id);
    if (ack.status === 'STATUS_REJECTED' && ack.reason === 'OUTPUT_TOO_LARGE') {
      const message = { attempt_id: ack.attempt_id, outcome: 'OUTCOME_PERMANENT_FAILURE', error_code: 'output_too_large', message: ack.message };
      this.unacked.set(ack.attempt_id, message);
      this.send({ result: message });
      return;
    }
    if (ack.status !== 'STATUS_ACCEPTED') {
      log(`result of attempt ${ack.attempt_id}: ${ack.status} ${ack.reason} ${ack.message}`);
    } else {
      log(`attempt ${ack.attempt_id}: ${sent.outcome}, job now ${ack.job_state}`);
    }
    this.acknowledged += 1;
    if (this.acknowledged >= EXIT_AFTER && !this.stopping) {
      this.shutdown(0);
      return;
    }
    this.replenish();
  }

  // Offers credit for the free slots (and no more than RUNWICK_EXIT_AFTER needs).
  replenish() {
    if (this.draining || !this.call) {
      return;
    }
    const busy = this.runs.size + this.unacked.size + this.credit;
    const wanted = Math.min(CONCURRENCY - busy, EXIT_AFTER - this.acknowledged - busy);
    if (wanted > 0) {
      this.credit += wanted;
      this.send({ credit: { count: wanted } });
    }
  }

  // No new work; unstarted claims released; running jobs finish within `withinMs`, the rest interrupted.
  async drain(withinMs) {
    this.draining = true;
    for (const run of this.runs.values()) {
      if (run.phase === 'starting') {
        this.send({ release: { attempt_id: run.assignment.attempt_id } });
        this.runs.delete(run.assignment.attempt_id);
      }
    }
    const until = Date.now() + withinMs;
    while (this.runs.size > 0 && Date.now() < until) {
      await timers.setTimeout(50);
    }
    for (const id of this.runs.keys()) {
      this.stop(id, 'shutdown');
    }
    const settled = Date.now() + CANCELLATION_GRACE_MS + 5000;
    while ((this.runs.size > 0 || this.unacked.size > 0) && Date.now() < settled) {
      await timers.setTimeout(50);
    }
  }

  async shutdown(code) {
    if (this.stopping) {
      return;
    }
    this.stopping = true;
    await this.drain(DRAIN_MS);
    clearInterval(this.timer);
    if (this.call) {
      this.call.end();
    }
    this.client.close();
    log(`stopped (${this.acknowledged} result(s) acknowledged)`);
    process.exit(code);
  }

  onClosed(call, error) {
    if (call !== this.call) {
      return;
    }
    this.call = null;
    if (error && FATAL.has(error.code)) {
      log(`the coordinator refused the stream: ${grpc.status[error.code]}: ${error.details}`);
      clearInterval(this.timer);
      process.exit(1);
    }
    if (this.stopping) {
      return;
    }
    // Claims are not released by a disconnect: reconnect and heartbeat them before they lapse.
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, 5000);
    log(`stream ended (${error ? `${grpc.status[error.code]}: ${error.details}` : 'closed'}); reconnecting in ${delay} ms`);
    setTimeout(() => this.connect(), delay);
  }
}

// How a handler's error is reported.
function failure(error) {
  const detail = String((error && error.stack) || error);
  if (error instanceof PermanentFailure) {
    return { outcome: 'OUTCOME_PERMANENT_FAILURE', error_code: error.code, exception_type: error.name, message: error.message, detail };
  }
  const name = (error && error.name) || 'Error';
  return { outcome: 'OUTCOME_RETRYABLE_FAILURE', error_code: name, exception_type: name, message: String(error && error.message), detail };
}

function main() {
  const worker = new Worker(loadService());
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      log(`${signal}: draining`);
      worker.shutdown(0);
    });
  }
  worker.connect();
}

main();
