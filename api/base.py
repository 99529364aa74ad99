"""`CamelModel`: the one pydantic base of every devicepool message and resource.

What leaves the process (payloads, queries, `-o json|yaml`) is camelCase; validation accepts
both spellings, so snake_case payloads in recorded histories still load. Unknown fields are
rejected: a typo never silently means a default."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["CamelModel"]


class CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        serialize_by_alias=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The camelCase JSON form (what `status` queries and `-o json` show)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
