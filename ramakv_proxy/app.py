"""The proxy application: forwards every request unchanged, reports named sessions' turns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry
from yarl import URL

from ramakv_protocol.log_text import loggable
from ramakv_proxy.answers import Answer, StreamScanner, read_json_answer
from ramakv_proxy.lifecycle import Lifecycle, Ticket
from ramakv_proxy.metrics import proxy_registry, render
from ramakv_proxy.naming import Named, api_key_of, named_request, scoped
from ramakv_proxy.request_end import RequestEnd
from ramakv_proxy.settings import ProxySettings
from ramakv_proxy.stock import StockLanding, StockSettings, StockStack
from ramakv_sdk import payloads, prompt_hashes
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.lifecycle.clock import Clock, LoopClock
from ramakv_sdk.lifecycle.landing import LandingWait
from ramakv_sdk.sender import EventSender

log = logging.getLogger("ramakv_proxy")

TURN_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
STATS_PATH = "/_ramakv/stats"
METRICS_PATH = "/_ramakv/metrics"
SSE_DONE = b"data: [DONE]"
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones aiohttp recomputes itself.
DROP_REQUEST = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
DROP_RESPONSE = DROP_REQUEST - {"host"}


SETTINGS = web.AppKey("settings", ProxySettings)
UPSTREAM = web.AppKey("upstream", aiohttp.ClientSession)
SENDER = web.AppKey("sender", EventSender)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
# Upstreams already warned about answers without chunk_hashes (once each, not per turn).
WARNED = web.AppKey("warned_no_hashes", set)
TOKENIZE_CHECK = web.AppKey("tokenize_check", prompt_hashes.TokenizeCheck)
REGISTRY = web.AppKey("registry", CollectorRegistry)
STOCK = web.AppKey("stock", StockStack)


def make_app(settings: ProxySettings, clock: Clock | None = None) -> web.Application:
    """The proxy application; the upstream session, the event sender and the session
    lifecycle (its timers on ``clock``, the event loop's by default) live with it."""
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[WARNED] = set()
    app[TOKENIZE_CHECK] = prompt_hashes.TokenizeCheck()
    app[REGISTRY] = proxy_registry(lambda: app[SENDER], lambda: app[LIFECYCLE])

    async def resources(app: web.Application) -> AsyncIterator[None]:
        # auto_decompress=False: bytes go to the client exactly as the engine sent them.
        app[UPSTREAM] = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            connector=aiohttp.TCPConnector(limit=0),
        )
        client = AsyncClient(settings.daemon_url, settings.daemon_timeout, settings.token)
        app[SENDER] = EventSender(client, retry_for=settings.retry_for)
        time = clock or LoopClock()
        landing = LandingWait(client, time, settings.restore_poll_ms / 1000)
        # ---- stock stack hook (docs/stock-stack.md): keys and restores by token ids ----
        if settings.lmcache_mp_url:
            stock = StockSettings(
                settings.lmcache_mp_url,
                settings.lmcache_mp_model,
                settings.lmcache_mp_world_size,
                settings.lmcache_mp_cache_salt,
            )
            app[STOCK] = StockStack(stock, app[UPSTREAM], settings.upstream)
            landing = StockLanding(app[STOCK], landing)
        # ---- end of the stock stack hook ----
        app[LIFECYCLE] = Lifecycle(settings, app[SENDER], time, landing)
        yield
        app[LIFECYCLE].close()
        await app[UPSTREAM].close()
        await app[SENDER].aclose(timeout=5.0)

    app.cleanup_ctx.append(resources)
    app.router.add_get(STATS_PATH, stats)
    app.router.add_get(METRICS_PATH, metrics)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def stats(request: web.Request) -> web.Response:
    """The proxy's own counters: events sent to the daemon, lifecycle decisions."""
    sender = request.app[SENDER]
    life = request.app[LIFECYCLE]
    return web.json_response(
        {
            **sender.stats.as_dict(),
            "pending": sender.pending,
            "lifecycle": {
                **life.stats.as_dict(),
                "run_end_grace_s": round(life.grace.seconds, 3),
                "breaker_open": life.breaker.is_open,
                "sessions": life.sessions,
                "sessions_by_state": life.by_state(),
            },
        }
    )


async def metrics(request: web.Request) -> web.Response:
    """The same counters as Prometheus text."""
    return web.Response(
        body=render(request.app[REGISTRY]), content_type="text/plain", charset="utf-8"
    )


def _upstream_error(err: BaseException, upstream: str) -> web.Response:
    message = f"ramakv-proxy: upstream {upstream} unavailable: {err or type(err).__name__}"
    return web.json_response(
        {"error": {"message": message, "type": "upstream_unavailable", "code": 502}}, status=502
    )


async def forward(request: web.Request) -> web.StreamResponse:
    """Forward any request unchanged; report turns of requests that name a session."""
    settings = request.app[SETTINGS]
    body = await request.read() if request.body_exists else None
    named: Named | None = None
    if request.method == "POST" and request.path in TURN_PATHS:
        named = named_request(request.headers.get(settings.session_header), body or b"")
    if named is None:
        return (await _forward(request, body, None))[0]
    sid = named.session_id
    if settings.scope_sessions_by_key:
        sid = scoped(api_key_of(request.headers.get("Authorization")), sid)
    life = request.app[LIFECYCLE]
    route = life.route(sid, named.shape)  # a side call goes to the session's branch
    # A failure until the relay says otherwise: an unexpected error (or a cancelled
    # handler) must not close the session; only a client seen leaving does.
    ended = RequestEnd.FAILED
    stock = request.app.get(STOCK)  # the stock stack: tokenised before a restore needs it
    keys = None
    if stock is not None:
        sent = [(k, v) for k, v in request.headers.items() if k.lower() not in DROP_REQUEST]
        keys = await stock.before(route.session_id, request.path, body or b"", sent)
    ticket = life.start(route)
    try:
        await life.ready(route, ticket)
        response, ended = await _forward(request, body, route.session_id, ticket, keys)
        return response
    finally:
        if stock is not None:
            stock.after(route.session_id, keys)
        life.end(route, ticket, ended, named.agent_step)


async def _forward(
    request: web.Request,
    body: bytes | None,
    sid: str | None,
    ticket: Ticket | None = None,
    keys: dict | None = None,
) -> tuple[web.StreamResponse, RequestEnd]:
    """Send the request upstream and relay its answer; how it ended, for the lifecycle."""
    settings = request.app[SETTINGS]
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in DROP_REQUEST]
    # encoded=True: the path and query go upstream byte for byte (no re-quoting).
    url = URL(settings.upstream + request.rel_url.raw_path_qs, encoded=True)
    tokenized = None
    check = request.app[TOKENIZE_CHECK]
    if STOCK in request.app:
        pass  # the stock stack: keys are the server's, computed before (``keys``)
    elif sid is not None and body and (prompt_hashes.is_streamed(body) or check.agrees is None):
        # Runs beside the engine's answer (tokenising only, no model step), so it is ready at
        # its end; a non-streamed turn is tokenised once, to check the hashes against the engine's.
        tokenized = asyncio.ensure_future(
            prompt_hashes.tokenized_turn_params(
                request.app[UPSTREAM],
                settings.upstream,
                request.path,
                body,
                headers,
                settings.chunk_size,
                settings.save_unfull_chunk,
            )
        )
    try:
        try:
            upstream = await request.app[UPSTREAM].request(
                request.method, url, headers=headers, data=body, allow_redirects=False
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            log.warning("upstream %s unavailable: %s", settings.upstream, err)
            return _upstream_error(err, settings.upstream), RequestEnd.FAILED
        async with upstream:
            return await _relay(request, upstream, sid, ticket, tokenized, keys)
    finally:
        if tokenized is not None and not tokenized.done():
            tokenized.cancel()


async def _relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    sid: str | None,
    ticket: Ticket | None,
    tokenized: asyncio.Future[dict | None] | None = None,
    keys: dict | None = None,
) -> tuple[web.StreamResponse, RequestEnd]:
    """Copy the engine's answer to the client chunk by chunk; then send turn_end. Also
    says how the request ended (a tool call, a client gone mid-answer...)."""
    out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for k, v in upstream.headers.items():
        if k.lower() not in DROP_RESPONSE:
            out.headers.add(k, v)
    if upstream.content_length is not None:
        out.content_length = upstream.content_length
    watch = sid is not None and upstream.status == 200
    ctype = upstream.headers.get("Content-Type", "")
    encoding = upstream.headers.get("Content-Encoding", "")
    scanner = StreamScanner() if watch and ctype.startswith("text/event-stream") else None
    kept: list[bytes] | None = [] if watch and scanner is None else None
    # The end of a watched answer (the chunk with "data: [DONE]", or a JSON body's last
    # chunk) waits for its turn_end's answer: a hook that closes the session once the
    # client has the answer must find the turn already recorded (see _report_turn).
    held = b""
    tail = b""  # the last bytes written, so a "data: [DONE]" split across chunks is seen
    received = False  # the engine's whole answer was relayed (all but its held end)
    try:
        await out.prepare(request)
        async for chunk in upstream.content.iter_any():
            if scanner is not None:
                scanner.feed(chunk)
                if held or SSE_DONE in tail + chunk:
                    held += chunk
                else:
                    await out.write(chunk)
                    tail = (tail + chunk)[-len(SSE_DONE) :]
            elif kept is not None:
                kept.append(chunk)
                if held:
                    await out.write(held)
                held = chunk
            else:
                await out.write(chunk)
        received = True
    except (ConnectionResetError, aiohttp.ClientError) as err:
        log.info("stream for session %s ended early: %s", loggable(sid or ""), err)
    answer = Answer()
    if watch and sid is not None:
        if scanner is not None:
            scanner.close()
            answer = scanner.answer
            params = answer.params  # an engine that streams them; vLLM 0.32 does not
            if not payloads.has_chunk_hashes(params) and tokenized is not None and received:
                params = await tokenized
                if request.app[TOKENIZE_CHECK].agrees is False:
                    params = None  # hashing the tokenised prompt gave the engine's hashes wrong
        else:
            answer = read_json_answer(b"".join(kept or ()), encoding)
            params = answer.params
            if tokenized is not None and params is not None and payloads.has_chunk_hashes(params):
                request.app[TOKENIZE_CHECK].compare(
                    await tokenized,
                    params,
                    request.app[SETTINGS].upstream,
                    request.app[SETTINGS].chunk_size,
                    request.app[SETTINGS].save_unfull_chunk,
                )
        if STOCK in request.app:
            params = keys  # the stock server's keys of this prompt, whatever the engine sent
        if payloads.has_chunk_hashes(params) and ticket is not None:
            event = {**payloads.turn_end(sid, params), "request_id": ticket.request_id}
            await _report_turn(event, received, request.app, ticket)
        elif received:
            _warn_no_hashes(request.app, request.app[SETTINGS].upstream)
    try:
        if held:
            await out.write(held)
        if received:
            await out.write_eof()
    except (ConnectionResetError, aiohttp.ClientError) as err:
        # The engine's answer was whole and its turn recorded: a client that closes while
        # the end waited (one that never read the body) did not leave mid-answer.
        log.info("client of session %s left before the answer's end: %s", loggable(sid or ""), err)
    if not received:
        return out, RequestEnd.DISCONNECTED
    if upstream.status != 200:
        return out, RequestEnd.FAILED
    return out, RequestEnd.TOOL_CALL if answer.tool_call else RequestEnd.ANSWERED


async def _report_turn(event: dict, wait: bool, app: web.Application, ticket: Ticket) -> None:
    """Send a turn_end; when the answer is whole, wait (bounded) for the daemon's answer
    before the client sees its end, so a session_close or suspend a framework hook sends
    straight to the daemon right after cannot overtake it (the late turn_end would make
    the closed session active again). A slow or absent daemon costs at most the request's
    daemon-wait budget (``daemon_wait_ms``), nothing while the breaker is open."""
    sender = app[SENDER]
    if not wait:
        sender.submit(event)
        return
    acked = sender.submit_wait(event)
    # shield: on timeout the event stays queued and is still sent, in order.
    ok, _ = await app[LIFECYCLE].wait_daemon(ticket, asyncio.shield(acked))
    if not ok:
        log.info("turn_end for session %s not awaited", loggable(event["session_id"]))


def _warn_no_hashes(app: web.Application, upstream: str) -> None:
    """The daemon refuses a turn_end without a list: say so once per upstream, send none."""
    warned = app[WARNED]
    if upstream in warned:
        return
    warned.add(upstream)
    log.warning(
        "answers from %s carry no kv_transfer_params.chunk_hashes: no turn_end is sent for "
        "them (is ascend_ext's connector configured?)",
        upstream,
    )
