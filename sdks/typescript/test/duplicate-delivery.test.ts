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
import { Entry, type Queue } from "../src/queue.js";
import { Worker } from "../src/worker.js";

const STREAM = "composer:q:q:0";

class FakeQueue implements Queue {
  acked: Array<[string, string]> = [];
  read_ = 0;
  private entries: Entry[] = [];
  private published = 0;

  publish(taskId: string): void {
    this.published += 1;
    this.entries.push(new Entry(STREAM, `${this.published}-0`, { task_id: taskId, run_id: "r1", attempt: "0" }));
  }

  reader(): unknown {
    return {};
  }

  async ensureGroups(): Promise<void> {}

  async read(_c: unknown, _s: string[], _consumer: string, count: number, blockMs: number): Promise<Entry[]> {
    if (this.entries.length === 0) await new Promise((resolve) => setTimeout(resolve, Math.min(blockMs, 20)));
    const taken = this.entries.splice(0, count);
    this.read_ += taken.length;
    return taken;
  }

  async ack(refs: Array<[string, string]>): Promise<void> {
    this.acked.push(...refs);
  }

  async heartbeat(): Promise<void> {}

  interrupt(): void {}

  async close(): Promise<void> {}
}

function lease(granted: boolean): Lease {
  return {
    granted,
    reason: granted ? "" : "held",
    inputJson: "{}",
    maxAttempts: 3,
    askedAt: performance.now(),
    token: "token",
    nodeId: "work",
    nodeType: "TASK",
    workflowId: "wf",
    workflowVersion: 1,
    timeoutSeconds: undefined,
    ttl: 0,
    contextJson: "",
  };
}

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
      return lease(false);
    }
    return lease(true);
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

async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
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
  await until(() => queue.read_ === 2, "both deliveries read");
  coordinator.answer(); // the first is refused: held
  await until(() => worker.completed === 1, "the second delivery ran the attempt");
  worker.stop();
  await running;
  assert.deepEqual(ran, ["t1"]);
  assert.equal(coordinator.reports, 1);
  assert.equal(worker.skipped, 1);
  assert.equal(queue.acked.length, 2);
});
