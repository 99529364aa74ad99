"""Payloads from a newer build decode on this one: unknown fields are ignored, at every depth.

Every payload of the recorded histories — workflow inputs, signals, updates,
activity inputs and results, child inputs — is decoded with `DATA_CONVERTER`
after a field this build does not know is added to each object the payload's
type reads as a model. It must decode to what the unchanged payload decodes to.
Only messages between builds are tolerant: a manifest keeps refusing an unknown
field (tests/api), and so does the stock CLI's `scale` signal (tests/workflows).
"""

from __future__ import annotations

import base64
import inspect
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import temporalio.api.common.v1
from pydantic import BaseModel
from temporalio import workflow

from devicepool.activities.definitions import DeviceActivityDefinitions, OrphanActivityDefinitions
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))
UNKNOWN = "fieldFromANewerBuild"


def _hints(fn: Any) -> tuple[Any | None, Any | None]:
    """The type of `fn`'s one message parameter (None: none, or untyped) and its result."""
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    return (hints.get(params[0]) if params else None), hints.get("return")


def _types() -> dict[tuple[str, str], Any]:
    """(kind, name) -> type, for every message a worker of this build reads."""
    types: dict[tuple[str, str], Any] = {}
    for cls in WORKFLOWS:
        defn = workflow._Definition.must_from_class(cls)
        assert defn.name and defn.run_fn
        types["workflow", defn.name] = _hints(defn.run_fn)[0]
        for name, signal in defn.signals.items():
            if name:
                types["signal", name] = _hints(signal.fn)[0]
        for name, update in defn.updates.items():
            if name:
                types["update", name] = _hints(update.fn)[0]
    for definitions in (DeviceActivityDefinitions, OrphanActivityDefinitions):
        for name, fn in inspect.getmembers(definitions, inspect.isfunction):
            types["activity", name], types["result", name] = _hints(fn)
    return types


TYPES = _types()


def _payloads(path: Path) -> Iterator[tuple[Any, str]]:
    """(type, base64 data) of every JSON payload in a history whose type is known."""
    scheduled: dict[str, str] = {}
    for event in json.loads(path.read_text())["events"]:
        attrs = next((v for k, v in event.items() if k.endswith("EventAttributes")), {})
        kind, name, payloads = None, "", []
        if "workflowType" in attrs and "input" in attrs:
            kind, name = "workflow", attrs["workflowType"]["name"]
            payloads = attrs["input"].get("payloads", [])
        elif "activityType" in attrs:
            scheduled[event["eventId"]] = attrs["activityType"]["name"]
            kind, name = "activity", attrs["activityType"]["name"]
            payloads = attrs.get("input", {}).get("payloads", [])
        elif "scheduledEventId" in attrs and "result" in attrs:
            kind, name = "result", scheduled.get(attrs["scheduledEventId"], "")
            payloads = attrs["result"].get("payloads", [])
        elif "signalName" in attrs and "input" in attrs:
            kind, name = "signal", attrs["signalName"]
            payloads = attrs["input"].get("payloads", [])
        elif "acceptedRequest" in attrs:
            kind, name = "update", attrs["acceptedRequest"]["input"]["name"]
            payloads = attrs["acceptedRequest"]["input"].get("args", {}).get("payloads", [])
        hint = TYPES.get((kind, name)) if kind else None
        for payload in payloads[:1]:
            if hint is not None and hint is not Any:
                yield hint, payload["data"]


def _with_unknown_fields(data: Any, value: Any) -> Any:
    """`data` (JSON) with an unknown field in every object `value` (its decoding) reads as a model."""
    if isinstance(value, BaseModel) and isinstance(data, dict):
        out = {UNKNOWN: {"added": True}}
        for name, field in type(value).model_fields.items():
            key = field.alias or name
            if key in data:
                out[key] = _with_unknown_fields(data[key], getattr(value, name))
        return {**data, **out}
    if isinstance(value, list | tuple) and isinstance(data, list):
        return [_with_unknown_fields(d, v) for d, v in zip(data, value, strict=False)]
    if isinstance(value, dict) and isinstance(data, dict):
        by_text = {str(k): v for k, v in value.items()}
        return {k: _with_unknown_fields(d, by_text.get(k)) for k, d in data.items()}
    return data


def _decode(hint: Any, data: bytes) -> Any:
    payload = temporalio.api.common.v1.Payload(metadata={"encoding": b"json/plain"}, data=data)
    return DATA_CONVERTER.payload_converter.from_payload(payload, hint)


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
def test_every_recorded_payload_decodes_with_unknown_fields_added(path: Path) -> None:
    checked = 0
    for hint, encoded in _payloads(path):
        raw = base64.b64decode(encoded)
        value = _decode(hint, raw)
        widened = json.dumps(_with_unknown_fields(json.loads(raw), value)).encode()
        assert _decode(hint, widened) == value, hint
        checked += 1
    assert checked > 0


def test_nested_unknown_fields_reach_every_model() -> None:
    """The test above must add fields below the top: a pool's input holds its state's slots."""
    pools = [p for p in HISTORIES if p.stem.startswith("pool")]
    found = []
    for path in pools:
        for hint, encoded in _payloads(path):
            raw = base64.b64decode(encoded)
            widened = _with_unknown_fields(json.loads(raw), _decode(hint, raw))
            if isinstance(widened.get("spec"), dict):
                found.append(UNKNOWN in widened["spec"])
    assert found and all(found)


def test_a_manifest_still_refuses_an_unknown_field() -> None:
    """What a user writes is checked strictly where it enters; only messages are tolerant."""
    with pytest.raises(ValueError, match="replica"):
        DevicePoolSpec.model_validate(
            {"platform": "android", "region": "us-west", "osVersion": "14", "replica": 3}
        )
