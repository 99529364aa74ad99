"""Reading request bodies, and the shape of a batch answer.

Documented: batch endpoints take `ids` (at most 100; `phone/start` takes 200) and answer
`{totalAmount, successAmount, failAmount, successDetails, failDetails}` (`phone/addNew`:
`details`, one per item with its own code). Our choices: a body that is not a JSON object
answers 40001; a missing or mistyped field 40004 naming it; an id listed twice is answered
twice, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator._base import json_object
from devicepool.emulator.geelark._envelope import BAD_BODY, MESSAGES, GeeLarkError, invalid

MAX_IDS = 100


def parse_body(raw: bytes) -> dict[str, Any]:
    return json_object(raw, _refused)


def _refused(parsed: bool) -> GeeLarkError:
    if parsed:
        return GeeLarkError(BAD_BODY, "failed to read the request body: not a JSON object")
    return GeeLarkError(BAD_BODY)


def ids_of(body: dict[str, Any], *, name: str = "ids", limit: int = MAX_IDS) -> list[str]:
    ids = body.get(name)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise invalid(f"{name} must be a non-empty list of ids")
    if len(ids) > limit:
        raise invalid(f"{name} takes at most {limit} ids")
    return ids


def optional_str(body: dict[str, Any], name: str, *, limit: int | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    if limit is not None and len(value) > limit:
        raise invalid(f"{name} takes at most {limit} characters")
    return value


def optional_int(body: dict[str, Any], name: str, allowed: tuple[int, ...]) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise invalid(f"{name} must be one of {list(allowed)}")
    return value


def required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{name} is required")
    return value


@dataclass
class Batch:
    """Per-item results of one batch call."""

    total: int
    success: list[dict[str, Any]] = field(default_factory=list)
    fail: list[dict[str, Any]] = field(default_factory=list)

    def failed(self, id_: str, code: int) -> None:
        self.fail.append({"code": code, "id": id_, "msg": MESSAGES.get(code, "failed")})

    def data(self, *, with_success: bool = True) -> dict[str, Any]:
        found: dict[str, Any] = {
            "totalAmount": self.total,
            "successAmount": self.total - len(self.fail),
            "failAmount": len(self.fail),
            "failDetails": self.fail,
        }
        if with_success:
            found["successDetails"] = self.success
        return found


@dataclass
class Result:
    """A handler's answer: its `data`, and for a batch how many items failed of how many."""

    data: Any = None
    total: int = 0
    failed: int = 0
