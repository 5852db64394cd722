/**
 * The process-wide fire-and-forget client, as the original SDK: initialise once
 * (from the SDK config file, a path, or an explicit URL), then call the event
 * functions anywhere. Before init, after a failed init, or with a missing or
 * broken config every call is a no-op. Later inits are ignored with a warning.
 */
import { defaultConfigPath, loadSdkConfig } from "./config.js";
import { EventSender, type SenderOptions } from "./client.js";
import type { DebugContext, KvTransferParams, Logger } from "./types.js";

let initialised = false;
let sender: EventSender | null = null;

function logger(opts?: SenderOptions): Logger | null {
  return opts?.logger === undefined ? console : opts.logger;
}

function alreadyInitialised(opts?: SenderOptions): boolean {
  if (!initialised) return false;
  logger(opts)?.warn("ram-a-kv: client already initialised; this init is ignored");
  return true;
}

/** Reads `daemon_url` from $XDG_CONFIG_HOME (or ~/.config)/ram-a-kv/config.toml. */
export function initFromConfig(opts?: SenderOptions): boolean {
  return initFromPath(defaultConfigPath(), opts);
}

/** Reads `daemon_url` (and `auth_token`) from a TOML file. Returns isEnabled(). */
export function initFromPath(path: string, opts?: SenderOptions): boolean {
  if (alreadyInitialised(opts)) return isEnabled();
  initialised = true;
  try {
    const cfg = loadSdkConfig(path);
    sender = new EventSender(cfg.daemonUrl, { authToken: cfg.authToken || undefined, ...opts });
  } catch (err) {
    sender = null;
    logger(opts)?.warn(
      `ram-a-kv: disabled, config ${path} unusable: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return isEnabled();
}

/** Uses an explicit daemon URL, e.g. "http://127.0.0.1:6998". Returns isEnabled(). */
export function initWithUrl(daemonUrl: string, opts?: SenderOptions): boolean {
  if (alreadyInitialised(opts)) return isEnabled();
  initialised = true;
  sender = /^https?:\/\//.test(daemonUrl) ? new EventSender(daemonUrl, opts) : null;
  if (!sender) logger(opts)?.warn(`ram-a-kv: disabled, not an http(s) URL: ${daemonUrl}`);
  return isEnabled();
}

export function isEnabled(): boolean {
  return sender !== null;
}

/** The global sender, or null when disabled (for stats or a host's own events). */
export function globalSender(): EventSender | null {
  return sender;
}

export function turnStart(sessionId: string, requestId?: string): void {
  sender?.turnStart(sessionId, requestId);
}
export function turnEnd(
  sessionId: string,
  kvTransferParams?: KvTransferParams | null,
  debugContext?: DebugContext,
  requestId?: string,
): void {
  sender?.turnEnd(sessionId, kvTransferParams, debugContext, requestId);
}
export function snapshotRestore(sessionId: string, sourceSessionId?: string, requestId?: string): void {
  sender?.snapshotRestore(sessionId, sourceSessionId, requestId);
}
export function sessionFork(sessionId: string): void {
  sender?.sessionFork(sessionId);
}
export function sessionForkEnd(sessionId: string, forkId?: number): void {
  sender?.sessionForkEnd(sessionId, forkId);
}
export function sessionSuspend(sessionId: string, inferred?: boolean): void {
  sender?.sessionSuspend(sessionId, inferred);
}
export function sessionClose(sessionId: string, inferred?: boolean): void {
  sender?.sessionClose(sessionId, inferred);
}
/** Waits for queued events (true) or the timeout (false). Never rejects. */
export function flush(timeoutMs = 5000): Promise<boolean> {
  return sender ? sender.flush(timeoutMs) : Promise.resolve(true);
}
export function droppedCount(): number {
  return sender?.droppedCount ?? 0;
}

/** Test hook: forget the global client so the next init takes effect. */
export function resetForTests(): void {
  initialised = false;
  sender = null;
}
