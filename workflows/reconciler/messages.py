"""What every pool kind's updates answer, and its `scale` messages (camelCase JSON, so the
stock `temporal` CLI can send and read them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from devicepool.api.base import CamelModel
from devicepool.api.validation_messages import format_errors

__all__ = ["Accepted", "ApplyResult", "ScaleRequest", "parse_scale_signal", "short_json"]


class ScaleRequest(CamelModel):
    """Update `scale_update` (the CLI) and, as plain JSON, signal `scale`."""

    # Strict: `"5"` or `true` from a hand-written signal must not pass as a count.
    replicas: int = Field(strict=True)


class ApplyResult(StrEnum):
    """What an `apply` did, in kubectl's words."""

    CREATED = "created"  # the update that started the pool
    CONFIGURED = "configured"  # the spec (or metadata) changed
    UNCHANGED = "unchanged"  # the pool already had this spec


class Accepted(CamelModel):
    """What an update answers: the generation the change was accepted as."""

    # Fields this version does not know are ignored, not refused: a worker newer
    # than its client may answer with more.
    model_config = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})

    generation: int
    replicas: int
    # Set by `apply` only. None: `scale_update`, or a worker from before the field.
    result: ApplyResult | None = None


def parse_scale_signal(payload: Any, *, check: Callable[[int], object]) -> ScaleRequest:
    """The `scale` signal's plain JSON, checked (`check`: the kind's replica rule); if bad,
    `ValueError` with one line worded as a manifest's errors are (`api.validation_messages`)."""
    if not isinstance(payload, dict):
        raise ValueError(
            f'must be a JSON object such as {{"replicas": 3}}, got {short_json(payload)}'
        )
    try:
        request = ScaleRequest.model_validate(payload)
    except ValidationError as err:
        lines = format_errors(err.errors(), model=ScaleRequest, prefix="", base=())
        raise ValueError("; ".join(lines)) from None
    check(request.replicas)
    return request


def short_json(payload: Any) -> str:
    """`payload` as the JSON a user sent (`{"replica": 4}`), cut to 80 characters."""
    try:
        text = json.dumps(payload, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # e.g. a circular structure: not from JSON anyway
        text = repr(payload)
    return text if len(text) <= 80 else text[:77] + "..."
