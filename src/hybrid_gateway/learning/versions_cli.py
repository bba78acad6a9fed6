"""`hybrid-gateway router versions | rollback`: the classifier versions in the records store.

    router versions --config gateway.yaml [--json]       every version, the live one marked
    router rollback --config gateway.yaml [--to VERSION] make an earlier version live (default:
                                                         the one below the live version)

A rollback stamps the version's ``live_since``; every gateway with ``learning.router_update``
on picks it up at its next poll (``poll_s``), with the cascade student stored with it (column
``student``: ``yes`` where the version has one).  Errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.accounting.log_source import connect_records
from hybrid_gateway.accounting.report import ReportError
from hybrid_gateway.config import load_config, resolve_path
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.model_store import (
    ModelStore,
    ModelVersion,
    PostgresModelStore,
    SqliteModelStore,
)
from hybrid_gateway.tools.cliargs import int_at_least

__all__ = ["add_arguments", "rollback", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the gateway config")
    parser.add_argument("--json", action="store_true", help="versions: one JSON object")
    parser.add_argument("--to", type=int_at_least(1), help="rollback: the version to make live")


@contextmanager
def _store(config_path: Path) -> Iterator[ModelStore]:
    config = load_config(config_path)
    if config.stores.records == "postgres":
        conn = connect_records(config, config_path)
        try:
            yield PostgresModelStore(lambda work: work(conn))
        finally:
            conn.close()
        return
    path = resolve_path(config_path, config.server.request_log.path)
    if not path.is_file():
        raise ReportError(f"no request log at {path} (server.request_log.path)")
    store = SqliteModelStore(path)
    try:
        yield store
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    try:
        with _store(args.config) as store:
            if args.router_command == "rollback":
                return rollback(store, args.to)
            _list(store.versions(), store.live(), args.json)
            return 0
    except (ReportError, ConfigError, OSError) as exc:
        print(f"router {args.router_command}: {exc}", file=sys.stderr)
        return 2


def _stamp(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _list(versions: list[ModelVersion], live: tuple[int, str] | None, as_json: bool) -> None:
    live_version = None if live is None else live[0]
    if as_json:
        rows: list[dict[str, Any]] = [
            {"version": v.version, "created": v.created, "namespace": v.namespace,
             "live_since": v.live_since, "live": v.version == live_version,
             "student": v.has_student, "metrics": v.metrics}
            for v in versions
        ]  # fmt: skip
        print(json.dumps({"live": live_version, "versions": rows}))
        return
    if not versions:
        print("no router model versions (learning.router_update has accepted none)")
        return
    print(f"{'':1} {'version':>7}  {'created (UTC)':<19}  {'embedder':<28}  student  metrics")
    for v in versions:
        mark = "*" if v.version == live_version else ""
        figures = ", ".join(f"{k} {val:.4f}" if isinstance(val, float) else f"{k} {val}"
                            for k, val in v.metrics.items())  # fmt: skip
        student = "yes" if v.has_student else "-"
        print(f"{mark:1} {v.version:>7}  {_stamp(v.created):<19}  {v.namespace:<28}  "
              f"{student:<7}  {figures}")  # fmt: skip
    print("* live")


def rollback(store: ModelStore, to: int | None) -> int:
    live = store.live()
    if live is None:
        raise ReportError("no router model versions to roll back to")
    target = to
    if target is None:
        below = [v.version for v in store.versions() if v.version < live[0]]
        if not below:
            raise ReportError(f"v{live[0]} is the first version: give --to")
        target = max(below)
    if target == live[0]:
        print(f"v{target} is live already")
        return 0
    if not store.make_live(target, time.time()):
        raise ReportError(f"no version {target} (`router versions` lists them)")
    print(f"v{target} is live (was v{live[0]}); gateways with learning.router_update load it at "
          "their next poll (poll_s)")  # fmt: skip
    return 0
