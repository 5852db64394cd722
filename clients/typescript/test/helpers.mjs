// Test helpers: start the real daemon on a free loopback port (noop backend, temp
// SQLite file and debug dir), and small stand-in HTTP servers.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export function freePort() {
  return new Promise((res, rej) => {
    const srv = createNetServer();
    srv.on("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function rawEvent(url, body) {
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  return res.json();
}

/** Starts `$PYTHON -m ramakv_daemon --config <temp>`; PYTHON defaults to <repo>/.venv/bin/python. */
export async function startDaemon() {
  const dir = mkdtempSync(join(tmpdir(), "ramakv-ts-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const debugDir = join(dir, "debug");
  const config = join(dir, "config.toml");
  writeFileSync(
    config,
    [
      `listen_addr = "127.0.0.1:${port}"`,
      "noop_backend = true",
      "debug_enabled = true",
      `debug_dir = "${debugDir}"`,
      `session_store_path = "${join(dir, "sessions.db")}"`,
      "turn_start_prefetch = true",
      "",
    ].join("\n"),
  );
  let py = process.env.PYTHON || ".venv/bin/python";
  if (!isAbsolute(py) && py.includes("/")) py = join(repoRoot, py);
  const logPath = join(dir, "daemon.log");
  let log = "";
  const child = spawn(py, ["-m", "ramakv_daemon", "--config", config], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  let exited = false;
  child.on("exit", () => (exited = true));
  const deadline = Date.now() + 20000;
  for (;;) {
    if (exited) throw new Error(`daemon exited during start-up:\n${log}`);
    try {
      const h = await rawEvent(url, { type: "health" });
      if (h.ok) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`daemon did not answer within 20 s:\n${log}`);
    }
    await sleep(100);
  }
  return {
    url,
    dir,
    debugDir,
    log: () => log,
    async stop() {
      if (!exited) {
        child.kill("SIGTERM");
        const t = Date.now();
        while (!exited && Date.now() - t < 10000) await sleep(50);
        if (!exited) child.kill("SIGKILL");
      }
      writeFileSync(logPath, log);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** An HTTP server on a free loopback port; `handler(req, res, body)`. */
export async function startServer(handler, port = 0) {
  const sockets = new Set();
  const srv = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => handler(req, res, body));
  });
  srv.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise((r) => srv.listen(port, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        srv.close(() => r());
      }),
  };
}

/**
 * A stand-in OpenAI-compatible engine: POST /v1/chat/completions streams `script`'s
 * SSE pieces (strings written one by one with a small pause, so lines split across
 * reads), as vLLM with the LMCache connector does.
 */
export async function startEngine(script) {
  const requests = [];
  const server = await startServer(async (req, res, body) => {
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
      res.writeHead(404).end("not found");
      return;
    }
    const parsed = JSON.parse(body);
    requests.push({ headers: req.headers, body: parsed });
    const pieces = typeof script === "function" ? script(parsed) : script;
    if (pieces.status) {
      res.writeHead(pieces.status, { "Content-Type": "application/json" }).end(pieces.body ?? "{}");
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    for (const p of pieces) {
      res.write(p);
      await sleep(5);
    }
    res.end();
  });
  return { ...server, baseUrl: `${server.url}/v1`, requests };
}

/** SSE pieces for one reply: text deltas, then a final chunk with usage and kv_transfer_params. */
export function sseReply(words, kvTransferParams, { crlf = false } = {}) {
  const nl = crlf ? "\r\n" : "\n";
  const ev = (obj) => `data: ${JSON.stringify(obj)}${nl}${nl}`;
  const base = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "stand-in" };
  const out = [`: keep-alive${nl}${nl}`];
  out.push(ev({ ...base, choices: [{ index: 0, delta: { role: "assistant" }, finish_reason: null }] }));
  for (const w of words) {
    const s = ev({ ...base, choices: [{ index: 0, delta: { content: w }, finish_reason: null }] });
    // split every event in two network writes, mid-line
    out.push(s.slice(0, 7), s.slice(7));
  }
  const last = {
    ...base,
    choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
    usage: { prompt_tokens: 10, completion_tokens: words.length, total_tokens: 10 + words.length },
  };
  if (kvTransferParams !== undefined) last.kv_transfer_params = kvTransferParams;
  out.push(ev(last));
  out.push(`data: [DONE]${nl}${nl}`);
  return out;
}

export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}
