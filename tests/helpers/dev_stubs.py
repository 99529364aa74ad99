"""`devicepool dev`'s stack with nothing started, for the CLI tests of what it would start.

`stub_dev_stack` makes `DevStack.start` hand each child to `spawn` instead of starting it and
wait for none of them (nor for `skip`); `nodes_up`, when given, stands for the BitBrowser
nodes printing their addresses. `start_and_stop` runs such a stack: the lines it printed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import devicepool.client._dev_stack
from devicepool.client._dev_config import DevOptions
from devicepool.client._dev_stack import DevStack


async def nothing(*_: object, **__: object) -> None:
    return None


def stub_dev_stack(
    monkeypatch: pytest.MonkeyPatch,
    spawn: Callable[..., Awaitable[None]],
    *,
    skip: tuple[str, ...] = (),
    nodes_up: Callable[[DevStack, int], Awaitable[None]] | None = None,
) -> None:
    monkeypatch.setattr(DevStack, "_spawn", spawn)
    for method in ("_wait_temporal", "_wait_emulator", "_start_worker", *skip):
        monkeypatch.setattr(DevStack, method, nothing)
    if nodes_up is not None:
        monkeypatch.setattr(DevStack, "_wait_bitbrowser", nodes_up)
    monkeypatch.setattr(DevStack, "_check_ports", lambda stack: None)
    monkeypatch.setattr(devicepool.client._dev_stack, "find_temporal", lambda: "temporal")


async def start_and_stop(options: DevOptions) -> list[str]:
    lines: list[str] = []
    stack = DevStack(options, out=lines.append)
    await stack.start([])
    await stack.stop()
    return lines
