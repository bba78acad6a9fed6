"""The built-in dashboard in headless Chromium: it loads, runs its script, and the numbers it
shows are the ones ``/metrics`` reports.  A screenshot is kept as a test artefact."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import openai
import pytest

from hybrid_gateway.dashboard import histogram_quantile
from tests.dashboard.live import live_gateway
from tests.e2e.stack import Gateway

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed and could not be: apt-get install -y chromium "
    "(make test installs it)",
)

_SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def chromium(url: str, *args: str, profile: Path) -> str:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
        # Virtual time runs the page's timers and waits for its fetches, then stops.
        "--virtual-time-budget=4000", *args, url,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Metrics:
    """The samples of a /metrics scrape, by name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match:
                name, labels, value = match.groups()
                pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels or ""))
                self.samples.append((name, pairs, float(value)))

    def total(self, name: str, **where: str) -> float:
        return sum(
            value for n, labels, value in self.samples
            if n == name and all(labels.get(k) == v for k, v in where.items())
        )  # fmt: skip

    def hits(self) -> float:
        return sum(
            value for n, labels, value in self.samples
            if n == "hybrid_gateway_requests_total" and labels["cache"] not in ("miss", "bypass")
        )  # fmt: skip

    def quantile(self, q: float, lane: str) -> float | None:
        cumulative: dict[float, float] = defaultdict(float)
        for n, labels, value in self.samples:
            if n == "hybrid_gateway_request_duration_seconds_bucket" and labels["lane"] == lane:
                cumulative[float(labels["le"])] += value
        bounds = sorted(cumulative)
        counts = [int(cumulative[b] - (cumulative[bounds[i - 1]] if i else 0))
                  for i, b in enumerate(bounds)]  # fmt: skip
        return histogram_quantile(q, [b for b in bounds if not math.isinf(b)], counts)


class Shown(HTMLParser):
    """Text of every element with a ``data-metric`` attribute, per lane row where inside one."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.lanes: dict[str, dict[str, str]] = defaultdict(dict)
        self._lane: str | None = None
        self._open: list[str | None] = []
        self._text: dict[int, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and found.get("data-lane"):
            self._lane = found["data-lane"]
        self._open.append(found.get("data-metric"))
        if found.get("data-metric"):
            self._text[len(self._open)] = []

    def handle_endtag(self, tag: str) -> None:
        if not self._open:
            return
        depth = len(self._open)
        metric = self._open.pop()
        if metric:
            text = "".join(self._text.pop(depth, [])).strip()
            if self._lane is not None and metric.startswith("lane"):
                self.lanes[self._lane][metric] = text
            else:
                self.values[metric] = text
        if tag == "tr":
            self._lane = None

    def handle_data(self, data: str) -> None:
        for texts in self._text.values():
            texts.append(data)


def ms(text: str) -> float:
    number, unit = text.split()
    return float(number) / (1000 if unit == "ms" else 1)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with live_gateway(tmp_path_factory.mktemp("dashboard")) as running:
        yield running


def send_traffic(stack: Gateway) -> None:
    with openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        questions = [f"how do i reset password {i}" for i in range(5)]  # light
        questions += [f"prove the theorem number {i}" for i in range(4)]  # heavy (default)
        questions += questions[:3]  # asked again: exact cache hits
        ids = []
        for question in questions:
            raw = sdk.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": question}], max_tokens=16
            )
            ids.append(raw.headers["x-request-id"])
        stream = sdk.chat.completions.create(
            model="auto", stream=True, max_tokens=16,
            messages=[{"role": "user", "content": "how do i stream an answer"}],
        )  # fmt: skip
        assert len(list(stream)) > 1
        with pytest.raises(openai.NotFoundError):
            sdk.chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "x"}]
            )
    body = json.dumps({"request_id": ids[5], "rating": "down", "reason": "too_slow"}).encode()
    request = urllib.request.Request(
        stack.url + "/v1/feedback", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_dashboard_in_chromium_matches_metrics(stack: Gateway, tmp_path: Path) -> None:
    send_traffic(stack)
    metrics = Metrics(get(stack.url + "/metrics"))
    dom = chromium(stack.url + "/dashboard", "--dump-dom", profile=tmp_path / "profile")
    shown = Shown()
    shown.feed(dom)

    total = metrics.total("hybrid_gateway_requests_total")
    assert total == 14  # 12 questions + 1 stream + 1 unknown model
    assert shown.values["requests"] == "14"
    assert shown.values["hit-rate"] == f"{metrics.hits() / total * 100:.1f} %" == "21.4 %"
    cost = metrics.total("hybrid_gateway_cost_usd_total")
    assert cost > 0
    assert float(shown.values["cost-per-1k"].lstrip("$")) == pytest.approx(
        1000 * cost / total, abs=1e-6
    )
    assert shown.values["errors"] == "1"
    assert shown.values["feedback-down"] == "1" and shown.values["feedback-up"] == "0"

    assert set(shown.lanes) == {"light", "heavy", "none"}
    for lane, row in shown.lanes.items():
        requests = metrics.total("hybrid_gateway_requests_total", lane=lane)
        assert row["lane-requests"] == str(int(requests))
        assert row["lane-share"] == f"{requests / total * 100:.1f} %"
        for q, key in ((0.5, "lane-p50"), (0.95, "lane-p95")):
            expected = metrics.quantile(q, lane)
            assert expected is not None
            assert ms(row[key]) == pytest.approx(expected, abs=0.0006), (lane, key)


def test_dashboard_screenshot_is_kept(stack: Gateway, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    chromium(
        stack.url + "/dashboard?refresh=1", f"--screenshot={shot}", "--window-size=1280,1000",
        profile=tmp_path / "profile",
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000, "a rendered page, not a blank one"


def test_dashboard_uses_no_external_assets(stack: Gateway) -> None:
    page = get(stack.url + "/dashboard")
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", page)
    script = get(stack.url + "/dashboard/static/dashboard.js")
    assert "http://" not in script.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in script


def test_data_json_agrees_with_metrics(stack: Gateway) -> None:
    data: dict[str, Any] = json.loads(get(stack.url + "/dashboard/data.json"))
    metrics = Metrics(get(stack.url + "/metrics"))
    assert data["requests"] == metrics.total("hybrid_gateway_requests_total")
    assert data["cache_hits"] == metrics.hits()
    assert data["cost_usd"] == pytest.approx(metrics.total("hybrid_gateway_cost_usd_total"))
