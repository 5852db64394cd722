"""The memory API's one request error, apart so the parsers of both its modules can raise it."""

from __future__ import annotations


class RequestError(ValueError):
    """A request field is missing or wrongly typed (HTTP 400)."""
