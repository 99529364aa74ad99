"""Progress on stderr while `apply --wait`, `scale --wait` and `delete --wait` wait: a live bar on
an interactive terminal, elsewhere (a pipe, a log, a dumb terminal) a line now and then."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from devicepool.client._waits import waiting_on

# A wait: called with the progress callback (None: no progress shown), it waits.
Wait = Callable[..., Awaitable[Any]]

# Off an interactive terminal: nothing for a wait's first `QUIET_SECONDS` (one that ends by then
# says only how it ended), then a line whenever a pool's figures change, and every
# `EVERY_SECONDS` while they do not.
QUIET_SECONDS = 10.0
EVERY_SECONDS = 15.0
# `why`'s countdown to the account window's next permit.
_COUNTDOWN = re.compile(r", next in \d+ s")


async def wait_with_progress(
    waits: dict[str, Wait],
    *,
    total_key: str,
    done_key: str,
    label: str,
    countdown: bool = False,
) -> list[Any]:
    """Run each wait with its progress on stderr; their answers. `waits` by the pool as the
    CLI names it (`devicepool/NAME`).

    Each wait's callback gets a dict with `done_key` (and `total_key`): the bar
    counts up to the total, or, with `countdown`, down from the first count seen.
    """
    from rich.console import Console

    console = Console(stderr=True)
    # Drawn on an interactive terminal only: elsewhere the display leaves its last frame and a
    # blank line on stderr before the next one (`error: ...`), or nothing but control codes.
    shown: _Bars | _Lines = _Bars(console) if console.is_interactive else _Lines()
    initial: dict[str, int] = {}

    def callback(name: str) -> Callable[[dict[str, Any]], None]:
        def update(status: dict[str, Any]) -> None:
            done = int(status.get(done_key) or 0)
            if countdown:
                first = initial.setdefault(name, max(done, 1))
                shown.update(name, first, first - done, f"{done} {label}")
            else:
                total = int(status.get(total_key) or 0)
                said = f"{done}/{total} {label}{why(status)}"
                shown.update(name, max(total, 1), done if total else 1, said)

        return update

    try:
        return await asyncio.gather(*(wait(cb=callback(name)) for name, wait in waits.items()))
    finally:
        shown.stop()


class _Bars:
    """A rich progress bar a pool, drawn from its first count on (a wait that fails at once,
    a pool not found, leaves its error line alone, without an empty bar)."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[shown]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.tasks: dict[str, Any] = {}

    def update(self, name: str, total: int, completed: int, said: str) -> None:
        if not self.tasks:
            self.progress.start()
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(name, total=None, shown="")
        self.progress.update(self.tasks[name], total=total, completed=completed, shown=said)

    def stop(self) -> None:
        if self.tasks:
            self.progress.stop()


class _Lines:
    """`devicepool/NAME: 3/5 ready · ... (35s)` on stderr: after `QUIET_SECONDS`, on each
    change and every `EVERY_SECONDS`."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        # pool -> (what it said last, when)
        self.last: dict[str, tuple[str, float]] = {}

    def update(self, name: str, total: int, completed: int, said: str) -> None:
        now = time.monotonic()
        if now - self.started < QUIET_SECONDS:
            return
        before = self.last.get(name)
        # The window's `next in N s` changes at every read: alone, it is no change.
        figures = _COUNTDOWN.sub("", said)
        if before is not None and before[0] == figures and now - before[1] < EVERY_SECONDS:
            return
        self.last[name] = (figures, now)
        sys.stderr.write(f"{name}: {said} ({round(now - self.started)}s)\n")
        sys.stderr.flush()

    def stop(self) -> None:
        pass


def why(status: dict[str, Any], now: datetime | None = None) -> str:
    """What a pool that is not ready yet is doing: devices booting, creates pending, whether
    those wait for the account's window (`accountWindow`: the ledger's view), and the
    conditions that hold it back (`waiting_on`)."""
    parts = []
    if booting := int(status.get("provisioningDevices") or 0):
        parts.append(f"{booting} booting")
    if pending := int(status.get("pendingDevices") or 0):
        parts.append(f"{pending} pending")
    window = status.get("accountWindow") or {}
    if pending and window.get("waiting"):
        rate = f"{window.get('capacity')}/{float(window.get('windowSeconds') or 60):g}s"
        said = f"waiting for the account's window ({rate})"
        at = window.get("nextPermitAt")
        if at:
            seconds = (datetime.fromisoformat(at) - (now or datetime.now(UTC))).total_seconds()
            said += f", next in {max(0, round(seconds))} s"
        parts.append(said)
    if held := waiting_on(status):
        parts.append(f"waiting: {', '.join(held)}")
    return f" · {' · '.join(parts)}" if parts else ""
