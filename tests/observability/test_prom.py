from __future__ import annotations

import pytest

from hybrid_gateway.observability.prom import Counter, Gauge, Histogram, Registry


def render(*families: Counter | Gauge | Histogram) -> list[str]:
    registry = Registry()
    registry.families.extend(families)
    return registry.render().decode().splitlines()


def test_counter_with_labels_and_escaping() -> None:
    c = Counter("x_requests", "Requests", ["model", "status"])
    c.inc(("a\\b", "200"))
    c.inc(('q"uote\nline', "500"), 2)
    c.inc(("a\\b", "200"))
    lines = render(c)
    assert lines[:2] == ["# HELP x_requests Requests", "# TYPE x_requests counter"]
    assert 'x_requests_total{model="a\\\\b",status="200"} 2.0' in lines
    assert 'x_requests_total{model="q\\"uote\\nline",status="500"} 2.0' in lines
    with pytest.raises(ValueError):
        c.inc(("a", "b"), -1)


def test_histogram_buckets_are_cumulative_and_le_inclusive() -> None:
    h = Histogram("lat_seconds", "Latency", ["lane"], [0.1, 1.0])
    for value in (0.05, 0.1, 0.5, 3.0):
        h.observe(value, ("light",))
    lines = render(h)
    assert 'lat_seconds_bucket{lane="light",le="0.1"} 2' in lines
    assert 'lat_seconds_bucket{lane="light",le="1.0"} 3' in lines
    assert 'lat_seconds_bucket{lane="light",le="+Inf"} 4' in lines
    assert 'lat_seconds_count{lane="light"} 4' in lines
    assert 'lat_seconds_sum{lane="light"} 3.65' in lines


def test_gauge_without_labels() -> None:
    g = Gauge("entries", "Entries")
    g.set(3)
    assert render(g)[-1] == "entries 3.0"
