/**
 * A report's answer carries the next task (docs/architecture.md §3.2), the worker's side
 * (as tests/unit/sdk/test_take_next.py for the Python SDK): a report offers to take one
 * only while its handler's reader is not waiting for a slot, not while the worker drains
 * and not with `takeNext` false; what the answer brings runs in the slot the report kept,
 * with nothing to acknowledge, and is reported with the lease that came with it; an
 * answer with no task gives the slot back; the drain waits for a task that comes during it.
 * A fake coordinator and a fake queue stand in for the stack.
 */

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test, type TestContext } from "node:test";

import type {
  Capabilities,
  Coordinator,
  Lease,
  LeaseRequest,
  NextTask,
  Outcome,
  ReportRequest,
  TakeNext,
} from "../src/coordinator.js";
import { SdkError } from "../src/errors.js";
import { FakeQueue, lease, until } from "./fakes.js";
import { Worker, type LogLevel } from "../src/worker.js";
import type { TaskContext } from "../src/context.js";

/** An accepted report's answer that carries `taskId`, leased to the reporter. */
function nextTask(taskId: string): NextTask {
  return { fields: { task_id: taskId, run_id: "r1", attempt: "0" }, lease: lease(taskId) };
}

interface Reported {
  request: ReportRequest;
  outcome: Outcome;
  takeNext: TakeNext | undefined;
}

/**
 * Grants every lease asked; answers the reports with `answers` in turn (then plain
 * acceptance), each once `hold` (when set) has resolved.
 */
class FakeCoordinator implements Coordinator {
  readonly target = "fake:1";
  leases: LeaseRequest[] = [];
  reports: Reported[] = [];
  answers: Array<boolean | NextTask> = [];
  hold: Promise<void> | undefined;

  async capabilities(): Promise<Capabilities | undefined> {
    return { protocolVersion: 1, minProtocolVersion: 1, features: new Set(), serverVersion: "fake", redisPrefix: "", shards: 0, redisTopology: "" };
  }

  async acquire(request: LeaseRequest): Promise<Lease | undefined> {
    this.leases.push(request);
    return lease(request.taskId);
  }

  async renew(): Promise<boolean | undefined> {
    return true;
  }

  async report(request: ReportRequest, outcome: Outcome, _until: () => boolean, takeNext?: TakeNext): Promise<boolean | NextTask | undefined> {
    this.reports.push({ request, outcome, takeNext });
    if (this.hold !== undefined) await this.hold;
    const answer = this.answers.shift() ?? true;
    // leased as the answer is sent
    return typeof answer === "object" ? { ...answer, lease: { ...answer.lease, askedAt: performance.now() } } : answer;
  }

  async heartbeat(): Promise<boolean> {
    return true;
  }

  close(): void {}
}

/** Something a test lets go of: `open()` resolves `wait`. */
class Gate {
  open: () => void = () => undefined;
  readonly wait = new Promise<void>((resolve) => (this.open = resolve));
}


/**
 * A worker of queue q serving `handler` (which gets the task id) on fakes, running until
 * `done()` stops it and returns what it logged (or the test ends: a failed assertion
 * leaves no worker running).
 */
function serve(
  t: TestContext,
  handler: (taskId: string, ctx: TaskContext) => Promise<unknown>,
  options: { concurrency?: number; takeNext?: boolean; env?: NodeJS.ProcessEnv } = {},
) {
  const queue = new FakeQueue();
  const coordinator = new FakeCoordinator();
  const logs: Array<[LogLevel, string]> = [];
  const worker = new Worker(
    {
      owner: "w1",
      concurrency: options.concurrency ?? 2,
      leaseTtl: 5,
      readBlockMs: 20,
      drainSeconds: 1,
      presenceSeconds: 0,
      handleSignals: false,
      ...(options.takeNext === undefined ? {} : { takeNext: options.takeNext }),
      log: (level, message) => logs.push([level, message]),
    },
    options.env ?? {},
    { queue, coordinator },
  );
  worker.handle("q", async (ctx) => handler(ctx.taskId, ctx));
  const running = worker.run();
  t.after(async () => {
    worker.stop();
    await running.catch(() => undefined);
  });
  const done = async (): Promise<Array<[LogLevel, string]>> => {
    worker.stop();
    await running;
    return logs;
  };
  return { worker, queue, coordinator, logs, running, done };
}

test("a report offers to take the next task; the one the answer brings runs and is reported with its lease", async (t) => {
  const ran: string[] = [];
  const gates = new Map([["t4", new Gate()], ["t5", new Gate()]]);
  const { worker, queue, coordinator, done } = serve(t, async (taskId) => {
    ran.push(taskId);
    await gates.get(taskId)?.wait;
    return { taskId };
  });
  coordinator.answers = [nextTask("t2"), nextTask("t3")]; // a chain: t1, then t2, then t3
  const t1 = queue.publish("t1");
  await until(() => worker.completed === 3, "three tasks completed");
  // t3's report offered too, and its answer brought nothing: the slot it kept is given
  // back, and both slots take tasks again
  queue.publish("t4");
  queue.publish("t5");
  await until(() => ran.includes("t4") && ran.includes("t5"), "t4 and t5 running together");
  for (const gate of gates.values()) gate.open();
  await until(() => worker.completed === 5, "five tasks completed");
  const logs = await done();
  assert.deepEqual([...ran.slice(0, 3), ...ran.slice(3).sort()], ["t1", "t2", "t3", "t4", "t5"]);
  const [first, second, third] = coordinator.reports as [Reported, Reported, Reported];
  assert.deepEqual(first.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  // t2's report presents the lease that came with the answer, and offers again
  assert.deepEqual([second.request.taskId, second.request.nodeId, second.request.token], ["t2", "node-t2", "token-t2"]);
  assert.deepEqual(second.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  assert.equal(third.request.token, "token-t3");
  assert.deepEqual(third.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  assert.equal(second.outcome.outputJson, '{"taskId":"t2"}');
  // of the chain, only t1 was read and leased; only its entry is acknowledged
  assert.deepEqual(coordinator.leases.map((l) => l.taskId).sort(), ["t1", "t4", "t5"]);
  assert.deepEqual(queue.acked[0], [t1.stream, t1.id]);
  assert.equal(queue.acked.length, 3);
  assert.equal(worker.takenNext, 2);
  // nothing said per task at info level
  assert.deepEqual(logs.filter(([level, message]) => level === "info" && /\bt\d\b/.test(message)), []);
});

test("the task the answer brings holds the slot its reporter kept; its slot comes back after", async (t) => {
  const gates = new Map<string, Gate>();
  const started: string[] = [];
  let active = 0;
  let most = 0;
  const { worker, queue, coordinator, done } = serve(t, async (taskId) => {
    started.push(taskId);
    active += 1;
    most = Math.max(most, active);
    await gates.get(taskId)?.wait;
    active -= 1;
    return {};
  });
  for (const id of ["t2", "t3", "t4", "t5", "t6"]) gates.set(id, new Gate());
  coordinator.answers = [nextTask("t2")];
  queue.publish("t1");
  await until(() => started.includes("t2"), "t2 started, brought by t1's report");
  assert.deepEqual(coordinator.reports[0]!.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  queue.publish("t3");
  await until(() => started.includes("t3"), "t3 read into the other slot");
  // both slots are held (t2 in the one t1's report kept, t3): t4 waits for one
  queue.publish("t4");
  await sleep(100);
  assert.ok(!started.includes("t4"), "t4 started with both slots held");
  // t3 ends while the reader waits for a slot: its report offers nothing, and its slot
  // goes to t4
  gates.get("t3")!.open();
  await until(() => started.includes("t4"), "t4 started in t3's slot");
  const t3 = coordinator.reports.find((r) => r.request.taskId === "t3")!;
  assert.equal(t3.takeNext, undefined);
  gates.get("t2")!.open();
  gates.get("t4")!.open();
  await until(() => worker.completed === 4, "four tasks completed");
  // every answer since brought no task: both slots are free again, and two run at once
  queue.publish("t5");
  queue.publish("t6");
  await until(() => started.includes("t5") && started.includes("t6"), "t5 and t6 running together");
  assert.equal(active, 2);
  gates.get("t5")!.open();
  gates.get("t6")!.open();
  await until(() => worker.completed === 6, "six tasks completed");
  await done();
  assert.equal(most, 2);
  assert.equal(worker.takenNext, 1);
  assert.deepEqual(coordinator.leases.map((l) => l.taskId).sort(), ["t1", "t3", "t4", "t5", "t6"]);
});

test("an answer that brings no task gives back the slot its report kept", async (t) => {
  const gates = new Map([["t2", new Gate()], ["t3", new Gate()]]);
  const started: string[] = [];
  const { worker, queue, coordinator, done } = serve(t, async (taskId) => {
    started.push(taskId);
    await gates.get(taskId)?.wait;
    return {};
  });
  queue.publish("t1");
  await until(() => worker.completed === 1, "t1 completed");
  assert.deepEqual(coordinator.reports[0]!.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  // its answer brought nothing: both slots take tasks again
  queue.publish("t2");
  queue.publish("t3");
  await until(() => started.includes("t2") && started.includes("t3"), "t2 and t3 running together");
  for (const gate of gates.values()) gate.open();
  await until(() => worker.completed === 3, "three tasks completed");
  await done();
  assert.equal(worker.takenNext, 0);
});

test("no offer while the reader waits for a slot", async (t) => {
  const release = new Gate();
  const { worker, queue, coordinator, done } = serve(
    t,
    async (taskId) => {
      if (taskId === "t1") await release.wait;
      return {};
    },
    { concurrency: 1 },
  );
  coordinator.answers = [nextTask("t9")]; // never taken: nothing offers
  queue.publish("t1");
  await until(() => coordinator.leases.length === 1, "t1 leased");
  queue.publish("t2");
  release.open();
  await until(() => worker.completed === 2, "both tasks completed");
  await done();
  assert.deepEqual(coordinator.reports.map((r) => r.request.taskId), ["t1", "t2"]);
  assert.ok(coordinator.reports.every((r) => r.takeNext === undefined));
  assert.equal(worker.takenNext, 0);
});

test("takeNext false, or COMPOSER_WORKER_TAKE_NEXT false, offers nothing", async (t) => {
  for (const off of [{ takeNext: false }, { env: { COMPOSER_WORKER_TAKE_NEXT: "false" } }]) {
    const { worker, queue, coordinator, done } = serve(t, async () => ({}), off);
    coordinator.answers = [nextTask("t9")];
    queue.publish("t1");
    queue.publish("t2");
    await until(() => worker.completed === 2, "both tasks completed");
    await done();
    assert.ok(coordinator.reports.every((r) => r.takeNext === undefined), JSON.stringify(off));
    assert.equal(worker.takenNext, 0);
  }
});

test("COMPOSER_WORKER_TAKE_NEXT is read as the Python SDK reads a yes/no variable", () => {
  const takeNext = (value: string | undefined, given?: boolean): boolean =>
    new Worker(given === undefined ? {} : { takeNext: given }, value === undefined ? {} : { COMPOSER_WORKER_TAKE_NEXT: value }).config.takeNext;
  for (const off of ["false", "0", "no", "off", " FALSE "]) assert.equal(takeNext(off), false, off);
  for (const on of [undefined, "", "true", "1", "yes", "on", "True"]) assert.equal(takeNext(on), true, String(on));
  assert.equal(takeNext("false", true), true); // given wins
  assert.throws(() => takeNext("maybe"), (err: unknown) => err instanceof SdkError && /COMPOSER_WORKER_TAKE_NEXT='maybe' is neither true nor false/.test(err.message));
});

test("no offer while draining; a task that comes with an answer during the drain runs before run() returns", async (t) => {
  const ran: string[] = [];
  const { worker, queue, coordinator, logs, running } = serve(t, async (taskId) => {
    ran.push(taskId);
    if (taskId === "t2") await sleep(100); // still running when t1's processing has ended
    return {};
  });
  const answer = new Gate();
  coordinator.hold = answer.wait;
  coordinator.answers = [nextTask("t2")];
  queue.publish("t1");
  await until(() => coordinator.reports.length === 1, "t1's report sent, with its offer");
  worker.stop();
  // the answer comes once the drain has begun, with t1's report in flight
  await until(() => logs.some(([, message]) => message.startsWith("draining:")), "the drain began");
  answer.open();
  await running;
  assert.deepEqual(ran, ["t1", "t2"]);
  const [first, second] = coordinator.reports as [Reported, Reported];
  assert.deepEqual(first.takeNext, { queue: "q", nodeTypes: ["TASK"], ttl: 5 });
  assert.equal(second.request.taskId, "t2");
  assert.equal(second.takeNext, undefined); // no offer while stopping
  assert.deepEqual([worker.completed, worker.takenNext], [2, 1]);
});

test("a report made once the worker is stopping offers nothing", async (t) => {
  const release = new Gate();
  const { worker, queue, coordinator, running } = serve(t, async () => {
    await release.wait;
    return {};
  });
  coordinator.answers = [nextTask("t9")];
  queue.publish("t1");
  await until(() => coordinator.leases.length === 1, "t1 leased");
  worker.stop();
  release.open();
  await running;
  assert.equal(coordinator.reports.length, 1);
  assert.equal(coordinator.reports[0]!.takeNext, undefined);
  assert.deepEqual([worker.completed, worker.takenNext], [1, 0]);
});
