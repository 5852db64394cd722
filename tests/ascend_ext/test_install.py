"""ascend_ext.install(): idempotent patches of lmcache 0.5.6, reported honestly."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lmcache
pytest.importorskip("lmcache")

ROOT = Path(__file__).resolve().parents[2]


def test_install_reports_and_is_idempotent() -> None:
    from lmcache.v1.lookup_client.factory import LookupClientFactory
    from lmcache.v1.token_database import TokenDatabase

    import ascend_ext

    first = ascend_ext.install()
    factory_fn = LookupClientFactory.create_lookup_client
    hash_fn = TokenDatabase._get_vllm_hash_func
    second = ascend_ext.install()
    assert first == second
    assert first["blake3_hash"] and first["lookup_client_upgrade"]
    # torch here is the CPU build: lmcache has no vLLM connector for it, ascend_ext's is used.
    assert first["cpu_kv_connector"] is True
    from ascend_ext.lmcache_fixes import DOUBLE_RELEASE_VERSIONS, lmcache_version

    assert first["async_loading_double_release_fix"] is (
        lmcache_version() in DOUBLE_RELEASE_VERSIONS
    )
    # vLLM cannot be installed on these machines: the connector patch says so.
    has_vllm = importlib.util.find_spec("vllm") is not None
    assert first["vllm_request_finished"] is has_vllm
    assert LookupClientFactory.create_lookup_client is factory_fn  # not wrapped twice
    assert TokenDatabase._get_vllm_hash_func is hash_fn


def test_install_in_a_fresh_process_and_opt_out() -> None:
    code = (
        "import json, ascend_ext; r = ascend_ext.install(); "
        "from lmcache.v1.config import LMCacheEngineConfig as C; "
        "from lmcache.v1.token_database import ChunkedTokenDatabase as D; "
        "d = D(C.from_defaults(chunk_size=4, pre_caching_hash_algorithm='blake3'), None); "
        "print(json.dumps([r, [h for _, _, h in d.process_tokens(list(range(10)), "
        "make_key=False)]]))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), LMCACHE_TRACK_USAGE="false")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    import json

    from ascend_ext.hashing import chain_hashes

    report, hashes = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["blake3_hash"] is True
    assert hashes == chain_hashes(list(range(10)), 4, save_unfull_chunk=False)  # lmcache default
    env["RAMAKV_ASCEND_EXT"] = "0"
    code_off = "import ascend_ext; print(ascend_ext.install())"
    out = subprocess.run(
        [sys.executable, "-c", code_off], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "{}"


def test_vllm_connector_module_needs_vllm() -> None:
    """Without vLLM the connector module fails with ImportError, after install() ran."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM present: covered by a real deployment")
    with pytest.raises(ImportError):
        importlib.import_module("ascend_ext.vllm_connector")
    import ascend_ext.installer as inst

    assert inst._done.get("blake3_hash") is True


def test_skip_env_leaves_a_patch_out_and_reports_it() -> None:
    code = "import json, ascend_ext; print(json.dumps(ascend_ext.install()))"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        LMCACHE_TRACK_USAGE="false",
        RAMAKV_ASCEND_EXT_SKIP="async_loading_double_release_fix",
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    import json

    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["async_loading_double_release_fix"] is False
    assert report["blake3_hash"] is True
