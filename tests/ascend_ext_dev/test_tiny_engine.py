"""The tiny engine's settings: a relative work dir, the model shape and what it implies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_ext_dev import tiny_model
from ascend_ext_dev.tiny_engine import EngineSettings, command, environment
from ascend_ext_dev.tiny_model import COMPUTE, SMALL, ModelShape


def test_a_relative_work_dir_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = EngineSettings(work_dir=Path("eng"), port=1, api_port_start=2)
    assert s.work_dir == tmp_path / "eng" and s.model_dir.is_absolute()
    # vLLM starts with its cwd in work_dir: a relative --model would be looked up in there.
    assert command(s)[command(s).index("--model") + 1] == str(tmp_path / "eng" / "model")


def test_chunk_size_in_mib_follows_the_model_shape() -> None:
    assert SMALL.chunk_mib(256) == 0.5
    assert COMPUTE.chunk_mib(256) == 4.0
    s = EngineSettings(work_dir=Path("/x"), port=1, api_port_start=2, model=COMPUTE)
    assert s.chunk_mib == 4.0
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelShape(hidden=100, heads=3)


def test_disk_odirect_reaches_lmcache_extra_config() -> None:
    s = EngineSettings(work_dir=Path("/x"), port=1, api_port_start=2, disk_odirect=True)
    assert json.loads(environment(s)["LMCACHE_EXTRA_CONFIG"])["use_odirect"] is True


def test_the_model_directory_follows_the_shape(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    tiny_model.build(tmp_path, 4096, SMALL)
    tokenizer = (tmp_path / "tokenizer.json").read_text()
    tiny_model.build(tmp_path, 4096, COMPUTE)  # another shape: a new config, same tokenizer
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (1024, 4, 64)
    assert (tmp_path / "tokenizer.json").read_text() == tokenizer
