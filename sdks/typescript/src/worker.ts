/**
 * The worker runtime (as composer_sdk._worker): read tasks from a queue's streams, lease,
 * run, renew, report, acknowledge.
 *
 * A stream entry names an attempt and nothing more: what the handler runs (its input,
 * node, timeout) comes with the lease, from the database, and the lease's token goes with
 * every renewal and report. Entries are read only for free slots (`concurrency`); a slot
 * is held from the read until the handler ends, and the report and the acknowledgement
 * go on outside it (within `prefetch` entries held). While it runs, the worker keeps its
 * consumer heartbeat key alive (every ttl/3, good for a ttl) and tells the coordinator
 * every `presenceSeconds` that it serves its queues (Heartbeat), and once more, STOPPED,
 * when it stops.
 *
 * For each entry: take the lease (a stale or duplicate attempt is not granted and is just
 * acknowledged; an entry that is no dispatch of its attempt to this handler is refused
 * and acknowledged away, loudly; a token that does not cover the queue is refused and the
 * entry dropped), run the handler under the node's timeout while renewing the lease every
 * ttl/3 (a lost lease aborts the handler and reports nothing), report the outcome, and
 * only then acknowledge the entry. A report the coordinator cannot take leaves the entry
 * pending for the lease-sweeper. On SIGTERM or SIGINT it stops reading and lets in-flight
 * tasks finish for `drainSeconds`; those still running then are aborted, report nothing,
 * and their entries stay pending for the sweeper.
 *
 * A report offers to take the next task (`takeNext`, docs/architecture.md §3.2) when its
 * handler's reader is not waiting for a slot and the worker is not stopping: the slot is
 * kept through the report, and a task the answer brings, leased to this worker in the
 * report's own transaction, runs in it as a leased entry would, with nothing to
 * acknowledge (its own report may bring the next); no task, and the slot is given back.
 */

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import { Batcher } from "./batcher.js";
import { callerOf, TaskContext } from "./context.js";
import {
  CoordinatorClient,
  MESSAGE_TOO_LARGE,
  sleep,
  type Capabilities,
  type Coordinator,
  type CoordinatorOptions,
  type Lease,
  type NextTask,
  type Outcome,
  type Presence,
  type TakeNext,
} from "./coordinator.js";
import { CoordinatorUnavailable, SdkError } from "./errors.js";
import { Handler, type HandlerFn, type HandlerOptions } from "./handler.js";
import { DEFAULT_MAX_OUTPUT_BYTES } from "./limits.js";
import { MalformedMessage, queueStreams, StreamQueue, taskMessage, type Entry, type Queue, type TaskMessage } from "./queue.js";
import { parseCoordinators, RunRoutedCoordinators } from "./routing.js";
import { Semaphore } from "./semaphore.js";
import { AttemptLines, DEFAULT_LOG_MAX_BYTES, DEFAULT_LOG_MAX_LINES, TaskLogger } from "./tasklog.js";
import { SDK_NAME, SDK_VERSION } from "./version.js";

export type LogLevel = "debug" | "info" | "warning" | "error" | "alert";
export type Log = (level: LogLevel, message: string) => void;

/** Every setting has a default; the connection's come from the environment, as `make run` writes it (.state/stack.env). */
export interface WorkerConfig {
  /** COMPOSER_REDIS_URL, else redis://127.0.0.1:6379/0. */
  redisUrl?: string;
  /** The coordinator's host:port: COMPOSER_GRPC_ADDR, else 127.0.0.1:50051. */
  coordinator?: string;
  /**
   * Every coordinator replica's own host:port, separated by commas, the same list in every
   * worker (of either SDK): COMPOSER_COORDINATORS. Each run's calls then go to the one its
   * id hashes to, so one coordinator batches all of a run's reports, and to the next while
   * that one cannot be reached (routing.ts). Set, it replaces `coordinator`; empty (the
   * default), every call goes to `coordinator`.
   */
  coordinators?: string;
  /** COMPOSER_WORKER_TOKEN. */
  token?: string;
  /** The stack's Redis key prefix: COMPOSER_REDIS_PREFIX, else "composer". */
  redisPrefix?: string;
  shards?: number;
  /** Tasks run at once by this process, across its queues (16). */
  concurrency?: number;
  /** Entries held at once (leasing, running, reporting); twice the concurrency by default. */
  prefetch?: number;
  /** Seconds (30). */
  leaseTtl?: number;
  /** The timeout of a node that sets none, in seconds (300). */
  defaultTimeout?: number;
  /** How long SIGTERM waits for in-flight tasks before aborting them, in seconds (30). */
  drainSeconds?: number;
  readBlockMs?: number;
  /**
   * Offer, with each report, to run a task it dispatches on the same queue: the coordinator
   * may lease it to this worker in the report's transaction and answer with it, so it never
   * goes through the stream (docs/architecture.md §3.2). The handler's slot is kept for it
   * until the answer. COMPOSER_WORKER_TAKE_NEXT, else true; false: every task is read from
   * the stream.
   */
  takeNext?: boolean;
  /** Lease owner and consumer name; unique per process by default. */
  owner?: string;
  /** Tries per coordinator call while it answers UNAVAILABLE (10). */
  coordinatorAttempts?: number;
  /** The largest output reported, as JSON (the coordinator's COMPOSER_MAX_OUTPUT_BYTES); null: no check here. */
  maxOutputBytes?: number | null;
  maxMessageBytes?: number;
  /** A PEM file of the CA that signed the coordinator's certificate: COMPOSER_GRPC_TLS_CA; none: plaintext. */
  coordinatorTlsCa?: string;
  logMaxBytes?: number;
  logMaxLines?: number;
  /** How often the worker tells the coordinator it is alive (5 s); 0: never. */
  presenceSeconds?: number;
  /** Stop (and drain) on SIGTERM and SIGINT while `run()` runs (true). */
  handleSignals?: boolean;
  /** Where the worker's own log lines go (stderr by default). */
  log?: Log;
}

type Settled = Required<Omit<WorkerConfig, "coordinatorTlsCa" | "maxOutputBytes" | "log" | "owner" | "prefetch">> & {
  coordinatorTlsCa: string | undefined;
  maxOutputBytes: number | undefined;
};

function settle(config: WorkerConfig, env: NodeJS.ProcessEnv): Settled {
  const number = (name: string): number | undefined => {
    const raw = env[name];
    if (raw === undefined || raw === "") return undefined;
    const value = Number(raw);
    if (!Number.isFinite(value)) throw new SdkError(`${name}=${raw} is not a number`);
    return value;
  };
  // a yes/no variable, read as the Python SDK reads it (composer_sdk._environment.flag_from_env)
  const flag = (name: string, fallback: boolean): boolean => {
    const value = (env[name] ?? "").trim().toLowerCase();
    if (value === "") return fallback;
    if (["1", "true", "yes", "on"].includes(value)) return true;
    if (["0", "false", "no", "off"].includes(value)) return false;
    throw new SdkError(`${name}='${value}' is neither true nor false (say true or false)`);
  };
  return {
    redisUrl: config.redisUrl ?? (env.COMPOSER_REDIS_URL || "redis://127.0.0.1:6379/0"),
    coordinator: config.coordinator ?? (env.COMPOSER_GRPC_ADDR || "127.0.0.1:50051"),
    coordinators: config.coordinators ?? env.COMPOSER_COORDINATORS ?? "",
    token: config.token ?? env.COMPOSER_WORKER_TOKEN ?? "",
    redisPrefix: config.redisPrefix ?? (env.COMPOSER_REDIS_PREFIX || "composer"),
    shards: config.shards ?? 4,
    concurrency: config.concurrency ?? 16,
    leaseTtl: config.leaseTtl ?? 30,
    defaultTimeout: config.defaultTimeout ?? 300,
    drainSeconds: config.drainSeconds ?? 30,
    readBlockMs: config.readBlockMs ?? 1000,
    takeNext: config.takeNext ?? flag("COMPOSER_WORKER_TAKE_NEXT", true),
    coordinatorAttempts: config.coordinatorAttempts ?? 10,
    maxOutputBytes: config.maxOutputBytes === null ? undefined : (config.maxOutputBytes ?? number("COMPOSER_MAX_OUTPUT_BYTES") ?? DEFAULT_MAX_OUTPUT_BYTES),
    maxMessageBytes: config.maxMessageBytes ?? 64 * 1024 * 1024,
    coordinatorTlsCa: config.coordinatorTlsCa ?? (env.COMPOSER_GRPC_TLS_CA || undefined),
    logMaxBytes: config.logMaxBytes ?? number("COMPOSER_TASK_LOG_MAX_BYTES") ?? DEFAULT_LOG_MAX_BYTES,
    logMaxLines: config.logMaxLines ?? number("COMPOSER_TASK_LOG_MAX_LINES") ?? DEFAULT_LOG_MAX_LINES,
    presenceSeconds: config.presenceSeconds ?? 5,
    handleSignals: config.handleSignals ?? true,
  };
}

/**
 * The client of `cfg.coordinator`, or of every one of `cfg.coordinators`, each run's calls
 * routed to one of them. Throws SdkError for a list with an empty or a repeated address.
 */
export function coordinatorClient(
  cfg: Settled,
  log: NonNullable<CoordinatorOptions["log"]> = () => undefined,
): Coordinator {
  const client = (target: string): CoordinatorClient =>
    new CoordinatorClient(target, cfg.token, {
      attempts: cfg.coordinatorAttempts,
      maxMessageBytes: cfg.maxMessageBytes,
      tlsCaFile: cfg.coordinatorTlsCa,
      log,
    });
  if (!cfg.coordinators) return client(cfg.coordinator);
  const targets = parseCoordinators(cfg.coordinators);
  // every target checked before any client is made: a bad list opens nothing
  return new RunRoutedCoordinators(targets.map(client));
}

/** `url` with its password shown as *** (a start line is no place for it). */
function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return url;
  }
}

function stderrLog(level: LogLevel, message: string): void {
  process.stderr.write(`${new Date().toISOString()} ${level.toUpperCase()} composer.sdk ${message}\n`);
}

/** The attempt this process holds a lease on: its message, its token, the TTL granted. */
interface Held {
  msg: TaskMessage;
  token: string;
  ttl: number;
}

/** Thrown inside an attempt when the worker gives up on it (drain past its grace): nothing is reported. */
class Abandoned extends Error {}

/**
 * A handler slot taken from `slots`: given back once, by whoever frees it first (the
 * handler's end, or the end of what holds it, or the last task run in it).
 */
class Slot {
  held = true;

  constructor(private readonly slots: Semaphore) {}

  readonly free = (): void => {
    if (this.held) {
      this.held = false;
      this.slots.release();
    }
  };
}

export class Worker {
  readonly config: Settled;
  readonly owner: string;
  readonly prefetch: number;
  private readonly log: Log;
  private readonly handlers = new Map<string, Handler<never, unknown>>();
  private readonly stopping = new AbortController();
  /** Aborted when the drain's grace is over: in-flight attempts are given up. */
  private readonly abandon = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly running = new Set<string>();
  /** Of those, the ones whose lease was granted. */
  private readonly granted = new Set<string>();
  /** Per running attempt: resolved once its lease is granted or its delivery is done with it. */
  private readonly decided = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  /** The queues whose reader waits for a free slot: their handlers' reports offer nothing (`offer`). */
  private readonly wanting = new Set<string>();
  private readonly slots: Semaphore;
  private readonly messages: Semaphore;
  private queue: Queue | undefined;
  private client: Coordinator | undefined;
  private acks: Batcher<[string, string], null> | undefined;
  private beats = true;
  /** The protocol version check (GetCapabilities): undefined until asked. */
  private compatible: Promise<boolean> | undefined;
  private incompatible: SdkError | undefined;
  startedAt = 0;
  /** Counters, for tests and logs. */
  completed = 0;
  failed = 0;
  skipped = 0;
  abandoned = 0;
  parked = 0;
  misrouted = 0;
  /** Tasks run that were leased with a report's answer, not read from a stream. */
  takenNext = 0;

  /**
   * `env` is where the settings not given default from; `given.queue` and
   * `given.coordinator` replace the clients built from the settings (tests), and are not
   * closed by `run()`.
   */
  constructor(
    config: WorkerConfig = {},
    env: NodeJS.ProcessEnv = process.env,
    private readonly given: { queue?: Queue; coordinator?: Coordinator } = {},
  ) {
    this.config = settle(config, env);
    this.log = config.log ?? stderrLog;
    this.owner = config.owner ?? `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    this.prefetch = config.prefetch ?? 2 * this.config.concurrency;
    if (this.prefetch < this.config.concurrency) {
      throw new SdkError(`prefetch (${this.prefetch}) must be at least the concurrency (${this.config.concurrency})`);
    }
    this.slots = new Semaphore(this.config.concurrency);
    this.messages = new Semaphore(this.prefetch);
  }

  /**
   * Serve `queue` with `fn`. It runs the queue's tasks of `options.nodeTypes` only (TASK by
   * default); `options.parse` checks and types the input.
   */
  handle<I = unknown, O = unknown>(queue: string, fn: HandlerFn<I, O>, options: HandlerOptions<I> = {}): this {
    if (this.handlers.has(queue)) throw new SdkError(`queue '${queue}' already has a handler`);
    this.handlers.set(queue, new Handler(queue, fn, options) as unknown as Handler<never, unknown>);
    return this;
  }

  /** Stop reading; in-flight tasks get `drainSeconds` to finish. */
  stop(): void {
    if (!this.stopping.signal.aborted) this.stopping.abort(new Error("the worker is stopping"));
  }

  get isStopping(): boolean {
    return this.stopping.signal.aborted;
  }

  /** Serve every registered queue until `stop()` (or SIGTERM, SIGINT); then drain and return. */
  async run(): Promise<void> {
    if (this.handlers.size === 0) throw new SdkError("no handlers registered: add one with worker.handle(queue, fn)");
    const cfg = this.config;
    // the coordinator's client first: a bad COMPOSER_COORDINATORS, or a CA file it cannot
    // read, stops the worker before anything is opened or listened for
    const client = (this.client = this.given.coordinator ?? coordinatorClient(cfg, (level, message) => this.log(level, message)));
    const onSignal = (signal: NodeJS.Signals): void => {
      this.log("info", `${signal}: draining (in-flight tasks get ${cfg.drainSeconds}s to finish)`);
      this.stop();
    };
    if (cfg.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const queue = (this.queue = this.given.queue ?? new StreamQueue(cfg.redisUrl));
    this.acks = new Batcher((refs) => this.ackBatch(refs), 512, 1);
    try {
      if (!cfg.token) {
        this.log(
          "warning",
          "no worker token: the coordinator refuses every call; set COMPOSER_WORKER_TOKEN " +
            "(make run keeps one in .state/tokens.env) or new Worker({ token })",
        );
      }
      for (const name of this.handlers.keys()) await this.ensureGroups(name);
      this.startedAt = Date.now() / 1000;
      this.log("info", this.describe());
      // The protocol version, asked beside the reads, not before them: a worker whose
      // coordinator is away still reads and holds its entries (its heartbeat says it is
      // alive) and asks again before its first lease; a coordinator of another version
      // stops the worker, and run() throws the error that names both.
      this.protocolOk().catch((err: unknown) =>
        this.log("warning", `cannot ask the coordinator its protocol version yet: ${(err as Error).message}`),
      );
      const heartbeat = this.every((cfg.leaseTtl / 3) * 1000, () => this.consumerBeat());
      const presence = this.presenceLoop();
      const readers = [...this.handlers.values()].map((h) => this.read(h));
      await Promise.race([Promise.all(readers), new Promise((resolve) => this.stopping.signal.addEventListener("abort", resolve, { once: true }))]);
      this.stop();
      queue.interrupt();
      await Promise.allSettled(readers);
      try {
        await this.drain();
      } finally {
        heartbeat.stop();
        await presence.stop();
        await this.sayStopped();
      }
      if (this.incompatible !== undefined) throw this.incompatible;
    } finally {
      if (cfg.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      try {
        if (this.given.queue === undefined) await queue.close();
      } finally {
        if (this.given.coordinator === undefined) client.close();
      }
    }
  }

  /**
   * What this worker serves and where, its start line (the Python SDK's shape): "worker ID
   * serving q1, q2 from Redis URL prefix 'P', coordinator ADDR (plaintext); node types …";
   * routed, "coordinators A,B (each run's calls to one)" in place of "coordinator ADDR".
   */
  describe(): string {
    const cfg = this.config;
    const handlers = [...this.handlers.values()].sort((a, b) => (a.queue < b.queue ? -1 : 1));
    const kinds = handlers.map((h) => `${h.queue} ${[...h.nodeTypes].sort().join("/")}`).join(", ");
    const where = cfg.coordinators ? `coordinators ${cfg.coordinators} (each run's calls to one)` : `coordinator ${cfg.coordinator}`;
    return (
      `worker ${this.owner} serving ${handlers.map((h) => h.queue).join(", ")} from Redis ` +
      `${withoutPassword(cfg.redisUrl)} prefix '${cfg.redisPrefix}', ${where} ` +
      `(${cfg.coordinatorTlsCa ? "TLS" : "plaintext"}); node types ${kinds}; concurrency ${cfg.concurrency}, ` +
      `prefetch ${this.prefetch}, ${SDK_NAME} ${SDK_VERSION}`
    );
  }

  /**
   * Whether leases may be taken: the coordinator speaks this SDK's protocol version
   * (GetCapabilities, asked once). False: it does not (the worker stops, and run() throws
   * the SdkError that names both versions), or the worker is stopping. Throws
   * CoordinatorUnavailable when the coordinator could not be asked.
   */
  private protocolOk(): Promise<boolean> {
    if (this.compatible === undefined) {
      this.compatible = this.askProtocol().catch((err: unknown) => {
        this.compatible = undefined; // not asked yet: the next lease asks again
        throw err;
      });
    }
    return this.compatible;
  }

  private async askProtocol(): Promise<boolean> {
    const client = this.client!;
    let capabilities;
    try {
      capabilities = await client.capabilities(`${SDK_NAME} ${SDK_VERSION}`, () => this.isStopping);
    } catch (err) {
      if (err instanceof CoordinatorUnavailable || !(err instanceof SdkError)) throw err;
      this.incompatible = err;
      this.log("error", `${err.message}; the worker stops`);
      this.stop();
      return false;
    }
    if (capabilities === undefined) return false;
    const mismatch = this.streamsMismatch(capabilities);
    if (mismatch !== undefined) {
      this.incompatible = mismatch;
      this.log("error", `${mismatch.message}; the worker stops`);
      this.stop();
      return false;
    }
    this.log(
      "info",
      client instanceof RunRoutedCoordinators
        ? `coordinators ${client.target} speak worker protocol version ${capabilities.protocolVersion} ` +
            `(the first serves ${capabilities.minProtocolVersion} and newer)`
        : `coordinator ${client.target} speaks worker protocol version ${capabilities.protocolVersion} ` +
            `(serves ${capabilities.minProtocolVersion} and newer)`,
    );
    return true;
  }

  /**
   * The error when this worker reads other streams than the coordinator's engine
   * publishes to (another Redis prefix, fewer shards): it would wait for ever for tasks
   * that go elsewhere, showing SERVING. Undefined when they agree or it did not say.
   */
  private streamsMismatch(capabilities: Capabilities): SdkError | undefined {
    const cfg = this.config;
    // routed, the first coordinator that answered said it: they share one stack's settings
    const coordinator = this.client?.target ?? cfg.coordinator;
    if (capabilities.redisPrefix && capabilities.redisPrefix !== cfg.redisPrefix) {
      return new SdkError(
        `the coordinator ${coordinator} publishes tasks under Redis prefix ` +
          `'${capabilities.redisPrefix}', but this worker reads prefix '${cfg.redisPrefix}': ` +
          `set COMPOSER_REDIS_PREFIX=${capabilities.redisPrefix} (a stack's .state/stack.env has it) ` +
          `or the worker's redisPrefix`,
        { code: "REDIS_PREFIX" },
      );
    }
    if (capabilities.shards && capabilities.shards !== cfg.shards) {
      return new SdkError(
        `the coordinator ${coordinator} publishes tasks to ${capabilities.shards} shard ` +
          `stream(s) per queue, but this worker reads ${cfg.shards}: set the worker's ` +
          `shards to ${capabilities.shards} (COMPOSER_SHARDS on the services)`,
        { code: "SHARDS" },
      );
    }
    if (capabilities.redisTopology === "cluster") {
      return new SdkError(
        `the coordinator ${coordinator} publishes tasks to a Redis Cluster ` +
          `(COMPOSER_REDIS_CLUSTER=true), which this SDK does not read yet: serve these queues ` +
          `with the Python SDK (composer-sdk)`,
        { code: "REDIS_CLUSTER" },
      );
    }
    return undefined;
  }

  private async ensureGroups(name: string): Promise<void> {
    const streams = queueStreams(this.config.redisPrefix, name, this.config.shards);
    let delay = 0.1;
    for (;;) {
      try {
        await this.queue!.ensureGroups(streams);
        return;
      } catch (err) {
        if (this.isStopping) throw err;
        if (/^(MOVED|ASK|CROSSSLOT)\b/.test((err as Error).message)) {
          // a node of a Redis Cluster: its other slots are elsewhere, and retrying cannot help
          throw new SdkError(
            `cannot prepare queue ${name}: ${(err as Error).message}: COMPOSER_REDIS_URL is a node ` +
              `of a Redis Cluster (COMPOSER_REDIS_CLUSTER=true), which this SDK does not read yet: ` +
              `serve these queues with the Python SDK (composer-sdk)`,
            { code: "REDIS_CLUSTER" },
          );
        }
        this.log("warning", `cannot prepare queue ${name}: ${(err as Error).message}; retrying in ${delay.toFixed(1)}s`);
        await sleep(delay * 1000);
        delay = Math.min(delay * 2, 5);
      }
    }
  }

  private every(ms: number, beat: () => Promise<void>): { stop: () => void } {
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const tick = async (): Promise<void> => {
      await beat();
      if (!stopped) timer = setTimeout(() => void tick(), ms);
    };
    void tick();
    return {
      stop: () => {
        stopped = true;
        clearTimeout(timer);
      },
    };
  }

  /** The consumer heartbeat key: the lease-sweeper counts this worker's entries as live. */
  private async consumerBeat(): Promise<void> {
    try {
      await this.queue!.heartbeat(this.config.redisPrefix, this.owner, this.config.leaseTtl * 1000);
    } catch (err) {
      this.log("warning", `the heartbeat failed: ${(err as Error).message}`);
    }
  }

  presence(state: Presence["state"]): Presence {
    return {
      workerId: this.owner,
      host: hostname(),
      queues: [...this.handlers.keys()].sort(),
      concurrency: this.config.concurrency,
      inFlight: this.running.size,
      sdkVersion: `${SDK_NAME} ${SDK_VERSION}`,
      state,
      startedAt: this.startedAt,
    };
  }

  private presenceLoop(): { stop: () => Promise<void> } {
    const every = this.config.presenceSeconds;
    if (every <= 0) return { stop: async () => undefined };
    let failing = false;
    const loop = this.every(every * 1000, async () => {
      if (!this.beats) return;
      try {
        if (!(await this.client!.heartbeat(this.presence(this.isStopping ? "DRAINING" : "SERVING")))) {
          this.log("info", "the coordinator keeps no heartbeats (older than this SDK)");
          this.beats = false;
          return;
        }
        if (failing) this.log("info", "heartbeats get through again");
        failing = false;
      } catch (err) {
        if (!failing) this.log("warning", `the heartbeat to the coordinator failed: ${(err as Error).message}; still trying`);
        failing = true;
      }
    });
    return { stop: async () => loop.stop() };
  }

  private async sayStopped(): Promise<void> {
    if (!this.beats || this.config.presenceSeconds <= 0 || this.startedAt === 0) return;
    try {
      await this.client!.heartbeat(this.presence("STOPPED"), 2000);
    } catch (err) {
      this.log("info", `could not tell the coordinator this worker stopped: ${(err as Error).message}`);
    }
  }

  /**
   * Wait for a free slot, then take every other slot free now: how many entries to read.
   * While it waits, `queue` is among those `wanting` a slot (its handler's reports offer to
   * take nothing); a slot free at once is taken with no wait.
   */
  private async room(queue: string): Promise<number> {
    const signal = this.stopping.signal;
    const wait = async (semaphore: Semaphore): Promise<void> => {
      if (semaphore.tryAcquire()) return;
      this.wanting.add(queue);
      try {
        await semaphore.acquire(signal);
      } finally {
        this.wanting.delete(queue);
      }
    };
    await wait(this.messages);
    try {
      await wait(this.slots);
    } catch (err) {
      this.messages.release();
      throw err;
    }
    let room = 1;
    while (room < this.config.concurrency && !this.slots.locked && !this.messages.locked) {
      this.slots.tryAcquire();
      this.messages.tryAcquire();
      room += 1;
    }
    return room;
  }

  private free(room: number): void {
    for (let i = 0; i < room; i++) {
      this.slots.release();
      this.messages.release();
    }
  }

  private async read(handler: Handler<never, unknown>): Promise<void> {
    const cfg = this.config;
    const names = queueStreams(cfg.redisPrefix, handler.queue, cfg.shards);
    const connection = this.queue!.reader();
    let turn = 0;
    let delay = 0.1;
    while (!this.isStopping) {
      let room: number;
      try {
        room = await this.room(handler.queue);
      } catch {
        return; // stopping
      }
      const order = [...names.slice(turn), ...names.slice(0, turn)];
      turn = (turn + 1) % names.length;
      let entries: Entry[];
      try {
        entries = await this.queue!.read(connection, order, this.owner, room, cfg.readBlockMs);
        delay = 0.1;
      } catch (err) {
        this.free(room);
        if (this.isStopping) return;
        this.log("warning", `reading queue ${handler.queue} failed: ${(err as Error).message}; retrying in ${delay.toFixed(1)}s`);
        await sleep(delay * 1000);
        delay = Math.min(delay * 2, 5);
        continue;
      }
      this.free(room - entries.length);
      for (const entry of entries) {
        const task = this.process(handler, entry).finally(() => {
          this.inFlight.delete(task);
          this.messages.release();
        });
        this.inFlight.add(task);
      }
    }
  }

  /**
   * Wait for in-flight tasks for `drainSeconds`, those that join meanwhile too (a report
   * answered during the drain may bring a task leased with it); then give up on the rest
   * (they report nothing).
   */
  private async drain(): Promise<void> {
    if (this.inFlight.size === 0) return;
    this.log("info", `draining: ${this.inFlight.size} task(s) in flight get ${this.config.drainSeconds}s to finish`);
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), this.config.drainSeconds * 1000);
    });
    let done: "done" | "late" = "done";
    // A task that settles has left the set, and a task run in its kept slot has joined it
    // before then: the set is empty only once nothing is left to wait for.
    while (this.inFlight.size > 0 && done === "done") {
      done = await Promise.race([Promise.allSettled([...this.inFlight]).then(() => "done" as const), grace]);
    }
    clearTimeout(timer);
    if (done === "late") {
      this.log("warning", `${this.inFlight.size} task(s) still running after the drain's ${this.config.drainSeconds}s: aborted, their entries stay pending for the sweeper`);
      this.abandon.abort(new Abandoned("the drain's grace is over"));
      while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    }
  }

  /**
   * One entry, under the slot taken for it when it was read: the slot is freed when the
   * handler ends or the entry needs no handler, or goes on to the task its report's
   * answer brought.
   */
  private async process(handler: Handler<never, unknown>, entry: Entry): Promise<void> {
    const slot = new Slot(this.slots);
    let next: NextTask | undefined;
    try {
      next = await this.handleEntry(handler, entry, slot.free);
    } catch (err) {
      if (!(err instanceof Abandoned)) await this.park(entry, err);
    } finally {
      if (next === undefined || !slot.held) slot.free();
    }
    // the slot goes on with the task; it holds no stream message
    if (next !== undefined && slot.held) this.track(this.runNext(handler, next, slot));
  }

  /** Count `work` in flight (the drain waits for it) until it settles. */
  private track(work: Promise<void>): void {
    const task: Promise<void> = work
      .catch((err: unknown) => this.log("alert", `running a task leased with a report failed: ${(err as Error)?.stack ?? String(err)}`))
      .finally(() => this.inFlight.delete(task));
    this.inFlight.add(task);
  }

  /**
   * Run the tasks leased with reports, one after the other, in the `slot` the first one's
   * reporter kept: each report may bring the next (a chain of steps stays on this worker).
   * A task that comes once the drain has given up is not run: its lease runs out and the
   * lease-sweeper recovers it.
   */
  private async runNext(handler: Handler<never, unknown>, first: NextTask, slot: Slot): Promise<void> {
    let next: NextTask | undefined = first;
    try {
      while (next !== undefined && slot.held && !this.abandon.signal.aborted) {
        this.takenNext += 1;
        let msg: TaskMessage;
        try {
          msg = taskMessage(next.fields, "a task leased with a report");
        } catch (err) {
          if (!(err instanceof MalformedMessage)) throw err;
          // a coordinator's bug: its lease runs out
          this.log("error", err.message);
          return;
        }
        try {
          next = await this.attempt(handler, undefined, msg, slot.free, next.lease);
        } catch (err) {
          if (err instanceof Abandoned) return;
          this.log(
            "alert",
            `task ${msg.taskId} attempt ${msg.attempt} of run ${msg.runId}, leased with a report: the worker failed on it ` +
              `(${(err as Error)?.stack ?? String(err)}); its lease runs out and the worker goes on`,
          );
          return;
        }
      }
    } finally {
      slot.free();
    }
  }

  private async park(entry: Entry, err: unknown): Promise<void> {
    this.parked += 1;
    this.log(
      "alert",
      `the worker failed on its entry ${entry.id} on ${entry.stream} (${(err as Error)?.stack ?? String(err)}); ` +
        "the entry is acknowledged away and the worker goes on",
    );
    await this.ack(entry).catch(() => undefined);
  }

  private async handleEntry(handler: Handler<never, unknown>, entry: Entry, handlerDone: () => void): Promise<NextTask | undefined> {
    let msg: TaskMessage;
    try {
      msg = entry.message();
    } catch (err) {
      this.log("alert", `dropping malformed message ${entry.id} on ${entry.stream}: ${(err as Error).message}`);
      await this.ack(entry);
      return undefined;
    }
    return this.attempt(handler, entry, msg, handlerDone);
  }

  /**
   * Lease (unless `lease` was granted already, with a report: then `entry` is undefined),
   * run and report `msg`'s attempt; the task leased with the report, if any.
   */
  private async attempt(
    handler: Handler<never, unknown>,
    entry: Entry | undefined,
    msg: TaskMessage,
    handlerDone: () => void,
    lease?: Lease,
  ): Promise<NextTask | undefined> {
    const key = `${msg.taskId}/${msg.attempt}`;
    while (this.running.has(key)) {
      if (this.granted.has(key) || lease !== undefined) {
        this.log("info", `task ${msg.taskId} attempt ${msg.attempt} is already running here: duplicate delivery skipped`);
        this.skipped += 1;
        await this.ack(entry);
        return undefined;
      }
      // Its lease is still being asked for here. Refused (the attempt was held, as a paused
      // run's are), this delivery may be the one that counts: a held attempt is sent again
      // when it is released, and the two deliveries can meet here.
      await this.decided.get(key)!.promise;
    }
    this.running.add(key);
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    this.decided.set(key, { promise, resolve });
    if (lease !== undefined) this.granted.add(key);
    try {
      if (lease !== undefined) return await this.runGranted(handler, entry, msg, lease, handlerDone);
      return await this.leaseRunReport(handler, entry!, msg, handlerDone);
    } finally {
      this.running.delete(key);
      this.granted.delete(key);
      this.decided.delete(key);
      resolve();
    }
  }

  private async leaseRunReport(
    handler: Handler<never, unknown>,
    entry: Entry,
    msg: TaskMessage,
    handlerDone: () => void,
  ): Promise<NextTask | undefined> {
    const cfg = this.config;
    try {
      if (!(await this.protocolOk())) return undefined; // a coordinator of another version: the entry stays pending
    } catch (err) {
      if (!(err instanceof SdkError)) throw err;
      this.giveUp(msg, "asking the coordinator's protocol version", err);
      return undefined;
    }
    let lease: Lease | undefined;
    try {
      lease = await this.client!.acquire(
        {
          taskId: msg.taskId,
          runId: msg.runId,
          attempt: msg.attempt,
          owner: this.owner,
          ttl: cfg.leaseTtl,
          claim: randomBytes(16).toString("base64url"),
          queue: handler.queue,
          nodeTypes: [...handler.nodeTypes],
        },
        () => this.isStopping,
      );
    } catch (err) {
      if (!(err instanceof SdkError)) throw err;
      if (err.code === "FAILED_PRECONDITION") {
        this.misroute(entry, msg, err.message);
        await this.ack(entry);
        return undefined;
      }
      if (err.code === "PERMISSION_DENIED" || err.code === MESSAGE_TOO_LARGE) {
        // not this worker's to run (its token does not cover the queue), or an answer that
        // would be as large again: the entry is dropped
        this.log("error", `task ${msg.taskId} attempt ${msg.attempt}: ${err.message}; its entry on ${entry.stream} is dropped`);
        this.skipped += 1;
        await this.ack(entry);
        return undefined;
      }
      this.giveUp(msg, "taking the lease", err);
      return undefined;
    }
    if (lease === undefined) return undefined; // stopping with the coordinator away: the entry stays pending
    if (!lease.granted) {
      this.log("info", `task ${msg.taskId} attempt ${msg.attempt} not leased (${lease.reason}): skipping`);
      this.skipped += 1;
      await this.ack(entry);
      return undefined;
    }
    const key = `${msg.taskId}/${msg.attempt}`;
    this.granted.add(key);
    this.decided.get(key)?.resolve(); // a delivery of it waiting here is a duplicate
    return this.runGranted(handler, entry, msg, lease, handlerDone);
  }

  /** Run the attempt `lease` grants and report it (`runAndReport`); the task leased with the report, if any. */
  private async runGranted(
    handler: Handler<never, unknown>,
    entry: Entry | undefined,
    msg: TaskMessage,
    lease: Lease,
    handlerDone: () => void,
  ): Promise<NextTask | undefined> {
    const cfg = this.config;
    if (!handler.nodeTypes.has(lease.nodeType)) {
      this.misroute(
        entry,
        msg,
        `node ${lease.nodeId} is of node type ${lease.nodeType || "(none given)"}, and the handler for queue ` +
          `'${handler.queue}' runs ${[...handler.nodeTypes].sort().join(", ")} nodes only`,
      );
      await this.ack(entry);
      return undefined;
    }
    const ttl = lease.ttl > 0 ? Math.min(cfg.leaseTtl, lease.ttl) : cfg.leaseTtl;
    const held: Held = { msg, token: lease.token, ttl };
    // until when this process knows it holds the lease: granted no earlier than it was asked
    let validUntil = (lease.askedAt || performance.now()) + ttl * 1000;
    if (performance.now() >= validUntil) {
      const asked = performance.now();
      if ((await this.renew(held)) !== true) {
        this.log("warning", `task ${msg.taskId} attempt ${msg.attempt}: the lease came back after its TTL and is no longer ours: not running it`);
        this.skipped += 1;
        await this.ack(entry);
        return undefined;
      }
      validUntil = asked + ttl * 1000;
    }
    return this.runAndReport(handler, entry, lease, held, validUntil, handlerDone);
  }

  private async runAndReport(
    handler: Handler<never, unknown>,
    entry: Entry | undefined,
    lease: Lease,
    held: Held,
    validUntil: number,
    handlerDone: () => void,
  ): Promise<NextTask | undefined> {
    const cfg = this.config;
    const msg = held.msg;
    const timeout = lease.timeoutSeconds ?? cfg.defaultTimeout;
    const lines = new AttemptLines(cfg.logMaxBytes, cfg.logMaxLines);
    const abort = new AbortController();
    const ctx = new TaskContext(
      msg.taskId,
      msg.runId,
      lease.nodeId,
      msg.attempt,
      lease.maxAttempts || 1,
      lease.workflowId,
      lease.workflowVersion,
      timeout,
      new TaskLogger(lines, `composer.task.${handler.queue}`),
      callerOf(lease.contextJson),
      abort.signal,
    );
    let input: unknown = null;
    try {
      input = lease.inputJson ? JSON.parse(lease.inputJson) : null;
    } catch {
      input = null;
    }
    let finished = false;
    const run = (async (): Promise<Outcome | undefined> => {
      if (performance.now() >= validUntil) return undefined;
      return handler.invoke(ctx, input as never, timeout, abort, cfg.maxOutputBytes);
    })().finally(() => {
      finished = true;
    });
    const lost = await this.renewUntilDone(run, held, validUntil, () => finished);
    const outcome = lost ? undefined : await run;
    if (outcome === undefined) {
      const why = this.abandon.signal.aborted ? "the drain's grace is over" : "lost the lease";
      abort.abort(new Error(why));
      if (this.abandon.signal.aborted) throw new Abandoned(why); // the entry stays pending
      this.log("warning", `lost the lease on task ${msg.taskId} attempt ${msg.attempt}: handler aborted, nothing reported`);
      await this.ack(entry);
      return undefined;
    }
    const offer = this.offer(handler);
    if (offer === undefined) handlerDone(); // else the slot is kept for the task the answer may bring
    outcome.logLines = lines.lines();
    outcome.logTruncated = lines.truncated;
    let accepted: boolean | NextTask | undefined;
    try {
      accepted = await this.client!.report(
        { taskId: msg.taskId, runId: msg.runId, nodeId: lease.nodeId, attempt: msg.attempt, owner: this.owner, token: lease.token },
        outcome,
        () => this.isStopping,
        offer,
      );
    } catch (err) {
      if (!(err instanceof SdkError)) throw err;
      this.giveUp(msg, "reporting the outcome", err, entry === undefined);
      return undefined;
    }
    if (accepted === undefined) {
      this.log("warning", `could not report task ${msg.taskId} before shutdown: it stays pending for recovery`);
      return undefined;
    }
    if (outcome.status === "COMPLETED") this.completed += 1;
    else this.failed += 1;
    await this.ack(entry);
    return typeof accepted === "object" ? accepted : undefined;
  }

  /**
   * What a report offers to run next (`takeNext`): nothing while stopping, nor while the
   * handler's reader waits for a slot (entries may be waiting on the stream: a freed slot
   * goes to them, first come).
   */
  private offer(handler: Handler<never, unknown>): TakeNext | undefined {
    if (!this.config.takeNext || this.isStopping || this.wanting.has(handler.queue)) return undefined;
    return { queue: handler.queue, nodeTypes: [...handler.nodeTypes], ttl: this.config.leaseTtl };
  }

  /** Renew every ttl/3 while the handler runs; true if the lease was lost (or the drain gave up on it). */
  private async renewUntilDone(run: Promise<unknown>, held: Held, validUntil: number, finished: () => boolean): Promise<boolean> {
    const ttlMs = held.ttl * 1000;
    const abandoned = new Promise<"abandoned">((resolve) => {
      if (this.abandon.signal.aborted) resolve("abandoned");
      this.abandon.signal.addEventListener("abort", () => resolve("abandoned"), { once: true });
    });
    for (;;) {
      const wait = Math.min(ttlMs / 3, Math.max(0, validUntil - performance.now()));
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<"tick">((resolve) => {
        timer = setTimeout(() => resolve("tick"), wait);
      });
      const what = await Promise.race([run.then(() => "done" as const, () => "done" as const), tick, abandoned]);
      clearTimeout(timer);
      if (what === "done" || finished()) return false;
      if (what === "abandoned") return true;
      const asked = performance.now();
      const ok = await this.renew(held, validUntil);
      if (ok === false) return true;
      if (ok === true) validUntil = asked + ttlMs;
      else if (performance.now() >= validUntil) {
        this.log("warning", `task ${held.msg.taskId} attempt ${held.msg.attempt}: no renewal got through before the lease ran out`);
        return true;
      }
    }
  }

  /** One renewal; undefined when it got no answer (by `deadline`, if given). */
  private async renew(held: Held, deadline?: number): Promise<boolean | undefined> {
    const call = this.client!.renew({
      taskId: held.msg.taskId,
      runId: held.msg.runId,
      attempt: held.msg.attempt,
      owner: this.owner,
      ttl: held.ttl,
      token: held.token,
    });
    if (deadline === undefined) return call;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(50, deadline - performance.now()));
    });
    try {
      return await Promise.race([call, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private misroute(entry: Entry | undefined, msg: TaskMessage, why: string): void {
    this.misrouted += 1;
    const what = entry === undefined ? "its lease with a report" : `entry ${entry.id} on ${entry.stream}`;
    this.log("alert", `task ${msg.taskId} attempt ${msg.attempt} of run ${msg.runId}: ${what} is not run and is acknowledged away: ${why}`);
  }

  /** Leave the entry unacknowledged (`withReport`: a task leased with a report, which has none): the lease-sweeper recovers its attempt. */
  private giveUp(msg: TaskMessage, doing: string, err: SdkError, withReport = false): void {
    this.abandoned += 1;
    const left = withReport ? "its lease, taken with a report, is left to run out for the lease-sweeper" : "its entry is left pending for the lease-sweeper";
    this.log(
      err instanceof CoordinatorUnavailable ? "warning" : "error",
      `task ${msg.taskId} attempt ${msg.attempt}: ${doing} failed (${err.message}); ${left}`,
    );
  }

  /** Acknowledge `entry` in the next batch of acknowledgements (undefined: a task leased with a report, which has no entry). */
  private async ack(entry: Entry | undefined): Promise<void> {
    if (entry !== undefined) await this.acks!.submit([entry.stream, entry.id]);
  }

  private async ackBatch(refs: Array<[string, string]>): Promise<null[]> {
    let delay = 0.1;
    for (let i = 0; i < 20; i++) {
      try {
        await this.queue!.ack(refs);
        return refs.map(() => null);
      } catch (err) {
        this.log("warning", `acknowledging ${refs.length} entries failed: ${(err as Error).message}; retrying in ${delay.toFixed(1)}s`);
        await sleep(delay * 1000);
        delay = Math.min(delay * 2, 2);
      }
    }
    this.log("warning", `gave up acknowledging ${refs.length} entries: the sweeper will find their tasks finished`);
    return refs.map(() => null);
  }
}
