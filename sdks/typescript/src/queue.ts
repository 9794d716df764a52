/**
 * The stream contract between the outbox-enqueuer and the workers (as composer_queue):
 * one stream per queue and shard, `<prefix>:q:<queue>:<shard>`, one consumer group,
 * `composer-workers`; an entry names a task attempt (task_id, run_id, attempt, maybe
 * traceparent) and nothing else. A worker reads at most as many entries as it has free
 * slots, acknowledges (XACK + XDEL in one MULTI) once its report is in, and keeps
 * `<prefix>:consumer:<name>` alive while it runs, so the lease-sweeper never takes its
 * entries for a dead worker's.
 */

import { Redis } from "ioredis";

export const GROUP = "composer-workers";
export const DEFAULT_SHARDS = 4;

export function streamName(prefix: string, queue: string, shard: number): string {
  return `${prefix}:q:${queue}:${shard}`;
}

export function queueStreams(prefix: string, queue: string, shards: number): string[] {
  return Array.from({ length: shards }, (_, shard) => streamName(prefix, queue, shard));
}

export function consumerKey(prefix: string, consumer: string): string {
  return `${prefix}:consumer:${consumer}`;
}

/** A task attempt's stream message: ids only. */
export interface TaskMessage {
  taskId: string;
  runId: string;
  attempt: number;
  traceparent: string | undefined;
}

/** One stream entry as read: where it is, its id, its fields. */
export class Entry {
  constructor(
    readonly stream: string,
    readonly id: string,
    readonly fields: Readonly<Record<string, string>>,
  ) {}

  /** The task message it carries; throws MalformedMessage naming what is wrong. */
  message(): TaskMessage {
    const { task_id: taskId, run_id: runId, attempt } = this.fields;
    const number = attempt === undefined ? NaN : Number(attempt);
    if (!taskId || !runId || !Number.isInteger(number) || number < 0) {
      throw new MalformedMessage(`malformed task message ${JSON.stringify(this.fields)} (entry ${this.id} on ${this.stream})`);
    }
    return { taskId, runId, attempt: number, traceparent: this.fields.traceparent };
  }
}

export class MalformedMessage extends Error {
  override name = "MalformedMessage";
}

/** XREADGROUP over several streams, at most ARGV[3] entries in all (composer_queue's _READ). */
const READ = `
local group, consumer, left = ARGV[1], ARGV[2], tonumber(ARGV[3])
local found, groups = {}, 1
for _, key in ipairs(KEYS) do
  if left <= 0 then break end
  local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', left,
                            'STREAMS', key, '>')
  if type(reply) == 'table' and reply['err'] then
    if not string.find(reply['err'], 'NOGROUP', 1, true) then
      return redis.error_reply(reply['err'])
    end
    groups = 0
  elseif reply then
    for _, item in ipairs(reply[1][2]) do
      found[#found + 1] = {key, item[1], item[2]}
      left = left - 1
    end
  end
end
return {groups, found}
`;

function fieldsOf(flat: string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
  return fields;
}

/** The Redis side of a worker: one connection for commands, one per reader for blocking reads. */
export class StreamQueue {
  readonly redis: Redis;
  private readonly readers: Redis[] = [];

  constructor(readonly url: string) {
    this.redis = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 3 });
    this.redis.on("error", () => undefined); // each command's own error says what failed
  }

  /** A connection of its own for one reader's blocking reads (closed by `close`, or `interrupt`). */
  reader(): Redis {
    const connection = this.redis.duplicate();
    connection.on("error", () => undefined);
    this.readers.push(connection);
    return connection;
  }

  async ensureGroups(streams: string[]): Promise<void> {
    for (const stream of streams) {
      try {
        await this.redis.xgroup("CREATE", stream, GROUP, "0", "MKSTREAM");
      } catch (err) {
        if (!String((err as Error).message).includes("BUSYGROUP")) throw err;
      }
    }
  }

  /** What is there, at most `count` in all; else wait up to `blockMs` for one. */
  async read(connection: Redis, streams: string[], consumer: string, count: number, blockMs: number): Promise<Entry[]> {
    if (count < 1 || streams.length === 0) return [];
    const reply = (await connection.eval(READ, streams.length, ...streams, GROUP, consumer, count)) as [
      number,
      Array<[string, string, string[]]>,
    ];
    const entries = reply[1].map(([stream, id, fields]) => new Entry(stream, id, fieldsOf(fields)));
    if (reply[0] === 0) {
      await this.ensureGroups(streams); // a group vanished (Redis restarted or was flushed)
      return entries;
    }
    if (entries.length > 0 || blockMs <= 0) return entries;
    let answer: Array<[string, Array<[string, string[] | null]>]> | null;
    try {
      answer = (await connection.call(
        "XREADGROUP",
        "GROUP",
        GROUP,
        consumer,
        "COUNT",
        count,
        "BLOCK",
        blockMs,
        "STREAMS",
        ...streams,
        ...streams.map(() => ">"),
      )) as typeof answer;
    } catch (err) {
      if (String((err as Error).message).includes("NOGROUP")) {
        await this.ensureGroups(streams);
        return [];
      }
      throw err;
    }
    const read: Entry[] = [];
    for (const [stream, items] of answer ?? []) {
      for (const [id, fields] of items) {
        if (fields !== null) read.push(new Entry(stream, id, fieldsOf(fields)));
      }
    }
    if (read.length > count) await this.giveBack(read.slice(count));
    return read.slice(0, count);
  }

  /** Put entries back on their streams, unread (a blocked read that answered too many). */
  async giveBack(entries: Entry[]): Promise<void> {
    const multi = this.redis.multi();
    for (const entry of entries) {
      multi.xadd(entry.stream, "*", ...Object.entries(entry.fields).flat());
      multi.xack(entry.stream, GROUP, entry.id);
      multi.xdel(entry.stream, entry.id);
    }
    await multi.exec();
  }

  /** Acknowledge, then delete: a handled entry is never read again (one MULTI). */
  async ack(refs: Array<[string, string]>): Promise<void> {
    const byStream = new Map<string, string[]>();
    for (const [stream, id] of refs) byStream.set(stream, [...(byStream.get(stream) ?? []), id]);
    if (byStream.size === 0) return;
    const multi = this.redis.multi();
    for (const [stream, ids] of byStream) {
      multi.xack(stream, GROUP, ...ids);
      multi.xdel(stream, ...ids);
    }
    const results = await multi.exec();
    const failed = results?.find(([err]) => err !== null);
    if (failed) throw failed[0];
  }

  async heartbeat(prefix: string, consumer: string, ttlMs: number): Promise<void> {
    await this.redis.set(consumerKey(prefix, consumer), "1", "PX", Math.max(1, Math.round(ttlMs)));
  }

  /** Stop every blocking read now (drain): their connections are closed. */
  interrupt(): void {
    for (const connection of this.readers) connection.disconnect();
  }

  async close(): Promise<void> {
    this.interrupt();
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }
}
