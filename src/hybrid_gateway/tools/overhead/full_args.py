"""The options of `bench overhead --pipeline full` (the smart path beside the pass-through)."""

from __future__ import annotations

import argparse

import yaml

from hybrid_gateway.tools.cliargs import int_at_least

__all__ = ["add_full_arguments", "parse_setting"]


def add_full_arguments(overhead: argparse.ArgumentParser) -> None:
    full = overhead.add_argument_group("the smart path (--pipeline full)")
    full.add_argument(
        "--pipeline",
        choices=["pass-through", "full"],
        default="pass-through",
        help="full: floor, pass-through and the full pipeline (semantic cache + classifier) "
        "side by side, per prompt kind, with an open-loop run and a stage breakdown",
    )
    full.add_argument(
        "--prompts",
        type=_prompt_list,
        default=["short", "long"],
        help="full: comma list of short (~60 chars), long (~2,000 chars) (default both)",
    )
    full.add_argument(
        "--rate",
        type=float,
        default=100.0,
        help="full: open-loop requests/s for the p99-added figure; 0 skips it (default 100)",
    )
    full.add_argument(
        "--profile-requests",
        type=int_at_least(1),
        default=30,
        help="full: requests per prompt kind in the in-process stage profile (default 30)",
    )
    full.add_argument(
        "--full-set",
        type=parse_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="full: change the full pipeline's config, e.g. embedding.max_wait_ms=2 (repeatable)",
    )


def _prompt_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    kinds = ("short", "long")
    if not names or any(n not in kinds for n in names):
        raise argparse.ArgumentTypeError(f"prompts are {','.join(kinds)}; got {text!r}")
    return [n for n in kinds if n in names]


def parse_setting(text: str) -> tuple[str, object]:
    """``a.b.c=VALUE`` -> (``a.b.c``, the value read as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with a dotted key, got {text!r}")
    return key.strip(), yaml.safe_load(value)
