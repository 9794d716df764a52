/**
 * The README's payments worker in TypeScript ("A worker in TypeScript": the code below is
 * that block, as it is; tests/unit/test_readme.py keeps the two equal). It serves the
 * queue `payments` (the TASK node `charge` of examples/charge.yaml, and of
 * examples/order-fulfilment.yaml) on the stack whose address, Redis prefix and token the
 * environment names (.state/stack.env and .state/tokens.env, as `make run` writes them).
 *
 *     make ts-sdk
 *     set -a; . .state/tokens.env; . .state/stack.env; set +a
 *     node sdks/typescript/dist/examples/payments.js
 */

import { PermanentError, Worker } from "@composer/worker";

interface Charge { amount: number; order: string }

function parseCharge(input: unknown): Charge {  // what it throws fails the node for good (bad_input)
  const { amount, order } = (input ?? {}) as Record<string, unknown>;
  if (typeof amount !== "number" || typeof order !== "string") throw new TypeError("not a charge");
  return { amount, order };
}

const worker = new Worker(); // the stack's address, Redis prefix and token: the environment

worker.handle<Charge>("payments", async (ctx, input) => {
  if (input.amount <= 0) throw new PermanentError("amount must be positive", { code: "bad_amount" });
  ctx.logger.info(`charging ${input.amount} for order ${input.order}`); // kept with the attempt
  return { charged: input.amount, key: ctx.idempotencyKey };
}, { parse: parseCharge });

await worker.run(); // until SIGTERM or Ctrl-C, then drains
