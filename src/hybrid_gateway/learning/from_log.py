"""``--from-log [LOG_OR_CONFIG]``: the audited traffic as labelled data for the offline commands
(``router calibrate``, ``cache calibrate``, ``cache train-verifier``, ``cache train-reranker``).

The audits come from a request log SQLite file, or from a config's records store (its SQLite
file, or the shared PostgreSQL); with no value, from the command's ``--config``.  Router audits
become outcome rows (``router_fit.outcome_rows``) with the category the request declared;
cache audits become labelled pairs (``cache_report_cli.write_pairs``).  Both need the question
text: ``server.request_log.prompts: full`` or ``redacted`` (with ``none`` nothing is stored,
with ``hash`` only a digest).
"""

from __future__ import annotations

import argparse
import atexit
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.accounting.report import LogSource, ReportError, parse_instant, sqlite_source
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.cache_report_cli import write_pairs
from hybrid_gateway.learning.labels import PAIR_KINDS, Label, read_labels
from hybrid_gateway.learning.router_fit import outcome_rows
from hybrid_gateway.routing.outcomes import OutcomeRow

__all__ = [
    "MIN_PAIRS", "MIN_ROUTER_ROWS", "FromLogError", "add_from_log_flag", "add_pair_source",
    "audited_pair_file", "audited_router_rows", "read_audits", "use_audited_pairs",
]  # fmt: skip

MIN_ROUTER_ROWS = 20  # fewer audited questions say nothing about a threshold
MIN_PAIRS = 20  # nor about a hit rule
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_DIGEST = re.compile(r"[0-9a-f]{64}")  # prompts: hash stores the SHA-256 hex digest
_NO_TEXT = ("the log stores no question text (server.request_log.prompts: none or hash); set it "
            "to full or redacted and let audits land first")  # fmt: skip
_CATEGORIES = (
    "SELECT a.request_id, r.category FROM audits AS a JOIN requests AS r "
    "ON r.request_id = a.request_id WHERE a.kind = 'router' AND a.ts >= ? AND a.ts < ?"
)


class FromLogError(ValueError):
    """Unusable audits: one line on stderr, exit code 2."""


def add_from_log_flag(parser: argparse.ArgumentParser | argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--from-log", nargs="?", const="", metavar="LOG_OR_CONFIG",
        help="labelled data from the audits (learning.audit) of a request log SQLite file or "
             "a config's records store (default: --config's)",
    )  # fmt: skip


def add_pair_source(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--pairs FILE [FILE ...]`` or ``--from-log [LOG_OR_CONFIG]`` (+ ``--since``)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", nargs="+", help=help_text)
    add_from_log_flag(source)
    parser.add_argument("--since", default="30d", help="--from-log: audits since (30d)")


def use_audited_pairs(args: argparse.Namespace) -> str | None:
    """With ``--from-log``: ``args.pairs`` becomes the audits' pair file (removed at exit);
    the one-line error when the audits cannot give one."""
    if not isinstance(getattr(args, "from_log", None), str):  # `cache pairs --from-log`: a flag
        return None
    try:
        labels = read_audits(args.from_log, getattr(args, "config", None), args.since)
        folder = Path(tempfile.mkdtemp(prefix="hybrid-gateway-audited-"))
        atexit.register(shutil.rmtree, folder, True)
        args.pairs = [str(audited_pair_file(labels, folder))]
    except (FromLogError, ReportError, ConfigError) as exc:
        return f"{args.action} --from-log: {exc}"
    return None


@contextmanager
def _source(target: str, config: Path | None) -> Iterator[LogSource]:
    path = Path(target) if target else config
    if path is None:
        raise FromLogError("--from-log needs a request log or config file, or --config")
    if path.suffix.lower() in _CONFIG_SUFFIXES:
        with config_source(load_config(path), path) as source:
            yield source
        return
    if not path.is_file():
        raise FromLogError(f"{path}: no such request log")
    with sqlite_source(path) as source:
        yield source


def read_audits(
    target: str, config: Path | None, since: str, *, categories: bool = False
) -> list[Label]:
    """The audits since ``since``; with ``categories`` a router label's ``scope`` holds the
    category its request declared (for the gates)."""
    now = time.time()
    start = parse_instant(since, now, ZoneInfo("UTC"))
    with _source(target, config) as source:
        labels = read_labels(source, start, now + 1)
        if not categories:
            return labels
        found: dict[str, str | None]
        try:
            found = {str(r[0]): r[1] for r in source.query(_CATEGORIES, (start, now + 1))}
        except Exception:  # an older log without the column, or no requests table
            found = {}
    return [
        replace(lb, scope=found.get(lb.request_id)) if lb.kind == "router" else lb for lb in labels
    ]


def _text(prompt: str | None) -> bool:
    return bool(prompt) and not _DIGEST.fullmatch(prompt or "")


def audited_router_rows(labels: Sequence[Label]) -> list[OutcomeRow]:
    """Router audits with a verdict and the question stored, as outcome rows (oldest first)."""
    judged = [lb for lb in labels if lb.kind == "router" and lb.verdict is not None]
    usable = [lb for lb in judged if _text(lb.prompt)]
    if judged and not usable:
        raise FromLogError(f"{len(judged)} router audits with a verdict, but {_NO_TEXT}")
    if len(usable) < MIN_ROUTER_ROWS:
        raise FromLogError(f"{len(usable)} usable router audits (a verdict and the question "
                           f"stored); at least {MIN_ROUTER_ROWS} are needed")  # fmt: skip
    ordered = sorted(usable, key=lambda lb: lb.ts)  # as outcome_rows orders them
    rows = outcome_rows(ordered)
    return [replace(r, category=lb.scope or "") for r, lb in zip(rows, ordered, strict=True)]


def audited_pair_file(labels: Sequence[Label], folder: Path | None = None) -> Path:
    """The cache and near-miss audits as a labelled pair file (JSONL) in a fresh temporary
    folder."""
    judged = [lb for lb in labels if lb.kind in PAIR_KINDS and lb.verdict is not None]
    usable = [lb for lb in judged if _text(lb.prompt) and _text(lb.cached_prompt)]
    if judged and not usable:
        raise FromLogError(f"{len(judged)} cache audits with a verdict, but {_NO_TEXT}")
    if len(usable) < MIN_PAIRS:
        raise FromLogError(f"{len(usable)} audited pairs (a cache audit with a verdict and both "
                           f"questions stored); at least {MIN_PAIRS} are needed")  # fmt: skip
    where = Path(tempfile.mkdtemp(prefix="hybrid-gateway-")) if folder is None else folder
    path = where / "audited-pairs.jsonl"
    try:
        write_pairs(path, usable)
    except ReportError as exc:
        raise FromLogError(str(exc)) from None
    return path
