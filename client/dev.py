"""`devicepool dev`: the whole system on one machine, the way `temporal server start-dev` is.

Here: `run_dev`, the supervisor (a dying worker or server is started again, at most 5 times a
minute; an emulator dying stops the stack). Options, keys and the worker config are in
`_dev_config`, the command lines in `_dev_commands`, the order in `_dev_stack`. What a user
sees: docs/operations.md, 'Running locally: `devicepool dev`'."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Sequence

from devicepool.api.v1beta1 import DevicePool
from devicepool.client._dev_config import (
    DevOptions,
    account_key,
    dev_worker_config,
    is_node_worker,
)
from devicepool.client._dev_processes import find_temporal
from devicepool.client._dev_stack import DevStack
from devicepool.client.errors import DevicePoolError

__all__ = ["DevOptions", "DevStack", "account_key", "dev_worker_config", "find_temporal", "run_dev"]


async def run_dev(
    options: DevOptions,
    pools: Sequence[DevicePool] = (),
    *,
    out: Callable[[str], None] | None = None,
) -> int:
    """Start the stack, apply `pools` (on a new data dir), run until SIGINT/SIGTERM or a child
    dies; 0 on a clean stop."""
    stack = DevStack(options) if out is None else DevStack(options, out=out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            stack.kill_all()  # a second Ctrl-C: stop waiting for graceful shutdowns
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    stopper = asyncio.create_task(stop.wait())
    try:
        startup = asyncio.create_task(stack.start(pools))
        await asyncio.wait({startup, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not startup.done():
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError, DevicePoolError):
                await startup
            return 0
        startup.result()  # the manifests are applied by now (on a new data dir)
        await _supervise(stack, stopper)
    finally:
        stopper.cancel()
        await stack.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    stack.out("stopped")
    return 0


async def _supervise(stack: DevStack, stopper: asyncio.Task[object]) -> None:
    """Until `stopper` is done: replace a dead worker or server; a dead emulator ends the stack."""
    restarts: list[float] = []
    while True:
        exited = asyncio.create_task(stack.wait_any_exit())
        await asyncio.wait({exited, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            exited.cancel()
            return
        child = exited.result()
        why = child.exit_reason()
        # A crashed worker is replaced, as a Deployment would: pools resume
        # from Temporal. A crashed server is started again on its SQLite file,
        # as a cluster's frontend comes back: its state is all on disk. The
        # emulator dying ends the stack (it stands for the provider).
        restarts = [t for t in restarts if time.monotonic() - t < 60] + [time.monotonic()]
        restartable = child.name in ("worker", "temporal") or is_node_worker(child.name)
        if not restartable or len(restarts) > 5:
            raise DevicePoolError(why)
        stack.out(f"{why}; restarting it")
        await stack.restart(child)
