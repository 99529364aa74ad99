"""What `apply --wait` / `scale --wait` say while a pool is not ready: booting, pending, and
whether the pending creates wait for the account's window (issue 28: `0/50 ready` for 100 s
said nothing while 17 booted and 13 waited)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from devicepool.client._cli_progress import why

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_a_pool_waiting_for_its_accounts_window_says_so_and_when() -> None:
    status = {
        "readyDevices": 0,
        "provisioningDevices": 17,
        "pendingDevices": 13,
        "accountWindow": {
            "capacity": 20,
            "windowSeconds": 60.0,
            "waiting": {"devicepool/p/provision/1-1": 13},
            "nextPermitAt": "2026-12-02T12:00:34Z",
        },
    }
    assert why(status, NOW) == (
        " · 17 booting · 13 pending · waiting for the account's window (20/60s), next in 34 s"
    )


def test_pending_creates_not_held_by_the_window_are_only_counted() -> None:
    status = {"provisioningDevices": 2, "pendingDevices": 3, "accountWindow": {"waiting": {}}}
    assert why(status, NOW) == " · 2 booting · 3 pending"
    assert why({"readyDevices": 5}, NOW) == ""


async def test_a_wait_off_a_terminal_leaves_stderr_to_the_lines_that_follow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Off a terminal the bar is not drawn: it left a blank line before `error: ...`."""
    from devicepool.client._cli_progress import wait_with_progress

    async def wait(cb: Any) -> None:
        cb({"desiredReplicas": 2, "readyDevices": 1})

    await wait_with_progress(
        {"devicepool/p": wait}, total_key="desiredReplicas", done_key="readyDevices", label="ready"
    )
    assert capsys.readouterr() == ("", "")
