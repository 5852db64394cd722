"""The installed ram-a-kv version, and the ``--version`` flag every console script has
(defined in ramakv_protocol.version, which the daemon imports without the SDK)."""

from __future__ import annotations

from ramakv_protocol.version import DISTRIBUTION, add_version_flag, package_version

__all__ = ["DISTRIBUTION", "add_version_flag", "package_version"]
