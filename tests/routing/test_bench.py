"""`hybrid-gateway bench routing`: decision latency of the config's routers, with the packaged
classifier or a model file of one's own (``--model``)."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.config import load_config
from hybrid_gateway.routing.bench import _measure, markdown
from hybrid_gateway.routing.training import FitSettings, TrainingSet, fit
from tests.routing.fakes import WordHashEmbedder
from tests.routing.helpers import synthetic_rows

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"


async def test_bench_times_a_model_of_ones_own(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    fit(data, embedder.namespace, FitSettings(target="outcomes")).save(tmp_path / "m.npz")
    report = await _measure(load_config(EXAMPLE), EXAMPLE, embedder, 200, tmp_path / "m.npz")
    assert report["classifier_model"] == str((tmp_path / "m.npz").resolve())
    routers = report["routers"]
    assert set(routers) == {"forced", "rules", "rules+classifier", "classifier decisions only"}
    decided = routers["classifier decisions only"]
    assert decided["decisions"] > 0 and set(decided["rules"]) == {"classifier"}
    assert decided["p99_us"] >= decided["p50_us"] > 0
    assert "classifier model: " in markdown(report)
