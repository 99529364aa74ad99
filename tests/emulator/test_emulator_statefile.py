"""`--state FILE`: an emulator closed and opened again on the same SQLite file is the same provider."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicepool.emulator import _statefile
from devicepool.emulator import cli as emulator_cli
from devicepool.emulator.app import EmulatorConfig, StateFileError, create_app
from devicepool.emulator.cli import build_parser, config_from_args, main
from tests.emulator.conftest import creates
from tests.helpers.emulator import AUTH, Provider, assert_problem

Open = Callable[..., Awaitable[Provider]]
Close = Callable[[Provider], Awaitable[None]]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "emulator.sqlite"


@pytest.fixture
async def emulators() -> AsyncIterator[tuple[Open, Close]]:
    """`open_(**config)` builds an app (and its provider) on the config; `close(provider)` stops it."""
    opened: list[Provider] = []

    async def open_(**config: Any) -> Provider:
        config.setdefault("seed", 7)
        app = create_app(EmulatorConfig(**config))
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://emulator"
        )
        provider = Provider(client, app.state.emulator)
        opened.append(provider)
        return provider

    async def close(provider: Provider) -> None:
        await provider.http.aclose()
        provider.emulator.close()

    yield open_, close
    for provider in opened:
        await close(provider)


async def devices_of(provider: Provider) -> list[dict[str, Any]]:
    response = await provider.get("/api/v1/devices")
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


async def test_a_reopened_emulator_is_the_same_provider(
    state: Path, emulators: tuple[Open, Close]
) -> None:
    open_, close = emulators
    first = await open_(state_file=state, creates_per_minute=4)
    kept = await first.create_ok(idempotency_key="kept-key", labels={"pool": "p1", "team": "a"})
    others = [await first.create_ok(labels={"pool": "p2"}) for _ in range(3)]
    assert_problem(await first.create(), 429, "rate_limited")
    assert_problem(await first.create(region=""), 400, "invalid_argument")
    await first.advance(60)
    await first.http.delete(f"/api/v1/devices/{others[2]['id']}", headers=AUTH)
    await first.advance(3600)
    session = await first.control(f"devices/{others[0]['id']}/session", {"active": True})
    assert session.status_code == 200
    before_devices = await devices_of(first)
    began = time.monotonic()
    before = await first.stats()
    assert before["creates"] == creates(accepted=4, rateLimited=1, rejected=1)
    assert before["deviceHoursBilled"] > 3
    await close(first)

    second = await open_(state_file=state, creates_per_minute=4)
    after_devices = await devices_of(second)
    assert [(d["id"], d["labels"], d["status"]) for d in after_devices] == [
        (d["id"], d["labels"], d["status"]) for d in before_devices
    ]
    assert {d["id"]: d["createdAt"] for d in after_devices} == {
        d["id"]: d["createdAt"] for d in before_devices
    }
    after = await second.stats()
    assert after["devices"] == before["devices"]
    assert after["creates"] == before["creates"]
    assert after["terminations"] == before["terminations"] == 1
    # The clock runs on while the emulator is down (by design): the 3 live devices bill the
    # wall time between the two reads, over a second on a loaded CI machine (3.0681 -> 3.0693
    # once), and nothing more.
    elapsed = time.monotonic() - began
    grown = after["deviceHoursBilled"] - before["deviceHoursBilled"]
    assert -0.0001 <= grown <= 3 * elapsed / 3600 + 0.0001, (grown, elapsed)

    replay = await second.create(idempotency_key="kept-key", labels={"pool": "p1", "team": "a"})
    assert replay.status_code == 202
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == kept
    reused = await second.create(idempotency_key="kept-key", labels={"pool": "other"})
    assert_problem(reused, 422, "idempotency_key_reused")
    stats = await second.stats()
    assert stats["creates"]["idempotentReplays"] == 1
    assert stats["creates"]["accepted"] == 4
    assert stats["devices"]["live"] == 3

    # Billing goes on from where it was: three live devices, one more virtual hour.
    await second.advance(3600)
    grown = (await second.stats())["deviceHoursBilled"]
    assert grown == pytest.approx(before["deviceHoursBilled"] + 3, abs=0.001)


async def test_a_provisioning_device_continues_on_the_clock(
    state: Path, emulators: tuple[Open, Close]
) -> None:
    open_, close = emulators
    first = await open_(state_file=state, provision_seconds=45)
    device = await first.create_ok()
    await first.advance(40)
    await close(first)

    second = await open_(state_file=state, provision_seconds=45)
    assert await second.status(device["id"]) == "provisioning"
    await second.advance(5)
    status = (await second.get(f"/api/v1/devices/{device['id']}/status")).json()
    assert status["status"] == "ready"
    # Ready at its due time, 45 s after its creation: the same timestamps as one run would give.
    assert status["updatedAt"] > device["createdAt"]
    listed = await devices_of(second)
    assert listed[0]["createdAt"] == device["createdAt"]


async def test_the_downtime_passes_on_the_clock_at_the_saved_speed(
    state: Path, emulators: tuple[Open, Close], monkeypatch: pytest.MonkeyPatch
) -> None:
    open_, close = emulators
    wall = [1_000_000.0]
    monkeypatch.setattr(_statefile, "wall_time", lambda: wall[0])
    first = await open_(state_file=state, provision_seconds=45, speed=2)
    device = await first.create_ok()
    await close(first)

    wall[0] += 30  # down for 30 real seconds at speed 2: 60 virtual seconds pass
    second = await open_(state_file=state, provision_seconds=45, speed=1)
    assert await second.status(device["id"]) == "ready"
    now = second.emulator.clock.now()
    # 60 virtual seconds of downtime, plus the real time since this run opened
    # (over a second on a loaded machine: 61.06 in one fresh-clone CI run).
    assert 60 <= now < 65
    assert second.emulator.clock.speed == 1  # this run's own --speed from now on
    assert (await second.stats())["deviceHoursBilled"] == pytest.approx(60 / 3600, abs=0.001)
    await close(second)

    wall[0] -= 1000  # a wall clock set back does not rewind the emulator's clock
    third = await open_(state_file=state)
    assert third.emulator.clock.now() >= now


async def test_the_rate_window_counts_creates_from_before_the_restart(
    state: Path, emulators: tuple[Open, Close]
) -> None:
    open_, close = emulators
    first = await open_(state_file=state, creates_per_minute=3)
    for _ in range(3):
        await first.create_ok()
    await first.advance(30)
    await close(first)

    second = await open_(state_file=state, creates_per_minute=3)
    limited = await second.create(idempotency_key="after-restart")
    assert_problem(limited, 429, "rate_limited")
    await second.advance(30)
    assert (await second.create(idempotency_key="after-restart")).status_code == 202
    creates = (await second.http.get("/_emulator/creates")).json()
    assert len(creates["accounts"]["default"]) == 4


async def test_regions_are_kept_and_reset_empties_the_file(
    state: Path, emulators: tuple[Open, Close]
) -> None:
    open_, close = emulators
    first = await open_(state_file=state)
    device = await first.create_ok(region="mars-north")
    assert (await first.control("regions/mars-north", {"status": "down"})).status_code == 200
    await close(first)

    second = await open_(state_file=state)
    regions = (await second.get("/api/v1/regions")).json()
    assert {"name": "mars-north", "status": "down"} in regions
    assert await second.status(device["id"]) == "offline"
    assert (await second.control("reset")).status_code == 200
    await close(second)

    third = await open_(state_file=state)
    assert await devices_of(third) == []
    assert (await third.stats())["creates"]["accepted"] == 0


async def test_without_a_state_file_nothing_is_written(
    tmp_path: Path, emulators: tuple[Open, Close], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EmulatorConfig().state_file is None
    monkeypatch.chdir(tmp_path)

    def no_sqlite(*args: object, **kwargs: object) -> None:
        raise AssertionError("an emulator without --state opened a database")

    monkeypatch.setattr(_statefile.sqlite3, "connect", no_sqlite)
    open_, close = emulators
    provider = await open_()
    await provider.create_ok()
    await provider.advance(60)
    await provider.control("reset")
    await close(provider)
    assert list(tmp_path.iterdir()) == []


async def test_one_emulator_per_state_file(state: Path, emulators: tuple[Open, Close]) -> None:
    open_, close = emulators
    first = await open_(state_file=state)
    with pytest.raises(StateFileError, match="in use by another emulator"):
        create_app(EmulatorConfig(state_file=state))
    await close(first)
    await close(await open_(state_file=state))  # free again once the first one is closed


def test_a_file_that_is_not_a_state_file_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    with pytest.raises(StateFileError, match="not a database"):
        create_app(EmulatorConfig(state_file=text))
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE things (x)")
    db.close()
    with pytest.raises(StateFileError, match="not an emulator state file"):
        create_app(EmulatorConfig(state_file=other))


def test_cli_state_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_serving(*args: object) -> None:
        raise AssertionError("the emulator started serving on an unusable state file")

    monkeypatch.setattr(emulator_cli, "serve", no_serving)
    assert config_from_args(build_parser().parse_args([])).state_file is None
    args = build_parser().parse_args(["--state", str(tmp_path / "e.sqlite")])
    assert config_from_args(args).state_file == tmp_path / "e.sqlite"

    with pytest.raises(SystemExit) as shown:
        main(["--help"])
    assert shown.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--state FILE" in help_text
    assert "SQLite file" in help_text

    bad = tmp_path / "bad.sqlite"
    bad.write_text("garbage that is long enough to not be an empty database file\n")
    with pytest.raises(SystemExit) as refused:
        main(["--state", str(bad)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "error:" in err
    assert str(bad) in err
