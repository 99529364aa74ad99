"""A pool's listing travels through its history as compact rows: ≤ 64 KB at 500 devices.

Whole `DeviceInfo`s are ~290 bytes of JSON each (~145 KB a listing at 500
devices, in every observe and every watch answer); rows carry the same
information in ~100 and read back to the same devices.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.models import (
    DeviceInfo,
    ListDevicesResult,
    WatchDevicesResult,
    device_rows,
    devices_from_rows,
)
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_SLOT, MANAGED_BY
from devicepool.connect import DATA_CONVERTER

T0 = datetime(2026, 12, 1, 10, 51, 0, 634000, tzinfo=UTC)
LIMIT = 64 * 1024


def _device(i: int, pool: str = "p0000", **changes: object) -> DeviceInfo:
    device = DeviceInfo(
        id=f"dev-{i:016x}",
        status="ready",
        region="us-west",
        created_at=T0 + timedelta(seconds=i),
        updated_at=T0 + timedelta(seconds=i, milliseconds=250),
        labels={LABEL_POOL: pool, LABEL_MANAGED_BY: MANAGED_BY, LABEL_SLOT: str(i)},
    )
    return device.model_copy(update=changes)


async def _size(value: object) -> int:
    [payload] = await DATA_CONVERTER.encode([value])
    return len(payload.data)


async def test_a_listing_of_500_devices_fits_in_64_kb_as_rows_and_did_not_as_devices() -> None:
    devices = [_device(i) for i in range(500)]
    assert await _size(ListDevicesResult(devices=devices)) > LIMIT
    compact = ListDevicesResult(rows=device_rows(devices, pool="p0000"))
    assert await _size(compact) <= LIMIT
    watch = WatchDevicesResult(
        rows=device_rows(devices, pool="p0000"), fingerprint="f" * 16, changed=True
    )
    assert await _size(watch) <= LIMIT


async def test_rows_read_back_to_the_same_devices() -> None:
    devices = [
        _device(1),
        _device(
            2,
            status="busy",
            session_active=True,
            last_activity_at=T0 + timedelta(minutes=3),
            reason="rented",
        ),
        # made by hand: no managed-by label, another label of its own
        _device(3, labels={LABEL_POOL: "p0000", "team": "qa"}, updated_at=None),
        _device(4, status="something-new", region=""),
    ]
    rows = device_rows(devices, pool="p0000")
    assert devices_from_rows(rows, pool="p0000") == devices
    # through the data converter too (JSON numbers and arrays)
    [payload] = await DATA_CONVERTER.encode([ListDevicesResult(rows=rows)])
    [decoded] = await DATA_CONVERTER.decode([payload], [ListDevicesResult])
    assert decoded.listing("p0000") == devices


def test_an_answer_in_either_form_lists_the_devices() -> None:
    devices = [_device(1)]
    assert ListDevicesResult(devices=devices).listing("p0000") == devices
    assert ListDevicesResult(rows=device_rows(devices, pool="p0000")).listing("p0000") == devices
    assert ListDevicesResult().listing("p0000") == []
