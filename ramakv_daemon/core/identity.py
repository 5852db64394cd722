"""Deployment identity -> compatibility namespace (``kvp-`` + 32 hex of sha256), pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from ramakv_daemon.core.catalogue import JsonObject

# Every field that makes two deployments' KV chunks incompatible. Order is documentation
# only: the canonical JSON sorts keys.
STRING_FIELDS: tuple[str, ...] = (
    "model_id",
    "model_revision",  # the full 40-hex commit sha, never a branch or tag
    "tokenizer_name",
    "tokenizer_version",
    "kv_dtype",  # the resolved dtype (e.g. "bfloat16"), never "auto"
    "connector_name",
    "connector_build_id",
    "chat_template_sha256",  # sha256 of the rendered chat template
)
INT_FIELDS: tuple[str, ...] = (
    "block_size",
    "kv_heads",
    "head_dim",
    "tensor_parallel_size",
    "max_model_len",
)
IDENTITY_FIELDS: tuple[str, ...] = STRING_FIELDS + INT_FIELDS

NAMESPACE_RE = re.compile(r"^kvp-[0-9a-f]{32}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def problems(fields: Mapping[str, object]) -> list[str]:
    """Why ``fields`` name no namespace: one line per missing, empty, "auto" or bad field."""
    out: list[str] = []
    for name in IDENTITY_FIELDS:
        value = fields.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            out.append(f"{name}: missing")
        elif isinstance(value, str) and value.strip().lower() == "auto":
            out.append(f'{name}: "auto" is not a resolved value')
        elif name in INT_FIELDS and _as_int(value) is None:
            out.append(f"{name}: must be a positive integer, got {value!r}")
        elif name in STRING_FIELDS and not isinstance(value, str):
            out.append(f"{name}: must be a string, got {value!r}")
        elif not isinstance(value, str):
            continue  # an int field, checked above
        elif name == "model_revision" and not _HEX40.match(value.strip().lower()):
            out.append("model_revision: must be the full 40-hex commit sha")
        elif name == "chat_template_sha256" and not _HEX64.match(value.strip().lower()):
            out.append("chat_template_sha256: must be 64 hex characters")
    return out


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit():
        return int(text) or None
    return None


def canonical_fields(fields: Mapping[str, object]) -> JsonObject | None:
    """The identity fields, normalised (ints as ints, hex lower-case), or None if incomplete.

    Fields outside :data:`IDENTITY_FIELDS` (a deployment's name, its URL) are ignored: they
    do not change what the KV chunks mean.
    """
    if problems(fields):
        return None
    out: JsonObject = {}
    for name in STRING_FIELDS:
        value = str(fields[name]).strip()
        if name in ("model_revision", "chat_template_sha256"):
            value = value.lower()
        out[name] = value
    for name in INT_FIELDS:
        out[name] = _as_int(fields[name])
    return out


def canonical_json(fields: Mapping[str, object]) -> str | None:
    """Sorted keys, no spaces, ASCII: the exact text that is hashed; None if incomplete."""
    canon = canonical_fields(fields)
    if canon is None:
        return None
    return json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def namespace_of(fields: Mapping[str, object]) -> str | None:
    """``kvp-`` + the first 32 hex chars of sha256(canonical JSON); None when incomplete.

    None means "no namespace": the daemon then steers nothing for that deployment (a miss
    is always preferred to a wrong hit).
    """
    text = canonical_json(fields)
    if text is None:
        return None
    return "kvp-" + hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


def is_namespace(text: object) -> bool:
    """True for a well-formed ``kvp-<32 hex>`` string."""
    return isinstance(text, str) and bool(NAMESPACE_RE.match(text))
