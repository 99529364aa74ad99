"""`--state FILE`: an emulated BitBrowser account started again on its file is the same account."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from devicepool.emulator.bitbrowser import BitBrowserConfig
from devicepool.emulator.bitbrowser.app import StateFileError
from devicepool.emulator.bitbrowser.cli import main
from tests.helpers.bitbrowser import Account, accounts_started, phone_body

Start = Callable[..., Account]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Start an account on `tmp_path/account.json`; `stop(account)` releases it."""
    async with accounts_started(
        nodes=["node-1", "node-2"],
        open_seconds=0,
        seed=7,
        phone_requests_per_second=100,
        state_file=tmp_path / "account.json",
    ) as make:
        yield make


async def test_a_restarted_emulator_is_the_same_account(start: Start) -> None:
    first = start()
    group = await first.ok("/group/add", {"groupName": "pools"})
    profile = await first.create(groupId=group["id"])
    await first.ok("/browser/open", {"id": profile["id"]})
    phone = await first.ok("/phone/profile/add", phone_body(computeType=1))
    await first.ok("/phone/openphone", {"id": phone["id"]})
    await first.advance(60)
    before = await first.stats()
    first.emulator.close()

    second = start()
    assert await second.ok("/browser/detail", {"id": profile["id"]}) == await first.ok(
        "/browser/detail", {"id": profile["id"]}
    )
    assert await second.ok("/phone/running", {"id": phone["id"]}) is True
    after = await second.stats()
    assert after["creates"] == before["creates"] == 1
    assert after["phones"]["created"] == 1 and after["phones"]["powerOns"] == 1
    assert after["phones"]["hoursBilled"] >= before["phones"]["hoursBilled"] > 0
    # Browsers do not survive a restart of the desktop client.
    assert after["profiles"]["open"] == 0
    assert await second.ok("/browser/pids/all") == {}
    await second.ok("/browser/open", {"id": profile["id"]}, node="node-2")
    # Ids and seqs carry on: nothing new collides with what was there.
    newer = await second.create(name="pool-a/1")
    assert newer["id"] != profile["id"] and newer["seq"] == profile["seq"] + 1
    listed = await second.ok("/browser/list", {"page": 0, "groupId": group["id"]})
    assert [p["id"] for p in listed["list"]] == [profile["id"]]


async def test_the_time_it_was_down_passes_on_its_clock(start: Start, tmp_path: Path) -> None:
    first = start()
    phone = await first.ok("/phone/profile/add", phone_body(computeType=1))
    await first.ok("/phone/openphone", {"id": phone["id"]})
    first.emulator.close()
    path = tmp_path / "account.json"
    saved = json.loads(path.read_text())
    saved["clock"]["wall"] -= 3600  # as if it had been stopped an hour ago
    path.write_text(json.dumps(saved))
    second = start()
    assert await second.ok("/phone/running", {"id": phone["id"]}) is True
    assert (await second.stats())["phones"]["hoursBilled"] == pytest.approx(1.0, abs=0.01)


async def test_reset_empties_the_file_too(start: Start) -> None:
    first = start()
    await first.create()
    await first.control("reset")
    first.emulator.close()
    assert (await start().stats())["profiles"]["total"] == 0


async def test_one_emulator_at_a_time(start: Start) -> None:
    start()
    with pytest.raises(StateFileError, match="another emulator"):
        start()


@pytest.mark.parametrize(
    "content",
    ["not json", '{"kind": "something else"}', '{"kind": "devicepool-bitbrowser-emulator"}'],
)
async def test_a_file_that_is_not_ours_is_refused(
    start: Start, tmp_path: Path, content: str
) -> None:
    (tmp_path / "account.json").write_text(content)
    with pytest.raises(StateFileError):
        start()


def test_the_cli_refuses_a_held_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = Account(BitBrowserConfig(state_file=tmp_path / "account.json"))
    try:
        with pytest.raises(SystemExit) as exited:
            main(["--port", "0", "--state", str(tmp_path / "account.json")])
    finally:
        held.emulator.close()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another emulator" in err
