/**
 * Several coordinators, each run's calls to one of them (as composer_sdk._routing;
 * docs/scale-out.md §3).
 *
 * A coordinator batches the reports it receives into one transaction (the group commit,
 * docs/architecture.md §3.1) and keeps a run's reports out of two of its own batches; it
 * cannot see another coordinator's. With replicas behind one address, the reports of one
 * run (a FORK's tasks, a chain's steps) reach both, and the two transactions queue on the
 * run's row lock. So a worker given every coordinator's address (`COMPOSER_COORDINATORS`,
 * `WorkerConfig.coordinators`) sends each run's leases, renewals and reports to the one its
 * run id hashes to, and every run has one batcher.
 *
 * The hash is the run id's CRC-32 (of its UTF-8 bytes, unsigned, as Python's zlib.crc32)
 * modulo the number of coordinators, the same in every worker of every language, with the
 * addresses in the order given: workers must be given one list, and a TypeScript worker
 * must route a run where a Python worker does (test/routing.test.ts pins pairs computed by
 * Python). A coordinator that cannot be reached (`CoordinatorUnavailable`, after its
 * client's retries) is passed over for `DOWN_SECONDS`: its runs' calls go to the next in
 * the list meanwhile, so a coordinator that dies stops no run — its runs only lose their
 * single batcher until it is back.
 */

import * as zlib from "node:zlib";

import type {
  Capabilities,
  Coordinator,
  Lease,
  LeaseRequest,
  NextTask,
  Outcome,
  Presence,
  RenewRequest,
  ReportRequest,
  TakeNext,
} from "./coordinator.js";
import { CoordinatorUnavailable, SdkError } from "./errors.js";

/** How long a coordinator that could not be reached is passed over, in seconds. */
export const DOWN_SECONDS = 5;

/**
 * Node's zlib.crc32, read off the module when asked, not imported by name: Node before
 * 20.15 has none, and a named import of it would fail the whole SDK at load, routing or not.
 */
function crc32(): (data: string) => number {
  const fn = (zlib as { crc32?: (data: string) => number }).crc32;
  if (typeof fn !== "function") {
    throw new SdkError(
      "routing runs over several coordinators (COMPOSER_COORDINATORS) needs zlib.crc32, which " +
        `Node ${process.versions.node} lacks: run the worker on Node 20.15 or newer, or give it one ` +
        "coordinator (COMPOSER_GRPC_ADDR) instead",
    );
  }
  return fn;
}

/** The index of the coordinator, of `coordinators`, that takes `runId`'s calls. */
export function route(runId: string, coordinators: number): number {
  if (!Number.isInteger(coordinators) || coordinators < 1) {
    throw new RangeError(`coordinators must be a whole number of at least 1, got ${coordinators}`);
  }
  // a string is hashed as its UTF-8 bytes, as Python's run_id.encode()
  return crc32()(runId) % coordinators;
}

/**
 * The comma-separated addresses of `COMPOSER_COORDINATORS`, in order, checked: an empty
 * entry or one named twice would route runs differently from the workers given the list
 * right, so either is an error that says so.
 */
export function parseCoordinators(text: string): string[] {
  const targets = text.split(",").map((t) => t.trim());
  if (targets.some((t) => t === "")) {
    throw new SdkError(
      `COMPOSER_COORDINATORS='${text}' has an empty address: give every coordinator's host:port, ` +
        "separated by commas, the same list to every worker",
    );
  }
  const seen = new Set<string>();
  for (const target of targets) {
    if (seen.has(target)) {
      throw new SdkError(
        `COMPOSER_COORDINATORS='${text}' names a coordinator twice (${target}): give each ` +
          "coordinator's host:port once, the same list to every worker",
      );
    }
    seen.add(target);
  }
  return targets;
}

/**
 * The coordinator protocol of `CoordinatorClient` over several coordinators: a run's
 * calls to one of them (`route`), to the next ones while it cannot be reached;
 * capabilities asked of every one, presence told to one.
 *
 * A renewal that gets no answer is undefined, as from one client (the next renewal asks
 * again), and moves nothing: only a call that throws CoordinatorUnavailable passes a
 * coordinator over.
 */
export class RunRoutedCoordinators implements Coordinator {
  readonly target: string;
  private readonly clients: readonly Coordinator[];
  /** Per coordinator, until when (clock seconds) it is passed over; 0: it is not. */
  private readonly downUntil: number[];

  /** `clock` says the time in seconds (a test's may stand still or jump). */
  constructor(
    clients: readonly Coordinator[],
    private readonly clock: () => number = () => performance.now() / 1000,
  ) {
    if (clients.length === 0) throw new RangeError("no coordinator to route to");
    crc32(); // a Node that cannot route stops the worker at start, not at its first lease
    this.clients = [...clients];
    this.downUntil = clients.map(() => 0);
    this.target = clients.map((c) => c.target).join(",");
  }

  /**
   * The coordinators to try for `runId`, by index: its own first, then the next ones in
   * the list, those passed over (unreachable a moment ago) last.
   */
  private order(runId: string): number[] {
    const n = this.clients.length;
    const first = route(runId, n);
    const order = Array.from({ length: n }, (_, k) => (first + k) % n);
    const now = this.clock();
    return [...order.filter((i) => this.downUntil[i]! <= now), ...order.filter((i) => this.downUntil[i]! > now)];
  }

  private async routed<T>(runId: string, call: (client: Coordinator) => Promise<T>): Promise<T> {
    let failed: CoordinatorUnavailable | undefined;
    for (const i of this.order(runId)) {
      let answer: T;
      try {
        answer = await call(this.clients[i]!);
      } catch (err) {
        if (!(err instanceof CoordinatorUnavailable)) throw err;
        this.downUntil[i] = this.clock() + DOWN_SECONDS;
        failed = err;
        continue;
      }
      this.downUntil[i] = 0;
      return answer;
    }
    throw failed!;
  }

  acquire(request: LeaseRequest, until: () => boolean): Promise<Lease | undefined> {
    return this.routed(request.runId, (c) => c.acquire(request, until));
  }

  renew(request: RenewRequest): Promise<boolean | undefined> {
    return this.routed(request.runId, (c) => c.renew(request));
  }

  report(request: ReportRequest, outcome: Outcome, until: () => boolean, takeNext?: TakeNext): Promise<boolean | NextTask | undefined> {
    return this.routed(request.runId, (c) => c.report(request, outcome, until, takeNext));
  }

  /**
   * Every reachable coordinator's, checked (each must speak this SDK's protocol: a run may
   * be routed to any); the first's is returned. Undefined if `until()` turned true; throws
   * CoordinatorUnavailable when none could be reached, and the SdkError of the first that
   * speaks another protocol version.
   */
  async capabilities(sdk: string, until: () => boolean): Promise<Capabilities | undefined> {
    let first: Capabilities | undefined;
    let failed: CoordinatorUnavailable | undefined;
    for (const client of this.clients) {
      let answer: Capabilities | undefined;
      try {
        answer = await client.capabilities(sdk, until);
      } catch (err) {
        if (!(err instanceof CoordinatorUnavailable)) throw err;
        failed = err;
        continue;
      }
      if (answer === undefined) return undefined;
      first ??= answer;
    }
    if (first === undefined) throw failed!;
    return first;
  }

  /**
   * To the first coordinator that answers (one is enough: they share the database); false
   * when it keeps no heartbeats. Throws the last CoordinatorUnavailable when none answers.
   */
  async heartbeat(presence: Presence, timeoutMs?: number): Promise<boolean> {
    let failed: CoordinatorUnavailable | undefined;
    for (const client of this.clients) {
      try {
        return await client.heartbeat(presence, timeoutMs);
      } catch (err) {
        if (!(err instanceof CoordinatorUnavailable)) throw err;
        failed = err;
      }
    }
    throw failed!;
  }

  /** End every coordinator's connection. */
  close(): void {
    for (const client of this.clients) client.close();
  }
}
