"""A real gateway in front of one emulator, for the feedback and dashboard end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.stack import Gateway, channel, emulator, gateway, write_config


def live_config(upstream_url: str, log_path: Path) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(log_path), "flush_interval_ms": 50}},
        "channels": {
            "light-emu": channel(upstream_url + "/v1", "light-model"),
            "heavy-emu": channel(upstream_url + "/v1", "heavy-model", price_per_1m_input=2.0,
                                 price_per_1m_output=6.0),
        },
        "lanes": {"light": {"channel": "light-emu"}, "heavy": {"channel": "heavy-emu"}},
        "routing": {"default_lane": "heavy", "rules": [
            {"name": "how-to", "when": {"keywords_any": ["how do i"]}, "lane": "light"},
        ]},
        "cache": {"exact": {"enabled": True, "ttl_s": 600}},
    }  # fmt: skip


@contextmanager
def live_gateway(folder: Path) -> Iterator[Gateway]:
    """One emulator (both channels, light profile: quick answers) and the gateway."""
    with emulator(folder, "emulator", "--profile", "light", "--model", "light-model") as emu:
        config = live_config(emu.url, folder / "requests.sqlite3")
        with gateway(write_config(folder / "gateway.yaml", config)) as running:
            yield running
