"""A wrong `TEMPORAL_ADDRESS` is told apart from a stack that is not running (issue 28).

An unresolvable host, an address without a port and a closed port each get a
line naming their cause, on stderr, with exit 1 and no traceback; only the
closed port asks whether `devicepool dev` is running.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from devicepool.client.cli import main
from devicepool.client.errors import EXIT_RUNTIME, TemporalUnreachable
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


def test_a_url_scheme_is_dropped_without_a_python_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK warns (UserWarning) on a scheme and will refuse it; the address is what it meant.
    port = closed_port()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        err = run_get(capsys, monkeypatch, f"http://127.0.0.1:{port}/")
    assert err == (
        f"error: cannot reach Temporal at 127.0.0.1:{port} — is `devicepool dev` running? "
        "(connection refused)"
    )


def test_https_says_it_turned_tls_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `https://` turns TLS on (a URL pasted from a TLS frontend): a failure says so, since a
    # plain server (a dev stack) refuses TLS with a line that names no cause.
    port = closed_port()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        err = run_get(capsys, monkeypatch, f"https://127.0.0.1:{port}")
    assert err.startswith(
        f"error: cannot reach Temporal at 127.0.0.1:{port} over TLS (on because of https://)"
    )
    detail = (
        "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
        "ConnectError(Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))"
    )
    said = str(TemporalUnreachable(f"127.0.0.1:{port}", detail, tls_from_scheme=True))
    assert said == (
        f"cannot reach Temporal at 127.0.0.1:{port} over TLS (on because of https://): the "
        "server does not speak TLS — drop https:// from TEMPORAL_ADDRESS"
    )


@pytest.mark.parametrize(
    ("address", "said"),
    [
        (
            "http://127.0.0.1:7233/api",
            "cannot reach Temporal at 127.0.0.1:7233/api: the address is host:port; "
            "a path (/api) is not allowed",
        ),
        (
            "dns:///127.0.0.1:7233",
            "cannot reach Temporal at dns:///127.0.0.1:7233: the gRPC resolver form dns:/// is "
            "not taken; give host:port (127.0.0.1:7233)",
        ),
    ],
)
def test_a_path_or_a_resolver_prefix_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, address: str, said: str
) -> None:
    # The SDK takes neither (tonic: InvalidUri for dns:///host:port).
    err = run_get(capsys, monkeypatch, address)
    assert err == f"error: {said}"


def test_the_web_ui_port_is_named_with_the_servers(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)  # no dev stack's lock here: the default ports
    err = run_get(capsys, monkeypatch, "http://127.0.0.1:8233")
    assert "cannot reach Temporal at 127.0.0.1:8233" in err
    assert err.endswith("that is the Web UI's port; the server's is 7233 (127.0.0.1:7233)")


def test_a_dev_stacks_own_ui_port_is_named_with_its_server(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # `devicepool dev --port P --ui-port U` in this directory: its lock says both.
    ui_port, port = closed_port(), closed_port()
    (tmp_path / ".devicepool").mkdir()
    (tmp_path / ".devicepool" / "lock").write_text(
        f"pid 1, Temporal 127.0.0.1:{port}, Web UI port {ui_port}, emulator port 8088, "
        "metrics port 9464\n"
    )
    monkeypatch.chdir(tmp_path)
    err = run_get(capsys, monkeypatch, f"localhost:{ui_port}")
    assert err.endswith(f"that is the Web UI's port; the server's is {port} (127.0.0.1:{port})")


@pytest.mark.parametrize(
    "status",
    [
        'Internal, message: "h2 protocol error: http2 error", ...',
        'Unknown, message: "transport error", ... kind: BrokenPipe ...',
    ],
)
def test_an_http_server_that_is_not_temporal_is_told_apart(status: str) -> None:
    # What the SDK says when an HTTP/1 server (a Web UI, a metrics port) answers the gRPC call.
    detail = (
        "Failed client connect: `get_system_info` call error after connection: Status { code: "
        f"{status} }}"
    )
    said = str(TemporalUnreachable("127.0.0.1:18088", detail))
    assert said == (
        "cannot reach Temporal at 127.0.0.1:18088: something answers there, but not "
        "Temporal's gRPC (a Web UI or an HTTP port?) — check TEMPORAL_ADDRESS"
    )
