"""Listing devices: the label and status filters, the page size, and the opaque page token.

Pages are ordered by `(createdAt, id)`; the token is that pair for the last item
of a page, base64url-encoded without padding.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from devicepool.emulator._bodies import is_number
from devicepool.emulator._devices import STATUSES, DeviceStore
from devicepool.emulator._problems import invalid

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


def list_devices(
    store: DeviceStore,
    account: str,
    *,
    labels: list[str],
    statuses: list[str],
    page_size: int | None,
    page_token: str | None,
) -> dict[str, Any]:
    wanted_labels = _label_filter(labels)
    wanted_statuses = _status_filter(statuses)
    size = DEFAULT_PAGE_SIZE if page_size is None else page_size
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise invalid(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    after = _decode_page_token(page_token) if page_token else None

    matches = []
    for device in store.settled(store.owned(account)):
        if any(device.labels.get(k) != v for k, v in wanted_labels.items()):
            continue
        if wanted_statuses and store.effective_status(device) not in wanted_statuses:
            continue
        if after is not None and (device.created_at, device.id) <= after:
            continue
        matches.append(device)
    matches.sort(key=lambda d: (d.created_at, d.id))
    page = matches[:size]
    token = None
    if len(matches) > size:
        last = page[-1]
        token = _encode_page_token(last.created_at, last.id)
    return {"items": [store.device_json(d) for d in page], "nextPageToken": token}


def _label_filter(labels: list[str]) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for item in labels:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise invalid(f"label filter {item!r} must look like key=value")
        wanted[name] = value
    return wanted


def _status_filter(statuses: list[str]) -> set[str]:
    wanted: set[str] = set()
    for item in statuses:
        for status in filter(None, (s.strip() for s in item.split(","))):
            if status not in STATUSES:
                raise invalid(f"unknown status {status!r}; expected one of {list(STATUSES)}")
            wanted.add(status)
    return wanted


def _encode_page_token(created_at: float, device_id: str) -> str:
    raw = json.dumps([created_at, device_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page_token(token: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created_at, device_id = json.loads(raw)
        if not is_number(created_at) or not isinstance(device_id, str):
            raise ValueError(token)
    except (binascii.Error, ValueError, TypeError):
        raise invalid("page_token is not valid") from None
    return float(created_at), device_id
