"""The config schema is the one source: the daemon's Config, the console's editor,
config.example.toml and the README's table all agree with it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from ramakv_console import config_io
from ramakv_daemon import config as config_mod
from ramakv_daemon.config import Config, ConfigError
from ramakv_protocol import config_docs as docs
from ramakv_protocol import config_schema as schema

REPO = Path(__file__).resolve().parents[2]
ANNOTATIONS = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "list": "tuple[str, ...]",
    "tables": "tuple[Deployment, ...]",
}
NUMBER_KEYS = [k.name for k in schema.KEYS if k.kind in ("int", "float")]


def test_the_daemon_config_has_exactly_the_schema_keys_with_their_types() -> None:
    got = [(f.name, f.type) for f in dataclasses.fields(Config)]
    assert got == [(k.name, ANNOTATIONS[k.kind]) for k in schema.KEYS]


def test_the_daemon_defaults_are_the_schema_defaults() -> None:
    cfg = Config()
    for key in schema.KEYS:
        assert getattr(cfg, key.name) == key.default_value(), key.name
        assert config_mod.value_problem(key.name, getattr(cfg, key.name)) is None, key.name


def test_every_key_has_a_doc_and_zero_rules_only_on_numbers() -> None:
    for key in schema.KEYS:
        assert key.doc and not key.doc.endswith("."), key.name
        assert key.zero_means is None or key.kind in ("int", "float"), key.name
        assert not key.choices or key.default in key.choices, key.name


@pytest.mark.parametrize("name", NUMBER_KEYS)
def test_daemon_and_console_agree_on_zero(name: str) -> None:
    """0 is accepted by both exactly where the schema says what it means, refused by both
    elsewhere (the loader once refused 0 where the docs allowed it)."""
    allowed = schema.BY_NAME[name].zero_means is not None
    spec = next(s for s in config_io.DAEMON_FIELDS if s.name == name)
    if allowed:
        cfg, warnings = config_mod.from_mapping({name: 0}, strict=True)
        assert warnings == [] and getattr(cfg, name) == 0
        assert config_io.parse_value(spec, "0") == 0
    else:
        with pytest.raises(ConfigError, match=f"config key '{name}' must be "):
            config_mod.from_mapping({name: 0}, "f.toml", strict=True)
        with pytest.raises(ValueError, match=f"{name}: must be "):
            config_io.parse_value(spec, "0")
    for refused in (-1, float("nan")):
        assert schema.value_problem(name, refused) is not None


def test_what_the_editor_accepts_the_daemon_loads_strictly() -> None:
    """Each field's default, as the form shows it, parses back to a value the daemon's
    strict loader takes as is."""
    edits = {
        s.name: config_io.parse_value(s, config_io.format_value(s.default))
        for s in config_io.DAEMON_FIELDS
    }
    cfg, warnings = config_mod.from_mapping(edits, "form", strict=True)
    assert warnings == [] and cfg == Config()


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("sqlite_synchronous", "off", "must be NORMAL, FULL or EXTRA"),
        ("session_store_url", "mysql://x", "must be a postgresql:// URL"),
        ("node_id", "  ", "must not be empty"),
        ("debug_dir", "", "must be a file system path"),
        ("evict_defer_s", "-1", "must be >= 0"),
        ("evict_defer_s", "61", "must be <= 60"),
    ],
)
def test_the_editor_gives_the_schema_reason(name: str, text: str, why: str) -> None:
    spec = next(s for s in config_io.DAEMON_FIELDS if s.name == name)
    with pytest.raises(ValueError, match=f"^{name}: {why}"):
        config_io.parse_value(spec, text)


def test_a_secret_is_never_repeated_in_a_complaint() -> None:
    problem = schema.value_problem("session_store_url", "mysql://u:pw@h/db")
    assert problem is not None and "pw" not in problem
    assert schema.value_problem("auth_token", 5) == "must be a string, got <hidden>"


def test_the_editor_offers_every_editable_key_and_keeps_the_rest() -> None:
    assert [s.name for s in config_io.DAEMON_FIELDS] == [k.name for k in schema.KEYS if k.editable]
    assert config_io.KEPT_AS_IS == {"deployments"}
    secret = {s.name for s in config_io.DAEMON_FIELDS if s.secret}
    assert secret == config_mod.SECRET_KEYS == {"auth_token", "session_store_url"}


def test_the_console_finds_the_file_the_daemon_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(schema.ENV_PATH, raising=False)
    for cli in (None, str(tmp_path / "cli.toml")):
        assert config_io.daemon_config_path(cli) == config_mod.resolve_path(cli)
    monkeypatch.setenv(schema.ENV_PATH, str(tmp_path / "env.toml"))
    assert config_io.daemon_config_path() == config_mod.resolve_path(None) == tmp_path / "env.toml"


def test_config_example_follows_the_schema() -> None:
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    assert docs.example_problems(text) == []


def test_the_daemon_loads_the_example_strictly_as_its_defaults() -> None:
    cfg, warnings = config_mod.load_explicit(str(REPO / "config.example.toml"))
    assert warnings == [] and cfg == Config()


def test_the_example_check_finds_what_strays() -> None:
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    strayed = (
        text.replace("max_sessions = 1000000\n", "")
        .replace("trace_queue = 1000\n", "trace_queue = 999\n")
        .replace("# node_id = ", "# node = ")
        .replace("# [[deployments]]", "# deployments")
        .replace("(0 = no bound)", "(no bound)")
    )
    problems = docs.example_problems("flux_capacitor = 88\n" + strayed)
    assert problems == [
        "unknown key 'flux_capacitor'",
        "the comment above 'max_sessions' does not say what 0 means",
        "the comment above 'ready_max_evict_backlog' does not say what 0 means",
        "'trace_queue' = 999, not its default 1000",
        "'max_sessions' is missing (default 1000000)",
        "'node_id' must be shown as '# node_id = \"node-1\"'",
        "'deployments' has no example table '# [[deployments]]'",
    ]


def test_readme_table_is_the_generated_one() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert docs.with_table(readme) == readme, (
        "README's config table is stale: python -m ramakv_protocol.config_docs --write README.md"
    )
    assert docs.markdown_table() in readme
    for key in schema.KEYS:
        assert f"\n| {key.name} | " in readme, key.name


def test_the_generator_prints_and_rewrites_the_table(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{docs.TABLE_BEGIN}\n| old |\n{docs.TABLE_END}\n\nafter\n")
    run = [sys.executable, "-m", "ramakv_protocol.config_docs"]
    printed = subprocess.run(
        [*run, "--markdown"], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert printed.stdout == docs.markdown_table()
    subprocess.run([*run, "--write", str(readme)], check=True, cwd=REPO)
    assert readme.read_text() == (
        f"# x\n\n{docs.TABLE_BEGIN}\n{docs.markdown_table()}{docs.TABLE_END}\n\nafter\n"
    )


def test_the_sdk_tab_edits_what_the_sdk_reads(tmp_path: Path) -> None:
    from ramakv_sdk import config as sdk_config

    assert config_io.sdk_config_path() == sdk_config.config_path()
    spec = {s.name: s for s in config_io.SDK_FIELDS}
    assert spec["auth_token"].secret and not spec["daemon_url"].secret
    edits = {
        "daemon_url": config_io.parse_value(spec["daemon_url"], " http://10.0.0.5:6998 "),
        "auth_token": config_io.parse_value(spec["auth_token"], "s3cret"),
    }
    path = tmp_path / "sdk.toml"
    merged, diffs = config_io.merge({}, edits, config_io.SDK_FIELDS)
    config_io.write_atomic(path, merged)
    assert sdk_config.load_config(path) == sdk_config.SdkConfig("http://10.0.0.5:6998", "s3cret")
    assert not any(d.needs_restart for d in diffs)


def test_a_value_out_of_range_is_refused_not_clamped(tmp_path: Path) -> None:
    """evict_defer_s past the memory API's 60 s: refused naming the key, never clamped."""
    from support.daemon_proc import run_to_exit, write_config

    assert schema.value_problem("evict_defer_s", 60) is None
    assert schema.value_problem("evict_defer_s", 61) == "must be <= 60, got 61"
    assert schema.value_problem("evict_defer_s", 60.5) == "must be <= 60, got 60.5"
    with pytest.raises(ConfigError, match="'evict_defer_s' must be <= 60, got 61"):
        config_mod.from_mapping({"evict_defer_s": 61}, "f.toml", strict=True)
    refused = run_to_exit(
        tmp_path / "s.db", write_config(tmp_path / "c.toml", {"evict_defer_s": 61}), timeout=60
    )
    assert refused.returncode == 2
    assert "'evict_defer_s' must be <= 60, got 61" in refused.stdout + refused.stderr
