"""Set a few values in a YAML config file in place, keeping its comments and layout.

`router calibrate` writes the threshold and the category gates it picked into the operator's
config.  Loading and dumping the YAML would drop every comment in a file that is mostly
comments, so values are spliced into the text at the positions PyYAML's composer reports:
an existing value is replaced; a missing key is added to its block mapping (or its flow
mapping is rewritten).  The result must still parse as a valid gateway config before the file
is touched, and the previous file is kept as ``<file>.bak``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import yaml

from hybrid_gateway.config import parse_config


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()  # a scalar ends its document


def _offset(lines: list[str], mark: yaml.Mark) -> int:
    return sum(len(line) for line in lines[: mark.line]) + mark.column


def _find(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return cast(yaml.Node, v)
    return None


def set_value(text: str, path: Sequence[str], value: Any) -> str:
    """``text`` with the mapping entry at ``path`` set to ``value`` (created if missing)."""
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("the config is not a mapping")
    lines = text.splitlines(keepends=True)
    node: yaml.MappingNode = root
    for depth, key in enumerate(path):
        child = _find(node, key)
        rest = path[depth + 1 :]
        if child is not None and rest and isinstance(child, yaml.MappingNode):
            node = child
            continue
        if child is not None and not rest:
            start, end = _offset(lines, child.start_mark), _offset(lines, child.end_mark)
            return text[:start] + _flow(value) + text[end:]
        nested: Any = value
        for k in reversed(rest):
            nested = {k: nested}
        if child is not None:  # a scalar (e.g. null) where a mapping is needed
            start, end = _offset(lines, child.start_mark), _offset(lines, child.end_mark)
            return text[:start] + _flow(nested) + text[end:]
        return _insert(text, lines, node, key, nested, depth)
    raise ValueError("empty path")


def _insert(
    text: str, lines: list[str], node: yaml.MappingNode, key: str, value: Any, depth: int
) -> str:
    if node.flow_style or not node.value:
        start, end = _offset(lines, node.start_mark), _offset(lines, node.end_mark)
        merged: dict[str, Any] = yaml.safe_load(text[start:end]) or {}
        merged[key] = value
        return text[:start] + _flow(merged) + text[end:]
    indent: int = node.value[0][0].start_mark.column
    last_line = node.value[-1][1].end_mark.line
    if node.value[-1][1].end_mark.column == 0:  # a block value ends at the next line's start
        last_line -= 1
    while last_line > 0 and lines[last_line].strip()[:1] in ("", "#"):
        last_line -= 1  # blank lines and comments after the mapping belong to what follows
    entry = " " * indent + f"{_flow(key)}: {_flow(value)}\n"
    cut = sum(len(line) for line in lines[: last_line + 1])
    prefix = text[:cut] if text[:cut].endswith("\n") or not cut else text[:cut] + "\n"
    return prefix + entry + text[cut:]


def update_config_file(path: Path, values: Mapping[tuple[str, ...], Any]) -> Path:
    """Write ``values`` into the config at ``path``; returns the backup's path."""
    text = path.read_text(encoding="utf-8")
    for key_path, value in values.items():
        text = set_value(text, key_path, value)
    parse_config(yaml.safe_load(text), str(path))  # raises ConfigError; the file is untouched
    backup = path.with_name(path.name + ".bak")
    shutil.copy2(path, backup)
    path.write_text(text, encoding="utf-8")
    return backup
