import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** The SDK's own config file: `daemon_url` (required) and `auth_token` (optional). */
export interface SdkConfig {
  daemonUrl: string;
  authToken: string;
}

/** `$XDG_CONFIG_HOME/ram-a-kv/config.toml`, else `~/.config/ram-a-kv/config.toml`. */
export function defaultConfigPath(): string {
  const xdg = process.env.XDG_CONFIG_HOME;
  const base = xdg && xdg.trim() !== "" ? xdg : join(homedir(), ".config");
  return join(base, "ram-a-kv", "config.toml");
}

function unquote(raw: string): string | undefined {
  const v = raw.trim();
  const m = /^"((?:[^"\\]|\\.)*)"\s*(#.*)?$/.exec(v);
  if (m) {
    try {
      return JSON.parse(`"${m[1]}"`) as string;
    } catch {
      return undefined;
    }
  }
  const lit = /^'([^']*)'\s*(#.*)?$/.exec(v);
  return lit ? lit[1] : undefined;
}

/**
 * Parses the few top-level string keys the SDK reads out of a TOML file.
 * Keys inside a [table] are ignored, as the SDK config has none.
 * Throws on a file that cannot be read or a missing/invalid daemon_url.
 */
export function parseSdkConfig(text: string): SdkConfig {
  const values: Record<string, string> = {};
  let inTable = false;
  for (const line of text.split(/\r?\n/)) {
    const t = line.trim();
    if (t === "" || t.startsWith("#")) continue;
    if (t.startsWith("[")) {
      inTable = true;
      continue;
    }
    if (inTable) continue;
    const eq = t.indexOf("=");
    if (eq <= 0) continue;
    const key = t.slice(0, eq).trim();
    const val = unquote(t.slice(eq + 1));
    if (val !== undefined) values[key] = val;
  }
  const url = values["daemon_url"];
  if (!url || !/^https?:\/\//.test(url)) {
    throw new Error("daemon_url missing or not an http(s) URL");
  }
  return { daemonUrl: url.replace(/\/+$/, ""), authToken: values["auth_token"] ?? "" };
}

export function loadSdkConfig(path: string = defaultConfigPath()): SdkConfig {
  return parseSdkConfig(readFileSync(path, "utf8"));
}
