/**
 * Two deliveries of one attempt in one worker (as tests/unit/sdk/test_worker.py's
 * `test_a_second_delivery_while_the_first_is_refused_its_lease_runs_the_attempt` for the
 * Python SDK): a paused run's attempt has an entry on the stream, and at the resume it is
 * sent again. The second delivery must not be dropped as a duplicate while the first's
 * lease is still being asked for: the first is refused (held), and the second is then the
 * only entry left.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import type { Capabilities, Coordinator, Lease, LeaseRequest, NextTask } from "../src/coordinator.js";
import { Worker } from "../src/worker.js";
import { FakeQueue, lease, until } from "./fakes.js";

/** The first lease asked waits for `answer` and is refused (held); the next ones are granted. */
class HeldThenReleased implements Coordinator {
  readonly target = "fake:1";
  leases: LeaseRequest[] = [];
  reports = 0;
  answer!: () => void;
  private readonly answered = new Promise<void>((resolve) => (this.answer = resolve));

  async capabilities(): Promise<Capabilities | undefined> {
    return { protocolVersion: 1, minProtocolVersion: 1, features: new Set(), serverVersion: "fake", redisPrefix: "", shards: 0, redisTopology: "" };
  }

  async acquire(request: LeaseRequest): Promise<Lease | undefined> {
    this.leases.push(request);
    if (this.leases.length === 1) {
      await this.answered;
      return lease(request.taskId, "held");
    }
    return lease(request.taskId);
  }

  async renew(): Promise<boolean | undefined> {
    return true;
  }

  async report(): Promise<boolean | NextTask | undefined> {
    this.reports += 1;
    return true;
  }

  async heartbeat(): Promise<boolean> {
    return true;
  }

  close(): void {}
}


test("a second delivery while the first is refused its lease runs the attempt", async (t) => {
  const queue = new FakeQueue();
  const coordinator = new HeldThenReleased();
  const worker = new Worker(
    { owner: "w1", concurrency: 4, leaseTtl: 5, readBlockMs: 20, drainSeconds: 1, presenceSeconds: 0, handleSignals: false, log: () => undefined },
    {},
    { queue, coordinator },
  );
  const ran: string[] = [];
  worker.handle("q", async (ctx) => {
    ran.push(ctx.taskId);
    return {};
  });
  const running = worker.run();
  t.after(async () => {
    worker.stop();
    await running.catch(() => undefined);
  });
  queue.publish("t1");
  await until(() => coordinator.leases.length === 1, "the first lease asked for");
  queue.publish("t1"); // the same attempt, sent again
  await until(() => queue.delivered === 2, "both deliveries read");
  coordinator.answer(); // the first is refused: held
  await until(() => worker.completed === 1, "the second delivery ran the attempt");
  worker.stop();
  await running;
  assert.deepEqual(ran, ["t1"]);
  assert.equal(coordinator.reports, 1);
  assert.equal(worker.skipped, 1);
  assert.equal(queue.acked.length, 2);
});
