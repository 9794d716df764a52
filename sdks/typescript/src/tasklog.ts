/**
 * Task logs: what one attempt logged, kept for its report (as composer_sdk._tasklog).
 *
 * A handler's `ctx.logger` keeps each line it is given, formatted `<UTC time> LEVEL
 * message`, and also writes it to the process's stderr as before. The lines go with the
 * attempt's report, failed or not (`composer logs RUN` shows them). Bounded per attempt:
 * the first lines up to `maxBytes` and `maxLines` are kept, the rest only counted, and a
 * last marker line says how many were dropped ("… 123 lines truncated").
 */

export const DEFAULT_LOG_MAX_BYTES = 64 * 1024;
export const DEFAULT_LOG_MAX_LINES = 1000;
/** A longer line is cut here (one line must not take an attempt's whole budget). */
export const MAX_LINE_CHARS = 4096;

export function marker(truncated: number): string {
  return `… ${truncated} lines truncated`;
}

/** `line` as PostgreSQL and protobuf take it: NUL and lone surrogates become U+FFFD. */
function storable(line: string): string {
  return line.replaceAll("\u0000", "\ufffd").toWellFormed();
}

/** The lines of one attempt: the first ones up to the bound, then a count. */
export class AttemptLines {
  private readonly kept: string[] = [];
  private size = 0;
  /** Lines dropped past the bound. */
  truncated = 0;

  constructor(
    readonly maxBytes: number = DEFAULT_LOG_MAX_BYTES,
    readonly maxLines: number = DEFAULT_LOG_MAX_LINES,
  ) {
    if (maxBytes < 0 || maxLines < 0) {
      throw new RangeError(`task log bounds must not be negative (got ${maxBytes} bytes, ${maxLines} lines)`);
    }
  }

  /** Keep `text`, one line per line it holds. */
  write(text: string): void {
    const lines = text.split(/\r\n|\r|\n/);
    if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
    for (const line of lines) this.add(line);
  }

  private add(line: string): void {
    if (this.truncated > 0) {
      this.truncated += 1; // once one is dropped, every later one is
      return;
    }
    if (line.length > MAX_LINE_CHARS) line = line.slice(0, MAX_LINE_CHARS) + " …(line cut)";
    line = storable(line);
    const size = Buffer.byteLength(line, "utf8") + 1;
    if (this.kept.length >= this.maxLines || this.size + size > this.maxBytes) {
      this.truncated = 1;
      return;
    }
    this.kept.push(line);
    this.size += size;
  }

  /** The lines kept, then the marker when some were dropped. */
  lines(): string[] {
    return this.truncated > 0 ? [...this.kept, marker(this.truncated)] : [...this.kept];
  }
}

export type Level = "DEBUG" | "INFO" | "WARNING" | "ERROR";
const RANK: Record<Level, number> = { DEBUG: 10, INFO: 20, WARNING: 30, ERROR: 40 };

/**
 * `ctx.logger`: what the handler logs at INFO and up (unless `level` is changed) is kept
 * with its attempt, and also written to stderr with the queue's name.
 */
export class TaskLogger {
  level: Level = "INFO";

  constructor(
    readonly attemptLines: AttemptLines,
    private readonly name: string,
    private readonly echo: (line: string) => void = (line) => process.stderr.write(line + "\n"),
  ) {}

  debug(message: string): void {
    this.log("DEBUG", message);
  }
  info(message: string): void {
    this.log("INFO", message);
  }
  warning(message: string): void {
    this.log("WARNING", message);
  }
  warn(message: string): void {
    this.log("WARNING", message);
  }
  error(message: string): void {
    this.log("ERROR", message);
  }

  log(level: Level, message: string): void {
    if (RANK[level] < RANK[this.level]) return;
    const line = `${utcNow()} ${level} ${message}`;
    this.attemptLines.write(line);
    this.echo(`${this.name} ${line}`);
  }
}

/** 2026-01-01T10:00:00.123Z, as the Python SDK writes its task log lines. */
export function utcNow(): string {
  return new Date().toISOString();
}
