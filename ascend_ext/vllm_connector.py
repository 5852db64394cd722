"""vLLM ``kv_connector_module_path`` target: LMCache's v1 connector with ascend_ext installed.

vLLM imports this module in the scheduler and in every worker before building the
connector, which is exactly where install() must run (the blake3 token database, the
lookup-client upgrade and the memory API are per process). Needs vLLM: not importable on
the CPU machines this repo is tested on.
"""

from __future__ import annotations

from ascend_ext.installer import install

install()

# Imported after install() on purpose: the patches must be in place before any connector
# (and its lookup client) is built.
from lmcache.integration.vllm.lmcache_connector_v1 import (  # noqa: E402
    LMCacheConnectorV1Dynamic,
)


class RamAKVConnectorV1(LMCacheConnectorV1Dynamic):
    """LMCache's connector; install() makes its request_finished return chunk_hashes."""


try:  # LMCache-Ascend's connector, when that package is present (NPU deployments)
    from lmcache_ascend.integration.vllm.lmcache_ascend_connector_v1 import (  # noqa: E402
        LMCacheAscendConnectorV1Dynamic,
    )
except ImportError:  # pragma: no cover - not installable here
    pass
else:

    class RamAKVAscendConnectorV1(LMCacheAscendConnectorV1Dynamic):
        """LMCache-Ascend's connector with ascend_ext installed."""
