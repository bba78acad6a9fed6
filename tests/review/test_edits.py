"""Proposal edits on a config file's text: rules inserted, changed, deleted; comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hybrid_gateway.errors import ConfigError
from hybrid_gateway.review.proposals import Edit, apply_edits
from hybrid_gateway.routing.config_edit import replace_config_file

BLOCK = """\
routing:   # the rules under review
  default_lane: heavy
  rules:
  - name: how-to-light  # too broad?
    when:
      keywords_any:
      - how do i
      - 怎么
    lane: light
  - name: short
    when: {max_chars: 40}
    lane: light
  classifier: {threshold: 0.5}
other: 1
"""


def rules_of(text: str) -> list[dict[str, object]]:
    return list(yaml.safe_load(text)["routing"]["rules"])


def test_insert_before_a_rule_and_after_the_last() -> None:
    new = {"name": "proofs", "when": {"keywords_any": ["证明"]}, "lane": "heavy"}
    text = apply_edits(BLOCK, [Edit("insert_rule", 0, new)])
    assert [r["name"] for r in rules_of(text)] == ["proofs", "how-to-light", "short"]
    assert rules_of(text)[0] == new and "# too broad?" in text and "# the rules" in text
    text = apply_edits(BLOCK, [Edit("insert_rule", 2, new)])
    assert [r["name"] for r in rules_of(text)] == ["how-to-light", "short", "proofs"]


def test_set_keywords_delete_and_threshold() -> None:
    text = apply_edits(BLOCK, [Edit("set_keywords", 0, ["怎么"])])
    assert rules_of(text)[0]["when"] == {"keywords_any": ["怎么"]}
    assert yaml.safe_load(text)["other"] == 1
    text = apply_edits(BLOCK, [Edit("delete_rule", 0)])
    assert [r["name"] for r in rules_of(text)] == ["short"]
    text = apply_edits(text, [Edit("delete_rule", 0)])
    assert rules_of(text) == [] and yaml.safe_load(text)["other"] == 1
    text = apply_edits(BLOCK, [Edit("set_threshold", value=0.42)])
    assert yaml.safe_load(text)["routing"]["classifier"] == {"threshold": 0.42}


def test_set_gates_creates_the_list_then_replaces_it() -> None:
    text = apply_edits(BLOCK, [Edit("set_gates", value=["maths"])])
    assert yaml.safe_load(text)["routing"]["gates"] == {"heavy_categories": ["maths"]}
    assert "# too broad?" in text and rules_of(text) == rules_of(BLOCK)
    text = apply_edits(text, [Edit("set_gates", value=["maths", "law"])])
    assert yaml.safe_load(text)["routing"]["gates"] == {"heavy_categories": ["maths", "law"]}
    assert yaml.safe_load(text)["other"] == 1


def test_flow_style_rules() -> None:
    text = "routing:\n  rules: [{name: a, when: {max_chars: 3}, lane: light}]\n"
    out = apply_edits(text, [Edit("insert_rule", 1, {"name": "b"}), Edit("delete_rule", 0)])
    assert rules_of(out) == [{"name": "b"}]


def test_an_invalid_result_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(BLOCK)
    bad = apply_edits(BLOCK, [Edit("insert_rule", 0, {"name": "x", "when": {}, "lane": "heavy"})])
    with pytest.raises(ConfigError):
        replace_config_file(path, bad)
    assert path.read_text() == BLOCK and not (tmp_path / "gw.yaml.bak").exists()
