"""A pool's listing travels through its history as compact rows: ≤ 64 KB at 500 devices.

Whole `DeviceInfo`s are ~290 bytes of JSON each (~145 KB a listing at 500
devices, in every observe and every watch answer); rows carry the same
information in ~100 and read back to the same devices. The `template-hash` label
most devices share is written once per answer, not on every row (~31 bytes each),
when the pool asks for it (`fold_template_hash`): a build from before never does.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.activities.models import (
    DeviceInfo,
    ListDevicesInput,
    ListDevicesResult,
    WatchDevicesInput,
    WatchDevicesResult,
    device_rows,
    devices_from_rows,
)
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
    slot_label,
)
from devicepool.connect import DATA_CONVERTER

T0 = datetime(2026, 12, 1, 10, 51, 0, 634000, tzinfo=UTC)
LIMIT = 64 * 1024
HASH, OLD = "e2d3c49815c1", "0f0f0f0f0f0f"


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


def _made(i: int, template: str | None = HASH) -> DeviceInfo:
    """Device `i` labelled as the create activity labels it (`template`: its hash)."""
    labels = {LABEL_POOL: "p0000", LABEL_MANAGED_BY: MANAGED_BY}
    labels[LABEL_SLOT] = slot_label(i, "0123456789ab")  # a run id's last 12 characters
    if template is not None:
        labels[LABEL_TEMPLATE_HASH] = template
    return _device(i, labels=labels)


def _asking(*, fold: bool = True) -> ListDevicesInput:
    return ListDevicesInput(account="a", pool="p0000", compact=True, fold_template_hash=fold)


async def _size(value: object) -> int:
    [payload] = await DATA_CONVERTER.encode([value])
    return len(payload.data)


async def _through_converter(answer: Any) -> Any:
    [payload] = await DATA_CONVERTER.encode([answer])
    [decoded] = await DATA_CONVERTER.decode([payload], [type(answer)])
    return decoded


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


async def test_500_devices_of_the_pools_template_fit_in_64_kb_and_read_back_exactly() -> None:
    # 75.5 KB as rows that each spell {"template-hash": ...} (bench [5]: 78.0 KB)
    devices = [_made(i) for i in range(500)]
    assert await _size(ListDevicesResult(rows=device_rows(devices, pool="p0000"))) > LIMIT
    listed = ListDevicesResult.answer(devices, _asking())
    assert listed.template_hash == HASH
    assert await _size(listed) <= LIMIT
    assert (await _through_converter(listed)).listing("p0000") == devices
    watch_input = WatchDevicesInput(
        account="a", pool="p0000", fingerprint="", compact=True, fold_template_hash=True
    )
    watched = WatchDevicesResult.answer(devices, watch_input, fingerprint="f" * 16, changed=True)
    assert await _size(watched) <= LIMIT
    assert (await _through_converter(watched)).listing("p0000") == devices


async def test_rows_of_a_pool_that_did_not_ask_keep_every_label_and_read_back() -> None:
    # A build from before the fold (v0.1.0's histories, a running older worker) reads
    # rows as they were: a label folded away would read as "no template", and drift.
    devices = [_made(i) for i in range(3)]
    answer = ListDevicesResult.answer(devices, _asking(fold=False))
    assert answer.template_hash is None
    assert all(row[-1][LABEL_TEMPLATE_HASH] == HASH for row in answer.rows)
    assert answer.rows == device_rows(devices, pool="p0000")
    # no field more than before: v0.1.0's worker decodes none it does not know
    [payload] = await DATA_CONVERTER.encode([answer])
    assert json.loads(payload.data) == {"devices": [], "rows": answer.rows}
    assert (await _through_converter(answer)).listing("p0000") == devices
    # and a folding reader given rows with no flag bit reads their labels
    assert devices_from_rows(answer.rows, pool="p0000", template_hash=HASH) == devices


async def test_a_device_of_another_template_or_none_keeps_what_it_had() -> None:
    devices = [_made(0), _made(1, OLD), _made(2), _made(3, None), _made(4)]
    answer = await _through_converter(ListDevicesResult.answer(devices, _asking()))
    assert answer.template_hash == HASH  # the one most devices carry
    assert answer.listing("p0000") == devices
    assert answer.rows[1][-1][LABEL_TEMPLATE_HASH] == OLD
    assert LABEL_TEMPLATE_HASH not in answer.listing("p0000")[3].labels
    # a flag bit with no hash beside it (no answer is written so) adds no label
    unread = devices_from_rows(answer.rows, pool="p0000")
    assert [LABEL_TEMPLATE_HASH in d.labels for d in unread] == [False, True, False, False, False]
