"""Set a few values in a YAML config file in place, keeping its comments and layout.

`router calibrate` writes the threshold and the category gates it picked into the operator's
config.  Loading and dumping the YAML would drop every comment in a file that is mostly
comments, so values are spliced into the text at the positions PyYAML's composer reports:
an existing value is replaced; a missing key is added to its block mapping (or its flow
mapping is rewritten).  The result must still parse as a valid gateway config before the file
is touched, and the previous file is kept as ``<file>.bak``.

Paths may step into sequences by index (``("routing", "rules", 2, "when")``); ``insert_item``
and ``delete_item`` add and remove sequence items (the misroute review adds and drops rules).
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


Key = str | int  # a mapping key, or an index into a sequence


def _find(node: yaml.Node, key: Key) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int):
        return (
            cast(yaml.Node, node.value[key]) if -len(node.value) <= key < len(node.value) else None
        )
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return cast(yaml.Node, v)
    return None


def _last_leaf(node: yaml.Node) -> yaml.Node:
    while isinstance(node, yaml.CollectionNode) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(last, tuple) else last
    return node


def _span(lines: list[str], node: yaml.Node) -> tuple[int, int]:
    """Where ``node`` is in the text.  A block collection's end mark is the next token (on a
    later line), so it ends where its last scalar or flow collection ends instead."""
    return _offset(lines, node.start_mark), _offset(lines, _last_leaf(node).end_mark)


def _replace(text: str, lines: list[str], node: yaml.Node, value: Any) -> str:
    start, end = _span(lines, node)
    if isinstance(node, yaml.CollectionNode) and not node.flow_style and node.value:
        line_start = _line_start(text, start)
        if not text[line_start:start].strip():  # on lines of its own: indent the flow value
            indent = " " * (node.start_mark.column + 2)  # deeper than the key it belongs to
            return text[:line_start] + indent + _flow(value) + text[end:]
    return text[:start] + _flow(value) + text[end:]


def _locate(text: str, path: Sequence[Key]) -> tuple[list[str], yaml.Node]:
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("the config is not a mapping")
    node: yaml.Node = root
    for key in path:
        child = _find(node, key)
        if child is None:
            raise ValueError(f"no {'/'.join(map(str, path))} in the config")
        node = child
    return text.splitlines(keepends=True), node


def set_value(text: str, path: Sequence[Key], value: Any) -> str:
    """``text`` with the entry at ``path`` set to ``value`` (mapping keys created if missing)."""
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("the config is not a mapping")
    lines = text.splitlines(keepends=True)
    node: yaml.Node = root
    for depth, key in enumerate(path):
        child = _find(node, key)
        rest = path[depth + 1 :]
        if child is not None and rest and isinstance(child, yaml.CollectionNode):
            node = child
            continue
        if child is not None and not rest:
            return _replace(text, lines, child, value)
        if isinstance(key, int) or any(isinstance(k, int) for k in rest):
            raise ValueError(f"no item {'/'.join(map(str, path[: depth + 1]))} in the config")
        nested: Any = value
        for k in reversed(rest):
            nested = {k: nested}
        if child is not None:  # a scalar (e.g. null) where a mapping is needed
            return _replace(text, lines, child, nested)
        if not isinstance(node, yaml.MappingNode):
            raise ValueError(f"{'/'.join(map(str, path[:depth]))} is not a mapping")
        return _insert(text, lines, node, key, nested, depth)
    raise ValueError("empty path")


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def insert_item(text: str, path: Sequence[Key], index: int, value: Any) -> str:
    """``text`` with ``value`` inserted into the sequence at ``path`` before item ``index``
    (``index`` = its length appends)."""
    lines, node = _locate(text, path)
    if not isinstance(node, yaml.SequenceNode):
        raise ValueError(f"{'/'.join(map(str, path))} is not a sequence")
    if node.flow_style or not node.value:
        items: list[Any] = yaml.safe_load(text[slice(*_span(lines, node))]) or []
        items.insert(index, value)
        start, end = _span(lines, node)
        return text[:start] + _flow(items) + text[end:]
    first = _offset(lines, node.value[0].start_mark)
    dash = text.rfind("-", 0, first)  # the first item's "- ", which every item lines up with
    prefix = " " * (dash - _line_start(text, dash)) + "- "
    if index < len(node.value):
        item_start = _offset(lines, node.value[index].start_mark)
        at = _line_start(text, text.rfind("-", 0, item_start))
    else:
        last_end = _span(lines, node.value[-1])[1]
        newline = text.find("\n", last_end)
        at = len(text) if newline < 0 else newline + 1
        if newline < 0:
            text += "\n"
            at = len(text)
    return text[:at] + prefix + _flow(value) + "\n" + text[at:]


def delete_item(text: str, path: Sequence[Key], index: int) -> str:
    """``text`` without item ``index`` of the sequence at ``path``."""
    lines, node = _locate(text, path)
    if not isinstance(node, yaml.SequenceNode) or not -len(node.value) <= index < len(node.value):
        raise ValueError(f"no item {index} in {'/'.join(map(str, path))}")
    if node.flow_style:
        start, end = _span(lines, node)
        items: list[Any] = yaml.safe_load(text[start:end])
        del items[index]
        return text[:start] + _flow(items) + text[end:]
    item = node.value[index]
    begin = _line_start(text, text.rfind("-", 0, _offset(lines, item.start_mark)))
    newline = text.find("\n", _span(lines, item)[1])
    end = len(text) if newline < 0 else newline + 1
    if len(node.value) == 1:  # an empty block sequence would read as null: leave []
        indent = len(text[begin:end]) - len(text[begin:end].lstrip(" ")) + 2
        return text[:begin] + " " * indent + "[]\n" + text[end:]
    return text[:begin] + text[end:]


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
    return replace_config_file(path, text)


def replace_config_file(path: Path, text: str) -> Path:
    """Replace the config at ``path`` by ``text`` if it is a valid config; returns the backup."""
    parse_config(yaml.safe_load(text), str(path))  # raises ConfigError; the file is untouched
    backup = path.with_name(path.name + ".bak")
    shutil.copy2(path, backup)
    path.write_text(text, encoding="utf-8")
    return backup
