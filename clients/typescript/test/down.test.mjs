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
    assert.equal(await s.flush(10000), true);
    assert.equal(s.droppedCount, 20, "requests that time out are dropped too");
  } finally {
    await hang.close();
  }
});

test("flush with nothing queued resolves true at once", async () => {
  const s = new EventSender("http://127.0.0.1:9", { logger: null });
  assert.equal(await s.flush(0), true);
});
