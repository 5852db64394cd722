// The SSE parser on its own: split reads, CRLF, comments, multi-line data, [DONE].
import { test } from "node:test";
import assert from "node:assert/strict";
import { iterateSSE } from "../dist/index.js";

function streamOf(pieces) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const p of pieces) c.enqueue(typeof p === "string" ? enc.encode(p) : p);
      c.close();
    },
  });
}

async function all(pieces) {
  const out = [];
  for await (const ev of iterateSSE(streamOf(pieces))) out.push(ev);
  return out;
}

test("events split across reads, CRLF and LF, comments, no space after data:", async () => {
  const got = await all([': hello\n\n', 'da', 'ta: {"a"', ':1}\r', '\n\r\ndata:{"b":2}\n\n', 'event: x\ndata: {"c":3}\n\n']);
  assert.deepEqual(got, [{ a: 1 }, { b: 2 }, { c: 3 }]);
});

test("multi-line data is joined with a newline; bad JSON is skipped", async () => {
  const got = await all(['data: {"a":\ndata: 1}\n\n', "data: not json\n\n", 'data: {"z":0}\n\n']);
  assert.deepEqual(got, [{ a: 1 }, { z: 0 }]);
});

test("[DONE] ends the stream; a last event without a blank line still counts", async () => {
  assert.deepEqual(await all(['data: {"a":1}\n\n', "data: [DONE]\n\n", 'data: {"b":2}\n\n']), [{ a: 1 }]);
  assert.deepEqual(await all(['data: {"a":1}']), [{ a: 1 }]);
});

test("a multi-byte character split between reads", async () => {
  const bytes = new TextEncoder().encode('data: {"t":"h\u00e9\u4e16"}\n\n');
  const got = await all([bytes.slice(0, 13), bytes.slice(13, 15), bytes.slice(15)]);
  assert.deepEqual(got, [{ t: "h\u00e9\u4e16" }]);
});
