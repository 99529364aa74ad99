"""A watch answer begun before the pool's own terminate (issue: a second replacement).

`release --replace` dooms b; the pass terminates it and starts its replacement. The
running watch, begun before, answers during the terminate with b `offline` (GeeLark
shuts a phone down before deleting it). Applied, b counted as an offline member (a
surplus withdrawn from the replacement's batch), and the next listing without b owed it
a replacement more. The terminate makes the watch's answer older: it is dropped, and the
pass goes on what it terminated (`terminate-outdates-the-watch`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from devicepool.activities import models as am
from devicepool.workflows.pool import act
from devicepool.workflows.pool import calls as pool_calls
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.pool.watch import DeviceWatch

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def dev(device_id: str, status: str) -> am.DeviceInfo:
    return am.DeviceInfo(id=device_id, status=status, created_at=NOW, labels={})


@dataclass
class _Happen:
    dirty: bool = False
    events: list[Any] = field(default_factory=list)

    def happened(self, *events: Any) -> None:
        self.events.extend(events)


@dataclass
class _Kind:
    s: PoolState
    devices: list[am.DeviceInfo]
    watch: DeviceWatch = field(default_factory=DeviceWatch)
    h: _Happen = field(default_factory=_Happen)
    name: str = "p"
    route: Any = None
    words: Any = say.REST
    retry_terminations: bool = False
    spec: Any = field(default_factory=lambda: SimpleNamespace(reserve=None))

    def said(self, said: Any) -> None:
        self.h.happened(*said.events)

    def take_listing(self, devices: list[am.DeviceInfo]) -> None:
        self.devices = self.s.take_listing(devices, reported_gone=())


def _stub(monkeypatch: pytest.MonkeyPatch, patched: set[str]) -> list[str]:
    asked: list[str] = []

    def is_patched(patch_id: str) -> bool:
        asked.append(patch_id)
        return patch_id in patched

    logger = SimpleNamespace(warning=lambda *a: None, info=lambda *a: None)
    monkeypatch.setattr(act, "workflow", SimpleNamespace(patched=is_patched, logger=logger))

    async def terminate_devices(route: Any, device_ids: list[str], **_: Any) -> Any:
        return pool_calls.Terminations()

    monkeypatch.setattr(act.calls, "terminate_devices", terminate_devices)
    return asked


async def _stale_answer_after_terminate(
    monkeypatch: pytest.MonkeyPatch, patched: set[str]
) -> tuple[_Kind, bool]:
    _stub(monkeypatch, patched)
    listed = [dev("a", am.READY), dev("b", am.READY), dev("c", am.READY)]
    s = PoolState()
    k = _Kind(s=s, devices=s.take_listing(listed, reported_gone=()))
    # The pool's watch, begun before the terminate; it answers during it, b shut down.
    answered = asyncio.get_running_loop().create_future()
    k.watch.ensure(lambda: answered)
    s.fates.set(["b"], Fate.DOOMED)  # release --replace
    await act.terminate(k, ["b"], only_if_idle=set(), reasons={})
    answered.set_result(
        am.WatchDevicesResult(
            devices=[dev("a", am.READY), dev("b", am.OFFLINE), dev("c", am.READY)],
            changed=True,
            fingerprint="x",
        )
    )
    await asyncio.sleep(0)
    got = k.watch.answer()
    assert got is not None
    answer, news = got
    if news:  # as `observe.until_due` does
        k.take_listing(answer.devices)
    return k, news


async def test_a_watch_begun_before_the_terminate_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patched = {act.TERMINATED_LEAVE_PATCH, act.TERMINATE_OUTDATES_WATCH_PATCH}
    k, news = await _stale_answer_after_terminate(monkeypatch, patched)
    assert not news
    assert {d.id: d.status for d in k.devices}["b"] == am.TERMINATING
    assert k.s.offline_seen == []
    # The next listing no longer shows b: no replacement more than the one started.
    k.take_listing([dev("a", am.READY), dev("c", am.READY)])
    assert k.s.replacements_owed == 0


async def test_runs_without_the_patch_still_apply_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Histories recorded before the patch replay as they ran: the answer is applied."""
    k, news = await _stale_answer_after_terminate(monkeypatch, {act.TERMINATED_LEAVE_PATCH})
    assert news
    assert k.s.offline_seen == ["b"]
    k.take_listing([dev("a", am.READY), dev("c", am.READY)])
    assert k.s.replacements_owed == 1
