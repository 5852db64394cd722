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
/** `fork_id`: unique in the daemon's store; pass it to sessionForkEnd when that subagent ends. */
export interface SessionForkResult { forked: boolean; fork_id: number }
/** `fork_end` is false (and nothing changed) when that fork_id was already released or is unknown. */
export interface SessionForkEndResult { fork_end: boolean; fork_id: number }
export interface HealthResult { status: string; sessions_count: number }
export interface EventSpec { description: string; required: string[]; optional: string[] }
/** `events`: exactly the nine contract events; `admin_events`: every other one. */
export interface ListEventsResult { events: Record<string, EventSpec>; admin_events: Record<string, EventSpec> }

/**
 * What the engine (vLLM + LMCache connector) returns. A turn_end needs its
 * `chunk_hashes` list (`[]` empties the map): without one the daemon refuses the
 * event, so the client never sends it (a missing list means the engine's
 * connector is not configured).
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
