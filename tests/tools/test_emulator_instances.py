"""JSON-schema instances for tool arguments and structured answers, checked by jsonschema."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from hybrid_gateway.tools.emulator.instances import SchemaError, SchemaInstances, check_strict

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 3, "maxLength": 40},
        "zip": {"type": "string", "format": "uuid"},
    },
    "required": ["street"],
}
SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 18, "maximum": 99},
            "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
            "ok": {"type": "boolean"},
            "kind": {"const": "person"},
            "home": ADDRESS,
            "when": {"type": "string", "format": "date-time"},
        },
        "required": ["name", "age", "unit"],
        "additionalProperties": False,
    },
    {  # pydantic's shape: $defs, $ref, nullable anyOf, a list of models
        "$defs": {"Address": ADDRESS},
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/Address"},
            "other": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Address"}], "default": None},
            "past": {"type": "array", "items": {"$ref": "#/$defs/Address"}},
            "note": {"type": ["string", "null"]},
        },
        "required": ["home", "other", "past", "note"],
    },
    {"allOf": [ADDRESS, {"properties": {"floor": {"type": "integer", "maximum": -2}}}]},
    {  # recursion through an optional field ends
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/Node",
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_instances_validate_against_their_schema(schema: dict[str, Any]) -> None:
    for seed in range(50):
        value = SchemaInstances(random.Random(seed)).instance(schema)
        jsonschema.validate(value, schema)


def test_instances_are_deterministic_per_seed() -> None:
    first, again, other = (
        SchemaInstances(random.Random(s)).instance(SCHEMAS[1]) for s in (1, 1, 2)
    )
    assert first == again != other


def test_a_schema_with_no_finite_instance_is_refused() -> None:
    loop = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    with pytest.raises(SchemaError, match="no finite instance"):
        SchemaInstances(random.Random(0)).instance(loop)


def test_strict_refuses_open_objects_and_optional_properties() -> None:
    open_object = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    with pytest.raises(SchemaError, match="additionalProperties"):
        check_strict(open_object, "response_format 'x'")
    optional = {**open_object, "required": [], "additionalProperties": False}
    with pytest.raises(SchemaError, match="Missing 'a'"):
        check_strict(optional, "response_format 'x'")
    nested = {
        "type": "object",
        "properties": {"inner": {"type": "object", "properties": {}}},
        "required": ["inner"],
        "additionalProperties": False,
    }
    with pytest.raises(SchemaError, match=r"context=\(properties.inner\)"):
        check_strict(nested, "function 'f'")
    check_strict(SCHEMAS[1]["properties"]["home"] | {"additionalProperties": False,
                 "required": ["street", "zip"]}, "function 'f'")  # fmt: skip
