"""A request's prompt, reduced to digests, to tell whether it extends its session's context
(the next step of the same conversation) or is a side call (a guardrail, a re-ask)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


def _digest(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


@dataclass(frozen=True, slots=True)
class PromptShape:
    """Per-message digests of a chat prompt, or the digests of a completion prompt's
    prefixes at each of its lengths that matter (the whole, for a non-text prompt)."""

    messages: tuple[bytes, ...] | None = None
    text: str | None = None  # a completion prompt, kept as its digest and length only
    text_len: int = 0
    text_digest: bytes = b""

    @classmethod
    def of(cls, obj: Any) -> PromptShape | None:
        """The shape of a parsed request body; None when it has no prompt to compare."""
        if not isinstance(obj, dict):
            return None
        messages = obj.get("messages")
        if isinstance(messages, list):
            return cls(messages=tuple(_digest(m) for m in messages))
        prompt = obj.get("prompt")
        if isinstance(prompt, str):
            return cls(text=prompt, text_len=len(prompt), text_digest=_digest(prompt))
        if prompt is not None:
            return cls(text_len=-1, text_digest=_digest(prompt))
        return None

    def slim(self) -> PromptShape:
        """The same shape without the prompt text (what a session remembers)."""
        return PromptShape(self.messages, None, self.text_len, self.text_digest)

    def extends(self, before: PromptShape) -> bool:
        """True when this prompt starts with all of ``before``'s (equal counts too: a retry)."""
        if self.messages is not None or before.messages is not None:
            if self.messages is None or before.messages is None:
                return False
            n = len(before.messages)
            return len(self.messages) >= n and self.messages[:n] == before.messages
        if before.text_len < 0 or self.text_len < 0 or self.text is None:
            return self.text_digest == before.text_digest
        n = before.text_len
        return len(self.text) >= n and _digest(self.text[:n]) == before.text_digest
