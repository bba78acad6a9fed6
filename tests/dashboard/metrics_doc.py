"""Reading docs/metrics.md's metric table: what each documented metric is, by exposed name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.observability.prom import Counter, Gauge, Histogram

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `(hybrid_gateway_[a-z0-9_]+)` \| (counter|gauge|histogram) \|([^|]*)\|")


@dataclass(frozen=True)
class Documented:
    name: str  # as queried: counters with _total, histograms without suffix
    kind: str
    labels: frozenset[str]


def documented() -> dict[str, Documented]:
    out: dict[str, Documented] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            name, kind, labels = match.groups()
            names = frozenset(re.findall(r"`([a-z_]+)`", labels))
            out[name] = Documented(name, kind, names)
    return out


def exposed_name(family: Counter | Gauge | Histogram) -> str:
    return family.name + "_total" if family.kind == "counter" else family.name


def series_names(doc: Documented) -> set[str]:
    """The sample names a query may use for a documented metric."""
    if doc.kind == "histogram":
        return {doc.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return {doc.name}
