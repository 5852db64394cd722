/**
 * Server-sent events as OpenAI-compatible servers stream them: `data: <json>`
 * events separated by a blank line, `data: [DONE]` at the end. Lines may end in
 * \n or \r\n, may be split anywhere across network reads, `:` lines are comments,
 * and an event's several `data:` lines are joined with \n (the SSE rule).
 */
const DONE: unique symbol = Symbol("sse-done");

export async function* iterateSSE(
  body: ReadableStream<Uint8Array>,
  maxEventBytes = 16 * 1024 * 1024,
): AsyncGenerator<unknown, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let dataLen = 0;

  function* dispatch(): Generator<unknown | typeof DONE, void, undefined> {
    if (data.length === 0) return;
    const payload = data.join("\n");
    data = [];
    dataLen = 0;
    if (payload.trim() === "[DONE]") {
      yield DONE;
      return;
    }
    try {
      yield JSON.parse(payload) as unknown;
    } catch {
      // not JSON: skip it, as the engines' own clients do
    }
  }

  function* feedLine(line: string): Generator<unknown | typeof DONE, void, undefined> {
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (line === "") {
      yield* dispatch();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    if (field !== "data") return;
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    dataLen += value.length;
    if (dataLen > maxEventBytes) throw new Error(`SSE event larger than ${maxEventBytes} bytes`);
    data.push(value);
  }

  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let idx: number;
      while ((idx = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, idx);
        buffer = buffer.slice(idx + 1);
        for (const ev of feedLine(line)) {
          if (ev === DONE) return;
          yield ev;
        }
      }
      if (buffer.length > maxEventBytes) throw new Error(`SSE line longer than ${maxEventBytes} bytes`);
    }
    buffer += decoder.decode();
    const tail = buffer.length > 0 ? [buffer, ""] : [""];
    for (const line of tail) {
      for (const ev of feedLine(line)) {
        if (ev === DONE) return;
        yield ev;
      }
    }
  } finally {
    try {
      await reader.cancel();
    } catch {
      // already closed
    }
    reader.releaseLock();
  }
}
