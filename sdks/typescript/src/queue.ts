/**
 * The stream contract between the outbox-enqueuer and the workers (as composer_queue):
 * one stream per queue and shard, `<prefix>:q:<queue>:<shard>` (and one per other priority
 * band of the shard, `bandStream`), one consumer group,
 * `composer-workers`; an entry names a task attempt (task_id, run_id, attempt, maybe
 * traceparent) and nothing else. A worker reads at most as many entries as it has free
 * slots, acknowledges (XACK + XDEL in one MULTI) once its report is in, and keeps
 * `<prefix>:consumer:<name>` alive while it runs, so the lease-sweeper never takes its
 * entries for a dead worker's.
 */

import { Redis } from "ioredis";

export const GROUP = "composer-workers";
export const DEFAULT_SHARDS = 4;
/** The band of a task whose run has no priority of its own: the shard's stream itself. */
export const DEFAULT_BAND = 3;
export const BANDS = [1, 2, 3, 4, 5] as const;

/**
 * The stream of priority `band` of the shard whose (band 3) stream is `stream`
 * (docs/architecture.md §4.16): `<stream>:p<band>{<stream>}`, in the shard's cluster slot.
 */
export function bandStream(stream: string, band: number): string {
  return band === DEFAULT_BAND ? stream : `${stream}:p${band}{${stream}}`;
}

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
  /** Its run's priority, the band it was published in (1 first … 5; 3 when absent). */
  priority: number;
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
    return taskMessage(this.fields, `entry ${this.id} on ${this.stream}`);
  }
}

/**
 * The task message of a stream message's `fields` (an entry's, or those a report's answer
 * carries with the next task); throws MalformedMessage naming what is wrong and `where`.
 */
export function taskMessage(fields: Readonly<Record<string, string>>, where: string): TaskMessage {
  const { task_id: taskId, run_id: runId, attempt } = fields;
  const number = attempt === undefined ? NaN : Number(attempt);
  if (!taskId || !runId || !Number.isInteger(number) || number < 0) {
    throw new MalformedMessage(`malformed task message ${JSON.stringify(fields)} (${where})`);
  }
  const priority = Number(fields.priority ?? DEFAULT_BAND);
  if (!(BANDS as readonly number[]).includes(priority)) {
    throw new MalformedMessage(`malformed task message ${JSON.stringify(fields)}: priority is not one of 1 to 5`);
  }
  return { taskId, runId, attempt: number, traceparent: fields.traceparent, priority };
}

export class MalformedMessage extends Error {
  override name = "MalformedMessage";
}

/**
 * XREADGROUP over the priority bands of several shards, at most ARGV[3] entries in all,
 * by effective band (band less one per whole minute waited, at best 1), then oldest
 * first (composer_queue's _READ: its comment says the layout of KEYS and ARGV).
 */
const READ = `
local group, consumer, left, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local found, groups, active, failure = {}, 1, {}, nil
local function read(key, n)
  local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n,
                            'STREAMS', key, '>')
  if type(reply) == 'table' and reply['err'] then
    if not string.find(reply['err'], 'NOGROUP', 1, true) then failure = reply['err'] end
    groups = 0
  elseif reply then
    for _, item in ipairs(reply[1][2]) do
      found[#found + 1] = {key, item[1], item[2]}
      left = left - 1
    end
  end
end
local function undelivered(key, n)
  local info = redis.pcall('XINFO', 'GROUPS', key)
  if type(info) == 'table' and info['err'] then return {} end
  local last = nil
  for _, g in ipairs(info) do
    local name, id
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then id = g[j + 1] end
    end
    if name == group then last = id end
  end
  if last == nil then
    redis.call('XGROUP', 'CREATE', key, group, '0')
    last = '0-0'
  end
  local ms = {}
  for i, item in ipairs(redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', n)) do
    ms[i] = tonumber(string.match(item[1], '^(%d+)'))
  end
  return ms
end
local shards, k, a = {}, 1, 5
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  a = a + 1
  local keys, bands = {}, {}
  for i = 1, n do
    keys[i], bands[i] = KEYS[k], tonumber(ARGV[a])
    k, a = k + 1, a + 1
  end
  shards[#shards + 1] = {keys, bands}
end
local heads, others = {}, false
for _, shard in ipairs(shards) do
  local keys, bands = shard[1], shard[2]
  for i = 2, #keys do
    if bands[i] > 0 or redis.call('XLEN', keys[i]) > 0 then
      local ms = undelivered(keys[i], left)
      if #ms > 0 then
        heads[keys[i]], others = ms, true
        active[#active + 1] = keys[i]
      end
    end
    bands[i] = math.abs(bands[i])
  end
end
if not others then
  for _, shard in ipairs(shards) do
    if left <= 0 or failure ~= nil then break end
    read(shard[1][1], left)
  end
else
  local cand = {}
  for _, shard in ipairs(shards) do
    local keys, bands = shard[1], shard[2]
    cand[#cand + 1] = {keys[1], 3, undelivered(keys[1], left)}
    for i = 2, #keys do
      if heads[keys[i]] then cand[#cand + 1] = {keys[i], bands[i], heads[keys[i]]} end
    end
  end
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local take, pos, order = {}, {}, {}
  for c = 1, #cand do take[c], pos[c] = 0, 1 end
  for _ = 1, left do
    local best, rank, born = nil, nil, nil
    for c = 1, #cand do
      local t = cand[c][3][pos[c]]
      if t ~= nil then
        local r = math.max(1, cand[c][2] - math.floor(math.max(0, now - t) / 60000))
        if best == nil or r < rank or (r == rank and t < born) then
          best, rank, born = c, r, t
        end
      end
    end
    if best == nil then break end
    if take[best] == 0 then order[#order + 1] = best end
    take[best], pos[best] = take[best] + 1, pos[best] + 1
  end
  for _, c in ipairs(order) do
    if failure == nil then read(cand[c][1], take[c]) end
  end
end
if failure ~= nil then return redis.error_reply(failure) end
return {groups, found, active}
`;

/** A reader that has not looked at every band of a shard for this long looks again. */
const PROBE_MS = 1000;

function fieldsOf(flat: string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
  return fields;
}

/**
 * What the worker asks of Redis (a StreamQueue; tests give a fake): `reader()` is one
 * reader's connection, handed back to `read`.
 */
export interface Queue {
  reader(): unknown;
  ensureGroups(streams: string[]): Promise<void>;
  read(connection: unknown, streams: string[], consumer: string, count: number, blockMs: number): Promise<Entry[]>;
  ack(refs: Array<[string, string]>): Promise<void>;
  heartbeat(prefix: string, consumer: string, ttlMs: number): Promise<void>;
  /** Stop every blocking read now (the drain). */
  interrupt(): void;
  close(): Promise<void>;
}

/** The Redis side of a worker: one connection for commands, one per reader for blocking reads. */
export class StreamQueue implements Queue {
  readonly redis: Redis;
  private readonly readers: Redis[] = [];
  /** Band streams that held undelivered entries when last looked at. */
  private readonly active = new Set<string>();
  /** Shard stream -> when (ms) its bands were last all looked at. */
  private readonly looked = new Map<string, number>();
  /** Shard streams whose other bands this reader made sure have the group. */
  private readonly grouped = new Set<string>();

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

  /**
   * The read script's keys and layout: per shard, band 3 always; another band when the
   * last look found entries in it, or (negative: looked at with XLEN first) when the
   * shard's bands were not all looked at for PROBE_MS. Default-priority work alone costs
   * no command more than before bands.
   */
  private plan(streams: string[]): [string[], number[]] {
    const now = Date.now();
    const keys: string[] = [];
    const layout: number[] = [];
    for (const stream of streams) {
      const look = now - (this.looked.get(stream) ?? -Infinity) >= PROBE_MS;
      if (look) this.looked.set(stream, now);
      const group: Array<[string, number]> = [[stream, DEFAULT_BAND]];
      for (const band of BANDS) {
        if (band === DEFAULT_BAND) continue;
        const key = bandStream(stream, band);
        if (this.active.has(key)) group.push([key, band]);
        else if (look) group.push([key, -band]);
      }
      layout.push(group.length);
      for (const [key, band] of group) {
        keys.push(key);
        layout.push(band);
      }
    }
    return [keys, layout];
  }

  /** What is there, at most `count` in all, by band; else wait up to `blockMs` for one. */
  async read(connection: Redis, streams: string[], consumer: string, count: number, blockMs: number): Promise<Entry[]> {
    if (count < 1 || streams.length === 0) return [];
    const [keys, layout] = this.plan(streams);
    const reply = (await connection.eval(READ, keys.length, ...keys, GROUP, consumer, count, 0, ...layout)) as [
      number,
      Array<[string, string, string[]]>,
      string[],
    ];
    const entries = reply[1].map(([stream, id, fields]) => new Entry(stream, id, fieldsOf(fields)));
    for (const key of keys) this.active.delete(key);
    for (const key of reply[2]) this.active.add(key);
    if (reply[0] === 0) {
      await this.ensureGroups(streams); // a group vanished (Redis restarted or was flushed)
      for (const stream of streams) this.grouped.delete(stream);
      return entries;
    }
    if (entries.length > 0 || blockMs <= 0) return entries;
    // wait on every band at once (one command): their groups made once by this reader
    const others = (list: string[]) => list.flatMap((s) => BANDS.filter((b) => b !== DEFAULT_BAND).map((b) => bandStream(s, b)));
    const fresh = streams.filter((s) => !this.grouped.has(s));
    if (fresh.length > 0) {
      await this.ensureGroups(others(fresh));
      for (const stream of fresh) this.grouped.add(stream);
    }
    const every = [...streams, ...others(streams)];
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
        ...every,
        ...every.map(() => ">"),
      )) as typeof answer;
    } catch (err) {
      if (String((err as Error).message).includes("NOGROUP")) {
        await this.ensureGroups(every);
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
    // as it answered it looked at every band (one with entries answers at once)
    const answered = Date.now();
    for (const stream of streams) this.looked.set(stream, answered);
    for (const entry of read) if (!streams.includes(entry.stream)) this.active.add(entry.stream);
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
