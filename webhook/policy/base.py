"""The base of every PlacementPolicy model: strict, frozen, camelCase in YAML."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        # YAML spelling only: a snake_case key is an unknown field, not a silent alias.
        alias_generator=to_camel,
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # `launcher:` with nothing after it is null in YAML; treat it as "not given".
        if isinstance(data, dict) and None in data.values():
            return {k: v for k, v in data.items() if v is not None}
        return data
