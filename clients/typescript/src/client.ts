import type {
  DebugContext,
  EventResponse,
  HealthResult,
  KvTransferParams,
  ListEventsResult,
  Logger,
  SessionCloseResult,
  SessionForkEndResult,
  SessionForkResult,
  SessionMapResult,
  SessionSuspendResult,
  SnapshotRestoreResult,
  TurnEndResult,
  TurnStartResult,
} from "./types.js";

/** The daemon answered ok:false; `message` is the daemon's error text, verbatim. */
export class RamAKvError extends Error {
  readonly eventType: string;
  constructor(eventType: string, message: string) {
    super(message);
    this.name = "RamAKvError";
    this.eventType = eventType;
  }
}

export interface HttpOptions {
  /** Sent as `Authorization: Bearer <token>` when not empty. */
  authToken?: string;
  /** Per-request timeout (default 5000 ms). */
  requestTimeoutMs?: number;
}

/** POST one event; resolves to the daemon's JSON answer, rejects on transport errors. */
export async function postEvent(
  daemonUrl: string,
  event: Record<string, unknown> | string,
  opts: HttpOptions = {},
): Promise<EventResponse> {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (opts.authToken) headers["Authorization"] = `Bearer ${opts.authToken}`;
  const res = await fetch(`${daemonUrl.replace(/\/+$/, "")}/event`, {
    method: "POST",
    headers,
    body: typeof event === "string" ? event : JSON.stringify(event),
    signal: AbortSignal.timeout(opts.requestTimeoutMs ?? 5000),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`daemon answered HTTP ${res.status} with a non-JSON body`);
  }
  if (!body || typeof body !== "object" || typeof (body as EventResponse).ok !== "boolean") {
    throw new Error(`daemon answered HTTP ${res.status} without an 'ok' field`);
  }
  return body as EventResponse;
}

/**
 * Request/response client: every event as an async method returning the typed
 * `data`, throwing RamAKvError with the daemon's text on ok:false. For hosts that
 * want answers (health at start-up, session_map); hot paths use EventSender.
 */
export class DaemonClient {
  readonly daemonUrl: string;
  private readonly http: HttpOptions;

  constructor(daemonUrl: string, opts: HttpOptions = {}) {
    this.daemonUrl = daemonUrl.replace(/\/+$/, "");
    this.http = opts;
  }

  async send<D = Record<string, unknown>>(type: string, payload: Record<string, unknown> = {}): Promise<D> {
    const res = await postEvent(this.daemonUrl, { ...payload, type }, this.http);
    if (!res.ok) throw new RamAKvError(type, res.error ?? "unknown error");
    return (res.data ?? {}) as D;
  }

  health(): Promise<HealthResult> {
    return this.send("health");
  }
  listEvents(): Promise<ListEventsResult> {
    return this.send("list_events");
  }
  /**
   * `requestId` (at most 128 characters) names the request it begins: only the
   * turn_end carrying the same id cancels its prefetch (overlapping requests of one
   * session never cancel each other's).
   */
  turnStart(sessionId: string, requestId?: string): Promise<TurnStartResult> {
    return this.send("turn_start", withRequestId({ session_id: sessionId }, requestId));
  }
  /** `requestId`: the request it ends (without one, the session's oldest open request). */
  turnEnd(
    sessionId: string,
    kvTransferParams?: KvTransferParams | null,
    debugContext?: DebugContext,
    requestId?: string,
  ): Promise<TurnEndResult> {
    try {
      return this.send("turn_end", turnEndPayload(sessionId, kvTransferParams, debugContext, requestId));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  /** `requestId`: the request its prefetch is for. */
  snapshotRestore(sessionId: string, sourceSessionId?: string, requestId?: string): Promise<SnapshotRestoreResult> {
    return this.send("snapshot_restore", restorePayload(sessionId, sourceSessionId, requestId));
  }
  sessionMap(sessionId: string): Promise<SessionMapResult> {
    return this.send("session_map", { session_id: sessionId });
  }
  /** Declared close (private chunks evicted after the deferral); `inferred`: a guess, never deletes. */
  sessionClose(sessionId: string, inferred?: boolean): Promise<SessionCloseResult> {
    return this.send("session_close", withInferred({ session_id: sessionId }, inferred));
  }
  /** `inferred`: the host guessed the pause (chunks only ordered cold). */
  sessionSuspend(sessionId: string, inferred?: boolean): Promise<SessionSuspendResult> {
    return this.send("session_suspend", withInferred({ session_id: sessionId }, inferred));
  }
  /** Holds the session's chunks for a subagent; keep the answer's `fork_id`. */
  sessionFork(sessionId: string): Promise<SessionForkResult> {
    return this.send("session_fork", { session_id: sessionId });
  }
  /** Releases fork `forkId` (without it, the session's newest open fork). */
  sessionForkEnd(sessionId: string, forkId?: number): Promise<SessionForkEndResult> {
    return this.send("session_fork_end", forkEndPayload(sessionId, forkId));
  }
}

/** Thrown (by DaemonClient.turnEnd, as a rejection) for a turn_end without a chunk_hashes list. */
export class MissingChunkHashesError extends Error {
  constructor() {
    super("turn_end needs kv_transfer_params.chunk_hashes, a list ([] empties the map); an " +
      "engine answer without one means its connector is not configured");
    this.name = "MissingChunkHashesError";
  }
}

function forkEndPayload(sessionId: string, forkId?: number): Record<string, unknown> {
  return forkId === undefined ? { session_id: sessionId } : { session_id: sessionId, fork_id: forkId };
}

/**
 * A chunk hash as the daemon wants it: strings verbatim, integers (bigint, or a
 * number that is a safe integer) as signed hex ("-1f"), as the Python SDK does.
 * Anything else gives undefined.
 */
export function hexHash(h: unknown): string | undefined {
  if (typeof h === "string") return h;
  if (typeof h === "bigint") return h.toString(16);
  if (typeof h === "number" && Number.isSafeInteger(h)) return h.toString(16);
  return undefined;
}

/**
 * The turn_end body. `chunk_hashes` missing, null, not a list, or holding
 * something that is not a hash means "the engine did not say": the key is left
 * out, so the daemon counts the turn but does not touch the session's map (it
 * never reads as "no chunks", which would evict the whole session).
 */
export function turnEndPayload(
  sessionId: string,
  kvTransferParams?: KvTransferParams | null,
  debugContext?: DebugContext,
  requestId?: string,
): Record<string, unknown> {
  const params: Record<string, unknown> =
    kvTransferParams && typeof kvTransferParams === "object" && !Array.isArray(kvTransferParams)
      ? { ...kvTransferParams }
      : {};
  const raw: unknown = params["chunk_hashes"];
  const hashes = Array.isArray(raw) ? raw.map(hexHash) : undefined;
  if (!hashes || !hashes.every((h) => h !== undefined)) throw new MissingChunkHashesError();
  params["chunk_hashes"] = hashes;
  const payload: Record<string, unknown> = { session_id: sessionId, kv_transfer_params: params };
  if (debugContext) payload["debug_context"] = debugContext;
  return withRequestId(payload, requestId);
}

function restorePayload(sessionId: string, sourceSessionId?: string, requestId?: string): Record<string, unknown> {
  const payload: Record<string, unknown> = { session_id: sessionId };
  if (sourceSessionId) payload["source_session_id"] = sourceSessionId;
  return withRequestId(payload, requestId);
}

/** The payload with `request_id` when one is given (turn_start, snapshot_restore, turn_end). */
function withRequestId(payload: Record<string, unknown>, requestId?: string): Record<string, unknown> {
  if (requestId !== undefined) payload["request_id"] = requestId;
  return payload;
}

/** `inferred: true` only when set: the daemon's default is a declared event. */
function withInferred(payload: Record<string, unknown>, inferred?: boolean): Record<string, unknown> {
  if (inferred) payload["inferred"] = true;
  return payload;
}

export interface SenderOptions extends HttpOptions {
  /** Most events waiting to be sent; beyond that new events are dropped (default 1024). */
  maxQueue?: number;
  /** Requests in flight at once, never two for one session (default 4). */
  concurrency?: number;
  /** Warnings about dropped events at most this often (default 30000 ms). */
  warnIntervalMs?: number;
  /**
   * After a failed delivery (daemon unreachable or timed out) everything queued is
   * dropped and new events are dropped at once for this long (default 1000 ms), so
   * a dead daemon never backs events up or holds the process open at exit.
   */
  downBackoffMs?: number;
  /** Where warnings go (default console; null = silent). */
  logger?: Logger | null;
}

export interface SenderStats {
  /** Delivered and answered ok:true. */
  sent: number;
  /** Delivered and answered ok:false (bad input; logged, not retried). */
  rejected: number;
  /** Not delivered: daemon unreachable/timed out, or the queue was full. */
  dropped: number;
  /** Waiting or in flight. */
  pending: number;
}

interface QueuedEvent {
  body: Record<string, unknown>;
  /** the body as sent, serialised when queued */
  json: string;
  /**
   * The sessions the event touches, in whose order it is sent: its session_id and,
   * for a snapshot_restore from another session, source_session_id too (the restore
   * must see the source's earlier turn_ends, and the source's later ones must not
   * overtake it).
   */
  keys: string[];
}

/**
 * Fire-and-forget sender. Calls return at once and never throw; events go
 * through a bounded queue, are sent in order per session (one request in flight
 * per session, several sessions in parallel), and are dropped with a counter and
 * a rate-limited warning when the daemon cannot be reached.
 */
export class EventSender {
  readonly daemonUrl: string;
  private readonly http: HttpOptions;
  private readonly maxQueue: number;
  private readonly concurrency: number;
  private readonly warnIntervalMs: number;
  private readonly downBackoffMs: number;
  private downUntil = 0;
  private readonly logger: Logger | null;

  /** session -> its events not yet sent, oldest first */
  private readonly queues = new Map<string, QueuedEvent[]>();
  /** sessions with an event in flight */
  private readonly busy = new Set<string>();
  private inFlight = 0;
  private queued = 0;
  private lastWarn = -Infinity;
  private droppedSinceWarn = 0;
  private idleWaiters: Array<() => void> = [];
  private readonly counters = { sent: 0, rejected: 0, dropped: 0 };

  constructor(daemonUrl: string, opts: SenderOptions = {}) {
    this.daemonUrl = daemonUrl.replace(/\/+$/, "");
    this.http = { authToken: opts.authToken, requestTimeoutMs: opts.requestTimeoutMs ?? 5000 };
    this.maxQueue = Math.max(1, opts.maxQueue ?? 1024);
    this.concurrency = Math.max(1, opts.concurrency ?? 4);
    this.warnIntervalMs = opts.warnIntervalMs ?? 30000;
    this.downBackoffMs = Math.max(0, opts.downBackoffMs ?? 1000);
    this.logger = opts.logger === undefined ? console : opts.logger;
  }

  /** `requestId`: the request it begins (the turn_end naming it cancels its prefetch). */
  turnStart(sessionId: string, requestId?: string): void {
    this.enqueue("turn_start", withRequestId({ session_id: sessionId }, requestId));
  }
  /** A turn_end without a chunk_hashes list is never sent: it is counted as dropped, with a warning. */
  turnEnd(
    sessionId: string,
    kvTransferParams?: KvTransferParams | null,
    debugContext?: DebugContext,
    requestId?: string,
  ): void {
    let payload: Record<string, unknown>;
    try {
      payload = turnEndPayload(sessionId, kvTransferParams, debugContext, requestId);
    } catch (err) {
      this.counters.dropped++;
      this.warn(`ram-a-kv: turn_end for ${sessionId} not sent: ${errText(err)}`);
      return;
    }
    this.enqueue("turn_end", payload);
  }
  snapshotRestore(sessionId: string, sourceSessionId?: string, requestId?: string): void {
    this.enqueue("snapshot_restore", restorePayload(sessionId, sourceSessionId, requestId));
  }
  sessionFork(sessionId: string): void {
    this.enqueue("session_fork", { session_id: sessionId });
  }
  /** Fire-and-forget: ends fork `forkId` (as DaemonClient.sessionFork returned it), else the newest. */
  sessionForkEnd(sessionId: string, forkId?: number): void {
    this.enqueue("session_fork_end", forkEndPayload(sessionId, forkId));
  }
  sessionSuspend(sessionId: string, inferred?: boolean): void {
    this.enqueue("session_suspend", withInferred({ session_id: sessionId }, inferred));
  }
  sessionClose(sessionId: string, inferred?: boolean): void {
    this.enqueue("session_close", withInferred({ session_id: sessionId }, inferred));
  }

  /** Queue any event (`type` plus fields). Never throws. */
  send(type: string, payload: Record<string, unknown> = {}): void {
    this.enqueue(type, payload);
  }

  get droppedCount(): number {
    return this.counters.dropped;
  }

  stats(): SenderStats {
    return { ...this.counters, pending: this.queued + this.inFlight };
  }

  /**
   * Resolves true once every event queued so far has been answered or dropped,
   * false if that did not happen within timeoutMs. Never rejects.
   */
  flush(timeoutMs = 5000): Promise<boolean> {
    if (this.queued === 0 && this.inFlight === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let done = false;
      const waiter = (): void => {
        if (done) return;
        done = true;
        clearTimeout(timer as number);
        resolve(true);
      };
      const timer: unknown = setTimeout(() => {
        if (done) return;
        done = true;
        this.idleWaiters = this.idleWaiters.filter((w) => w !== waiter);
        resolve(false);
      }, Math.max(0, timeoutMs));
      (timer as { unref?: () => void }).unref?.();
      this.idleWaiters.push(waiter);
    });
  }

  private enqueue(type: string, payload: Record<string, unknown>): void {
    try {
      if (this.queued >= this.maxQueue) {
        this.drop(`queue full (${this.maxQueue} events)`);
        return;
      }
      if (Date.now() < this.downUntil) {
        this.drop(`daemon at ${this.daemonUrl} was not reachable a moment ago`);
        return;
      }
      const body: Record<string, unknown> = { ...payload, type };
      const key = typeof body["session_id"] === "string" ? (body["session_id"] as string) : "";
      const source = body["source_session_id"];
      const ev: QueuedEvent = {
        body,
        json: JSON.stringify(body),
        keys: typeof source === "string" && source !== key ? [key, source] : [key],
      };
      for (const k of ev.keys) {
        const q = this.queues.get(k);
        if (q) q.push(ev);
        else this.queues.set(k, [ev]);
      }
      this.queued++;
      this.pump();
    } catch (err) {
      this.counters.dropped++;
      this.warn(`ram-a-kv: could not queue ${type}: ${errText(err)}`);
    }
  }

  /** Starts every event that is first in line for all its sessions, up to `concurrency`. */
  private pump(): void {
    if (this.inFlight >= this.concurrency || this.queued === 0) return;
    for (const q of this.queues.values()) {
      if (this.inFlight >= this.concurrency) break;
      const ev = q[0];
      if (!ev || !ev.keys.every((k) => !this.busy.has(k) && this.queues.get(k)?.[0] === ev)) continue;
      for (const k of ev.keys) {
        const kq = this.queues.get(k) as QueuedEvent[];
        kq.shift();
        if (kq.length === 0) this.queues.delete(k);
        this.busy.add(k);
      }
      this.queued--;
      this.inFlight++;
      void this.deliver(ev).finally(() => {
        this.inFlight--;
        for (const k of ev.keys) this.busy.delete(k);
        this.pump();
        this.checkIdle();
      });
    }
  }

  private async deliver(ev: QueuedEvent): Promise<void> {
    try {
      const res = await postEvent(this.daemonUrl, ev.json, this.http);
      if (res.ok) {
        this.counters.sent++;
      } else {
        this.counters.rejected++;
        this.logger?.warn(`ram-a-kv: daemon rejected ${String(ev.body["type"])}: ${res.error ?? "unknown error"}`);
      }
    } catch (err) {
      this.downUntil = Date.now() + this.downBackoffMs;
      const reason = `daemon at ${this.daemonUrl} not reachable: ${errText(err)}`;
      this.drop(reason);
      // the daemon is down: drop what waits too rather than trying each in turn
      for (const [k, q] of this.queues) {
        for (const queued of q) if (queued.keys[0] === k) this.drop(reason);
      }
      this.queues.clear();
      this.queued = 0;
    }
  }

  private drop(reason: string): void {
    this.counters.dropped++;
    this.droppedSinceWarn++;
    const now = Date.now();
    if (now - this.lastWarn >= this.warnIntervalMs) {
      this.lastWarn = now;
      const n = this.droppedSinceWarn;
      this.droppedSinceWarn = 0;
      this.warn(`ram-a-kv: dropped ${n} event(s) (${this.counters.dropped} in total): ${reason}`);
    }
  }

  private warn(msg: string): void {
    try {
      this.logger?.warn(msg);
    } catch {
      // a broken logger must not break the host
    }
  }

  private checkIdle(): void {
    if (this.queued !== 0 || this.inFlight !== 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}

function errText(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    const code = cause && typeof cause === "object" ? (cause as { code?: unknown }).code : undefined;
    return code ? `${err.message} (${String(code)})` : err.message;
  }
  return String(err);
}
