// The daemon is down or hangs: no call throws, events are dropped and counted,
// warnings are rate-limited, the queue stays bounded and flush honours its timeout.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EventSender } from "../dist/index.js";
import { freePort, startServer } from "./helpers.mjs";

test("daemon down: nothing throws, every event is counted as dropped, one warning", async () => {
  const port = await freePort(); // nothing listens there
  const warnings = [];
  const s = new EventSender(`http://127.0.0.1:${port}`, { logger: { warn: (m) => warnings.push(m) } });
  for (let i = 0; i < 20; i++) {
    s.turnStart(`down-${i % 3}`);
    s.turnEnd(`down-${i % 3}`, { chunk_hashes: [`h${i}`] });
  }
  s.snapshotRestore("down-x", "down-y");
  s.sessionFork("down-x");
  s.sessionForkEnd("down-x");
  s.sessionSuspend("down-x");
  s.sessionClose("down-x");
  assert.equal(await s.flush(10000), true);
  assert.equal(s.droppedCount, 45);
  assert.deepEqual(s.stats(), { sent: 0, rejected: 0, dropped: 45, pending: 0 });
  assert.equal(warnings.length, 1, warnings.join("\n"));
  assert.match(warnings[0], /dropped 1 event\(s\) .*not reachable/);
});

test("a broken logger does not break the caller", async () => {
  const port = await freePort();
  const s = new EventSender(`http://127.0.0.1:${port}`, { logger: { warn() { throw new Error("boom"); } } });
  s.turnStart("x");
  assert.equal(await s.flush(5000), true);
  assert.equal(s.droppedCount, 1);
});

test("hanging daemon: bounded queue drops the overflow, flush times out, timeouts drop", async () => {
  const hang = await startServer(() => {}); // accepts, never answers
  try {
    const s = new EventSender(hang.url, { logger: null, maxQueue: 5, concurrency: 1, requestTimeoutMs: 300 });
    for (let i = 0; i < 20; i++) s.turnEnd("hang", { chunk_hashes: [`h${i}`] });
    // one in flight, five queued, the other fourteen dropped at once
    assert.equal(s.droppedCount, 14);
    assert.equal(s.stats().pending, 6);
    const t0 = Date.now();
    assert.equal(await s.flush(100), false, "flush must give up after its timeout");
    assert.ok(Date.now() - t0 < 1000);
    const t1 = Date.now();
    assert.equal(await s.flush(10000), true);
    assert.equal(s.droppedCount, 20, "a timed-out request drops what waited behind it");
    assert.ok(Date.now() - t1 < 2000, "one timeout, not one per queued event");
  } finally {
    await hang.close();
  }
});

test("flush with nothing queued resolves true at once", async () => {
  const s = new EventSender("http://127.0.0.1:9", { logger: null });
  assert.equal(await s.flush(0), true);
});

test("after a failure new events are dropped for downBackoffMs, then sent again", async () => {
  const port = await freePort();
  const s = new EventSender(`http://127.0.0.1:${port}`, { logger: null, downBackoffMs: 300 });
  s.turnStart("back");
  assert.equal(await s.flush(5000), true);
  assert.equal(s.droppedCount, 1);
  const answered = [];
  const up = await startServer((req, res, body) => {
    answered.push(JSON.parse(body).type);
    res.writeHead(200, { "Content-Type": "application/json" }).end('{"ok":true,"type":"x","data":{}}');
  }, port);
  try {
    s.turnStart("back"); // inside the back-off window: dropped without trying
    assert.equal(s.droppedCount, 2);
    await new Promise((r) => setTimeout(r, 350));
    s.turnEnd("back", { chunk_hashes: ["h"] });
    s.sessionClose("back");
    assert.equal(await s.flush(5000), true);
    assert.deepEqual(answered, ["turn_end", "session_close"]);
    assert.deepEqual(s.stats(), { sent: 2, rejected: 0, dropped: 2, pending: 0 });
  } finally {
    await up.close();
  }
});
