"""Instances of JSON schemas: the arguments of an emulated tool call, a ``json_schema`` answer.

``SchemaInstances(rng).instance(schema)`` writes a value that validates against ``schema``,
for the subset of JSON Schema that OpenAI's structured outputs and function parameters use:
``type`` (one or a list), ``properties`` / ``required`` / ``additionalProperties``, ``items``
with ``minItems`` / ``maxItems``, ``enum``, ``const``, ``anyOf`` / ``oneOf`` (the first branch
that is not ``null``), ``allOf`` (merged), ``$ref`` into ``$defs`` / ``definitions``,
numeric bounds, string lengths and the common string ``format`` values.  ``pattern`` is not
followed.  Strings are pseudo words from the answer vocabulary, drawn from ``rng``, so the same
seed writes the same instance.

``check_strict`` refuses what OpenAI refuses under ``strict: true``: an object whose
``additionalProperties`` is not ``false`` or whose ``required`` does not list every property.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from .text import WORDS

_MAX_DEPTH = 24  # past this, only required properties and the fewest array items
_TYPE_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")
_FORMATS: Mapping[str, str] = {
    "date-time": "2026-01-15T10:30:00Z",
    "date": "2026-01-15",
    "time": "10:30:00",
    "duration": "PT1H",
    "email": "user@example.com",
    "uri": "https://example.com/item",
    "url": "https://example.com/item",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
}


class SchemaError(ValueError):
    """A schema the emulator cannot write an instance of, or one ``strict`` forbids."""


class SchemaInstances:
    """Writes instances of JSON schemas; ``root`` resolves ``$ref``."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def instance(self, schema: Any) -> Any:
        try:
            return self._value(schema, schema, 0)
        except (TypeError, ValueError, ArithmeticError) as exc:
            if isinstance(exc, SchemaError):
                raise
            raise SchemaError(f"cannot write an instance of this schema: {exc}") from None

    def _value(self, schema: Any, root: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH * 2:
            raise SchemaError("schema has no finite instance (required properties recurse)")
        if schema is True or not isinstance(schema, dict) or not schema:
            return self._words(1, 3)  # any value is valid
        schema = _resolved(schema, root)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return self._value(_branch(schema[key], root), root, depth + 1)
        if isinstance(schema.get("allOf"), list):
            return self._value(_merged(schema, root), root, depth + 1)
        kind = _type(schema)
        if kind == "object":
            return self._object(schema, root, depth)
        if kind == "array":
            return self._array(schema, root, depth)
        return self._scalar(kind, schema)

    def _object(self, schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            properties = {}
        required = schema.get("required")
        names = list(properties)
        if depth > _MAX_DEPTH and isinstance(required, list):
            names = [name for name in names if name in required]
        return {name: self._value(properties[name], root, depth + 1) for name in names}

    def _array(self, schema: dict[str, Any], root: Any, depth: int) -> list[Any]:
        low = _int(schema.get("minItems"), 0)
        high = max(low, _int(schema.get("maxItems"), low + 3))
        fewest = max(low, min(1, high))
        count = low if depth > _MAX_DEPTH else self._rng.randint(fewest, min(high, low + 3))
        items = schema.get("items", {})
        if isinstance(schema.get("prefixItems"), list):
            prefix = schema["prefixItems"]
            return [self._value(item, root, depth + 1) for item in prefix]
        return [self._value(items, root, depth + 1) for _ in range(count)]

    def _scalar(self, kind: str, schema: dict[str, Any]) -> Any:
        if kind == "boolean":
            return self._rng.random() < 0.5
        if kind == "null":
            return None
        if kind in ("integer", "number"):
            return self._number(kind, schema)
        text = _FORMATS.get(str(schema.get("format")))
        if text is None:
            text = self._words(1, 4)
        low = _int(schema.get("minLength"), 0)
        high = _int(schema.get("maxLength"), max(low, len(text)))
        if len(text) < low:
            text += "x" * (low - len(text))
        return text[:high]

    def _number(self, kind: str, schema: dict[str, Any]) -> int | float:
        low, high = _bounds(schema, kind == "integer")
        if kind == "integer":
            return self._rng.randint(low, high) if low <= high else low
        value = round(self._rng.uniform(low, high), 2)
        return value if low <= value <= high else float(low)

    def _words(self, low: int, high: int) -> str:
        return " ".join(self._rng.choice(WORDS) for _ in range(self._rng.randint(low, high)))


def _resolved(schema: dict[str, Any], root: Any) -> dict[str, Any]:
    seen = 0
    while isinstance(schema.get("$ref"), str):
        target = _pointer(schema["$ref"], root)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **rest}
        seen += 1
        if seen > 64:
            raise SchemaError("a $ref refers to itself")
    return schema


def _pointer(ref: str, root: Any) -> dict[str, Any]:
    if ref == "#":
        node = root
    elif ref.startswith("#/"):
        node = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else None
    else:
        raise SchemaError(f"only local $ref values are supported, not {ref!r}")
    if not isinstance(node, dict):
        raise SchemaError(f"$ref {ref!r} does not resolve to a schema")
    return node


def _branch(branches: list[Any], root: Any) -> Any:
    """The first branch that is not plain ``null`` (a nullable field gets a value)."""
    for branch in branches:
        resolved = _resolved(branch, root) if isinstance(branch, dict) else branch
        if not (isinstance(resolved, dict) and resolved.get("type") == "null"):
            return branch
    return branches[0]


def _merged(schema: dict[str, Any], root: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if not isinstance(part, dict):
            continue
        part = _resolved(part, root)
        properties = {**merged.get("properties", {}), **part.get("properties", {})}
        required = [*merged.get("required", []), *part.get("required", [])]
        merged = {**part, **merged, "properties": properties, "required": required}
    return merged


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str)]
        real = [k for k in kinds if k != "null"] or kinds or ["string"]
        return min(real, key=lambda k: _TYPE_ORDER.index(k) if k in _TYPE_ORDER else 99)
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[Any, Any]:
    low = schema.get("minimum", 0 if "maximum" not in schema else schema["maximum"] - 100)
    high = schema.get("maximum", low + 100)
    if "exclusiveMinimum" in schema:
        low = schema["exclusiveMinimum"] + (1 if integer else 0.01)
    if "exclusiveMaximum" in schema:
        high = schema["exclusiveMaximum"] - (1 if integer else 0.01)
    if integer:
        return math.ceil(low), math.floor(high)
    return float(low), float(high)


def check_strict(schema: Any, where: str) -> None:
    """``SchemaError`` naming the first object that ``strict: true`` would refuse."""
    _check_strict(schema, where, "")


def _check_strict(schema: Any, where: str, path: str) -> None:
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            _check_strict(item, where, f"{path}[{i}]")
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            raise SchemaError(
                f"Invalid schema for {where}: In context=({path or '()'}), "
                "'additionalProperties' is required to be supplied and to be false."
            )
        missing = [name for name in properties if name not in (schema.get("required") or [])]
        if missing:
            raise SchemaError(
                f"Invalid schema for {where}: In context=({path or '()'}), 'required' is "
                f"required to be supplied and to be an array including every key in "
                f"properties. Missing {missing[0]!r}."
            )
    for key in ("properties", "$defs", "definitions"):
        children = schema.get(key)
        if isinstance(children, dict):
            for name, child in children.items():
                _check_strict(child, where, f"{path}.{key}.{name}" if path else f"{key}.{name}")
    for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
        if key in schema:
            _check_strict(schema[key], where, f"{path}.{key}" if path else key)
