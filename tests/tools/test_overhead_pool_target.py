"""`bench overhead --targets gateway-pool`: the same gateway config with one-endpoint pools."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hybrid_gateway.config import load_config
from hybrid_gateway.tools.overhead.cli import _write_gateway_config, add_arguments


def test_the_pool_target_has_each_channel_as_a_pool_of_its_one_server(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8123"
    plain = load_config(_write_gateway_config(tmp_path / "a", url))
    pooled = load_config(_write_gateway_config(tmp_path / "b", url, pool=True))
    assert plain.channels.keys() == pooled.channels.keys()
    for name, channel in pooled.channels.items():
        assert plain.channels[name].endpoints is None
        assert [e.url for e in channel.endpoints or []] == [f"{url}/v1"]
        assert channel.model == plain.channels[name].model


def test_gateway_pool_is_a_target_but_not_a_default_one() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).targets == ["emulator", "bare", "gateway"]
    chosen = parser.parse_args(["--targets", "gateway-pool,gateway"]).targets
    assert chosen == ["gateway", "gateway-pool"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--targets", "pool"])
