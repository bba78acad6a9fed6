"""Audits end to end (issue 23): a real gateway and two emulators that answer a labelled
workload right or wrong (quality marks), audits on with the ``marks`` judge; the labels land
in the records store, `router train --from-log` trains on them, and a gateway loads the model.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import openai
import pytest
import yaml

from hybrid_gateway.cli import main
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.classifier import load_model
from hybrid_gateway.routing.dataset import bundled_embedder
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload
from tests.e2e.stack import channel, emulator, gateway, write_config

FAST = ("--decode-step-ms", "0.2", "--prefill-tps", "1000000")
PER_KIND = 30


def item(n: int, question: str, hard: bool) -> WorkloadItem:
    labels = Labels(
        light_ok=not hard, heavy_ok=True, complexity="COMPLEX" if hard else "SIMPLE",
        category="e2e", source="e2e", group=f"g{n}", lang="en", outcome="measured",
    )  # fmt: skip
    return WorkloadItem(f"i{n}", 0.0, "default", ({"role": "user", "content": question},),
                        64, 24, False, labels)  # fmt: skip


def questions() -> list[tuple[str, bool]]:
    hard = [f"Prove that for every integer n >= {k}, the sum of the first n odd numbers is n "
            f"squared, and derive a closed form for the sum of their cubes up to {k * 7}."
            for k in range(PER_KIND)]  # fmt: skip
    easy = [f"What time does branch number {k} open on Saturdays?" for k in range(PER_KIND)]
    return [(q, kind) for pair in zip(hard, easy, strict=True)
            for q, kind in zip(pair, (True, False), strict=True)]  # fmt: skip


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    asked = questions()
    workload = tmp_path / "workload.jsonl"
    write_workload(workload, [item(n, q, h) for n, (q, h) in enumerate(asked)], {"seed": 1})
    log_path = tmp_path / "requests.sqlite3"
    logs = tmp_path / "logs"
    with (
        emulator(logs, "light", "--profile", "light", "--model", "light-model", "--workload",
                 str(workload), *FAST) as light,
        emulator(logs, "heavy", "--profile", "heavy", "--model", "heavy-model", "--workload",
                 str(workload), *FAST) as heavy,
    ):  # fmt: skip
        config = {
            "server": {"host": "127.0.0.1", "port": 0,
                       "request_log": {"path": str(log_path), "flush_interval_ms": 50,
                                       "prompts": "full"}},
            "channels": {"light-emu": channel(light.url + "/v1", "light-model"),
                         "heavy-emu": channel(heavy.url + "/v1", "heavy-model")},
            "lanes": {"light": {"channel": "light-emu"}, "heavy": {"channel": "heavy-emu"}},
            "routing": {"default_lane": "light"},
            "cache": {"exact": {"enabled": False}},
            "learning": {"audit": {"enabled": True, "judge": {"kind": "marks"},
                                   "router": {"rate": 1.0, "daily_usd_per_tenant": 10.0}}},
        }  # fmt: skip
        config_path = write_config(tmp_path / "gateway.yaml", config)
        with gateway(config_path) as running:
            yield running.base_url, config_path, log_path


def verdicts(log_path: Path, want: int) -> dict[str, str | None]:
    """request id -> verdict, once ``want`` audits are stored (the gateway writes them in the
    background; 30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        with closing(sqlite3.connect(log_path)) as db:
            try:
                rows = dict(db.execute("SELECT request_id, verdict FROM audits").fetchall())
            except sqlite3.OperationalError:  # not created yet
                rows = {}
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_labels_land_and_a_model_trained_on_them_loads(
    stack: tuple[str, Path, Path], tmp_path: Path
) -> None:
    base_url, config_path, log_path = stack
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    asked = questions()
    hard_ids = set()
    for question, hard in asked:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": question}], max_tokens=64
        )
        answer = raw.parse().choices[0].message.content or ""
        assert "lane=light" in raw.headers["x-gateway-route"]
        assert ("|wrong⟧" in answer) == hard  # the client got the light answer, untouched
        if hard:
            hard_ids.add(raw.headers["x-request-id"])
    stored = verdicts(log_path, len(asked))
    assert len(stored) == len(asked)
    assert {v for rid, v in stored.items() if rid in hard_ids} == {"a_worse"}
    assert {v for rid, v in stored.items() if rid not in hard_ids} == {"equivalent"}
    candidate, out = tmp_path / "candidate.npz", tmp_path / "router.npz"
    code = main(["router", "train", "--from-log", "--config", str(config_path),
                 "--out", str(out), "--candidate-out", str(candidate),
                 "--embed-cache", str(tmp_path / "embeddings.sqlite3")])  # fmt: skip
    assert code in (0, 1)  # accepted, or refused by the replay; the candidate is kept either way
    assert out.exists() == (code == 0)
    model = load_model(candidate, namespace_of(bundled_embedder()))
    assert model.info["from_log"] == {"rows": 42, "l2_towards_prior": 30.0}
    served = write_config(tmp_path / "served.yaml", {
        **yaml_of(config_path),
        "routing": {"default_lane": "light", "classifier": {"model": str(candidate)}},
    })  # fmt: skip
    with gateway(served, "gateway-candidate") as running:
        client = openai.OpenAI(base_url=running.base_url, api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": asked[0][0]}], max_tokens=64
        )
        assert "rule=classifier" in raw.headers["x-gateway-route"]


def yaml_of(path: Path) -> dict[str, object]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded
