/** Wire types of the ram-a-kv event API (see DESIGN.md, "Event API"). */

export type EventType =
  | "turn_start"
  | "turn_end"
  | "snapshot_restore"
  | "session_map"
  | "session_close"
  | "session_suspend"
  | "session_fork"
  | "session_fork_end"
  | "health"
  | "list_events";

export interface EventResponse<D = Record<string, unknown>> {
  ok: boolean;
  type?: string;
  data?: D;
  error?: string;
}

export interface TurnStartResult { prefetch_sent: boolean; prefetch_count: number }
export interface TurnEndResult { evicted_count: number; map_updated: boolean; debug_written: boolean }
export interface SnapshotRestoreResult { prefetch_sent: boolean; prefetch_count: number }
export interface SessionMapResult { session_id: string; chunk_hashes: string[] }
export interface SessionCloseResult { evicted_count: number; closed: boolean }
export interface SessionSuspendResult { evicted_count: number; suspended: boolean }
export interface SessionForkResult { forked: boolean }
export interface SessionForkEndResult { fork_end: boolean }
export interface HealthResult { status: string; sessions_count: number }
export interface EventSpec { description: string; required: string[]; optional: string[] }
export interface ListEventsResult { events: Record<string, EventSpec> }

/**
 * What the engine (vLLM + LMCache connector) returns. `chunk_hashes` may be
 * missing or null: that means "unknown", never "no chunks".
 */
export interface KvTransferParams {
  chunk_hashes?: string[] | null;
  [key: string]: unknown;
}

export interface DebugTiming {
  ttft_ms?: number;
  total_time_ms?: number;
  tpot_ms?: number;
}

export interface DebugContext {
  messages?: unknown[];
  timing?: DebugTiming;
}

/** Where warnings go; `console` by default, `null` for silence. */
export interface Logger {
  warn(message: string): void;
  info?(message: string): void;
}
