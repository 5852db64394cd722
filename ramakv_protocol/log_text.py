"""Text checks for what is logged and stored, shared by the daemon and the proxy: UTF-8
only, and a client's string never forges a log line (one event, one log line)."""

from __future__ import annotations


def utf8(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogates), so SQLite can store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def loggable(text: str, limit: int = 200) -> str:
    """``text`` as is when printable and short; else its repr, cut: one event, one log line."""
    if len(text) <= limit and text.isprintable():
        return text
    return repr(text[:limit]) + ("..." if len(text) > limit else "")
