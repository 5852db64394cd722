"""A stand-in OpenAI-compatible engine that answers as vLLM 0.32 with ascend_ext's connector does.

Its tokens are the prompt's UTF-8 bytes. ``POST /v1/chat/completions`` and ``/v1/completions``
answer with a completion whose ``kv_transfer_params`` carries ``chunk_hashes``: ascend_ext's
``chain_hashes_hex`` over those tokens in ``chunk_tokens``-token chunks (full chunks only, as
LMCache's default ``save_unfull_chunk: false``), ``[]`` under one chunk. With ``"stream":
true`` they stream SSE chunks and, as real vLLM 0.32, **no** kv_transfer_params anywhere in
the stream. ``POST /tokenize`` answers a chat (``messages``) or completion (``prompt``)
request's token ids in vLLM's shape.
Behaviour per request, by header:

* ``X-Engine-Params: none`` (no kv_transfer_params; /tokenize answers 404, as an engine
  without the route) or ``null-hashes`` (chunk_hashes null)
* ``X-Engine-Status: 503`` answer that status with an OpenAI error body
* ``X-Engine-Delay: 0.01`` seconds between streamed chunks
* ``X-Engine-Hold: NAME`` a streamed answer writes only the chunks the test allows (the
  first one, until ``engine.hold(NAME).allow(n)`` or ``.release()``); a test waits on
  ``hold.until(check)`` (``hold.sent`` chunks written, ``hold.done`` once the handler has
  returned or failed writing to a closed connection), never on a delay

Tool calls, in vLLM 0.32's shapes (``--enable-auto-tool-choice --tool-call-parser ...``;
tests/proxy/test_naming_answers.py checks them against the real engine's answers kept in
tests/proxy/data): a chat request with
``tools`` answers with one call of a tool, arguments built from its JSON schema, when
``tool_choice`` names that tool (``finish_reason: "stop"``, as OpenAI and vLLM answer a
named choice), is ``"required"``, or is ``"auto"`` / absent and the last message is the
user's (``finish_reason: "tool_calls"``; after a ``tool`` message it answers text, so an
agent's loop ends). Non-streamed, ``message.tool_calls`` holds ``{id, type: "function",
function: {name, arguments}}``; streamed, one delta carries ``{id, type, index, function:
{name, arguments}}`` with the first piece of the arguments and the following ones the other
pieces ``{index, function: {arguments}}``, the last of them with the finish reason (after a
first chunk with the role). tests/proxy/data holds the real engine's answers these follow.

``GET /v1/models`` lists one model; any other path echoes method, path, query, headers and
body as JSON (to check the proxy forwards everything unchanged). Every request is kept in
``engine.requests``. Run it alone: ``python tests/support/openai_engine.py --listen
127.0.0.1:8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ascend_ext.hashing import chain_hashes_hex

MODEL = "stand-in-model"
#: The stand-in's chunk size in tokens (bytes); proxies in tests are set to the same.
CHUNK_TOKENS = 16


def tokens_of(text: str) -> list[int]:
    """The stand-in's tokenizer: one token per UTF-8 byte."""
    return list(text.encode())


def chunk_hashes(text: str, chunk_tokens: int = CHUNK_TOKENS) -> list[str]:
    """What ascend_ext's connector returns for ``text``'s tokens (full chunks only)."""
    return chain_hashes_hex(tokens_of(text), chunk_tokens, False)


def prompt_of(body: dict[str, Any]) -> str:
    """The prompt text: chat messages' contents joined, or the completion prompt."""
    if isinstance(body.get("messages"), list):
        return "".join(f"<{m.get('role')}>{m.get('content')}" for m in body["messages"])
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


_CALL_IDS = itertools.count(1)
_SAMPLE = {"string": "stand-in", "integer": 1, "number": 1.5, "boolean": True}


def _arguments(schema: Any) -> str:
    """JSON arguments for a tool: every property of its parameters' schema, sampled."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    args = {
        name: _SAMPLE.get(str(spec.get("type")) if isinstance(spec, dict) else "", "stand-in")
        for name, spec in (props or {}).items()
    }
    return json.dumps(args)


def tool_call_of(body: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The call the stand-in makes for this chat request, and its finish_reason, or None."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("function")]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    finish = "tool_calls"
    if isinstance(choice, dict):  # named: that tool, finish_reason "stop" (as vLLM, OpenAI)
        name = (choice.get("function") or {}).get("name")
        tools = [t for t in tools if t["function"].get("name") == name]
        if not tools:
            return None
        finish = "stop"
    elif choice in (None, "auto"):
        messages = body.get("messages") or []
        if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
            return None  # after a tool result: answer in words
    fn = tools[0]["function"]
    call = {
        "id": f"chatcmpl-tool-{next(_CALL_IDS):016x}",
        "type": "function",
        "function": {"name": fn.get("name"), "arguments": _arguments(fn.get("parameters"))},
    }
    return call, finish


@dataclass
class Hold:
    """A streamed answer written only as far as the test allows (``X-Engine-Hold: NAME``)."""

    allowed: float = 1  # chunks it may write before it waits for allow()
    sent: int = 0  # chunks written so far
    done: bool = False  # its handler has returned
    _moved: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def allow(self, chunks: float) -> None:
        """Let the answer go on up to ``chunks`` chunks in all."""
        self.allowed = chunks
        self._moved.set()

    def release(self) -> None:
        """Let the answer run to its end."""
        self.allow(math.inf)

    def moved(self, *, done: bool = False) -> None:
        """The engine wrote a chunk (or, ``done``, returned)."""
        if done:
            self.done = True
        else:
            self.sent += 1
        self._moved.set()

    async def until(self, check: Callable[[Hold], bool]) -> None:
        """Wait until ``check(self)`` holds (re-checked at every change; callers bound it)."""
        while not check(self):
            self._moved.clear()
            await self._moved.wait()


@dataclass
class StandInEngine:
    """The stand-in engine's state: settings and every request it saw."""

    chunk_tokens: int = CHUNK_TOKENS
    reply: str = "Hello from the stand-in engine."
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    holds: dict[str, Hold] = field(default_factory=dict)
    _runner: web.AppRunner | None = None

    def hold(self, name: str) -> Hold:
        """The hold of requests sent with ``X-Engine-Hold: name`` (made on first use)."""
        return self.holds.setdefault(name, Hold())

    def kv_params(self, body: dict[str, Any], mode: str) -> dict[str, Any] | None:
        if mode == "none":
            return None
        hashes = None if mode == "null-hashes" else chunk_hashes(prompt_of(body), self.chunk_tokens)
        return {"chunk_hashes": hashes}

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
        status = int(request.headers.get("X-Engine-Status", "200"))
        if status != 200:
            return web.json_response(
                {"error": {"message": "stand-in failure", "type": "server_error", "code": status}},
                status=status,
            )
        params = self.kv_params(body, request.headers.get("X-Engine-Params", ""))
        chat = request.path.endswith("/chat/completions")
        tool = tool_call_of(body) if chat else None
        if body.get("stream"):
            delay = float(request.headers.get("X-Engine-Delay", "0"))
            name = request.headers.get("X-Engine-Hold")
            hold = self.hold(name) if name else None
            try:
                return await self._stream(request, chat, delay, tool, hold)
            finally:
                if hold is not None:
                    hold.moved(done=True)
        message: dict[str, Any] = {"role": "assistant", "content": self.reply}
        finish = "stop"
        if tool is not None:
            call, finish = tool
            # vLLM's whole ChatMessage: "" content for a named or required choice, the
            # parser's None for an auto one
            auto = body.get("tool_choice") in (None, "auto")
            message = {
                "role": "assistant",
                "content": None if auto else "",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [call],
                "reasoning": None,
            }
        answer: dict[str, Any] = {
            "id": "cmpl-standin",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish,
                    **({"message": message} if chat else {"text": self.reply}),
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
        }
        if params is not None:
            answer["kv_transfer_params"] = params
        return web.json_response(answer)

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize: the prompt's token ids, nothing generated."""
        body = await request.json()
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
        if request.headers.get("X-Engine-Params") == "none":
            return web.json_response({"detail": "Not Found"}, status=404)
        tokens = tokens_of(prompt_of(body))
        return web.json_response(
            {"count": len(tokens), "max_model_len": 4096, "tokens": tokens, "token_strs": None}
        )

    async def _stream(
        self,
        request: web.Request,
        chat: bool,
        delay: float,
        tool: tuple[dict[str, Any], str] | None = None,
        hold: Hold | None = None,
    ) -> web.StreamResponse:
        async def send(data: bytes) -> None:
            """One chunk: when the hold allows it, then the delay after it."""
            if hold is not None:
                await hold.until(lambda h: h.sent < h.allowed)
            await out.write(data)
            if hold is not None:
                hold.moved()
            if delay:
                await asyncio.sleep(delay)

        out = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await out.prepare(request)
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(
            piece: str | None, finish: str | None = None, delta: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = delta or ({} if piece is None else {"content": piece})
            else:
                choice["text"] = piece or ""
            return {
                "id": "cmpl-standin",
                "object": kind,
                "created": int(time.time()),
                "model": MODEL,
                "choices": [choice],
            }

        if tool is not None:
            # As vLLM 0.32 (tests/proxy/data/vllm032_named_tool_call.sse): a role chunk, the
            # call's head with the first piece of its arguments, the other pieces, the last
            # one carrying the finish reason.
            call, finish = tool
            args = call["function"]["arguments"]
            parts = [args[i : i + 8] for i in range(0, len(args), 8)] or [""]
            head = {**call, "index": 0, "function": {**call["function"], "arguments": parts[0]}}
            deltas = [{"tool_calls": [head]}] + [
                {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
                for part in parts[1:]
            ]
            pieces = [chunk(None, delta={"role": "assistant", "content": ""})]
            pieces += [chunk(None, delta=d) for d in deltas[:-1]]
            pieces.append(chunk(None, finish, delta=deltas[-1]))
            for piece in pieces:
                await send(f"data: {json.dumps(piece)}\n\n".encode())
        else:
            for word in self.reply.split(" "):
                await send(f"data: {json.dumps(chunk(word + ' '))}\n\n".encode())
            # As vLLM 0.32: the last chunk has the finish reason and no kv_transfer_params.
            await send(f"data: {json.dumps(chunk(None, 'stop'))}\n\n".encode())
        await send(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append(
            {
                "path": request.path,
                "headers": dict(request.headers),
                "body": body.decode("utf-8", "replace"),
            }
        )
        return web.json_response(
            {
                "method": request.method,
                "path": request.path,
                "raw_path": request.raw_path,
                "headers": dict(request.headers),
                "body": body.decode("utf-8", "replace"),
            },
            headers={"X-Engine-Echo": "1"},
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_route("*", "/{tail:.*}", self.echo)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> StandInEngine:
        """Serve on ``host:port`` (0 = a free port); ``url`` is set when it returns."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (127.0.0.1:8000)")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    web.run_app(StandInEngine().app(), host=host, port=int(port), access_log=None)


if __name__ == "__main__":
    main()
