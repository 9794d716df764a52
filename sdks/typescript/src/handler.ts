/** Handlers: how an input becomes a call and a result becomes an outcome (as composer_sdk._handler). */

import type { TaskContext } from "./context.js";
import type { Outcome } from "./coordinator.js";
import { SdkError, TaskFailed } from "./errors.js";
import { encode } from "./limits.js";

/** `async (ctx, input) => output`: the input typed by `parse`, the output any JSON value. */
export type HandlerFn<I, O> = (ctx: TaskContext, input: I) => Promise<O> | O;

export interface HandlerOptions<I> {
  /**
   * The node types it runs: by default TASK (HTTP on the `http` queue, PYTHON on `python`,
   * the queues reserved for the built-in executors).
   */
  nodeTypes?: string[];
  /**
   * Checks the task's input and gives it its type (a zod schema's `parse`, a hand-written
   * guard); what it throws fails the attempt for good (`bad_input`). None: the input as is.
   */
  parse?: (input: unknown) => I;
}

export const WORKER_NODE_TYPES = ["HTTP", "PYTHON", "TASK"] as const;
export const RESERVED_QUEUES: Readonly<Record<string, string>> = { http: "HTTP", python: "PYTHON" };

/** The node types a handler of `queue` runs; throws SdkError for a type no worker runs. */
export function handlerNodeTypes(queue: string, nodeTypes: string[] | undefined): ReadonlySet<string> {
  const reservedFor = RESERVED_QUEUES[queue];
  if (nodeTypes === undefined) return new Set([reservedFor ?? "TASK"]);
  const names = new Set(nodeTypes);
  const unknown = [...names].filter((n) => !(WORKER_NODE_TYPES as readonly string[]).includes(n)).sort();
  if (unknown.length > 0) {
    throw new SdkError(
      `handler for queue '${queue}': ${unknown.map((n) => `'${n}'`).join(", ")} is not a node type a worker runs ` +
        `(nodeTypes takes some of ${WORKER_NODE_TYPES.join(", ")})`,
    );
  }
  if (names.size === 0) throw new SdkError(`handler for queue '${queue}': nodeTypes names no node type`);
  if (reservedFor !== undefined && (names.size !== 1 || !names.has(reservedFor))) {
    throw new SdkError(
      `queue '${queue}' is reserved for ${reservedFor} nodes (the built-in workers run every task on it as one): ` +
        `a handler there runs ${reservedFor} nodes only; serve your TASK nodes on a queue of your own`,
    );
  }
  return names;
}

export class Handler<I = unknown, O = unknown> {
  readonly nodeTypes: ReadonlySet<string>;

  constructor(
    readonly queue: string,
    readonly fn: HandlerFn<I, O>,
    private readonly options: HandlerOptions<I> = {},
  ) {
    if (typeof fn !== "function") throw new SdkError(`the handler for queue '${queue}' is not a function`);
    this.nodeTypes = handlerNodeTypes(queue, options.nodeTypes);
  }

  /**
   * Run the handler once and turn whatever happens into an Outcome (without its log lines).
   * An output the coordinator would refuse (not storable as JSON, over `maxOutputBytes`)
   * fails the attempt for good, here, before it is sent. `abort` is aborted on timeout.
   */
  async invoke(ctx: TaskContext, rawInput: unknown, timeoutSeconds: number, abort: AbortController, maxOutputBytes: number | undefined): Promise<Outcome> {
    let value: I;
    try {
      value = this.options.parse ? this.options.parse(rawInput) : (rawInput as I);
    } catch (err) {
      return failed(`input does not match what the handler takes: ${describe(err)}`, "bad_input", true);
    }
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), timeoutSeconds * 1000);
    });
    let result: O;
    try {
      const ran = await Promise.race([Promise.resolve().then(() => this.fn(ctx, value)), timedOut]);
      if (ran === "timeout") {
        abort.abort(new Error(`handler ran past its timeout of ${timeoutSeconds}s`));
        return failed(`handler ran past its timeout of ${timeoutSeconds}s`, "timeout", false);
      }
      result = ran;
    } catch (err) {
      if (err instanceof TaskFailed) return failed(err.message, err.code ?? "", err.permanent);
      return failed(describe(err), "exception", false);
    } finally {
      clearTimeout(timer);
    }
    const encoded = encode(result, "output", maxOutputBytes, "COMPOSER_MAX_OUTPUT_BYTES");
    if (typeof encoded !== "string") {
      return failed(encoded.message, encoded.tooLarge ? "output_too_large" : "bad_output", true);
    }
    return { status: "COMPLETED", outputJson: encoded, error: "", code: "", permanent: false, logLines: [], logTruncated: 0 };
  }
}

function failed(error: string, code: string, permanent: boolean): Outcome {
  return { status: "FAILED", outputJson: "", error, code, permanent, logLines: [], logTruncated: 0 };
}

/** `TypeError: x is not a function`, as the Python SDK says `ValueError: ...`. */
function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return `thrown ${typeof err}: ${String(err)}`;
}
