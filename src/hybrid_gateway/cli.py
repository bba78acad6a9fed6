"""The `hybrid-gateway` command line: a thin registry of subcommands.

Each subcommand lives in its own module, which exposes two functions:

    configure(parser: argparse.ArgumentParser) -> None   # add its arguments
    run(args: argparse.Namespace) -> int                  # do the work, return an exit code

Modules are imported only when their subcommand runs, so `hybrid-gateway emulate` never pays
for the gateway's imports and vice versa.  Adding a subcommand: write the module, add one line
to ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from hybrid_gateway import __version__

# name -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("hybrid_gateway.api.serve", "run the OpenAI-compatible gateway"),
    "emulate": (
        "hybrid_gateway.tools.emulator.cli",
        "run an OpenAI-compatible LLM server emulator",
    ),
    "bench": (
        "hybrid_gateway.tools.bench_cli",
        "benchmarks: `bench overhead`, `bench run`, `bench degrade`",
    ),
    "workload": ("hybrid_gateway.tools.workload.cli", "build replayable workloads from real data"),
    "demo": ("hybrid_gateway.tools.demo", "a short mix, then a strategy comparison"),
    "config": ("hybrid_gateway.config_cli", "check a config file (`config check FILE`)"),
    "cache": (
        "hybrid_gateway.cache.semantic.cli",
        "semantic cache on labelled pairs: `cache eval`, `calibrate`, `train-verifier`, "
        "`train-reranker`",
    ),
    "router": (
        "hybrid_gateway.routing.cli",
        "the complexity classifier: `router train`, `router eval`, `router calibrate`",
    ),
    "plan": (
        "hybrid_gateway.accounting.plan_cli",
        "capacity planning: `plan vram`, `plan breakeven`",
    ),
    "keys": ("hybrid_gateway.tenancy.keys_cli", "API keys: `keys create | list | revoke`"),
    "report": ("hybrid_gateway.accounting.report_cli", "cost per tenant/lane/...: `report cost`"),
    "misroutes": (
        "hybrid_gateway.review.cli",
        "the weekly misroute review: clusters, proposed rule changes, replayed; `--apply N`",
    ),
}


class CommandParser(argparse.ArgumentParser):
    """A usage error is one line and exit 2: what is wrong and where help is, no usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="hybrid-gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_parser(name: str) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The full parser of one subcommand (importing its module), and the module."""
    module_path, help_text = COMMANDS[name]
    module = importlib.import_module(module_path)
    parser = CommandParser(prog=f"hybrid-gateway {name}", description=help_text)
    module.configure(parser)
    return parser, module


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    if not args_list or args_list[0] in {"-h", "--help"}:
        top.print_help()
        return 0 if args_list else 2
    if args_list[0] == "--version":
        print(_version())
        return 0
    name = args_list[0]
    if name not in COMMANDS:
        top.parse_args(args_list)  # prints the usage error and exits 2
        return 2
    parser, module = command_parser(name)
    args = parser.parse_args(args_list[1:])
    try:
        code = int(module.run(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        # `hybrid-gateway config check FILE | head`: the reader left; no traceback, and
        # nothing more to write (stdout now goes nowhere, so the final flush succeeds)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped
    return code


def _version() -> str:
    return f"hybrid-gateway {__version__}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
