// The openclaw-style bridge against the real daemon and a stand-in SSE engine.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  DaemonClient,
  EventSender,
  onSessionEnd,
  onSessionStart,
  beforeTurn,
  runChatTurn,
  streamChatCompletions,
} from "../dist/index.js";
import { sseReply, startDaemon, startEngine } from "./helpers.mjs";

let daemon;
let api;
let sender;
const opts = () => ({ sender });

before(async () => {
  daemon = await startDaemon();
  api = new DaemonClient(daemon.url);
  sender = new EventSender(daemon.url, { logger: null });
});
after(async () => {
  await daemon?.stop();
});

test("a streamed turn sends turn_start, then turn_end with the engine's hashes and timing", async () => {
  const hashes = ["-7f3a", "0c11", "-0001"];
  const engine = await startEngine(sseReply(["Hel", "lo", " there"], { chunk_hashes: hashes }));
  try {
    const turn = streamChatCompletions(
      {
        baseUrl: engine.baseUrl,
        apiKey: "k-1",
        sessionId: "br-1",
        body: { model: "m", messages: [{ role: "user", content: "hi" }] },
      },
      { ...opts(), debugMessages: true },
    );
    const chunks = [];
    for await (const c of turn) chunks.push(c);
    const r = await turn.result;
    assert.equal(r.content, "Hello there");
    assert.equal(r.finishReason, "stop");
    assert.deepEqual(r.kvTransferParams, { chunk_hashes: hashes });
    assert.equal(typeof r.timing.ttft_ms, "number");
    assert.equal(typeof r.timing.total_time_ms, "number");
    assert.equal(typeof r.timing.tpot_ms, "number");
    assert.equal(chunks.length, 5, "every engine chunk is passed through");
    // the engine saw a streaming request with the key
    assert.equal(engine.requests[0].body.stream, true);
    assert.equal(engine.requests[0].headers.authorization, "Bearer k-1");
    assert.equal(await sender.flush(5000), true);
    assert.deepEqual(sender.stats().rejected, 0);
    assert.deepEqual((await api.sessionMap("br-1")).chunk_hashes, hashes);
    // debug_context reached the daemon: it wrote the debug file with the timing
    const file = join(daemon.debugDir, "kvcache_debug_br-1_1.json");
    assert.ok(existsSync(file), `no ${file}`);
    const text = readFileSync(file, "utf8");
    assert.match(text, /ttft_ms/);
    assert.match(text, /hi/);
  } finally {
    await engine.close();
  }
});

test("a stream without kv_transfer_params (or with null hashes) sends no turn_end; the map stays", async () => {
  let n = 0;
  const engine = await startEngine(() => {
    n++;
    if (n === 1) return sseReply(["a"], { chunk_hashes: ["keep-1", "keep-2"] });
    if (n === 2) return sseReply(["b"], undefined, { crlf: true });
    return sseReply(["c"], { chunk_hashes: null });
  });
  const droppedBefore = sender.stats().dropped;
  try {
    for (let i = 0; i < 3; i++) {
      const r = await runChatTurn({ baseUrl: engine.baseUrl, sessionId: "br-2", body: { messages: [] } }, opts());
      assert.equal(r.content, ["a", "b", "c"][i]);
    }
    await sender.flush(5000);
    assert.equal(sender.stats().rejected, 0);
    assert.equal(sender.stats().dropped - droppedBefore, 2, "the two turn_ends without a list were not sent");
    assert.deepEqual((await api.sessionMap("br-2")).chunk_hashes, ["keep-1", "keep-2"]);
  } finally {
    await engine.close();
  }
});

test("an engine error rejects the turn and sends no turn_end", async () => {
  const engine = await startEngine({ status: 500, body: '{"error":"boom"}' });
  try {
    await assert.rejects(
      runChatTurn({ baseUrl: engine.baseUrl, sessionId: "br-3", body: { messages: [] } }, opts()),
      /HTTP 500/,
    );
    await sender.flush(5000);
    // turn_start went out (unknown session: nothing to prefetch), no turn_end created the session
    await assert.rejects(api.sessionMap("br-3"), /not found/);
  } finally {
    await engine.close();
  }
});

test("a consumer that stops early sends no turn_end", async () => {
  const engine = await startEngine(sseReply(["x", "y", "z"], { chunk_hashes: ["never"] }));
  try {
    const turn = streamChatCompletions({ baseUrl: engine.baseUrl, sessionId: "br-4", body: {} }, opts());
    for await (const c of turn) {
      void c;
      break;
    }
    await assert.rejects(turn.result, /before completion/);
    await sender.flush(5000);
    await assert.rejects(api.sessionMap("br-4"), /not found/);
  } finally {
    await engine.close();
  }
});

test("session end: deleted -> session_close, other reasons -> session_suspend", async () => {
  for (const sid of ["br-del", "br-idle", "br-next"]) sender.turnEnd(sid, { chunk_hashes: [`${sid}-h`] });
  assert.equal(onSessionEnd({ sessionId: "br-del", reason: "deleted" }, opts()), "close");
  assert.equal(onSessionEnd({ sessionId: "br-idle", reason: "idle" }, opts()), "suspend");
  assert.equal(onSessionEnd({ sessionId: "br-next", reason: "deleted", nextSessionId: "br-next-2" }, opts()), "suspend");
  assert.equal(onSessionEnd({ sessionId: "" }, opts()), "none");
  await sender.flush(5000);
  assert.equal(sender.stats().rejected, 0);
  await assert.rejects(api.sessionMap("br-del"), /session 'br-del' not found/);
  assert.deepEqual((await api.sessionMap("br-idle")).chunk_hashes, ["br-idle-h"], "suspended keeps its map");
  assert.deepEqual((await api.sessionMap("br-next")).chunk_hashes, ["br-next-h"]);
});

test("session start resumed from another id -> snapshot_restore with source_session_id", async () => {
  sender.turnEnd("br-old", { chunk_hashes: ["o1", "o2", "o1"] });
  onSessionEnd({ sessionId: "br-old", reason: "idle", nextSessionId: "br-new" }, opts());
  assert.equal(onSessionStart({ sessionId: "br-new", resumedFrom: "br-old" }, opts()), "restore");
  assert.equal(onSessionStart({ sessionId: "br-fresh", resumedFrom: "br-old", reason: "reset" }, opts()), "skip");
  assert.equal(onSessionStart({ sessionId: "br-plain" }, opts()), "skip");
  assert.equal(onSessionStart({ sessionId: "br-off", resumedFrom: "br-old" }, { ...opts(), restoreOnSessionStart: false }), "skip");
  beforeTurn("br-new", opts());
  await sender.flush(5000);
  assert.equal(sender.stats().rejected, 0);
  assert.deepEqual((await api.sessionMap("br-new")).chunk_hashes, ["o1", "o2", "o1"]);
  assert.deepEqual((await api.sessionMap("br-old")).chunk_hashes, ["o1", "o2", "o1"], "the source is left as it was");
  await assert.rejects(api.sessionMap("br-fresh"), /not found/);
  // a resume under the same id restores that session
  assert.equal(onSessionStart({ sessionId: "br-old", resumedFrom: "br-old" }, opts()), "restore");
  await sender.flush(5000);
  assert.equal(sender.stats().rejected, 0);
  // both hold o1, o2 now: closing one evicts nothing
  assert.equal((await api.sessionClose("br-old")).evicted_count, 0);
  assert.equal((await api.sessionClose("br-new")).evicted_count, 2);
});
