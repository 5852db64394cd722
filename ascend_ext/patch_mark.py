"""The mark on ascend_ext's patches of lmcache and vLLM, so installing twice wraps once."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

MARK = "__ramakv_wrapped__"


def mark_patched(fn: T) -> T:
    """``fn`` (a wrapper about to replace the original) carries the mark; returns it."""
    fn.__dict__[MARK] = True
    return fn


def is_patched(fn: object) -> bool:
    """True when ``fn`` is one of ascend_ext's wrappers (it is installed already)."""
    return bool(getattr(fn, MARK, False))
