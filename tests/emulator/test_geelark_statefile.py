"""`--state FILE`: the GeeLark emulator started again on its file is the same team."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from devicepool.emulator.geelark import GeeLarkConfig, StateFileError, create_app
from tests.helpers.geelark import phone_row, team


async def test_a_team_started_again_on_its_file_is_the_same_team(tmp_path: Path) -> None:
    state = tmp_path / "geelark.json"
    config = {"state_file": state, "boot_seconds": 0, "requests_per_minute": 50}
    async with team(**config, requests_per_hour=60) as t:
        running, off, gone = await t.create("running", "off", "gone")
        await t.ok("phone/start", {"ids": [running, gone]}, mode="token")
        await t.advance(120)
        await t.ok("phone/stop", {"ids": [gone]}, mode="token")
        await t.ok("phone/delete", {"ids": [gone]}, mode="token")
        while (await t.call("phone/list", {})).json()["code"] != 40014:
            pass  # the key's hour runs out: it is locked
        before = await t.stats()
    async with team(**config, requests_per_hour=60) as t:
        assert await t.refused("phone/list", {}) == 40014  # the lock survived the restart
        listed = await t.ok("phone/list", {}, mode="token")
        assert sorted(i["serialName"] for i in listed["items"]) == ["off", "running"]
        assert await t.status(running, off, mode="token") == {running: 0, off: 2}
        stats = await t.stats()
        assert stats["billing"]["byPhone"][gone] == before["billing"]["byPhone"][gone]
        assert stats["billing"]["byPhone"][running]["minutes"] >= 2
        assert stats["phones"]["created"] == 3 and stats["phones"]["deleted"] == 1
        assert stats["quotas"]["creates"] == before["quotas"]["creates"]
        [new] = await t.create("new", mode="token")
        assert new not in (running, off, gone)


async def test_one_emulator_at_a_time_on_a_file(tmp_path: Path) -> None:
    state = tmp_path / "geelark.json"
    async with team(state_file=state):
        with pytest.raises(StateFileError, match="another emulator"):
            create_app(GeeLarkConfig(state_file=state))
    create_app(GeeLarkConfig(state_file=state)).state.emulator.close()


@pytest.mark.parametrize(
    ("text", "says"),
    [("{nope", "cannot read"), ('{"kind": "other"}', "not a GeeLark emulator's state file")],
)
def test_a_file_that_is_not_a_team_is_refused(tmp_path: Path, text: str, says: str) -> None:
    state = tmp_path / "geelark.json"
    state.write_text(text)
    with pytest.raises(StateFileError, match=says):
        create_app(GeeLarkConfig(state_file=state))
    assert state.read_text() == text  # left as it was


def test_the_cli_refuses_such_a_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from devicepool.client.cli import main as cli_main

    state = tmp_path / "geelark.json"
    state.write_text("[]")
    with pytest.raises(SystemExit) as exited:
        cli_main(["emulator", "--geelark", "--port", "0", "--state", str(state)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a GeeLark emulator's state file" in err


async def test_a_change_whose_answer_is_held_is_already_on_disk(tmp_path: Path) -> None:
    state = tmp_path / "geelark.json"
    async with team(state_file=state) as t:
        await t.faults(timeouts=1, timeoutSeconds=30)
        body = {"mobileType": "Android 12", "data": [phone_row("held")]}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(t.call("phone/addNew", body), timeout=0.3)
        # Were the process killed now, the phone would be there when it starts again.
        saved = json.loads(state.read_text())
        assert [p["name"] for p in saved["phones"]] == ["held"]


async def test_the_state_file_is_the_owners_alone(tmp_path: Path) -> None:
    # It holds every phone's proxy and ADB passwords: 0600, whatever the umask, and one
    # an older run left wider is made 0600 too.
    state = tmp_path / "geelark.json"
    old = os.umask(0o022)
    try:
        async with team(state_file=state) as t:
            await t.create("one")
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        state.chmod(0o644)
        async with team(state_file=state) as t:
            await t.create("two")
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
    finally:
        os.umask(old)
