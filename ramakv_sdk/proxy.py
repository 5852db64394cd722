"""Deprecated: ramakv-proxy is the top-level package ``ramakv_proxy``; this name forwards to it.

The proxy is a server, not part of the client library. Kept one release, because
docs/proxy.md documented ``ramakv_sdk.proxy.make_app``; every use warns (DeprecationWarning)."""

from __future__ import annotations

import sys
import warnings
from typing import Any

#: Names the proxy renamed when it moved: its request ``Outcome`` is ``RequestEnd``.
_RENAMED = {"Outcome": "RequestEnd"}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    import ramakv_proxy  # deferred: the SDK itself never needs the server

    new = _RENAMED.get(name, name)
    warnings.warn(
        f"ramakv_sdk.proxy.{name} is deprecated: use ramakv_proxy.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(ramakv_proxy, new)


if __name__ == "__main__":  # python -m ramakv_sdk.proxy, as before the move
    warnings.warn(
        "python -m ramakv_sdk.proxy is deprecated: use ramakv-proxy or python -m ramakv_proxy",
        DeprecationWarning,
        stacklevel=1,
    )
    import ramakv_proxy

    sys.exit(ramakv_proxy.main())
