/**
 * The worker's side of the coordinator protocol, with retries on transient failures (as
 * composer_sdk._client): leases, renewals and reports are batched (what the tasks ask while
 * a call of the same kind is in flight goes together in the next one, each item with its
 * own answer), a coordinator without the batched calls (UNIMPLEMENTED) gets one unary call
 * per item, and a message too large is permanent, never retried.
 */

import { readFileSync } from "node:fs";

import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { Batcher } from "./batcher.js";
import { CoordinatorUnavailable, SdkError } from "./errors.js";
import * as pb from "./gen/composer/v1/worker_pb.js";
import { incompatible, PROTOCOL_VERSION } from "./protocol.js";

/** The gRPC message limit, both ways: well above the data limits (1 MiB by default). */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** The items of one batched call, at most (an item larger than this goes alone). */
export const CALL_BYTES = 3 * 1024 * 1024;
/** SdkError.code of a call whose message was too large, sent or received: permanent. */
export const MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE";

const TRANSIENT = new Set([Code.Unavailable, Code.DeadlineExceeded, Code.ResourceExhausted]);

/** A gRPC status code's name as the protocol spells it (FAILED_PRECONDITION). */
export function codeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

function codeOf(name: string): Code {
  if (name === "CANCELLED") return Code.Canceled;
  const camel = name
    .toLowerCase()
    .split("_")
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join("");
  const code = (Code as unknown as Record<string, Code | undefined>)[camel];
  return code === undefined ? Code.Unknown : code;
}

/** Whether `err` is a message over a gRPC size limit (any other RESOURCE_EXHAUSTED is load). */
export function tooLarge(err: ConnectError): boolean {
  return err.code === Code.ResourceExhausted && /larger than|exceeds|max(imum)? (message )?size/i.test(err.rawMessage);
}

function isTransient(err: ConnectError): boolean {
  return TRANSIENT.has(err.code) && !tooLarge(err);
}

/** What the coordinator speaks (GetCapabilities). */
export interface Capabilities {
  protocolVersion: number;
  minProtocolVersion: number;
  features: ReadonlySet<string>;
  serverVersion: string;
  /** Where the coordinator's engine publishes tasks ("" / 0: it did not say). */
  redisPrefix: string;
  shards: number;
  /** "server" or "cluster": how the engine reaches Redis ("": it did not say). */
  redisTopology: string;
}

/** The coordinator's answer to a lease request: with a grant, its token and what to run. */
export interface Lease {
  granted: boolean;
  reason: string;
  inputJson: string;
  maxAttempts: number;
  /** performance.now() when the request that got this answer was sent. */
  askedAt: number;
  token: string;
  nodeId: string;
  nodeType: string;
  workflowId: string;
  workflowVersion: number;
  /** The node's timeout in seconds (undefined: the worker's default). */
  timeoutSeconds: number | undefined;
  /** The TTL granted; 0: as asked. */
  ttl: number;
  contextJson: string;
}

export interface Outcome {
  status: "COMPLETED" | "FAILED";
  outputJson: string;
  error: string;
  code: string;
  permanent: boolean;
  logLines: string[];
  logTruncated: number;
}

export interface Presence {
  workerId: string;
  host: string;
  queues: string[];
  concurrency: number;
  inFlight: number;
  sdkVersion: string;
  state: "SERVING" | "DRAINING" | "STOPPED";
  startedAt: number;
}

/** A lease asked for one attempt of a task. */
export interface LeaseRequest {
  taskId: string;
  runId: string;
  attempt: number;
  owner: string;
  ttl: number;
  claim: string;
  queue: string;
  nodeTypes: string[];
}

/** A renewal of a lease held, by its token. */
export interface RenewRequest {
  taskId: string;
  runId: string;
  attempt: number;
  owner: string;
  ttl: number;
  token: string;
}

/**
 * A report's offer to run next a task it dispatches: the reporting handler's queue and
 * node types, and the lease TTL it asks, in seconds (docs/architecture.md §3.2).
 */
export interface TakeNext {
  queue: string;
  nodeTypes: string[];
  ttl: number;
}

/**
 * A task leased to this worker with its report's answer: its stream message's fields (as
 * an entry would carry them) and its granted lease.
 */
export interface NextTask {
  fields: Readonly<Record<string, string>>;
  lease: Lease;
}

/** Which attempt an outcome is of, and the token of its lease. */
export interface ReportRequest {
  taskId: string;
  runId: string;
  nodeId: string;
  attempt: number;
  owner: string;
  token: string;
}

/**
 * What the worker asks of the coordinator: one `CoordinatorClient`, or several behind a
 * `RunRoutedCoordinators` (routing.ts) that sends each run's calls to one of them; tests
 * give a fake. `target` names where the calls go, for log lines.
 */
export interface Coordinator {
  readonly target: string;
  capabilities(sdk: string, until: () => boolean): Promise<Capabilities | undefined>;
  acquire(request: LeaseRequest, until: () => boolean): Promise<Lease | undefined>;
  renew(request: RenewRequest): Promise<boolean | undefined>;
  /**
   * True accepted, false stale, undefined if `until()` turned true meanwhile; with
   * `takeNext`, an accepted report may be answered with a task it dispatched, leased to
   * this worker (a NextTask), which the caller runs (or lets its lease run out).
   */
  report(request: ReportRequest, outcome: Outcome, until: () => boolean, takeNext?: TakeNext): Promise<boolean | NextTask | undefined>;
  heartbeat(presence: Presence, timeoutMs?: number): Promise<boolean>;
  close(): void;
}

export interface CoordinatorOptions {
  attempts?: number;
  callTimeoutMs?: number;
  maxMessageBytes?: number;
  /** A PEM file of the CA that signed the coordinator's certificate: TLS; none: plaintext. */
  tlsCaFile?: string | undefined;
  log?: (level: "info" | "warning" | "error", message: string) => void;
}

type LeaseReq = pb.AcquireTaskLeaseRequest;
type RenewReq = pb.RenewTaskLeaseRequest;
type ReportReq = pb.ReportTaskResultRequest;

/**
 * The coordinator over gRPC. A transient status (UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED) is retried with jittered backoff, at most `attempts` times per call,
 * then CoordinatorUnavailable is thrown; any other status throws SdkError at once.
 */
export class CoordinatorClient implements Coordinator {
  private readonly client: Client<typeof pb.WorkerService>;
  private readonly session: Http2SessionManager;
  private readonly headers: Record<string, string>;
  private readonly attempts: number;
  private readonly timeoutMs: number;
  private readonly log: NonNullable<CoordinatorOptions["log"]>;
  /** False once the coordinator said it has no batched calls (UNIMPLEMENTED). */
  batched = true;
  private readonly leases: Batcher<LeaseReq, pb.AcquireTaskLeaseResponse>;
  private readonly renewals: Batcher<RenewReq, pb.RenewTaskLeaseResponse>;
  private readonly reports: Batcher<ReportReq, pb.ReportTaskResultResponse>;

  constructor(
    readonly target: string,
    token: string,
    options: CoordinatorOptions = {},
  ) {
    this.attempts = options.attempts ?? 10;
    if (this.attempts < 1) throw new RangeError(`attempts must be at least 1, got ${this.attempts}`);
    this.timeoutMs = options.callTimeoutMs ?? 10_000;
    this.log = options.log ?? (() => undefined);
    const maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    let ca: Buffer | undefined;
    if (options.tlsCaFile) {
      try {
        ca = readFileSync(options.tlsCaFile);
      } catch (err) {
        throw new SdkError(
          `cannot read the coordinator's CA file ${options.tlsCaFile} (${(err as Error).message}): ` +
            "COMPOSER_GRPC_TLS_CA (WorkerConfig.coordinatorTlsCa) must name a PEM file this process may read",
        );
      }
    }
    const baseUrl = `${ca ? "https" : "http"}://${target}`;
    // a session of our own, so that close() ends it and the process can exit
    this.session = new Http2SessionManager(baseUrl, { idleConnectionTimeoutMs: 60_000 }, ca ? { ca } : {});
    const transport = createGrpcTransport({
      baseUrl,
      sessionManager: this.session,
      readMaxBytes: maxBytes,
      writeMaxBytes: maxBytes,
    });
    this.client = createClient(pb.WorkerService, transport);
    this.headers = { authorization: `Bearer ${token}` };
    this.leases = new Batcher((items) =>
      this.batch(
        items,
        pb.AcquireTaskLeaseRequestSchema,
        async (batch) => (await this.client.acquireTaskLeases({ items: batch }, this.opts())).items,
        (item) => this.client.acquireTaskLease(item, this.opts()),
      ),
    );
    this.renewals = new Batcher((items) =>
      this.batch(
        items,
        pb.RenewTaskLeaseRequestSchema,
        async (batch) => (await this.client.renewTaskLeases({ items: batch }, this.opts())).items,
        (item) => this.client.renewTaskLease(item, this.opts()),
      ),
    );
    this.reports = new Batcher((items) =>
      this.batch(
        items,
        pb.ReportTaskResultRequestSchema,
        async (batch) => (await this.client.reportTaskResults({ items: batch }, this.opts())).items,
        (item) => this.client.reportTaskResult(item, this.opts()),
      ),
    );
  }

  /** End the connection to the coordinator (calls still out fail). */
  close(): void {
    this.session.abort();
  }

  private opts(timeoutMs?: number): { headers: Record<string, string>; timeoutMs: number } {
    return { headers: this.headers, timeoutMs: timeoutMs ?? this.timeoutMs };
  }

  /**
   * What the coordinator speaks; undefined if `until()` turned true while it was
   * unreachable. Throws SdkError, naming both versions, for a coordinator outside this
   * SDK's protocol version, including one that predates GetCapabilities.
   */
  async capabilities(sdk: string, until: () => boolean): Promise<Capabilities | undefined> {
    let reply: pb.GetCapabilitiesResponse | undefined;
    try {
      reply = await this.retry(
        "GetCapabilities",
        () => this.client.getCapabilities({ protocolVersion: PROTOCOL_VERSION, sdk }, this.opts()),
        until,
      );
    } catch (err) {
      if (err instanceof SdkError && err.code === "UNIMPLEMENTED") {
        throw new SdkError(
          `the coordinator at ${this.target} predates worker protocol versions (it has no ` +
            `GetCapabilities call: version 0); this SDK (${sdk}) speaks protocol version ` +
            `${PROTOCOL_VERSION}: upgrade the coordinator`,
          { code: err.code, cause: err },
        );
      }
      throw err;
    }
    if (reply === undefined) return undefined;
    const problem = incompatible(sdk, PROTOCOL_VERSION, this.target, reply.protocolVersion, reply.minProtocolVersion);
    if (problem !== undefined) throw new SdkError(problem, { code: "PROTOCOL_VERSION" });
    return {
      protocolVersion: reply.protocolVersion,
      minProtocolVersion: reply.minProtocolVersion,
      features: new Set(reply.features),
      serverVersion: reply.serverVersion,
      redisPrefix: reply.redisPrefix,
      shards: reply.shards,
      redisTopology: reply.redisTopology,
    };
  }

  /** Take the lease; undefined if `until()` turned true while the coordinator was unreachable. */
  async acquire(request: LeaseRequest, until: () => boolean): Promise<Lease | undefined> {
    const item = create(pb.AcquireTaskLeaseRequestSchema, {
      taskId: request.taskId,
      runId: request.runId,
      attempt: request.attempt,
      owner: request.owner,
      ttlSeconds: request.ttl,
      claim: request.claim,
      queue: request.queue,
      nodeTypes: [...request.nodeTypes].sort(),
    });
    let askedAt = 0;
    const reply = await this.retry(
      "AcquireTaskLease",
      () => {
        askedAt = performance.now();
        return this.leases.submit(item);
      },
      until,
    );
    if (reply === undefined) return undefined;
    return leaseOf(reply, askedAt);
  }

  /** True: renewed; false: the lease is lost; undefined: no answer this time. */
  async renew(request: RenewRequest): Promise<boolean | undefined> {
    const item = create(pb.RenewTaskLeaseRequestSchema, {
      taskId: request.taskId,
      runId: request.runId,
      attempt: request.attempt,
      owner: request.owner,
      ttlSeconds: request.ttl,
      leaseToken: request.token,
    });
    try {
      return (await this.renewals.submit(item)).ok;
    } catch (err) {
      const failure = ConnectError.from(err);
      if (isTransient(failure)) {
        this.log("warning", `renewing the lease of task ${request.taskId} failed: ${failure.rawMessage}`);
        return undefined;
      }
      throw fatal(failure);
    }
  }

  /**
   * Report an outcome: true accepted, false stale, undefined if `until()` turned true while
   * the coordinator was unreachable. With `takeNext`, an accepted report may be answered
   * with a task it dispatched, leased to this worker (a NextTask): the caller runs it (or
   * lets its lease run out). A report too large for a message is sent again as a
   * permanent failure that says so.
   */
  async report(
    request: ReportRequest,
    outcome: Outcome,
    until: () => boolean,
    takeNext?: TakeNext,
  ): Promise<boolean | NextTask | undefined> {
    try {
      return await this.reportOnce(request, outcome, until, takeNext);
    } catch (err) {
      if (!(err instanceof SdkError) || err.code !== MESSAGE_TOO_LARGE) throw err;
      this.log("error", `task ${request.taskId} attempt ${request.attempt}: ${err.message}; reporting a failure instead`);
      return await this.reportOnce(request, smaller(outcome, err), until, takeNext);
    }
  }

  private async reportOnce(
    request: ReportRequest,
    outcome: Outcome,
    until: () => boolean,
    takeNext: TakeNext | undefined,
  ): Promise<boolean | NextTask | undefined> {
    const item = create(pb.ReportTaskResultRequestSchema, {
      taskId: request.taskId,
      runId: request.runId,
      nodeId: request.nodeId,
      attempt: request.attempt,
      owner: request.owner,
      leaseToken: request.token,
      status: outcome.status === "COMPLETED" ? pb.TaskStatus.COMPLETED : pb.TaskStatus.FAILED,
      outputJson: outcome.status === "COMPLETED" ? outcome.outputJson : "",
      error: outcome.error,
      errorCode: outcome.code,
      permanent: outcome.permanent,
      logLines: outcome.logLines,
      logTruncated: outcome.logTruncated,
      takeNext:
        takeNext === undefined
          ? undefined
          : create(pb.TakeNextSchema, { queue: takeNext.queue, nodeTypes: [...takeNext.nodeTypes].sort(), ttlSeconds: takeNext.ttl }),
    });
    let askedAt = 0;
    const reply = await this.retry(
      "ReportTaskResult",
      () => {
        askedAt = performance.now();
        return this.reports.submit(item);
      },
      until,
    );
    if (reply === undefined) return undefined;
    const next = reply.next;
    if (reply.accepted && next?.lease?.granted) return { fields: { ...next.message }, lease: leaseOf(next.lease, askedAt) };
    return reply.accepted;
  }

  /**
   * Tell the coordinator this worker is alive (one call, not retried: the next beat is the
   * retry). False when the coordinator has no Heartbeat: send no more.
   */
  async heartbeat(presence: Presence, timeoutMs?: number): Promise<boolean> {
    const states = { SERVING: pb.WorkerState.SERVING, DRAINING: pb.WorkerState.DRAINING, STOPPED: pb.WorkerState.STOPPED };
    try {
      await this.client.heartbeat(
        {
          workerId: presence.workerId,
          host: presence.host,
          queues: presence.queues,
          concurrency: presence.concurrency,
          inFlight: presence.inFlight,
          sdkVersion: presence.sdkVersion,
          state: states[presence.state],
          startedAt: presence.startedAt,
        },
        this.opts(timeoutMs),
      );
    } catch (err) {
      const failure = ConnectError.from(err);
      if (failure.code === Code.Unimplemented) return false;
      if (isTransient(failure)) {
        throw new CoordinatorUnavailable(`Heartbeat to ${this.target} failed (${codeName(failure.code)}: ${failure.rawMessage})`, {
          code: codeName(failure.code),
        });
      }
      throw fatal(failure);
    }
    return true;
  }

  // -- batched calls: each item's answer, or what failed it ----------------------------

  private async batch<Req extends LeaseReq | RenewReq | ReportReq, Resp extends { problem?: pb.Problem | undefined }>(
    items: Req[],
    schema: Parameters<typeof toBinary>[0],
    batched: (items: Req[]) => Promise<Resp[]>,
    unary: (item: Req) => Promise<Resp>,
  ): Promise<Array<Resp | Error>> {
    const calls = bySize(items, schema, CALL_BYTES);
    if (calls.length > 1) {
      const answers = await Promise.all(calls.map((call) => this.batchOnce(call, batched, unary)));
      return answers.flat();
    }
    return this.batchOnce(items, batched, unary);
  }

  private async batchOnce<Req, Resp extends { problem?: pb.Problem | undefined }>(
    items: Req[],
    batched: (items: Req[]) => Promise<Resp[]>,
    unary: (item: Req) => Promise<Resp>,
  ): Promise<Array<Resp | Error>> {
    const oneByOne = (): Promise<Array<Resp | Error>> =>
      Promise.all(items.map((item) => unary(item).catch((err: unknown) => ConnectError.from(err))));
    if (this.batched) {
      let reply: Resp[];
      try {
        reply = await batched(items);
      } catch (err) {
        const failure = ConnectError.from(err);
        if (tooLarge(failure) && items.length > 1) return oneByOne();
        if (failure.code !== Code.Unimplemented) return items.map(() => failure);
        this.log("info", `the coordinator at ${this.target} has no batched calls: one call per item`);
        this.batched = false;
        return oneByOne();
      }
      if (reply.length !== items.length) {
        const failure = new ConnectError(`${reply.length} answers for ${items.length} items`, Code.Internal);
        return items.map(() => failure);
      }
      return reply.map((answer) =>
        answer.problem !== undefined ? new ConnectError(answer.problem.message, codeOf(answer.problem.code)) : answer,
      );
    }
    return oneByOne();
  }

  private async retry<T>(name: string, call: () => Promise<T>, until: () => boolean): Promise<T | undefined> {
    let delay = 0.05;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      try {
        return await call();
      } catch (err) {
        const failure = ConnectError.from(err);
        if (!isTransient(failure)) throw fatal(failure);
        if (until()) return undefined;
        if (attempt === this.attempts) {
          throw new CoordinatorUnavailable(
            `${name} to ${this.target} failed ${attempt} times (${codeName(failure.code)}: ${failure.rawMessage}); ` +
              "giving up on this call (WorkerConfig.coordinatorAttempts sets how many tries)",
            { code: codeName(failure.code), cause: failure },
          );
        }
        const wait = delay * (0.5 + Math.random());
        delay = Math.min(delay * 2, 5);
        this.log(
          "warning",
          `${name} to ${this.target} failed (${failure.rawMessage}, attempt ${attempt} of ${this.attempts}): retrying in ${wait.toFixed(2)}s`,
        );
        await sleep(wait * 1000);
      }
    }
    throw new Error("unreachable: the last attempt returns or throws");
  }
}

/** The lease a grant answers, asked for at `askedAt` (performance.now()). */
function leaseOf(reply: pb.AcquireTaskLeaseResponse, askedAt: number): Lease {
  return {
    granted: reply.granted,
    reason: reply.reason,
    inputJson: reply.inputJson,
    maxAttempts: reply.maxAttempts,
    askedAt,
    token: reply.leaseToken,
    nodeId: reply.nodeId,
    nodeType: reply.nodeType,
    workflowId: reply.workflowId,
    workflowVersion: reply.workflowVersion,
    timeoutSeconds: reply.timeoutSeconds || undefined,
    ttl: reply.ttlSeconds,
    contextJson: reply.contextJson,
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function bySize<Req>(items: Req[], schema: Parameters<typeof toBinary>[0], budget: number): Req[][] {
  const runs: Req[][] = [];
  let current: Req[] = [];
  let size = 0;
  for (const item of items) {
    const n = toBinary(schema, item as Parameters<typeof toBinary>[1]).length;
    if (current.length > 0 && size + n > budget) {
      runs.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += n;
  }
  runs.push(current);
  return runs;
}

/** What to report instead of `outcome`, whose report was too large for a message. */
function smaller(outcome: Outcome, err: SdkError): Outcome {
  if (outcome.status === "COMPLETED") {
    const size = Buffer.byteLength(outcome.outputJson, "utf8");
    return {
      ...outcome,
      status: "FAILED",
      outputJson: "",
      error:
        `output is ${size} bytes, over the limit of a message to the coordinator (${err.message}); ` +
        "return less, or store it elsewhere and return a reference",
      code: "output_too_large",
      permanent: true,
    };
  }
  return { ...outcome, error: outcome.error.slice(0, 2000) + "… (cut short: too large to report)" };
}

function fatal(err: ConnectError): SdkError {
  const code = codeName(err.code);
  if (tooLarge(err)) {
    return new SdkError(
      `a message to or from the coordinator is too large: ${err.rawMessage} (not retried: it would be as large again)`,
      { code: MESSAGE_TOO_LARGE, cause: err },
    );
  }
  if (err.code === Code.Unauthenticated) {
    return new SdkError(`the coordinator refused the worker token: ${err.rawMessage} (check COMPOSER_WORKER_TOKEN)`, {
      code,
      cause: err,
    });
  }
  if (err.code === Code.PermissionDenied) {
    return new SdkError(err.rawMessage || "permission denied", { code, cause: err });
  }
  return new SdkError(`coordinator call failed with ${code}: ${err.rawMessage}`, { code, cause: err });
}
