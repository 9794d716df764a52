/**
 * Fakes of the worker's adapters for the unit tests: a queue's streams in memory, a
 * lease as the coordinator answers it, and a wait on a condition with a deadline.
 */

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import type { Lease } from "../src/coordinator.js";
import { Entry, type Queue } from "../src/queue.js";

export const STREAM = "composer:q:q:0";

/** A queue's streams in memory: `publish` adds an entry, `read` takes them, `ack` notes them. */
export class FakeQueue implements Queue {
  acked: Array<[string, string]> = [];
  /** Entries handed to the worker so far. */
  delivered = 0;
  private entries: Entry[] = [];
  private waiters: Array<() => void> = [];
  private published = 0;

  publish(taskId: string): Entry {
    this.published += 1;
    const entry = new Entry(STREAM, `${this.published}-0`, { task_id: taskId, run_id: "r1", attempt: "0" });
    this.entries.push(entry);
    this.wake();
    return entry;
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  reader(): unknown {
    return {};
  }

  async ensureGroups(): Promise<void> {}

  async read(_connection: unknown, _streams: string[], _consumer: string, count: number, blockMs: number): Promise<Entry[]> {
    if (this.entries.length === 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, blockMs);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const taken = this.entries.splice(0, count);
    this.delivered += taken.length;
    return taken;
  }

  async ack(refs: Array<[string, string]>): Promise<void> {
    this.acked.push(...refs);
  }

  async heartbeat(): Promise<void> {}

  interrupt(): void {
    this.wake();
  }

  async close(): Promise<void> {}
}

/** A lease of `taskId`: granted, or refused with `refused` as its reason. */
export function lease(taskId: string, refused?: string): Lease {
  return {
    granted: refused === undefined,
    reason: refused ?? "",
    inputJson: "{}",
    maxAttempts: 3,
    askedAt: performance.now(),
    token: `token-${taskId}`,
    nodeId: `node-${taskId}`,
    nodeType: "TASK",
    workflowId: "wf",
    workflowVersion: 1,
    timeoutSeconds: undefined,
    ttl: 0,
    contextJson: "",
  };
}

export async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
