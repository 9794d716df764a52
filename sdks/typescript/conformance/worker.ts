/**
 * The conformance worker for the TypeScript SDK: one queue, served by a handler whose
 * input says what to do (`{"do": ...}`): the same behaviours, on the same inputs, as
 * tests/conformance/python_worker.py, so the scenarios in tests/conformance/test_sdks.py
 * run unchanged against either SDK.
 *
 * Configured by the environment: COMPOSER_GRPC_ADDR, COMPOSER_REDIS_URL,
 * COMPOSER_REDIS_PREFIX, COMPOSER_WORKER_TOKEN, COMPOSER_WORKER_TAKE_NEXT (the SDK's own
 * defaults), CONFORMANCE_QUEUE, CONFORMANCE_LEASE_TTL. It says on stdout
 * `started <task> <attempt>` when a handler starts and `aborted <task> <attempt>` when one
 * is stopped unfinished.
 */

import { setTimeout as sleep } from "node:timers/promises";

import { PermanentError, Worker, type TaskContext } from "../src/index.js";

type Input = Record<string, unknown> & { do?: string };

function say(line: string): void {
  process.stdout.write(line + "\n");
}

async function behave(ctx: TaskContext, input: Input): Promise<unknown> {
  const wait = async (seconds: number): Promise<void> => {
    await sleep(seconds * 1000, undefined, { signal: ctx.signal });
  };
  switch (input.do) {
    case "echo":
      return { input, attempt: ctx.attempt, idempotency_key: ctx.idempotencyKey, caller: ctx.caller ?? null };
    case "fail_until":
      if (ctx.attempt < Number(input.attempt)) throw new Error(`attempt ${ctx.attempt} fails on purpose`);
      return { attempt: ctx.attempt };
    case "permanent":
      throw new PermanentError(String(input.message), { code: String(input.code) });
    case "sleep":
      await wait(Number(input.seconds));
      return { slept: input.seconds };
    case "hang_first":
      ctx.logger.info(`attempt ${ctx.attempt}`); // kept only if the attempt reports
      if (ctx.attempt === 0) await wait(3600);
      return { attempt: ctx.attempt };
    case "big":
      return { data: "x".repeat(Number(input.bytes)) };
    case "log": {
      const lines = Number(input.lines);
      for (let i = 0; i < lines; i++) ctx.logger.info(`line ${i + 1} of ${lines}`);
      ctx.logger.warning("done");
      return { logged: lines };
    }
    default:
      throw new PermanentError(`unknown behaviour '${String(input.do)}'`, { code: "bad_behaviour" });
  }
}

const worker = new Worker({
  leaseTtl: Number(process.env.CONFORMANCE_LEASE_TTL ?? "5"),
  readBlockMs: 200,
  drainSeconds: Number(process.env.CONFORMANCE_DRAIN_SECONDS ?? "10"),
  presenceSeconds: 1,
});
worker.handle<Input>(process.env.CONFORMANCE_QUEUE ?? "conformance", async (ctx, input) => {
  say(`started ${ctx.taskId} ${ctx.attempt}`);
  ctx.signal.addEventListener("abort", () => say(`aborted ${ctx.taskId} ${ctx.attempt}`), { once: true });
  return behave(ctx, input);
});
await worker.run();
