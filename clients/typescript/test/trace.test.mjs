// Trace protocol 2: the URL, the mirror folding a real daemon's messages, close codes.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { TraceMirror, describeClose, traceUrl } from "../dist/index.js";
import { rawEvent, startDaemon } from "./helpers.mjs";

let daemon;
before(async () => { daemon = await startDaemon(); });
after(async () => { await daemon?.stop(); });

describe("trace protocol 2", () => {
  test("traceUrl asks for protocol 2 and resumes", () => {
    assert.equal(traceUrl("http://127.0.0.1:6998/"), "ws://127.0.0.1:6998/trace?protocol=2");
    assert.equal(traceUrl("https://h", { since: 5, epoch: "ab", session: "s", history: 10 }),
      "wss://h/trace?protocol=2&since=5&epoch=ab&session=s&history=10");
  });

  test("the mirror folds a snapshot in parts, then deltas", () => {
    const m = new TraceMirror();
    m.apply({ kind: "snapshot", protocol: 2, seq: 3, epoch: "e", ts: 0, max_message_bytes: 1,
      totals: { sessions: 2, chunks: 3, references: 4 }, session: null });
    assert.equal(m.loading, true);
    const row = (id, n) => ({ session_id: id, state: "active", turn_count: 1, chunk_count: n,
      shared_count: 1, fork_holds: 0, last_event_ts: 1 });
    m.apply({ kind: "snapshot_sessions", seq: 3, epoch: "e", part: 0, last: false,
      sessions: [row("a", 2)], refcounts: {} });
    m.apply(JSON.stringify({ kind: "snapshot_sessions", seq: 3, epoch: "e", part: 1,
      last: true, sessions: [row("b", 2)], refcounts: {} }));
    assert.equal(m.loading, false);
    assert.deepEqual([...m.sessions.keys()].sort(), ["a", "b"]);
    m.apply({ kind: "event", seq: 4, epoch: "e", ts: 0, type: "session_close", session_id: "a",
      ok: true, delta: { sessions: { a: null }, refcounts: { x: 0, sys: 1 } },
      totals: { sessions: 1, chunks: 2, references: 2 } });
    assert.deepEqual([...m.sessions.keys()], ["b"]);
    assert.equal(m.refcounts.get("sys"), 1);
    assert.equal(m.totals.references, 2);
    assert.deepEqual(m.resumeOptions(), { since: 4, epoch: "e" });
    assert.throws(() => m.apply({ kind: "snapshot", protocol: 3 }), /protocol 3/);
  });

  test("close codes say whether to retry", () => {
    assert.equal(describeClose(4010, "x").retry, false);
    assert.equal(describeClose(4008, "slow").retry, true);
    assert.match(describeClose(1009, "big").why, /too large/);
  });

  test("the daemon's paged admin reads answer as documented", async () => {
    await rawEvent(daemon.url, { type: "turn_end", session_id: "ts-a",
      kv_transfer_params: { chunk_hashes: ["sys", "a1"] } });
    await rawEvent(daemon.url, { type: "turn_end", session_id: "ts-b",
      kv_transfer_params: { chunk_hashes: ["sys", "b1"] } });
    const top = await rawEvent(daemon.url, { type: "chunk_top", limit: 1 });
    assert.deepEqual(top.data.chunks, [{ hash: "sys", refcount: 2 }]);
    const page = await rawEvent(daemon.url, { type: "session_chunks", session_id: "ts-a" });
    assert.deepEqual(page.data.chunks.map((c) => [c.hash, c.others]), [["sys", 1], ["a1", 0]]);
  });
});
