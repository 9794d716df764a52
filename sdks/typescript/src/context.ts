/** What a handler knows about the attempt it runs (as composer_sdk.TaskContext). */

import type { TaskLogger } from "./tasklog.js";

/**
 * Who started the run (their API token's name and role) and the request metadata they
 * passed with the start; `ctx.caller` is undefined when the run has none.
 */
export interface Caller {
  name: string;
  role: string;
  metadata: Readonly<Record<string, unknown>>;
}

/** The caller a lease's calling context names (undefined: none, or not one we read). */
export function callerOf(contextJson: string): Caller | undefined {
  if (!contextJson) return undefined;
  let document: unknown;
  try {
    document = JSON.parse(contextJson);
  } catch {
    return undefined;
  }
  if (typeof document !== "object" || document === null) return undefined;
  const { caller, metadata } = document as { caller?: unknown; metadata?: unknown };
  if (typeof caller !== "object" || caller === null) return undefined;
  const { name, role } = caller as { name?: unknown; role?: unknown };
  if (typeof name !== "string" || typeof role !== "string") return undefined;
  const meta = typeof metadata === "object" && metadata !== null && !Array.isArray(metadata) ? metadata : {};
  return Object.freeze({ name, role, metadata: Object.freeze({ ...(meta as Record<string, unknown>) }) });
}

export class TaskContext {
  constructor(
    readonly taskId: string,
    readonly runId: string,
    readonly nodeId: string,
    /** 0 for the first attempt (the protocol's numbering). */
    readonly attempt: number,
    readonly maxAttempts: number,
    readonly workflowId: string,
    readonly workflowVersion: number,
    /** Seconds this attempt may run (the node's timeout_seconds, or the worker's default). */
    readonly timeout: number,
    /** Kept with the attempt and shown with the run (`composer logs`, the UI's node panel). */
    readonly logger: TaskLogger,
    readonly caller: Caller | undefined,
    /** Aborted when the attempt must stop: its timeout, a lost lease, a drain past its grace. */
    readonly signal: AbortSignal,
  ) {}

  /** The same for every attempt of this node in this run: pass it to the systems you call. */
  get idempotencyKey(): string {
    return `${this.runId}:${this.nodeId}`;
  }

  /** True when a failure now fails the node for good (time for give-up side effects). */
  get isLastAttempt(): boolean {
    return this.attempt + 1 >= this.maxAttempts;
  }
}
