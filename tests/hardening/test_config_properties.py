"""Property tests of config loading: any file is a config or a ``ConfigError``, nothing else.

A bad file must fail at start-up with the file, the field and what was expected, never with a
pydantic or YAML traceback.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_gateway.config import GatewayConfig, load_config, parse_config
from hybrid_gateway.errors import ConfigError
from tests.hardening.strategies import json_values

VALID: dict[str, Any] = {
    "server": {"port": 8080, "request_log": {"path": "var/r.sqlite3"}},
    "channels": {
        "light-local": {"base_url": "http://127.0.0.1:9101/v1", "model": "l",
                        "price_per_1m_input": 0.1, "max_concurrency": 8},
        "heavy-local": {"base_url": "http://127.0.0.1:9102/v1", "model": "h"},
    },
    "lanes": {"light": {"channel": "light-local"},
              "heavy": {"channel": "heavy-local", "backup": "light-local"}},
    "models": [{"id": "auto"}, {"id": "light", "lane": "light"}],
    "routing": {"default_lane": "heavy",
                "rules": [{"name": "short", "when": {"max_chars": 60}, "lane": "light"}]},
    "cache": {"exact": {"enabled": True, "ttl_s": 60}},
    "resilience": {"retry": {"backoff_s": [0.1, 0.2]}, "breaker": {"min_requests": 5}},
}  # fmt: skip

_SETTINGS = settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load(tmp_path: Path, content: bytes) -> GatewayConfig | None:
    path = tmp_path / "gateway.yaml"
    path.write_bytes(content)
    try:
        return load_config(path)
    except ConfigError as exc:
        assert exc.file == str(path) and exc.field and exc.expected
        return None


def test_the_base_config_is_valid() -> None:
    parse_config(copy.deepcopy(VALID))


@_SETTINGS
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_load_or_raise_config_error(tmp_path: Path, content: bytes) -> None:
    _load(tmp_path, content)


# YAML-ish text: the characters that make YAML structure, so the parser gets past line one.
_YAML_TEXT = st.text(alphabet=st.sampled_from(list("ab:-[]{},'\"!&*?|>#%@ \n\t0.1")), max_size=200)


@_SETTINGS
@given(_YAML_TEXT)
def test_yaml_shaped_text_loads_or_raises_config_error(tmp_path: Path, text: str) -> None:
    _load(tmp_path, text.encode())


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def mutated_configs(draw: st.DrawFn) -> Any:
    """The valid config with a few values replaced, keys added or removed."""
    config = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(config)))
        if not path:
            return draw(json_values())
        parent = config
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values(6))
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values(4))
    return config


@_SETTINGS
@given(mutated_configs())
def test_mutated_configs_load_or_raise_config_error(tmp_path: Path, config: Any) -> None:
    _load(tmp_path, yaml.safe_dump(config, allow_unicode=True).encode())


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"\xff\xfe not utf-8", id="not-utf-8"),
        pytest.param(b"[" * 5000 + b"]" * 5000, id="deeply-nested"),
        pytest.param(b"a: &x [*x]", id="recursive-alias"),
        pytest.param(b"channels: &x {a: *x}\nlanes: {}", id="recursive-mapping"),
    ],
)
def test_regression_corpus(tmp_path: Path, content: bytes) -> None:
    """Bytes that are not UTF-8 (found by the any-bytes property) raised UnicodeDecodeError,
    and deep nesting RecursionError, out of ``load_config`` instead of a ConfigError."""
    assert _load(tmp_path, content) is None
