/**
 * The host bridge the original openclaw plugin did, as plain functions a host
 * plugin calls from its own hooks:
 *
 *   before a turn                 -> beforeTurn(sessionId)            -> turn_start
 *   stream /chat/completions      -> streamChatCompletions(...)       -> turn_start, then
 *                                    turn_end with the kv_transfer_params read from the
 *                                    SSE chunks and the turn's timing
 *   session end                   -> onSessionEnd({sessionId, reason, nextSessionId})
 *                                    -> session_close when deleted, else session_suspend
 *   session start, resumed from X -> onSessionStart({sessionId, resumedFrom: X})
 *                                    -> snapshot_restore with source_session_id X
 *
 * Every function only queues events on an EventSender (the global one unless
 * `sender` is given): none of them waits for the daemon or throws because of it.
 */
import { globalSender } from "./global.js";
import type { EventSender } from "./client.js";
import { iterateSSE } from "./sse.js";
import type { DebugContext, DebugTiming, KvTransferParams } from "./types.js";

export interface BridgeOptions {
  /** Where events go; default the global client (a no-op when it is disabled). */
  sender?: EventSender | null;
  /** Send turn_start before each turn (default true). */
  prefetchOnTurnStart?: boolean;
  /** Send snapshot_restore when a session starts resumed from another (default true). */
  restoreOnSessionStart?: boolean;
  /** Session-start reasons that skip the restore (default ["new", "reset", "deleted"]). */
  skipRestoreReasons?: string[];
  /** Session-end reasons that close rather than suspend (default ["deleted"]). */
  closeReasons?: string[];
  /** Put the request's messages into debug_context (default false; timing is always sent). */
  debugMessages?: boolean;
}

function senderOf(opts: BridgeOptions): EventSender | null {
  return opts.sender === undefined ? globalSender() : opts.sender;
}

/** Before a turn: turn_start (the daemon prefetches the session's chunks). */
export function beforeTurn(sessionId: string, opts: BridgeOptions = {}): void {
  if (!sessionId || opts.prefetchOnTurnStart === false) return;
  senderOf(opts)?.turnStart(sessionId);
}

/**
 * After a turn: turn_end with the engine's kv_transfer_params. Null or missing
 * chunk_hashes leave the session's map as it is (the turn is still counted).
 */
export function afterTurn(
  sessionId: string,
  kvTransferParams: KvTransferParams | null | undefined,
  debugContext?: DebugContext,
  opts: BridgeOptions = {},
): void {
  if (!sessionId) return;
  senderOf(opts)?.turnEnd(sessionId, kvTransferParams, debugContext);
}

export interface SessionEndEvent {
  sessionId: string;
  reason?: string;
  /** Set when the conversation continues under a new id (then it is never closed). */
  nextSessionId?: string;
}

/** Session end: close when it was deleted (and nothing continues it), else suspend. */
export function onSessionEnd(event: SessionEndEvent, opts: BridgeOptions = {}): "close" | "suspend" | "none" {
  if (!event?.sessionId) return "none";
  const closeReasons = opts.closeReasons ?? ["deleted"];
  const sender = senderOf(opts);
  if (!event.nextSessionId && closeReasons.includes(event.reason ?? "unknown")) {
    sender?.sessionClose(event.sessionId);
    return "close";
  }
  sender?.sessionSuspend(event.sessionId);
  return "suspend";
}

export interface SessionStartEvent {
  sessionId: string;
  /** The id of the session this one resumes (hosts often give a resumed chat a new id). */
  resumedFrom?: string;
  /** Why the previous session ended, when the host knows ("new", "reset", ...). */
  reason?: string;
}

/**
 * Session start: when resumed from another session, snapshot_restore the new id
 * from the old one (source_session_id), so the new session takes the old map and
 * its chunks are prefetched. Resuming under the same id restores that session.
 */
export function onSessionStart(event: SessionStartEvent, opts: BridgeOptions = {}): "restore" | "skip" {
  if (!event?.sessionId || !event.resumedFrom || opts.restoreOnSessionStart === false) return "skip";
  const skip = opts.skipRestoreReasons ?? ["new", "reset", "deleted"];
  if (event.reason && skip.includes(event.reason)) return "skip";
  const source = event.resumedFrom === event.sessionId ? undefined : event.resumedFrom;
  senderOf(opts)?.snapshotRestore(event.sessionId, source);
  return "restore";
}

/** One streamed chunk as OpenAI-compatible servers send it (only the fields we read). */
export interface ChatCompletionChunk {
  id?: string;
  model?: string;
  choices?: Array<{
    index?: number;
    delta?: { content?: string | null; [key: string]: unknown };
    finish_reason?: string | null;
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null;
  kv_transfer_params?: KvTransferParams | null;
  [key: string]: unknown;
}

export interface ChatRequest {
  /** e.g. "http://localhost:8000/v1"; the request goes to `${baseUrl}/chat/completions`. */
  baseUrl: string;
  /** The OpenAI request body; `stream: true` is forced. */
  body: Record<string, unknown>;
  /** The host's session id; without it no events are sent. */
  sessionId?: string;
  apiKey?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Whole-request timeout (default 300000 ms). */
  timeoutMs?: number;
}

export interface TurnResult {
  /** The assistant text, concatenated from the deltas. */
  content: string;
  finishReason: string | null;
  /** The last kv_transfer_params seen in the stream, or null if none came. */
  kvTransferParams: KvTransferParams | null;
  timing: DebugTiming;
  usage: ChatCompletionChunk["usage"] | null;
}

export interface ChatTurn extends AsyncIterable<ChatCompletionChunk> {
  /** Settles when the stream ends: the turn's summary, or the stream's error. */
  readonly result: Promise<TurnResult>;
}

const STRIP_MESSAGE_KEYS = new Set([
  "__messages", "__timing", "kvTransferParams", "api", "provider", "model", "responseId",
  "responseModel", "stopReason", "usage", "__openclaw", "idempotencyKey",
]);

function messagesForDebug(body: Record<string, unknown>): unknown[] | undefined {
  const msgs = body["messages"];
  if (!Array.isArray(msgs)) return undefined;
  return msgs.map((m) => {
    if (!m || typeof m !== "object") return m;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(m as Record<string, unknown>)) {
      if (!STRIP_MESSAGE_KEYS.has(k)) out[k] = v;
    }
    return out;
  });
}

/**
 * Streams one chat turn through `${baseUrl}/chat/completions` and yields the
 * engine's chunks unchanged. Around it: turn_start before the request; when the
 * stream completes, turn_end with the last `kv_transfer_params` any chunk carried
 * and the timing (ttft_ms, total_time_ms, tpot_ms). A failed or abandoned stream
 * sends no turn_end (the turn did not complete) and rejects `result`.
 * Iterate it once (or use runChatTurn); `result` settles when the iteration ends.
 */
export function streamChatCompletions(req: ChatRequest, opts: BridgeOptions = {}): ChatTurn {
  let settle!: (r: TurnResult) => void;
  let fail!: (e: unknown) => void;
  const result = new Promise<TurnResult>((res, rej) => {
    settle = res;
    fail = rej;
  });
  result.catch(() => undefined); // a caller that only iterates must not see an unhandled rejection

  async function* run(): AsyncGenerator<ChatCompletionChunk, void, undefined> {
    const sessionId = req.sessionId;
    let completed = false;
    try {
      if (sessionId) beforeTurn(sessionId, opts);
      const t0 = Date.now();
      const controller = new AbortController();
      const timer: unknown = setTimeout(() => controller.abort(new Error("chat request timed out")), req.timeoutMs ?? 300000);
      (timer as { unref?: () => void }).unref?.();
      const onAbort = (): void => controller.abort(req.signal?.reason);
      req.signal?.addEventListener("abort", onAbort, { once: true });
      try {
        const headers: Record<string, string> = { "Content-Type": "application/json", ...req.headers };
        if (req.apiKey) headers["Authorization"] = `Bearer ${req.apiKey}`;
        const fetchStart = Date.now();
        const res = await fetch(`${req.baseUrl.replace(/\/+$/, "")}/chat/completions`, {
          method: "POST",
          headers,
          body: JSON.stringify({ ...req.body, stream: true }),
          signal: controller.signal,
        });
        if (!res.ok || !res.body) {
          const text = await res.text().catch(() => "");
          throw new Error(`chat request failed: HTTP ${res.status} ${text.slice(0, 500)}`);
        }
        let firstToken = 0;
        let content = "";
        let finishReason: string | null = null;
        let kv: KvTransferParams | null = null;
        let usage: ChatCompletionChunk["usage"] | null = null;
        for await (const raw of iterateSSE(res.body)) {
          if (!raw || typeof raw !== "object") continue;
          const chunk = raw as ChatCompletionChunk;
          if (chunk.kv_transfer_params && typeof chunk.kv_transfer_params === "object") {
            kv = chunk.kv_transfer_params;
          }
          if (chunk.usage) usage = chunk.usage;
          const choice = chunk.choices?.[0];
          if (choice) {
            if (firstToken === 0) firstToken = Date.now();
            if (typeof choice.delta?.content === "string") content += choice.delta.content;
            if (choice.finish_reason) finishReason = choice.finish_reason;
          }
          yield chunk;
        }
        const end = Date.now();
        const timing: DebugTiming = {
          ttft_ms: firstToken > 0 ? firstToken - fetchStart : undefined,
          total_time_ms: end - t0,
        };
        const out = usage?.completion_tokens;
        if (firstToken > 0 && typeof out === "number" && out > 1) {
          timing.tpot_ms = Math.round(((end - firstToken) / (out - 1)) * 100) / 100;
        }
        completed = true;
        if (sessionId) {
          const debug: DebugContext = { timing };
          if (opts.debugMessages) debug.messages = messagesForDebug(req.body);
          afterTurn(sessionId, kv, debug, opts);
        }
        settle({ content, finishReason, kvTransferParams: kv, timing, usage });
      } finally {
        clearTimeout(timer as number);
        req.signal?.removeEventListener("abort", onAbort);
      }
    } catch (err) {
      fail(err);
      throw err;
    } finally {
      if (!completed) fail(new Error("chat stream ended before completion"));
    }
  }

  const iterator = run();
  return {
    result,
    [Symbol.asyncIterator]: () => iterator,
  };
}

/** streamChatCompletions, consumed to the end: resolves to the turn's summary. */
export async function runChatTurn(req: ChatRequest, opts: BridgeOptions = {}): Promise<TurnResult> {
  const turn = streamChatCompletions(req, opts);
  for await (const chunk of turn) void chunk;
  return turn.result;
}
