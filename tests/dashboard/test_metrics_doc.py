"""docs/metrics.md documents exactly the metrics the registry renders, with type and labels."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.observability import names
from tests.dashboard.metrics_doc import documented, exposed_name


async def test_every_rendered_metric_is_documented_with_its_type_and_labels(
    app_client: TestClient[Any, Any],
) -> None:
    docs = documented()
    families = app_client.app[RUNTIME].metrics.registry.families
    assert families, "the registry has metrics"
    for family in families:
        name = exposed_name(family)
        assert name in docs, f"{name} is rendered by /metrics but not documented in docs/metrics.md"
        doc = docs[name]
        assert doc.kind == family.kind, f"{name}: documented as {doc.kind}, is {family.kind}"
        assert doc.labels == set(family.label_names), (
            f"{name}: documented labels {sorted(doc.labels)}, has {sorted(family.label_names)}"
        )
    rendered = {exposed_name(f) for f in families}
    stale = sorted(set(docs) - rendered)
    assert not stale, f"documented but not rendered: {stale}"


async def test_the_scrape_has_no_family_outside_the_registry(
    app_client: TestClient[Any, Any],
) -> None:
    text = await (await app_client.get("/metrics")).text()
    typed = re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE)
    docs = documented()
    for name, kind in typed:
        exposed = name + "_total" if kind == "counter" else name
        assert exposed in docs, f"{exposed} is on /metrics but not in docs/metrics.md"


def test_every_name_constant_is_documented() -> None:
    docs = {d.name.removesuffix("_total") for d in documented().values()}
    constants = {
        value for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith("hybrid_gateway_")
    }  # fmt: skip
    assert constants <= docs, f"undocumented: {sorted(constants - docs)}"
