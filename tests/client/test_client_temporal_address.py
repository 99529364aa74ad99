"""A wrong `TEMPORAL_ADDRESS` is told apart from a stack that is not running (issue 28).

An unresolvable host, an address without a port and a closed port each get a
line naming their cause, on stderr, with exit 1 and no traceback; only the
closed port asks whether `devicepool dev` is running.
"""

from __future__ import annotations

import pytest

from devicepool.client.cli import main
from devicepool.client.errors import EXIT_RUNTIME
from devicepool.testing import free_port as closed_port  # nothing listens on it


def run_get(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, address: str
) -> str:
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS", "TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    code = main(["get"])
    out, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert out == ""
    assert err.count("\n") == 1, err
    return err.strip()


def test_an_unresolvable_host_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    err = run_get(capsys, monkeypatch, "nonexistent.invalid:7233")
    assert "cannot resolve host 'nonexistent.invalid'" in err
    assert "TEMPORAL_ADDRESS" in err
    assert "devicepool dev` running" not in err


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("localhost", "the address needs host:port, e.g. localhost:7233"),
        ("localhost:port", "the address needs host:port, with a port number"),
    ],
)
def test_an_address_without_a_port_number_is_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, address: str, said: str
) -> None:
    err = run_get(capsys, monkeypatch, address)
    assert f"cannot reach Temporal at {address}: {said}" in err
    assert "devicepool dev` running" not in err


def test_a_closed_port_asks_for_the_stack(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    err = run_get(capsys, monkeypatch, address)
    assert err.endswith(
        f"cannot reach Temporal at {address} — is `devicepool dev` running? (connection refused)"
    )
