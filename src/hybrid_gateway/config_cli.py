"""`hybrid-gateway config check FILE`: validate a config without starting anything."""

from __future__ import annotations

import argparse
import sys

from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate a config file and summarise it")
    check.add_argument("file", help="the YAML config file")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    for line in summary_lines(args.file, config):
        print(line)
    return 0


def summary_lines(file: str, config: GatewayConfig) -> list[str]:
    """What ``config check`` prints, and ``serve`` logs at start-up."""
    lines = [f"{file}: ok"]
    for name, channel in config.channels.items():
        where = channel.base_url
        if channel.endpoints is not None:  # upstreams/pool/: several servers
            where = (f"{len(channel.endpoints)} endpoints ({channel.balancing.policy}) "
                     + ", ".join(e.url for e in channel.endpoints))  # fmt: skip
        lines.append(
            f"  channel {name}: {where} model={channel.model} "
            f"${channel.price_per_1m_input:g}/${channel.price_per_1m_output:g} per 1M in/out, "
            f"max_concurrency={channel.max_concurrency}"
        )
    for name, lane in config.lanes.items():
        extra = f", backup {lane.backup}" if lane.backup else ""
        if lane.deadline_s is not None:
            on = "first token" if lane.deadline_on == "first_token" else "answer"
            stall = f", stall {lane.stall_s:g} s" if lane.stall_s is not None else ""
            extra += f", deadline {lane.deadline_s:g} s on the {on}{stall} -> {lane.fallback_lane}"
        lines.append(f"  lane {name} -> {lane.channel}{extra}")
    models = ", ".join(
        f"{m.id}" + (f"->{m.lane}" if m.lane else " (routed)") for m in config.models
    )
    lines.append(f"  models: {models}")
    rules = ", ".join(f"{r.name}->{r.lane or r.action}" for r in config.routing.rules) or "none"
    lines.append(f"  rules: {rules}; default lane {config.routing.default_lane}")
    return lines
