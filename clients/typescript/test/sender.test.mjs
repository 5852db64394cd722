// EventSender and DaemonClient against the real daemon.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { DaemonClient, EventSender, MissingChunkHashesError, RamAKvError, turnEndPayload } from "../dist/index.js";
import { startDaemon } from "./helpers.mjs";

let daemon;
let api;
const quiet = { warn() {} };

before(async () => {
  daemon = await startDaemon();
  api = new DaemonClient(daemon.url);
});
after(async () => {
  await daemon?.stop();
});

describe("DaemonClient (request/response)", () => {
  test("health and list_events", async () => {
    const h = await api.health();
    assert.equal(h.status, "running");
    assert.equal(typeof h.sessions_count, "number");
    const l = await api.listEvents();
    for (const ev of ["turn_start", "turn_end", "snapshot_restore", "session_map", "session_close",
      "session_suspend", "session_fork", "session_fork_end", "health"]) {
      assert.ok(l.events[ev], `list_events lacks ${ev}`);
    }
    assert.equal(Object.keys(l.events).length, 9, "exactly the nine contract events");
    assert.ok(l.admin_events.list_sessions && l.admin_events.list_events, "admin events apart");
  });

  test("ok:false becomes RamAKvError with the daemon's text", async () => {
    await assert.rejects(api.sessionMap("ts-nobody"), (err) => {
      assert.ok(err instanceof RamAKvError);
      assert.equal(err.message, "session 'ts-nobody' not found");
      assert.equal(err.eventType, "session_map");
      return true;
    });
  });

  test("every event's data has exactly the contract's fields", async () => {
    const sid = "ts-shape";
    assert.deepEqual(Object.keys(await api.turnStart(sid)).sort(), ["prefetch_count", "prefetch_sent"]);
    assert.deepEqual(Object.keys(await api.turnEnd(sid, { chunk_hashes: ["a"] })).sort(),
      ["debug_written", "evicted_count", "map_updated"]);
    assert.deepEqual(await api.sessionMap(sid), { session_id: sid, chunk_hashes: ["a"] });
    const first = await api.sessionFork(sid);
    assert.equal(first.forked, true);
    assert.ok(Number.isInteger(first.fork_id) && first.fork_id > 0);
    const second = await api.sessionFork(sid);
    assert.ok(second.fork_id > first.fork_id, "fork ids increase");
    assert.deepEqual(await api.sessionForkEnd(sid, first.fork_id), { fork_end: true, fork_id: first.fork_id });
    // a retry of a released fork_id: ok, fork_end false, nothing changes
    assert.deepEqual(await api.sessionForkEnd(sid, first.fork_id), { fork_end: false, fork_id: first.fork_id });
    assert.deepEqual(await api.sessionForkEnd(sid), { fork_end: true, fork_id: second.fork_id });
    assert.deepEqual(Object.keys(await api.snapshotRestore(sid)).sort(), ["prefetch_count", "prefetch_sent"]);
    const sus = await api.sessionSuspend(sid);
    assert.deepEqual(Object.keys(sus).sort(), ["evicted_count", "suspended"]);
    assert.equal(sus.suspended, true);
    const closed = await api.sessionClose(sid);
    assert.deepEqual(Object.keys(closed).sort(), ["closed", "evicted_count"]);
    assert.equal(closed.closed, true);
  });
});

describe("request ids", () => {
  test("turn_start, turn_end and snapshot_restore carry request_id when given", async () => {
    const sid = "ts-request";
    assert.deepEqual(turnEndPayload(sid, { chunk_hashes: [] }, undefined, "r1").request_id, "r1");
    assert.equal("request_id" in turnEndPayload(sid, { chunk_hashes: [] }), false);
    await api.turnEnd(sid, { chunk_hashes: ["a"] });
    assert.deepEqual(await api.turnStart(sid, "r1"), { prefetch_sent: true, prefetch_count: 1 });
    assert.equal((await api.turnEnd(sid, { chunk_hashes: ["a"] }, undefined, "r1")).map_updated, true);
    await api.sessionSuspend(sid);
    assert.deepEqual(await api.snapshotRestore(sid, undefined, "r2"), { prefetch_sent: true, prefetch_count: 1 });
    await assert.rejects(api.turnStart(sid, "x".repeat(129)), (err) => {
      assert.ok(err instanceof RamAKvError);
      assert.equal(err.message, "'request_id' must be a string of 1 to 128 characters");
      return true;
    });
    await api.sessionClose(sid);
  });
});

describe("inferred ends", () => {
  test("sessionSuspend and sessionClose say a guessed end; the daemon accepts it", async () => {
    const sid = "ts-inferred";
    await api.turnEnd(sid, { chunk_hashes: ["i1", "i2"] });
    assert.deepEqual(await api.sessionSuspend(sid, true), { evicted_count: 2, suspended: true });
    assert.equal((await api.sessionClose(sid, true)).closed, true);
    await assert.rejects(api.send("session_close", { session_id: sid, inferred: "yes" }), (err) => {
      assert.ok(err instanceof RamAKvError);
      assert.match(err.message, /inferred/);
      return true;
    });
  });
});

describe("turnEndPayload", () => {
  test("integer hashes become signed hex like the Python SDK; anything else is refused", () => {
    assert.deepEqual(turnEndPayload("s", { chunk_hashes: ["ab", 31, -31, -0x6ed9a448787a198fn] }).kv_transfer_params,
      { chunk_hashes: ["ab", "1f", "-1f", "-6ed9a448787a198f"] });
    for (const bad of [[1.5], [2 ** 60], [true], [null], [{}]]) {
      assert.throws(() => turnEndPayload("s", { chunk_hashes: bad, other: 1 }), MissingChunkHashesError);
    }
  });

  test("an event that cannot be serialised is dropped with a warning, not thrown", async () => {
    const warnings = [];
    const s = new EventSender("http://127.0.0.1:9", { logger: { warn: (m) => warnings.push(m) } });
    const loop = {};
    loop.self = loop;
    s.turnEnd("s", { chunk_hashes: ["a"] }, { messages: [loop] });
    assert.equal(s.droppedCount, 1);
    assert.equal(s.stats().pending, 0);
    assert.match(warnings[0], /could not queue turn_end/);
  });

  test("null, missing or non-list chunk_hashes: never sent (the daemon would refuse it)", async () => {
    for (const kv of [undefined, null, {}, { chunk_hashes: null }, { chunk_hashes: "x" }]) {
      assert.throws(() => turnEndPayload("s", kv), /kv_transfer_params\.chunk_hashes/, JSON.stringify(kv));
    }
    const warnings = [];
    const s = new EventSender("http://127.0.0.1:9", { logger: { warn: (m) => warnings.push(m) } });
    s.turnEnd("s", { chunk_hashes: null });
    assert.equal(s.droppedCount, 1);
    assert.equal(s.stats().pending, 0);
    assert.match(warnings[0], /turn_end for s not sent/);
    await assert.rejects(new DaemonClient("http://127.0.0.1:9").turnEnd("s", {}), MissingChunkHashesError);
    const p = turnEndPayload("s", { chunk_hashes: ["-1a", "2b"], do_remote_decode: false }, { timing: { ttft_ms: 1 } });
    assert.deepEqual(p, {
      session_id: "s",
      kv_transfer_params: { chunk_hashes: ["-1a", "2b"], do_remote_decode: false },
      debug_context: { timing: { ttft_ms: 1 } },
    });
  });
});

describe("EventSender (fire-and-forget) against the daemon", () => {
  test("calls return at once and every event arrives", async () => {
    const s = new EventSender(daemon.url, { logger: quiet });
    const sid = "ts-ff-1";
    const t0 = performance.now();
    s.turnStart(sid);
    s.turnEnd(sid, { chunk_hashes: ["f1", "f2", "f3"] });
    s.sessionFork(sid);
    s.turnEnd(sid, { chunk_hashes: ["f4"] });
    s.sessionForkEnd(sid);
    assert.ok(performance.now() - t0 < 50, "enqueueing must not wait for the daemon");
    assert.equal(await s.flush(5000), true);
    assert.deepEqual(s.stats(), { sent: 5, rejected: 0, dropped: 0, pending: 0 });
    assert.deepEqual((await api.sessionMap(sid)).chunk_hashes, ["f4"]);
    s.sessionSuspend(sid);
    assert.equal(await s.flush(5000), true);
    assert.deepEqual((await api.sessionMap(sid)).chunk_hashes, ["f4"], "suspended sessions still answer");
    s.sessionClose(sid);
    await s.flush(5000);
    await assert.rejects(api.sessionMap(sid), /not found/);
  });

  test("per-session order under concurrency", async () => {
    const s = new EventSender(daemon.url, { logger: quiet, concurrency: 4 });
    const sessions = ["ts-ord-a", "ts-ord-b", "ts-ord-c", "ts-ord-d", "ts-ord-e", "ts-ord-f"];
    const N = 30;
    for (let i = 1; i <= N; i++) {
      for (const sid of sessions) s.turnEnd(sid, { chunk_hashes: [`${sid}-${i}`, "shared"] });
    }
    assert.equal(await s.flush(20000), true);
    assert.equal(s.stats().sent, N * sessions.length);
    for (const sid of sessions) {
      assert.deepEqual((await api.sessionMap(sid)).chunk_hashes, [`${sid}-${N}`, "shared"], sid);
      s.sessionClose(sid);
    }
    await s.flush(5000);
  });

  test("null or missing chunk_hashes are never sent and never clear the map", async () => {
    const s = new EventSender(daemon.url, { logger: quiet });
    const sid = "ts-null";
    s.turnEnd(sid, { chunk_hashes: ["n1", "n2"] });
    s.turnEnd(sid, { chunk_hashes: null });
    s.turnEnd(sid, {});
    s.turnEnd(sid);
    s.turnEnd(sid, null, { timing: { ttft_ms: 3 } });
    assert.equal(await s.flush(5000), true);
    assert.deepEqual(s.stats(), { sent: 1, rejected: 0, dropped: 4, pending: 0 });
    assert.deepEqual((await api.sessionMap(sid)).chunk_hashes, ["n1", "n2"]);
    s.turnEnd(sid, { chunk_hashes: [] });
    await s.flush(5000);
    assert.deepEqual((await api.sessionMap(sid)).chunk_hashes, [], "an explicit [] does clear it");
    await api.sessionClose(sid);
  });

  test("snapshotRestore with a source session (resume under a new id)", async () => {
    const s = new EventSender(daemon.url, { logger: quiet });
    s.turnEnd("ts-src", { chunk_hashes: ["r1", "r2"] });
    s.sessionSuspend("ts-src");
    s.snapshotRestore("ts-dst", "ts-src");
    await s.flush(5000);
    assert.deepEqual(s.stats().rejected, 0);
    assert.deepEqual((await api.sessionMap("ts-dst")).chunk_hashes, ["r1", "r2"]);
    assert.deepEqual((await api.sessionMap("ts-src")).chunk_hashes, ["r1", "r2"]);
    await api.sessionClose("ts-src");
    assert.equal((await api.sessionClose("ts-dst")).evicted_count, 2);
  });

  test("a restore from another session waits for that session's queued events", async () => {
    const s = new EventSender(daemon.url, { logger: quiet, concurrency: 4 });
    for (let i = 1; i <= 10; i++) s.turnEnd("ts-dep-src", { chunk_hashes: [`d${i}`] });
    s.snapshotRestore("ts-dep-dst", "ts-dep-src");
    s.turnStart("ts-dep-dst");
    s.turnEnd("ts-dep-src", { chunk_hashes: ["later"] });
    assert.equal(await s.flush(10000), true);
    assert.deepEqual(s.stats(), { sent: 13, rejected: 0, dropped: 0, pending: 0 });
    assert.deepEqual((await api.sessionMap("ts-dep-dst")).chunk_hashes, ["d10"]);
    assert.deepEqual((await api.sessionMap("ts-dep-src")).chunk_hashes, ["later"]);
    await api.sessionClose("ts-dep-src");
    await api.sessionClose("ts-dep-dst");
  });

  test("ok:false answers are counted as rejected and logged, not thrown", async () => {
    const warnings = [];
    const s = new EventSender(daemon.url, { logger: { warn: (m) => warnings.push(m) } });
    s.send("session_map", { session_id: "ts-nope" });
    s.send("no_such_event");
    s.turnStart("");
    await s.flush(5000);
    assert.deepEqual(s.stats(), { sent: 0, rejected: 3, dropped: 0, pending: 0 });
    assert.ok(warnings.some((w) => w.includes("session 'ts-nope' not found")), warnings.join("\n"));
    assert.ok(warnings.some((w) => w.includes("unknown event type")), warnings.join("\n"));
    assert.ok(warnings.some((w) => w.includes("session_id must not be empty")), warnings.join("\n"));
  });
});
