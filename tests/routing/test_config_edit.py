from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.config_edit import set_value, update_config_file
from tests.test_config import EXAMPLE


def test_values_are_spliced_in_and_comments_kept(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(EXAMPLE.read_text())
    backup = update_config_file(path, {
        ("routing", "classifier", "threshold"): 0.42,
        ("routing", "gates", "heavy_categories"): ["college_mathematics", "法律"],
    })  # fmt: skip
    assert backup.read_text() == EXAMPLE.read_text()
    config = load_config(path)
    assert config.routing.classifier is not None and config.routing.classifier.threshold == 0.42
    assert config.routing.gates is not None
    assert config.routing.gates.heavy_categories == ("college_mathematics", "法律")
    text = path.read_text()
    assert "# first match wins; every decision names its rule" in text
    update_config_file(path, {("routing", "classifier", "threshold"): 0.5})
    assert load_config(path).routing.classifier.threshold == 0.5  # type: ignore[union-attr]


def test_flow_mappings_and_missing_sections() -> None:
    text = "routing:\n  classifier: {model: default}\n  default_lane: heavy\n"
    out = yaml.safe_load(set_value(text, ("routing", "classifier", "threshold"), 0.3))
    assert out["routing"]["classifier"] == {"model": "default", "threshold": 0.3}
    out = yaml.safe_load(set_value("a: 1\n", ("routing", "classifier", "threshold"), 0.3))
    assert out == {"a": 1, "routing": {"classifier": {"threshold": 0.3}}}


def test_an_invalid_result_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(EXAMPLE.read_text())
    with pytest.raises(ConfigError):
        update_config_file(path, {("routing", "classifier", "threshold"): 7})
    assert path.read_text() == EXAMPLE.read_text()
    assert not (tmp_path / "gw.yaml.bak").exists()
