/**
 * Composer worker SDK for Node.js: typed handlers for a queue, run with leases and reports.
 *
 *     const worker = new Worker({ token: process.env.COMPOSER_WORKER_TOKEN });
 *     worker.handle<Charge>("payments", async (ctx, input) => {
 *       if (input.amount <= 0) throw new PermanentError("amount must be positive", { code: "bad_amount" });
 *       ctx.logger.info(`charging ${input.amount}`);
 *       return { charged: input.amount, key: ctx.idempotencyKey };
 *     });
 *     await worker.run();   // until SIGTERM or SIGINT, then drains
 */

export { type Caller, TaskContext } from "./context.js";
export { CoordinatorUnavailable, PermanentError, SdkError, TaskFailed } from "./errors.js";
export { type Outcome } from "./coordinator.js";
export { type HandlerFn, type HandlerOptions } from "./handler.js";
export { PROTOCOL_VERSION } from "./protocol.js";
export { AttemptLines, TaskLogger } from "./tasklog.js";
export { handlerOutcome, runHandler, type TestAttempt } from "./testing.js";
export { SDK_NAME, SDK_VERSION } from "./version.js";
export { type Log, type LogLevel, Worker, type WorkerConfig } from "./worker.js";
