"""Building blocks shared by every config section: strict models, bounded numbers, field errors.

Each feature keeps its section's models next to its code (``tenancy/settings.py``, ...) and
builds them from these; ``config.py`` assembles the tree and checks cross-references.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class Strict(BaseModel):
    """Unknown keys are errors; parsed values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldError(ValueError):
    """Raised from a validator to name the exact field and what was expected there."""

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(expected)
        self.field = field
        self.expected = expected


def must_exist(name: str, names: Mapping[str, Any], field: str, what: str) -> None:
    if name not in names:
        known = ", ".join(sorted(names)) or "none defined"
        raise FieldError(field, f"{what} (one of: {known}), got {name!r}")
