"""identity: canonical JSON stability, any field change -> new namespace, missing -> none."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.ns_rig import ident

from ramakv_daemon.cli.identity import main
from ramakv_daemon.core.identity import (
    IDENTITY_FIELDS,
    INT_FIELDS,
    canonical_json,
    is_namespace,
    namespace_of,
)
from ramakv_daemon.deployments import parse_deployments


def test_canonical_json_is_sorted_compact_and_pinned() -> None:
    text = canonical_json(ident())
    assert text is not None and " " not in text.replace("Qwen3-8B", "")
    data = json.loads(text)
    assert list(data) == sorted(data) and set(data) == set(IDENTITY_FIELDS)
    ns = namespace_of(ident())
    assert ns == "kvp-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    # Pinned: a change here silently orphans every deployment's cache.
    assert ns == "kvp-0dd20671820a3a4a784764e48090a2c8"
    assert ns == namespace_of(dict(reversed(list(ident().items()))))
    assert is_namespace(ns)


def test_key_order_whitespace_int_spelling_and_extra_keys_do_not_matter() -> None:
    a = namespace_of(ident())
    assert (
        namespace_of(
            ident(block_size="256", model_revision=" " + "0123456789ABCDEF" * 2 + "01234567")
        )
        == a
    )
    assert namespace_of({**ident(), "name": "x", "lmcache_url": "http://h:1"}) == a


@pytest.mark.parametrize("field", IDENTITY_FIELDS)
def test_any_field_change_gives_a_new_namespace(field: str) -> None:
    base = ident()
    if field in INT_FIELDS:
        changed = ident(**{field: base[field] + 1})
    elif field == "model_revision":
        changed = ident(model_revision="f" * 40)
    elif field == "chat_template_sha256":
        changed = ident(chat_template_sha256="cd" * 32)
    else:
        changed = ident(**{field: base[field] + "-2"})
    assert namespace_of(changed) not in (None, namespace_of(base))


@pytest.mark.parametrize("field", IDENTITY_FIELDS)
@pytest.mark.parametrize("bad", [None, "", "  ", "auto", "AUTO"])
def test_missing_empty_or_auto_field_means_no_namespace(field: str, bad: object) -> None:
    fields = ident()
    if bad is None:
        fields.pop(field)
    else:
        fields[field] = bad
    assert namespace_of(fields) is None


@pytest.mark.parametrize(
    "over",
    [
        {"model_revision": "main"},
        {"model_revision": "abc123"},
        {"block_size": 0},
        {"kv_heads": -1},
        {"head_dim": True},
        {"chat_template_sha256": "xyz"},
    ],
)
def test_uncertain_values_mean_no_namespace(over: dict) -> None:
    assert namespace_of(ident(**over)) is None


@given(st.dictionaries(st.sampled_from(IDENTITY_FIELDS), st.text(max_size=5)))
def test_namespace_is_none_or_well_formed(over: dict) -> None:
    ns = namespace_of({**ident(), **over})
    assert ns is None or is_namespace(ns)


def test_cli_prints_the_namespace(tmp_path) -> None:
    path = tmp_path / "id.json"
    path.write_text(json.dumps(ident()))
    out = io.StringIO()
    assert main(["--from", str(path)], out) == 0
    assert out.getvalue().strip() == namespace_of(ident())
    env = tmp_path / "identity.env"
    env.write_text("\n".join(f"KVP_{k.upper()}={v}" for k, v in ident().items()))
    out = io.StringIO()
    assert main(["--from", str(env), "--json"], out) == 0
    assert out.getvalue().splitlines() == [namespace_of(ident()), canonical_json(ident())]


def test_cli_refuses_an_incomplete_identity(tmp_path, capsys) -> None:
    path = tmp_path / "id.toml"
    path.write_text('model_id = "m"\nkv_dtype = "auto"\n')
    assert main(["--from", str(path)], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "no namespace" in err and "kv_dtype" in err and "model_revision: missing" in err
    assert main(["--from", str(tmp_path / "nope.json")], io.StringIO()) == 2


def test_deployment_config_parsing() -> None:
    ns = namespace_of(ident())
    deps, warnings = parse_deployments(
        [
            {
                "name": "qwen",
                **ident(),
                "lmcache_url": "http://127.0.0.1:7001",
                "ddr_budget_chunks": 100,
            },
            {"name": "pre", "namespace": "kvp-" + "1" * 32},
            {"name": "half", "model_id": "m"},
            {"name": "clash", "namespace": "kvp-" + "2" * 32, **ident()},
            {"name": "qwen", "namespace": "kvp-" + "3" * 32},
            {"name": "bad name!"},
        ]
    )
    by = {d.name: d for d in deps}
    assert set(by) == {"qwen", "pre", "half", "clash"}
    assert by["qwen"].namespace == ns and by["qwen"].ddr_budget_chunks == 100
    assert by["pre"].namespace == "kvp-" + "1" * 32 and by["pre"].steered
    assert by["half"].namespace is None and by["half"].key == "unresolved:half"
    assert not by["half"].steered and by["half"].problems
    assert by["clash"].namespace is None and "disagrees" in by["clash"].problems[0]
    assert any("duplicate" in w for w in warnings) and any("name" in w for w in warnings)
