/**
 * What a handler returns, as the JSON text reported, or why it cannot be (as
 * composer_common.limits.encode): PostgreSQL's JSONB refuses NaN and Infinity, the NUL
 * character and lone surrogates, and JSON.stringify would quietly turn a NaN into null or
 * drop an undefined; an output over the coordinator's COMPOSER_MAX_OUTPUT_BYTES fails the
 * node for good here, before it is sent.
 */

export const MiB = 1024 * 1024;
/** COMPOSER_MAX_OUTPUT_BYTES's default: keep WorkerConfig.maxOutputBytes equal to it. */
export const DEFAULT_MAX_OUTPUT_BYTES = MiB;

export interface Refusal {
  message: string;
  tooLarge: boolean;
}

export function encode(
  value: unknown,
  what: string,
  maxBytes: number | undefined,
  setting: string,
): string | Refusal {
  const problem = whereUnstorable(value);
  if (problem !== undefined) {
    return { message: `${what} is not storable as JSON: ${problem}`, tooLarge: false };
  }
  const text = JSON.stringify(value === undefined ? null : value);
  const size = Buffer.byteLength(text, "utf8");
  if (maxBytes !== undefined && size > maxBytes) {
    return { message: overLimit(what, size, maxBytes, setting), tooLarge: true };
  }
  return text;
}

/** What in `value` JSON (as JSONB stores it) cannot hold, and where (a JSONPath). */
export function whereUnstorable(value: unknown): string | undefined {
  const stack: Array<[unknown, string]> = [[value, "$"]];
  while (stack.length > 0) {
    const [current, path] = stack.pop()!;
    if (typeof current === "string") {
      const problem = textProblem(current);
      if (problem) return `${problem} at ${path}`;
    } else if (typeof current === "number") {
      if (!Number.isFinite(current)) {
        const name = Number.isNaN(current) ? "NaN" : current > 0 ? "Infinity" : "-Infinity";
        return `${name} at ${path}`;
      }
    } else if (Array.isArray(current)) {
      current.forEach((child, i) => stack.push([child, `${path}[${i}]`]));
    } else if (current !== null && typeof current === "object") {
      const proto = Object.getPrototypeOf(current);
      if (proto !== Object.prototype && proto !== null) {
        if (typeof (current as { toJSON?: unknown }).toJSON === "function") {
          continue; // a Date and its kind say themselves what their JSON is
        }
        return `a ${current.constructor?.name ?? "value"}, which is not JSON, at ${path}`;
      }
      for (const [key, child] of Object.entries(current)) {
        const problem = textProblem(key);
        if (problem) return `${problem} in a key at ${path}`;
        if (child !== undefined) stack.push([child, `${path}.${key}`]);
      }
    } else if (typeof current === "bigint" || typeof current === "function" || typeof current === "symbol") {
      return `a ${typeof current}, which is not JSON, at ${path}`;
    } // null, a boolean, and undefined (reported as null, as JSON.stringify writes it in a list)
  }
  return undefined;
}

function textProblem(text: string): string | undefined {
  if (text.includes("\u0000")) return "a NUL character (\\u0000)";
  if (!text.isWellFormed()) return "a lone surrogate (not valid Unicode text)";
  return undefined;
}

export function overLimit(what: string, size: number, limit: number, setting: string): string {
  return `${what} is ${showSize(size)}, over the ${showLimit(limit)} limit (${setting})`;
}

function showSize(size: number): string {
  if (size >= 1_000_000) return `${(size / 1_000_000).toFixed(1)} MB`;
  if (size >= 10_000) return `${Math.round(size / 1000)} kB`;
  return `${size} bytes`;
}

function showLimit(limit: number): string {
  for (const [unit, name] of [[MiB, "MiB"], [1024, "KiB"]] as const) {
    if (limit >= unit && limit % (unit / 16) === 0) return `${limit / unit} ${name}`;
  }
  return `${limit} bytes`;
}
