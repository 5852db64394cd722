/**
 * Trace protocol 2 (docs/trace.md): wire types, the URL to open, and a mirror that folds
 * the messages into session summaries and totals. Dependency-free: bring any WebSocket
 * (Node 22's global one, `ws`, a browser's) and feed its text frames to `TraceMirror`.
 */

/** The protocol version this client speaks; sent as `?protocol=2`. */
export const TRACE_PROTOCOL = 2;
/** No trace message is larger than this (the daemon's bound). */
export const TRACE_MAX_MESSAGE_BYTES = 1 << 20;
/** Close codes of ours: fell behind (reconnect with since), wrong protocol version. */
export const TRACE_SLOW_CLOSE = 4008;
export const TRACE_PROTOCOL_CLOSE = 4010;

export interface SessionSummary {
  session_id: string;
  state: "active" | "suspended";
  turn_count: number;
  chunk_count: number;
  shared_count: number;
  fork_holds: number;
  last_event_ts: number;
  namespace?: string;
}

export interface TraceTotals { sessions: number; chunks: number; references: number }

export interface TraceSnapshot {
  kind: "snapshot";
  protocol: number;
  seq: number;
  epoch: string;
  ts: number;
  max_message_bytes: number;
  totals: TraceTotals;
  session: string | null;
}

export interface TraceSessionsPart {
  kind: "snapshot_sessions";
  seq: number;
  epoch: string;
  part: number;
  last: boolean;
  sessions: SessionSummary[];
  /** With a session filter: refcounts of that session's chunks. */
  refcounts: Record<string, number>;
}

export interface TraceEvent {
  kind: "event";
  seq: number;
  epoch: string;
  ts: number;
  type: string;
  session_id: string | null;
  ok: boolean;
  data?: unknown;
  data_omitted_bytes?: number;
  error?: string;
  delta: {
    sessions: Record<string, SessionSummary | null>;
    refcounts: Record<string, number>;
    /** Sessions not in `sessions` may have a new shared_count: re-read with list_sessions. */
    shared_changed?: boolean;
  };
  totals?: TraceTotals;
  /** The record was cut to stay under the bound; a fresh snapshot follows. */
  resync?: true;
}

export type TraceMessage = TraceSnapshot | TraceSessionsPart | TraceEvent | { kind: string; [k: string]: unknown };

export interface TraceUrlOptions { since?: number; epoch?: string; session?: string; history?: number }

/** `ws(s)://host/trace?protocol=2&…` for a daemon base URL. */
export function traceUrl(baseUrl: string, opts: TraceUrlOptions = {}): string {
  const u = new URL(baseUrl.replace(/\/+$/, "") + "/trace");
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  u.searchParams.set("protocol", String(TRACE_PROTOCOL));
  if (opts.since !== undefined) u.searchParams.set("since", String(opts.since));
  if (opts.epoch !== undefined) u.searchParams.set("epoch", opts.epoch);
  if (opts.session !== undefined) u.searchParams.set("session", opts.session);
  if (opts.history) u.searchParams.set("history", String(opts.history));
  return u.toString();
}

/** What a close code means, for a follower deciding whether to retry. */
export function describeClose(code: number, reason: string): { retry: boolean; why: string } {
  if (code === TRACE_PROTOCOL_CLOSE) return { retry: false, why: `protocol mismatch: ${reason}` };
  if (code === TRACE_SLOW_CLOSE) return { retry: true, why: `fell behind: ${reason}` };
  if (code === 1009) return { retry: true, why: `message too large: ${reason}` };
  if (code === 1001) return { retry: true, why: "daemon shutting down" };
  return { retry: true, why: reason || `closed (${code})` };
}

/** Folds protocol 2 messages: session summaries, totals, the last seq and epoch. */
export class TraceMirror {
  sessions = new Map<string, SessionSummary>();
  totals: TraceTotals = { sessions: 0, chunks: 0, references: 0 };
  /** Refcounts the stream told (the filtered snapshot's and every delta's). */
  refcounts = new Map<string, number>();
  seq = 0;
  epoch = "";
  /** True between a snapshot header and its last part. */
  loading = false;

  /** Apply one message (parsed JSON or the frame's text); returns it parsed. */
  apply(message: TraceMessage | string): TraceMessage {
    const msg = (typeof message === "string" ? JSON.parse(message) : message) as TraceMessage;
    if (msg.kind === "snapshot") {
      const s = msg as TraceSnapshot;
      if (s.protocol !== TRACE_PROTOCOL) throw new Error(`trace protocol ${s.protocol}, expected ${TRACE_PROTOCOL}`);
      this.sessions.clear();
      this.refcounts.clear();
      this.totals = { ...s.totals };
      this.loading = true;
      this.seq = s.seq;
      this.epoch = s.epoch;
    } else if (msg.kind === "snapshot_sessions") {
      const p = msg as TraceSessionsPart;
      for (const row of p.sessions) this.sessions.set(row.session_id, row);
      for (const [h, n] of Object.entries(p.refcounts)) this.refcounts.set(h, n);
      if (p.last) this.loading = false;
    } else if (msg.kind === "event") {
      const e = msg as TraceEvent;
      this.seq = e.seq;
      this.epoch = e.epoch;
      if (e.totals) this.totals = { ...e.totals };
      for (const [sid, row] of Object.entries(e.delta.sessions)) {
        if (row === null) this.sessions.delete(sid);
        else this.sessions.set(sid, row);
      }
      for (const [h, n] of Object.entries(e.delta.refcounts)) {
        if (n) this.refcounts.set(h, n);
        else this.refcounts.delete(h);
      }
    }
    return msg;
  }

  /** Where to resume after a drop (same daemon run: a replay; else a fresh snapshot). */
  resumeOptions(session?: string): TraceUrlOptions {
    return { since: this.seq, epoch: this.epoch, ...(session ? { session } : {}) };
  }
}
