/**
 * A worker given every coordinator (COMPOSER_COORDINATORS) sends each run's calls to one
 * of them, the same whichever worker asks — of either SDK — and to the next while it is
 * away (as tests/unit/sdk/test_routing.py for the Python SDK).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import type { Capabilities, Coordinator, Lease, LeaseRequest, NextTask, Outcome, Presence, RenewRequest, ReportRequest } from "../src/coordinator.js";
import { CoordinatorClient } from "../src/coordinator.js";
import { CoordinatorUnavailable, SdkError } from "../src/errors.js";
import { DOWN_SECONDS, parseCoordinators, route, RunRoutedCoordinators } from "../src/routing.js";
import { coordinatorClient, Worker } from "../src/worker.js";

const RUNS = Array.from({ length: 200 }, (_, i) => `0190c0de-0000-7000-8000-${i.toString(16).padStart(12, "0")}`);

/**
 * One coordinator's client: notes the runs it was asked about; `up` false answers every
 * call as a client does after its retries, CoordinatorUnavailable.
 */
class FakeCoordinator implements Coordinator {
  up = true;
  runs: string[] = [];
  beats = 0;
  closed = false;

  constructor(readonly target: string) {}

  private call(runId: string): void {
    if (!this.up) throw new CoordinatorUnavailable(`${this.target} unavailable`, { code: "UNAVAILABLE" });
    this.runs.push(runId);
  }

  async capabilities(): Promise<Capabilities | undefined> {
    this.call("");
    return {
      protocolVersion: 1,
      minProtocolVersion: 1,
      features: new Set(),
      serverVersion: this.target,
      redisPrefix: "",
      shards: 0,
      redisTopology: "",
    };
  }

  async acquire(request: LeaseRequest): Promise<Lease | undefined> {
    this.call(request.runId);
    return undefined;
  }

  async renew(request: RenewRequest): Promise<boolean | undefined> {
    this.call(request.runId);
    return true;
  }

  async report(request: ReportRequest): Promise<boolean | undefined> {
    this.call(request.runId);
    return true;
  }

  async heartbeat(): Promise<boolean> {
    this.call("");
    this.beats += 1;
    return true;
  }

  close(): void {
    this.closed = true;
  }
}

/** A clock that moves only when the test moves it. */
class Clock {
  now = 100;
  readonly read = (): number => this.now;
}

const never = (): boolean => false;
const OUTCOME: Outcome = { status: "COMPLETED", outputJson: "{}", error: "", code: "", permanent: false, logLines: [], logTruncated: 0 };
const PRESENCE: Presence = { workerId: "w", host: "host", queues: ["q"], concurrency: 1, inFlight: 0, sdkVersion: "test", state: "SERVING", startedAt: 0 };

function report(client: Coordinator, runId: string): Promise<boolean | NextTask | undefined> {
  return client.report({ taskId: "t", runId, nodeId: "a", attempt: 0, owner: "w", token: "token" }, OUTCOME, never);
}

function renew(client: Coordinator, runId: string): Promise<boolean | undefined> {
  return client.renew({ taskId: "t", runId, attempt: 0, owner: "w", ttl: 30, token: "token" });
}

function acquire(client: Coordinator, runId: string): Promise<Lease | undefined> {
  return client.acquire({ taskId: "t", runId, attempt: 0, owner: "w", ttl: 30, claim: "c", queue: "q", nodeTypes: ["TASK"] }, never);
}

/**
 * Run ids and their CRC-32, and the coordinator each goes to of 2 and of 3, as Python
 * computes them (`zlib.crc32(run_id.encode("utf-8")) % n`, composer_sdk._routing.route):
 * a TypeScript worker and a Python worker given one list send a run to one coordinator.
 */
const PYTHON_ROUTES: Array<[runId: string, crc32: number, of2: number, of3: number]> = [
  ["0190c0de-0000-7000-8000-000000000001", 2642264432, 0, 2],
  ["0190c0de-0000-7000-8000-000000000002", 74748106, 0, 1],
  ["0190c0de-0000-7000-8000-000000000003", 1936957532, 0, 2],
  ["0190c0de-0000-7000-8000-000000000004", 3977721343, 1, 1],
  ["0190c0de-0000-7000-8000-000000000005", 2584741225, 1, 1],
  ["0190c0de-0000-7000-8000-000000000006", 51991763, 1, 2],
  ["0190c0de-0000-7000-8000-000000000007", 1948148805, 1, 0],
  ["0190c0de-0000-7000-8000-000000000008", 3835787732, 0, 2],
  ["0190c0e1-7b2a-7c3d-9e4f-5a6b7c8d9e0f", 4027281190, 0, 1],
  ["run-é-ü", 806628164, 0, 2], // hashed as its UTF-8 bytes, as Python's str.encode()
];

test("a run goes to the coordinator a Python worker sends it to", () => {
  for (const [runId, crc, of2, of3] of PYTHON_ROUTES) {
    assert.equal(route(runId, 4294967296), crc, runId); // the whole unsigned CRC-32
    assert.equal(route(runId, 2), of2, runId);
    assert.equal(route(runId, 3), of3, runId);
    assert.equal(route(runId, 1), 0);
  }
  assert.throws(() => route("r", 0), RangeError);
});

test("every call of a run reaches the same coordinator, whichever worker sends it", async () => {
  const a = new FakeCoordinator("a:1");
  const b = new FakeCoordinator("b:1");
  const first = new RunRoutedCoordinators([a, b], new Clock().read);
  for (const runId of RUNS) {
    await report(first, runId);
    await renew(first, runId);
    await acquire(first, runId);
  }
  // a run's lease, renewal and report all went to one coordinator, and each takes a share
  const onA = new Set(a.runs);
  assert.ok(b.runs.every((r) => !onA.has(r)));
  assert.deepEqual([...a.runs, ...b.runs].sort(), [...RUNS, ...RUNS, ...RUNS].sort());
  assert.ok(onA.size >= 60 && onA.size <= 140, `${onA.size} of ${RUNS.length} runs on a`);
  for (const runId of RUNS) assert.ok([a, b][route(runId, 2)]!.runs.includes(runId), runId);
  // another worker's client, given the same list, sends each run to the same one
  const a2 = new FakeCoordinator("a:1");
  const b2 = new FakeCoordinator("b:1");
  const second = new RunRoutedCoordinators([a2, b2], new Clock().read);
  for (const runId of RUNS.slice(0, 20)) {
    await report(second, runId);
    assert.equal(a2.runs.includes(runId), a.runs.includes(runId), runId);
  }
  // and the pairs Python computed land where Python sends them
  const three = [new FakeCoordinator("a:1"), new FakeCoordinator("b:1"), new FakeCoordinator("c:1")];
  const routed = new RunRoutedCoordinators(three, new Clock().read);
  for (const [runId, , , of3] of PYTHON_ROUTES) {
    await report(routed, runId);
    assert.deepEqual(three.map((c) => c.runs.includes(runId)), [0, 1, 2].map((i) => i === of3), runId);
  }
});

test("a coordinator away sends its runs to the next until it is back, passed over meanwhile", async () => {
  const clock = new Clock();
  const a = new FakeCoordinator("a:1");
  const b = new FakeCoordinator("b:1");
  const client = new RunRoutedCoordinators([a, b], clock.read);
  const mine = RUNS.find((r) => route(r, 2) === 0)!;
  a.up = false;
  assert.equal(await report(client, mine), true);
  assert.deepEqual(b.runs, [mine]);
  // passed over while it is marked away: b is asked first, a is not tried
  a.up = true;
  assert.equal(await renew(client, mine), true);
  await acquire(client, mine);
  assert.deepEqual([a.runs, b.runs], [[], [mine, mine, mine]]);
  clock.now += DOWN_SECONDS - 0.1;
  await report(client, mine);
  assert.deepEqual(a.runs, []);
  clock.now += 0.2; // past DOWN_SECONDS: its own coordinator again
  await report(client, mine);
  assert.deepEqual(a.runs, [mine]);
});

test("the next in the list takes a run's calls, wrapping round, the ones away last", async () => {
  const clock = new Clock();
  const coordinators = [new FakeCoordinator("a:1"), new FakeCoordinator("b:1"), new FakeCoordinator("c:1")];
  const [a, b, c] = coordinators as [FakeCoordinator, FakeCoordinator, FakeCoordinator];
  const client = new RunRoutedCoordinators(coordinators, clock.read);
  const onC = PYTHON_ROUTES.find(([, , , of3]) => of3 === 2)![0];
  c.up = false;
  await report(client, onC);
  assert.deepEqual([a.runs, b.runs], [[onC], []]); // after c comes a
  // a away too: b; then a and c are both passed over, b is asked first
  a.up = false;
  await report(client, onC);
  assert.deepEqual(b.runs, [onC]);
  // b away as well: the ones passed over are tried after all, in the run's order
  b.up = false;
  c.up = true;
  await report(client, onC);
  assert.deepEqual(c.runs, [onC]);
});

test("every coordinator away is the error of the call", async () => {
  const a = new FakeCoordinator("a:1");
  const b = new FakeCoordinator("b:1");
  a.up = b.up = false;
  const client = new RunRoutedCoordinators([a, b], new Clock().read);
  await assert.rejects(report(client, RUNS[0]!), CoordinatorUnavailable);
  await assert.rejects(acquire(client, RUNS[1]!), CoordinatorUnavailable);
  // an error that is no unavailability is the call's at once: the next is not asked
  const refusing = new FakeCoordinator("c:1");
  refusing.report = async () => {
    throw new SdkError("coordinator call failed with INTERNAL: boom", { code: "INTERNAL" });
  };
  const other = new FakeCoordinator("d:1");
  const mixed = new RunRoutedCoordinators([refusing, other], new Clock().read);
  const onFirst = RUNS.find((r) => route(r, 2) === 0)!;
  await assert.rejects(report(mixed, onFirst), (err: unknown) => err instanceof SdkError && !(err instanceof CoordinatorUnavailable));
  assert.deepEqual(other.runs, []);
});

test("capabilities come from the coordinators that answer, presence from the first that does", async () => {
  const a = new FakeCoordinator("a:1");
  const b = new FakeCoordinator("b:1");
  const client = new RunRoutedCoordinators([a, b], new Clock().read);
  a.up = false;
  const answer = await client.capabilities("composer-sdk test", never);
  assert.equal(answer?.serverVersion, "b:1");
  assert.equal(await client.heartbeat(PRESENCE), true);
  assert.deepEqual([a.beats, b.beats], [0, 1]);
  a.up = true;
  assert.equal(await client.heartbeat(PRESENCE), true);
  assert.deepEqual([a.beats, b.beats], [1, 1]); // one beat, to the first that answers
  // both reachable: each is asked (each must speak this SDK's protocol), the first answers
  a.runs = [];
  b.runs = [];
  assert.equal((await client.capabilities("composer-sdk test", never))?.serverVersion, "a:1");
  assert.deepEqual([a.runs.length, b.runs.length], [1, 1]);
  a.up = b.up = false;
  await assert.rejects(client.capabilities("composer-sdk test", never), CoordinatorUnavailable);
  await assert.rejects(client.heartbeat(PRESENCE), CoordinatorUnavailable);
  client.close();
  assert.ok(a.closed && b.closed);
});

test("a coordinator of another protocol version stops the check, reachable or not the others", async () => {
  const a = new FakeCoordinator("a:1");
  const b = new FakeCoordinator("b:1");
  b.capabilities = async () => {
    throw new SdkError("the coordinator at b:1 speaks worker protocol version 0", { code: "PROTOCOL_VERSION" });
  };
  const client = new RunRoutedCoordinators([a, b], new Clock().read);
  await assert.rejects(client.capabilities("composer-sdk test", never), /b:1 speaks worker protocol version 0/);
});

test("the list is checked and builds a client per coordinator", async () => {
  assert.deepEqual(parseCoordinators(" a:1, b:2 "), ["a:1", "b:2"]);
  assert.deepEqual(parseCoordinators("a:1"), ["a:1"]);
  assert.throws(
    () => parseCoordinators("a:1,,b:2"),
    (err: unknown) =>
      err instanceof SdkError &&
      err.message ===
        "COMPOSER_COORDINATORS='a:1,,b:2' has an empty address: give every coordinator's host:port, " +
          "separated by commas, the same list to every worker",
  );
  assert.throws(() => parseCoordinators("a:1,b:2,"), /empty address/);
  assert.throws(() => parseCoordinators("a:1, a:1"), (err: unknown) => err instanceof SdkError && /names a coordinator twice \(a:1\)/.test(err.message));
  assert.throws(() => new RunRoutedCoordinators([]), RangeError);

  const routed = coordinatorClient(new Worker({ coordinator: "x:1", coordinators: "a:1,b:2" }, {}).config);
  assert.ok(routed instanceof RunRoutedCoordinators);
  assert.equal(routed.target, "a:1,b:2");
  const alone = coordinatorClient(new Worker({ coordinator: "x:1" }, {}).config);
  assert.ok(alone instanceof CoordinatorClient);
  assert.equal(alone.target, "x:1");
  routed.close();
  alone.close();
  assert.throws(() => coordinatorClient(new Worker({ coordinators: "a:1,a:1" }, {}).config), /names a coordinator twice/);
});

test("COMPOSER_COORDINATORS sets the list; a given one wins; the start line names them all", () => {
  const fromEnv = new Worker({}, { COMPOSER_GRPC_ADDR: "x:1", COMPOSER_COORDINATORS: "a:1,b:2" });
  assert.deepEqual([fromEnv.config.coordinator, fromEnv.config.coordinators], ["x:1", "a:1,b:2"]);
  assert.equal(new Worker({ coordinators: "c:3" }, { COMPOSER_COORDINATORS: "a:1,b:2" }).config.coordinators, "c:3");
  assert.equal(new Worker({}, {}).config.coordinators, "");
  const worker = new Worker({ owner: "w1", redisUrl: "redis://10.0.0.5:6379/0", coordinators: "10.0.0.5:8451,10.0.0.6:8451" }, {});
  worker.handle("payments", async () => ({}));
  assert.match(
    worker.describe(),
    /prefix 'composer', coordinators 10\.0\.0\.5:8451,10\.0\.0\.6:8451 \(each run's calls to one\) \(plaintext\); node types payments TASK;/,
  );
});

test("a bad list stops the worker before it opens anything", async () => {
  const worker = new Worker({ coordinators: "a:1,,b:2", handleSignals: true, redisUrl: "redis://127.0.0.1:1/0" }, {});
  worker.handle("payments", async () => ({}));
  const listeners = process.listenerCount("SIGTERM");
  await assert.rejects(worker.run(), (err: unknown) => err instanceof SdkError && /has an empty address/.test(err.message));
  assert.equal(process.listenerCount("SIGTERM"), listeners);
});
