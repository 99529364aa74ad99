"""A dev stack whose free port was taken before Temporal bound it is started again.

Tests start stacks side by side; a port `free_ports` found free can be taken by
another process before `devicepool dev` checks it (it names the flag) or after,
before Temporal binds it ("address already in use" in Temporal's log, seen
twice in CI this stop). `start_stack` tries again on new ports; here the port
is taken before the check, which the same retry covers.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from devicepool.testing import free_ports
from tests.helpers import dev_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def test_a_stack_whose_port_was_taken_starts_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks: list[list[int]] = []

        def racing(n: int) -> list[Any]:
            ports = list(free_ports(n))
            if not picks:
                ports[0] = busy  # Temporal's gRPC port, taken since it was found free
            picks.append(ports)
            return ports

        monkeypatch.setattr(dev_stack, "free_ports", racing)
        stack = dev_stack.start_stack(tmp_path / "dev", tmp_path / "dev.out")
        try:
            assert len(picks) == 2, picks
            assert stack.port == picks[1][0] != busy
            assert "devicepool dev is up" in stack.out.read_text()
        finally:
            dev_stack.stop_stack(stack)
