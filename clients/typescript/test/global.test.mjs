// The process-wide client: init from config (XDG_CONFIG_HOME), path or URL; once only.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as kv from "../dist/index.js";
import { startDaemon } from "./helpers.mjs";

let daemon;
let tmp;
before(async () => {
  daemon = await startDaemon();
  tmp = mkdtempSync(join(tmpdir(), "ramakv-ts-cfg-"));
});
after(async () => {
  kv.resetForTests();
  await daemon?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

test("not initialised: disabled, every call is a no-op", async () => {
  kv.resetForTests();
  assert.equal(kv.isEnabled(), false);
  kv.turnStart("g");
  kv.turnEnd("g", { chunk_hashes: ["a"] });
  kv.snapshotRestore("g", "h");
  kv.sessionFork("g");
  kv.sessionForkEnd("g");
  kv.sessionSuspend("g");
  kv.sessionClose("g");
  assert.equal(await kv.flush(10), true);
  assert.equal(kv.droppedCount(), 0);
});

test("missing or broken config: disabled with a warning", () => {
  const warnings = [];
  const logger = { warn: (m) => warnings.push(m) };
  kv.resetForTests();
  assert.equal(kv.initFromPath(join(tmp, "nope.toml"), { logger }), false);
  kv.resetForTests();
  const bad = join(tmp, "bad.toml");
  writeFileSync(bad, "daemon_url = 42\n");
  assert.equal(kv.initFromPath(bad, { logger }), false);
  assert.equal(kv.isEnabled(), false);
  assert.equal(warnings.length, 2);
  assert.match(warnings[1], /bad\.toml.*daemon_url/);
});

test("initFromConfig reads $XDG_CONFIG_HOME/ram-a-kv/config.toml; later inits are ignored", async () => {
  kv.resetForTests();
  mkdirSync(join(tmp, "xdg", "ram-a-kv"), { recursive: true });
  writeFileSync(
    join(tmp, "xdg", "ram-a-kv", "config.toml"),
    `# SDK config\ndaemon_url = "${daemon.url}/"   # trailing slash is fine\n# auth_token = "x"\n`,
  );
  const old = process.env.XDG_CONFIG_HOME;
  process.env.XDG_CONFIG_HOME = join(tmp, "xdg");
  const warnings = [];
  try {
    assert.equal(kv.initFromConfig({ logger: { warn: (m) => warnings.push(m) } }), true);
  } finally {
    if (old === undefined) delete process.env.XDG_CONFIG_HOME;
    else process.env.XDG_CONFIG_HOME = old;
  }
  assert.equal(kv.isEnabled(), true);
  assert.equal(kv.globalSender().daemonUrl, daemon.url);
  assert.equal(kv.initWithUrl("http://127.0.0.1:1", { logger: { warn: (m) => warnings.push(m) } }), true);
  assert.equal(kv.globalSender().daemonUrl, daemon.url, "the second init must not replace the client");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /already initialised/);

  kv.turnStart("g-1");
  kv.turnEnd("g-1", { chunk_hashes: ["g-a", "g-b"] });
  kv.sessionFork("g-1");
  kv.sessionForkEnd("g-1");
  kv.sessionSuspend("g-1");
  kv.snapshotRestore("g-2", "g-1");
  assert.equal(await kv.flush(5000), true);
  assert.deepEqual(kv.globalSender().stats(), { sent: 6, rejected: 0, dropped: 0, pending: 0 });
  const api = new kv.DaemonClient(daemon.url);
  assert.deepEqual((await api.sessionMap("g-2")).chunk_hashes, ["g-a", "g-b"]);
  kv.sessionClose("g-1");
  kv.sessionClose("g-2");
  await kv.flush(5000);
  await assert.rejects(api.sessionMap("g-1"), /not found/);
});

test("initWithUrl rejects a non-URL", () => {
  kv.resetForTests();
  assert.equal(kv.initWithUrl("localhost:6998", { logger: null }), false);
});

test("parseSdkConfig", () => {
  assert.deepEqual(kv.parseSdkConfig('daemon_url = "http://h:1"\nauth_token = \'t\'\n'),
    { daemonUrl: "http://h:1", authToken: "t" });
  assert.deepEqual(kv.parseSdkConfig('# c\ndaemon_url = "http://a/" # x\n[table]\ndaemon_url = "http://b"\n'),
    { daemonUrl: "http://a", authToken: "" });
  assert.throws(() => kv.parseSdkConfig('[t]\ndaemon_url = "http://a"\n'), /daemon_url/);
  assert.throws(() => kv.parseSdkConfig(""), /daemon_url/);
});
