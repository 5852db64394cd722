"""A streamed turn's chunk hashes: the engine renders the prompt's tokens, ascend_ext hashes them.

vLLM 0.32 sends ``kv_transfer_params`` only with non-streamed answers; a stream never
carries them. So for a streamed turn the proxy asks the engine's render route
(``/v1/chat/completions/render``, ``/v1/completions/render``: the serving path's own
tokenisation, chat template, tools and all, without running the model) for the prompt's
token ids, and hashes them with the function LMCache uses under ascend_ext
(``pre_caching_hash_algorithm: blake3``). The client's request and the stream it receives are
left exactly as they are; see docs/proxy.md for why this way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

log = logging.getLogger("ramakv_proxy")

RENDER_TIMEOUT_S = 30.0
# Fields that only shape the answer's delivery; render does not need them.
_DROP_FIELDS = ("stream", "stream_options")


def is_streamed(body: bytes) -> bool:
    """True when a request body asks for a streamed answer (``"stream": true``)."""
    if b'"stream"' not in body:
        return False
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("stream") is True


def render_body(body: bytes) -> bytes:
    """The request body for the render route: the same request, not streamed."""
    obj = json.loads(body)
    for name in _DROP_FIELDS:
        obj.pop(name, None)
    return json.dumps(obj).encode()


def token_lists(answer: Any) -> list[list[int]] | None:
    """Token ids per prompt of a render answer (chat: one object; completions: a list)."""
    items = answer if isinstance(answer, list) else [answer]
    out: list[list[int]] = []
    for item in items:
        ids = item.get("token_ids") if isinstance(item, dict) else None
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            return None
        out.append(ids)
    return out or None


def hashes_of(prompts: Iterable[list[int]], chunk_size: int, save_unfull_chunk: bool) -> list[str]:
    """Chain hashes of each prompt, in order, each hash once (a batch of prompts: all)."""
    # The engine's own hash format (needs only blake3); imported here so that importing the
    # SDK stays free of ascend_ext (tests/sdk/test_imports.py).
    from ascend_ext.hashing import chain_hashes_hex

    seen: dict[str, None] = {}
    for ids in prompts:
        for h in chain_hashes_hex(ids, chunk_size, save_unfull_chunk):
            seen.setdefault(h, None)
    return list(seen)


async def rendered_turn_params(
    http: aiohttp.ClientSession,
    render_url: str,
    body: bytes,
    headers: Mapping[str, str] | list[tuple[str, str]],
    chunk_size: int,
    save_unfull_chunk: bool,
) -> dict[str, Any] | None:
    """``{"chunk_hashes": [...]}`` of a turn request's prompt; None when the engine can't say."""
    try:
        async with http.post(
            render_url, data=render_body(body), headers=headers,
            timeout=aiohttp.ClientTimeout(total=RENDER_TIMEOUT_S),
        ) as r:
            if r.status != 200:
                log.warning("render %s answered %s: streamed turns get no chunk_hashes "
                            "(is the engine vLLM >= 0.32?)", render_url, r.status)
                return None
            answer = await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
        log.warning("render %s failed: %s", render_url, err)
        return None
    prompts = token_lists(answer)
    if prompts is None:
        log.warning("render %s gave no token_ids", render_url)
        return None
    return {"chunk_hashes": hashes_of(prompts, chunk_size, save_unfull_chunk)}


class RenderCheck:
    """Whether hashing the engine's rendered prompt gives the hashes the engine itself sent
    (checked once, on the first non-streamed turn with chunk_hashes); None until then."""

    def __init__(self) -> None:
        self.agrees: bool | None = None

    def compare(self, rendered: dict | None, engine: dict, upstream: str, chunk_size: int,
                save_unfull_chunk: bool) -> None:
        """Record whether they agree; an error is logged once when they do not."""
        if rendered is None or self.agrees is not None:
            return
        self.agrees = rendered.get("chunk_hashes") == engine.get("chunk_hashes")
        if not self.agrees:
            log.error("chunk hashes of %s's rendered prompts (blake3, chunk_size=%d, "
                      "save_unfull_chunk=%s) differ from the engine's own: streamed turns get "
                      "no turn_end. Match --chunk-size/--save-unfull-chunk to LMCache's config "
                      "and use pre_caching_hash_algorithm: blake3", upstream, chunk_size,
                      save_unfull_chunk)
