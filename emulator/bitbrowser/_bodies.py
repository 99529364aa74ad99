"""Reading Local API request bodies: JSON objects, ids, paging.

The vendor takes every parameter in a JSON body ("not url params, not
form-data"); anything else is refused with `BAD_JSON`. An empty body counts as
`{}` (the docs' no-parameter calls, `/health`, `/browser/pids/all`, are sent so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicepool.emulator._base import json_object
from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._envelope import LocalApiError

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 10
MAX_IDS = 100


def parse_body(raw: bytes) -> dict[str, Any]:
    return json_object(raw, lambda _: LocalApiError(text.BAD_JSON))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: Any) -> int | None:
    """An int, or a string of digits (the vendor's own Postman sends `"port": ""`)."""
    if is_int(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def required_id(body: dict[str, Any], message: str = text.ID_REQUIRED) -> str:
    value = body.get("id")
    if not isinstance(value, str) or not value.strip():
        raise LocalApiError(message)
    return value


def id_list(
    body: dict[str, Any], key: str = "ids", message: str = text.IDS_REQUIRED, *, limit: int | None
) -> list[str]:
    ids = body.get(key)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise LocalApiError(message)
    if limit is not None and len(ids) > limit:
        raise LocalApiError(text.TOO_MANY_IDS)
    return list(dict.fromkeys(ids))


@dataclass(frozen=True)
class Page:
    page: int
    size: int

    @classmethod
    def parse(cls, body: dict[str, Any]) -> Page:
        """0-based `page` (required); `pageSize` default 10, more than 100 cut to 100."""
        page = as_int(body.get("page"))
        if page is None or page < 0:
            raise LocalApiError(text.PAGE_REQUIRED)
        size = body.get("pageSize", DEFAULT_PAGE_SIZE)
        size_value = as_int(size)
        if size_value is None or size_value < 1:
            raise LocalApiError(f"pageSize {text.BAD_FIELD}")
        return cls(page, min(size_value, MAX_PAGE_SIZE))

    def cut(self, items: list[Any]) -> list[Any]:
        start = self.page * self.size
        return items[start : start + self.size]

    def answer(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "list": self.cut(items),
            "total": len(items),
            "page": self.page,
            "pageSize": self.size,
        }


def optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise LocalApiError(f"{key} {text.BAD_FIELD}")
    return value


def optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    number = as_int(value)
    if number is None:
        raise LocalApiError(f"{key} {text.BAD_FIELD}")
    return number
