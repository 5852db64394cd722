"""``ramakv-proxy``: an OpenAI-compatible reverse proxy that reports turns to ram-a-kv."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from yarl import URL

from ramakv_sdk import events, prompt_hashes
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import DEFAULT_DAEMON_URL, load_config
from ramakv_sdk.kvparams import SseScanner, from_json_body, session_id_of
from ramakv_sdk.sender import EventSender
from ramakv_sdk.version import add_version_flag

log = logging.getLogger("ramakv_proxy")

TURN_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
STATS_PATH = "/_ramakv/stats"
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


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Where to forward, where to report, and how sessions are named."""

    upstream: str
    daemon_url: str = DEFAULT_DAEMON_URL
    token: str | None = None
    session_header: str = "X-Session-Id"
    daemon_timeout: float = 2.0
    retry_for: float = 5.0
    max_body_bytes: int = 256 * 1024 * 1024
    #: LMCache's chunk_size and save_unfull_chunk, to hash a streamed turn's tokenised prompt
    #: exactly as the engine's connector does (vLLM streams carry no kv_transfer_params).
    chunk_size: int = 256
    save_unfull_chunk: bool = False


SETTINGS = web.AppKey("settings", ProxySettings)
UPSTREAM = web.AppKey("upstream", aiohttp.ClientSession)
SENDER = web.AppKey("sender", EventSender)
# Upstreams already warned about answers without chunk_hashes (once each, not per turn).
WARNED = web.AppKey("warned_no_hashes", set)
TOKENIZE_CHECK = web.AppKey("tokenize_check", prompt_hashes.TokenizeCheck)


def make_app(settings: ProxySettings) -> web.Application:
    """The proxy application; the upstream session and the event sender live with it."""
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[WARNED] = set()
    app[TOKENIZE_CHECK] = prompt_hashes.TokenizeCheck()

    async def resources(app: web.Application) -> AsyncIterator[None]:
        # auto_decompress=False: bytes go to the client exactly as the engine sent them.
        app[UPSTREAM] = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            connector=aiohttp.TCPConnector(limit=0),
        )
        client = AsyncClient(settings.daemon_url, settings.daemon_timeout, settings.token)
        app[SENDER] = EventSender(client, retry_for=settings.retry_for)
        yield
        await app[UPSTREAM].close()
        await app[SENDER].aclose(timeout=5.0)

    app.cleanup_ctx.append(resources)
    app.router.add_get(STATS_PATH, stats)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def stats(request: web.Request) -> web.Response:
    """The proxy's own counters of events sent to the daemon."""
    sender = request.app[SENDER]
    return web.json_response({**sender.stats.as_dict(), "pending": sender.pending})


def _upstream_error(err: BaseException, upstream: str) -> web.Response:
    message = f"ramakv-proxy: upstream {upstream} unavailable: {err or type(err).__name__}"
    return web.json_response(
        {"error": {"message": message, "type": "upstream_unavailable", "code": 502}}, status=502
    )


async def forward(request: web.Request) -> web.StreamResponse:
    """Forward any request unchanged; report turns of requests that name a session."""
    settings = request.app[SETTINGS]
    sender = request.app[SENDER]
    body = await request.read() if request.body_exists else None
    sid = None
    if request.method == "POST" and request.path in TURN_PATHS:
        sid = session_id_of(request.headers.get(settings.session_header), body or b"")
    if sid is not None:
        sender.submit({"type": "turn_start", "session_id": sid})
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in DROP_REQUEST]
    # encoded=True: the path and query go upstream byte for byte (no re-quoting).
    url = URL(settings.upstream + request.rel_url.raw_path_qs, encoded=True)
    tokenized = None
    check = request.app[TOKENIZE_CHECK]
    if sid is not None and body and (prompt_hashes.is_streamed(body) or check.agrees is None):
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
            return _upstream_error(err, settings.upstream)
        async with upstream:
            return await _relay(request, upstream, sid, sender, tokenized)
    finally:
        if tokenized is not None and not tokenized.done():
            tokenized.cancel()


async def _relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    sid: str | None,
    sender: EventSender,
    tokenized: asyncio.Future[dict | None] | None = None,
) -> web.StreamResponse:
    """Copy the engine's answer to the client chunk by chunk; then send turn_end."""
    out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for k, v in upstream.headers.items():
        if k.lower() not in DROP_RESPONSE:
            out.headers.add(k, v)
    if upstream.content_length is not None:
        out.content_length = upstream.content_length
    watch = sid is not None and upstream.status == 200
    ctype = upstream.headers.get("Content-Type", "")
    encoding = upstream.headers.get("Content-Encoding", "")
    scanner = SseScanner() if watch and ctype.startswith("text/event-stream") else None
    kept: list[bytes] | None = [] if watch and scanner is None else None
    complete = False
    try:
        await out.prepare(request)
        async for chunk in upstream.content.iter_any():
            await out.write(chunk)
            if scanner is not None:
                scanner.feed(chunk)
            elif kept is not None:
                kept.append(chunk)
        await out.write_eof()
        complete = True
    except (ConnectionResetError, aiohttp.ClientError) as err:
        log.info("stream for session %s ended early: %s", sid, err)
    if watch and sid is not None:
        if scanner is not None:
            scanner.close()
            params = scanner.params  # an engine that streams them; vLLM 0.32 does not
            if not events.has_chunk_hashes(params) and tokenized is not None and complete:
                params = await tokenized
                if request.app[TOKENIZE_CHECK].agrees is False:
                    params = None  # hashing the tokenised prompt gave the engine's hashes wrong
        else:
            params = from_json_body(b"".join(kept or ()), encoding)
            if tokenized is not None and params is not None and events.has_chunk_hashes(params):
                request.app[TOKENIZE_CHECK].compare(
                    await tokenized,
                    params,
                    request.app[SETTINGS].upstream,
                    request.app[SETTINGS].chunk_size,
                    request.app[SETTINGS].save_unfull_chunk,
                )
        if events.has_chunk_hashes(params):
            sender.submit(events.turn_end(sid, params))
        elif complete:
            _warn_no_hashes(request.app, request.app[SETTINGS].upstream)
    return out


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="ramakv-proxy",
        description="OpenAI-compatible reverse proxy that sends turn_start/turn_end to "
        "ram-a-kv for requests naming a session (X-Session-Id header, else 'user').",
    )
    p.add_argument("--upstream", required=True, help="engine base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="127.0.0.1:8001", help="HOST:PORT (127.0.0.1:8001)")
    p.add_argument(
        "--daemon",
        help="ram-a-kv URL (default: daemon_url from "
        "~/.config/ram-a-kv/config.toml, else " + DEFAULT_DAEMON_URL + ")",
    )
    p.add_argument("--token", help="daemon bearer token (default: auth_token from the config)")
    p.add_argument(
        "--session-header",
        default="X-Session-Id",
        help="request header carrying the session id (X-Session-Id)",
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        default=256,
        help="LMCache chunk_size of the engine, to hash streamed turns (256)",
    )
    p.add_argument(
        "--save-unfull-chunk",
        action="store_true",
        help="the engine's LMCache has save_unfull_chunk: true",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (INFO)")
    add_version_flag(p)
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> ProxySettings:
    """ProxySettings from the flags and the SDK config (its token only for its own URL)."""
    cfg = load_config()
    daemon = (args.daemon or (cfg.daemon_url if cfg else DEFAULT_DAEMON_URL)).rstrip("/")
    token = args.token
    if token is None and cfg is not None and cfg.auth_token and daemon == cfg.daemon_url:
        token = cfg.auth_token
    return ProxySettings(
        upstream=args.upstream.rstrip("/"),
        daemon_url=daemon,
        token=token,
        session_header=args.session_header,
        chunk_size=args.chunk_size,
        save_unfull_chunk=args.save_unfull_chunk,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ramakv-proxy`` console script."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"ramakv-proxy: --listen must be HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2
    settings = settings_from(args)
    log.info(
        "ramakv-proxy on %s -> %s, reporting to %s",
        args.listen,
        settings.upstream,
        settings.daemon_url,
    )
    try:
        web.run_app(
            make_app(settings), host=host.strip("[]"), port=int(port), print=None, access_log=None
        )
    except OSError as err:
        log.error("cannot listen on %s: %s", args.listen, err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
