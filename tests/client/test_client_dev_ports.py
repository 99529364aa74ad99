"""A taken port stops `devicepool dev` with the flag to change, also as `make demo ARGS=` (issue 28)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devicepool.client.cli import main
from devicepool.client.errors import EXIT_RUNTIME
from devicepool.testing import free_port

FLAGS = ["--port", "--ui-port", "--emulator-port", "--metrics-port"]


@pytest.mark.parametrize("flag", FLAGS)
def test_a_taken_port_names_its_flag_and_make_demo_args(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # The other ports free: the defaults may be taken on a shared machine.
        ports = [str(port) if f == flag else str(free_port()) for f in FLAGS]
        argv = [arg for pair in zip(FLAGS, ports, strict=True) for arg in pair]
        code = main(["dev", "--data-dir", str(tmp_path / "d"), *argv])
    out, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert out == ""
    assert err.count("\n") == 1, err
    assert f"port {port} ({flag}) is already in use" in err
    other = port + 10000 if port < 55536 else port - 10000
    assert f'make demo ARGS="{flag} {other}"' in err
    assert not (tmp_path / "d" / "temporal.db").exists()
