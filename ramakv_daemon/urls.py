"""URL checks shared by the daemon's config, its deployments and the console's editor."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


def url_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable http(s) base URL, or None when it is.

    Shared with the console's config editor, so both refuse the same URLs
    (``http://localhost:6999XYZ``: the port is not a number).
    """
    if not isinstance(value, str) or not value:
        return "must be an http(s) URL such as http://localhost:6999"
    if any(c.isspace() or not c.isprintable() for c in value):
        return f"must be an http(s) URL without spaces or control characters, got {value!r}"
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError as err:
        return f"is not a valid URL ({err}): {value!r}"
    if parts.scheme not in ("http", "https"):
        return f"must start with http:// or https://, got {value!r}"
    if not parts.hostname:
        return f"has no host name: {value!r}"
    if port == 0:
        return f"has port 0: {value!r}"
    if parts.query or parts.fragment or parts.username or parts.password:
        return f"must not carry a query, fragment or user info: {value!r}"
    return None
