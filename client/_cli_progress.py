"""Live progress bars on stderr while `apply --wait`, `scale --wait` and `delete --wait` wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

# A wait: called with the progress callback (None: no progress shown), it waits.
Wait = Callable[..., Awaitable[Any]]


async def wait_with_progress(
    waits: dict[str, Wait],
    *,
    total_key: str,
    done_key: str,
    label: str,
    countdown: bool = False,
) -> list[Any]:
    """Run each wait with a live rich progress bar on stderr (a terminal's); their answers.
    `waits` by the pool as the CLI names it (`devicepool/NAME`).

    Each wait's callback gets a dict with `done_key` (and `total_key`): the bar
    counts up to the total, or, with `countdown`, down from the first count seen.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[shown]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    )
    # A bar appears with its first count, not before: a wait that fails at once
    # (a pool not found) leaves its error line alone, without an empty bar.
    tasks: dict[str, Any] = {}
    initial: dict[str, int] = {}

    def task(name: str) -> Any:
        # Drawn on a terminal only: elsewhere (a pipe, a log) the display would leave
        # nothing but a stray blank line on stderr before the next one.
        if not tasks and console.is_terminal:
            progress.start()
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=None, shown="")
        return tasks[name]

    def callback(name: str) -> Callable[[dict[str, Any]], None]:
        def update(status: dict[str, Any]) -> None:
            done = int(status.get(done_key) or 0)
            if countdown:
                first = initial.setdefault(name, max(done, 1))
                progress.update(
                    task(name), total=first, completed=first - done, shown=f"{done} {label}"
                )
            else:
                total = int(status.get(total_key) or 0)
                progress.update(
                    task(name),
                    total=max(total, 1),
                    completed=done if total else 1,
                    shown=f"{done}/{total} {label}{why(status)}",
                )

        return update

    try:
        return await asyncio.gather(*(wait(cb=callback(name)) for name, wait in waits.items()))
    finally:
        if tasks and console.is_terminal:
            progress.stop()


def why(status: dict[str, Any], now: datetime | None = None) -> str:
    """What a pool that is not ready yet is doing: devices booting, creates pending, and
    whether those wait for the account's window (`accountWindow`: the ledger's view)."""
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
    return f" · {' · '.join(parts)}" if parts else ""
