/**
 * The SDK's own unit tests (node --test; `make test` runs them): what a handler's outcome
 * is for each way it can end, the output limit, the task log's bounds, the caller, the
 * protocol version check and the package's version. The behaviour against a real stack
 * is tests/conformance's, shared with the Python SDK.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";

import { Batcher } from "../src/batcher.js";
import { callerOf, TaskContext } from "../src/context.js";
import { codeName } from "../src/coordinator.js";
import { PermanentError, TaskFailed } from "../src/errors.js";
import { Handler } from "../src/handler.js";
import { encode } from "../src/limits.js";
import { incompatible, PROTOCOL_VERSION } from "../src/protocol.js";
import { AttemptLines, TaskLogger } from "../src/tasklog.js";
import { SDK_NAME, SDK_VERSION } from "../src/version.js";
import { handlerOutcome, runHandler, Worker } from "../src/index.js";
import { Code } from "@connectrpc/connect";

function context(abort = new AbortController(), lines = new AttemptLines()): TaskContext {
  const logger = new TaskLogger(lines, "composer.task.q", () => undefined);
  return new TaskContext("t1", "r1", "n1", 0, 3, "wf", 1, 5, logger, undefined, abort.signal);
}

async function outcome<I>(fn: (ctx: TaskContext, input: I) => unknown, input: unknown = {}, timeout = 5, parse?: (raw: unknown) => I) {
  const handler = new Handler<I, unknown>("q", fn as never, parse ? { parse } : {});
  return handler.invoke(context(), input, timeout, new AbortController(), 1024);
}

test("a returned value is the output, as compact JSON", async () => {
  const done = await outcome(async (_ctx, input: { n: number }) => ({ doubled: input.n * 2, name: "é" }), { n: 2 });
  assert.equal(done.status, "COMPLETED");
  assert.equal(done.outputJson, '{"doubled":4,"name":"é"}');
});

test("a PermanentError fails for good with its code; TaskFailed is retried with its code", async () => {
  const permanent = await outcome(async () => {
    throw new PermanentError("card declined", { code: "card_declined" });
  });
  assert.deepEqual([permanent.status, permanent.error, permanent.code, permanent.permanent], ["FAILED", "card declined", "card_declined", true]);
  const retried = await outcome(async () => {
    throw new TaskFailed("try later", { code: "busy" });
  });
  assert.deepEqual([retried.code, retried.permanent], ["busy", false]);
});

test("any other error is retried, carrying its name and message", async () => {
  const failed = await outcome(async () => {
    throw new TypeError("x is not a function");
  });
  assert.deepEqual([failed.error, failed.code, failed.permanent], ["TypeError: x is not a function", "exception", false]);
});

test("a handler past its timeout fails with the code timeout and is signalled to stop", async () => {
  const abort = new AbortController();
  const handler = new Handler("q", async (ctx: TaskContext) => {
    await sleep(5000, undefined, { signal: ctx.signal }).catch(() => undefined);
    return {};
  });
  const ctx = context(abort);
  const result = await handler.invoke(ctx, {}, 0.05, abort, undefined);
  assert.deepEqual([result.status, result.code, result.permanent], ["FAILED", "timeout", false]);
  assert.ok(ctx.signal.aborted);
});

test("an input the parser refuses fails for good as bad_input", async () => {
  const parse = (raw: unknown): { n: number } => {
    if (typeof (raw as { n?: unknown }).n !== "number") throw new Error("n must be a number");
    return raw as { n: number };
  };
  const refused = await outcome(async (_ctx, input: { n: number }) => input.n, { n: "2" }, 5, parse);
  assert.deepEqual([refused.code, refused.permanent], ["bad_input", true]);
  assert.match(refused.error, /n must be a number/);
});

test("an output over the limit, or one JSON cannot store, fails for good before it is sent", async () => {
  const big = await outcome(async () => ({ data: "x".repeat(2000) }));
  assert.deepEqual([big.code, big.permanent], ["output_too_large", true]);
  assert.match(big.error, /over the 1 KiB limit \(COMPOSER_MAX_OUTPUT_BYTES\)/);
  const nan = await outcome(async () => ({ a: { b: NaN } }));
  assert.deepEqual([nan.code, nan.error], ["bad_output", "output is not storable as JSON: NaN at $.a.b"]);
  assert.equal(typeof encode({ at: new Date(0) }, "output", undefined, "X"), "string");
  assert.match((encode("a\u0000b", "output", undefined, "X") as { message: string }).message, /NUL/);
});

test("the task log keeps the first lines, then a marker counting the rest", () => {
  const lines = new AttemptLines(1000, 2);
  const logger = new TaskLogger(lines, "q", () => undefined);
  logger.info("one");
  logger.debug("not kept below INFO");
  logger.warning("two");
  logger.error("three");
  logger.error("four");
  const kept = lines.lines();
  assert.equal(kept.length, 3);
  assert.match(kept[0]!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO one$/);
  assert.match(kept[1]!, /Z WARNING two$/);
  assert.equal(kept[2], "… 2 lines truncated");
  assert.equal(lines.truncated, 2);
});

test("the caller comes from the lease's calling context; none without one", () => {
  const caller = callerOf('{"caller": {"name": "ci", "role": "operator"}, "metadata": {"ticket": "OPS-7"}}');
  assert.deepEqual(caller, { name: "ci", role: "operator", metadata: { ticket: "OPS-7" } });
  assert.equal(callerOf(""), undefined);
  assert.equal(callerOf("not json"), undefined);
  assert.equal(callerOf('{"caller": {"name": 1}}'), undefined);
});

test("the idempotency key is the same for every attempt of a node in a run", () => {
  const ctx = context();
  assert.equal(ctx.idempotencyKey, "r1:n1");
  assert.equal(ctx.isLastAttempt, false);
});

test("the protocol check names both versions and what to upgrade", () => {
  assert.equal(incompatible("sdk", PROTOCOL_VERSION, "c:1", PROTOCOL_VERSION, 1), undefined);
  assert.match(incompatible("sdk", 2, "c:1", 1, 1)!, /version 1, older than this SDK's \(sdk, protocol version 2\): upgrade the coordinator/);
  assert.match(incompatible("sdk", 1, "c:1", 3, 2)!, /serves SDKs of protocol version 2 and newer; this SDK \(sdk\) speaks version 1: upgrade the SDK/);
});

test("status names are the protocol's", () => {
  assert.equal(codeName(Code.FailedPrecondition), "FAILED_PRECONDITION");
  assert.equal(codeName(Code.Unavailable), "UNAVAILABLE");
  assert.equal(codeName(Code.Canceled), "CANCELLED");
});

test("the connection's settings default from the environment a stack writes", () => {
  const worker = new Worker({}, {
    COMPOSER_GRPC_ADDR: "127.0.0.1:8451",
    COMPOSER_REDIS_URL: "redis://127.0.0.1:6379/3",
    COMPOSER_REDIS_PREFIX: "composer_8400",
    COMPOSER_WORKER_TOKEN: "secret",
  });
  const { coordinator, redisUrl, redisPrefix, token } = worker.config;
  assert.deepEqual({ coordinator, redisUrl, redisPrefix, token }, {
    coordinator: "127.0.0.1:8451",
    redisUrl: "redis://127.0.0.1:6379/3",
    redisPrefix: "composer_8400",
    token: "secret",
  });
  const given = new Worker({ coordinator: "c:1" }, { COMPOSER_GRPC_ADDR: "ignored:2" });
  assert.equal(given.config.coordinator, "c:1");
});

test("a handler on a reserved queue runs its node type only", () => {
  const worker = new Worker({}, {});
  assert.throws(() => worker.handle("http", async () => ({}), { nodeTypes: ["TASK"] }), /reserved for HTTP nodes/);
  assert.throws(() => worker.handle("q", async () => ({}), { nodeTypes: ["SQL"] }), /'SQL' is not a node type/);
});

test("the package's version is package.json's", () => {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { name: string; version: string };
  assert.deepEqual([pkg.name, pkg.version], [SDK_NAME, SDK_VERSION]);
});

test("calls are batched: what is asked while calls are out goes together in the next one", async () => {
  const calls: number[][] = [];
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const batcher = new Batcher<number, number>(async (items) => {
    calls.push(items);
    await gate;
    return items.map((n) => (n === 4 ? new Error("item 4 refused") : n * 10));
  }, 128, 1);
  const answers = [1, 2, 3, 4, 5].map((n) => batcher.submit(n).catch((err: Error) => err.message));
  release();
  assert.deepEqual(await Promise.all(answers), [10, 20, 30, "item 4 refused", 50]);
  assert.deepEqual(calls, [[1], [2, 3, 4, 5]]); // the first at once, the rest in one call
});

test("runHandler runs a handler with no engine: its output, or the failure it would report", async () => {
  const charge = async (ctx: TaskContext, input: { amount: number }) => {
    if (input.amount <= 0) throw new PermanentError("amount must be positive", { code: "bad_amount" });
    ctx.logger.info(`charging ${input.amount}`);
    return { charged: input.amount, key: ctx.idempotencyKey };
  };
  assert.deepEqual(await runHandler(charge, { amount: 5 }, { runId: "r1", nodeId: "charge" }), { charged: 5, key: "r1:charge" });
  await assert.rejects(runHandler(charge, { amount: 0 }), (err: unknown) => err instanceof PermanentError && err.code === "bad_amount");
  const outcome = await handlerOutcome(charge, { amount: 7 });
  assert.match(outcome.logLines[0]!, /INFO charging 7$/);
});

test("the start line says what the worker serves and where, with no password", () => {
  const worker = new Worker({ owner: "w1", redisUrl: "redis://:secret@10.0.0.5:6379/0", redisPrefix: "composer_8400", coordinator: "10.0.0.5:8451" }, {});
  worker.handle("payments", async () => ({}));
  worker.handle("egress", async () => ({}), { nodeTypes: ["HTTP", "TASK"] });
  assert.equal(
    worker.describe(),
    "worker w1 serving egress, payments from Redis redis://:***@10.0.0.5:6379/0 prefix 'composer_8400', " +
      "coordinator 10.0.0.5:8451 (plaintext); node types egress HTTP/TASK, payments TASK; concurrency 16, " +
      `prefetch 32, ${SDK_NAME} ${SDK_VERSION}`,
  );
});
