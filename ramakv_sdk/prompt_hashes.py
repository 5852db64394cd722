"""A streamed turn's chunk hashes: the engine tokenises the prompt, ascend_ext's hash chains it.

vLLM 0.32 sends ``kv_transfer_params`` only with non-streamed answers; a stream never
carries them. So for a streamed turn the proxy asks the engine's ``POST /tokenize`` (always
served by vLLM's OpenAI server; chat messages go through the same chat template, tools and
kwargs as the request) for the prompt's token ids, and hashes them with the function LMCache
keys chunks with under ascend_ext (``pre_caching_hash_algorithm: blake3``). The client's
request and the stream it receives are left exactly as they are; docs/proxy.md says why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import aiohttp

log = logging.getLogger("ramakv_proxy")

TOKENIZE_TIMEOUT_S = 30.0
# The fields of a chat request that shape its prompt (vLLM's TokenizeChatRequest).
_CHAT_FIELDS = (
    "model",
    "messages",
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
    "media_io_kwargs",
    "mm_processor_kwargs",
    "tools",
)
_COMPLETION_FIELDS = ("model", "add_special_tokens")

#: One prompt to tokenise: a /tokenize body, or token ids the request already gave.
Prompt = dict[str, Any] | list[int]


def is_streamed(body: bytes) -> bool:
    """True when a request body asks for a streamed answer (``"stream": true``)."""
    if b'"stream"' not in body:
        return False
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("stream") is True


def _ids(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


def prompts_of(path: str, body: bytes) -> list[Prompt] | None:
    """The prompts of a chat or completion request (a completion may batch several)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if path.endswith("/chat/completions"):
        return [{k: obj[k] for k in _CHAT_FIELDS if k in obj}]
    extra = {k: obj[k] for k in _COMPLETION_FIELDS if k in obj}
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        return [{**extra, "prompt": prompt}]
    if _ids(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or _ids(p) for p in prompt):
        return [p if isinstance(p, list) else {**extra, "prompt": p} for p in prompt]
    return None


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


async def _tokenize(
    http: aiohttp.ClientSession, url: str, prompt: Prompt, headers: list[tuple[str, str]]
) -> list[int] | None:
    if isinstance(prompt, list):
        return prompt
    async with http.post(
        url, json=prompt, headers=headers, timeout=aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S)
    ) as r:
        if r.status != 200:
            log.warning("%s answered %s: %s", url, r.status, (await r.read())[:300])
            return None
        answer = await r.json(content_type=None)
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return tokens if isinstance(tokens, list) else None


async def tokenized_turn_params(
    http: aiohttp.ClientSession,
    upstream: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str] | list[tuple[str, str]],
    chunk_size: int,
    save_unfull_chunk: bool,
) -> dict[str, Any] | None:
    """``{"chunk_hashes": [...]}`` of a turn request's prompt; None when the engine can't say."""
    ids = await tokenized_ids(http, upstream, path, body, headers)
    if ids is None:
        return None
    return {"chunk_hashes": hashes_of(ids, chunk_size, save_unfull_chunk)}


async def tokenized_ids(
    http: aiohttp.ClientSession,
    upstream: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str] | list[tuple[str, str]],
) -> list[list[int]] | None:
    """The token ids of each prompt of a turn request (the engine's /tokenize); None when
    the engine can't say."""
    prompts = prompts_of(path, body)
    if prompts is None:
        return None
    # The client's headers (its API key) minus the body's: /tokenize gets a JSON body of its
    # own, and an uncompressed answer (the proxy's upstream session does not decompress).
    items = headers.items() if isinstance(headers, Mapping) else headers
    plain = [
        (k, v)
        for k, v in items
        if k.lower() not in ("accept-encoding", "content-type", "content-encoding")
    ]
    url = f"{upstream}/tokenize"
    ids: list[list[int]] = []
    try:
        for prompt in prompts:
            tokens = await _tokenize(http, url, prompt, plain)
            if tokens is None:
                return None
            ids.append(tokens)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
        log.warning("%s failed: %s", url, err)
        return None
    return ids


class TokenizeCheck:
    """Whether hashing the engine's tokenisation gives the hashes the engine itself sent
    (checked once, on the first non-streamed turn with chunk_hashes); None until then."""

    def __init__(self) -> None:
        self.agrees: bool | None = None

    def compare(
        self,
        tokenized: dict | None,
        engine: dict,
        upstream: str,
        chunk_size: int,
        save_unfull_chunk: bool,
    ) -> None:
        """Record whether they agree; an error is logged once when they do not."""
        if tokenized is None or self.agrees is not None:
            return
        self.agrees = tokenized.get("chunk_hashes") == engine.get("chunk_hashes")
        if not self.agrees:
            log.error(
                "chunk hashes of %s's tokenised prompts (blake3, chunk_size=%d, "
                "save_unfull_chunk=%s) differ from the engine's own: streamed turns get "
                "no turn_end. Match --chunk-size/--save-unfull-chunk to LMCache's config "
                "and use pre_caching_hash_algorithm: blake3",
                upstream,
                chunk_size,
                save_unfull_chunk,
            )
