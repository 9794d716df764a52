/**
 * Run a handler with no engine at all, for unit tests (as composer_sdk.testing):
 * `runHandler` returns its output as a worker would report it, parsed back from the
 * JSON sent, or throws the failure the worker would report (`PermanentError` when no
 * retry can help, else `TaskFailed`; `code` says why); `handlerOutcome` returns the
 * whole outcome, with what the handler logged.
 */

import { TaskContext, type Caller } from "./context.js";
import type { Outcome } from "./coordinator.js";
import { PermanentError, TaskFailed } from "./errors.js";
import { Handler, type HandlerFn, type HandlerOptions } from "./handler.js";
import { DEFAULT_MAX_OUTPUT_BYTES } from "./limits.js";
import { AttemptLines, TaskLogger } from "./tasklog.js";

export interface TestAttempt<I> {
  runId?: string;
  nodeId?: string;
  taskId?: string;
  attempt?: number;
  maxAttempts?: number;
  workflowId?: string;
  workflowVersion?: number;
  /** Seconds (300). */
  timeout?: number;
  caller?: Caller;
  parse?: HandlerOptions<I>["parse"];
  maxOutputBytes?: number;
}

/** What a worker would report for one attempt of `fn` on `input`, with its log lines. */
export async function handlerOutcome<I, O>(fn: HandlerFn<I, O>, input: unknown, attempt: TestAttempt<I> = {}): Promise<Outcome> {
  const handler = new Handler<I, O>("test", fn, attempt.parse ? { parse: attempt.parse } : {});
  const lines = new AttemptLines();
  const abort = new AbortController();
  const timeout = attempt.timeout ?? 300;
  const ctx = new TaskContext(
    attempt.taskId ?? "task-test",
    attempt.runId ?? "run-test",
    attempt.nodeId ?? "node",
    attempt.attempt ?? 0,
    attempt.maxAttempts ?? 3,
    attempt.workflowId ?? "test-workflow",
    attempt.workflowVersion ?? 1,
    timeout,
    new TaskLogger(lines, "composer.task.test", () => undefined),
    attempt.caller,
    abort.signal,
  );
  const outcome = await handler.invoke(ctx, input, timeout, abort, attempt.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES);
  return { ...outcome, logLines: lines.lines(), logTruncated: lines.truncated };
}

/** The output a worker would report for `fn` on `input`; throws the failure it would report. */
export async function runHandler<I, O>(fn: HandlerFn<I, O>, input: unknown, attempt: TestAttempt<I> = {}): Promise<unknown> {
  const outcome = await handlerOutcome(fn, input, attempt);
  if (outcome.status === "COMPLETED") return JSON.parse(outcome.outputJson) as unknown;
  const options = outcome.code ? { code: outcome.code } : {};
  throw outcome.permanent ? new PermanentError(outcome.error, options) : new TaskFailed(outcome.error, options);
}
