"""`devicepool setup` against a Temporal dev server started without the pool's search attributes.

README: "`devicepool setup` (registers the search attributes) ... (self-hosted;
idempotent)". The CLI runs as a user runs it (TEMPORAL_ADDRESS /
TEMPORAL_NAMESPACE, exit codes, stdout and stderr); what the server holds
afterwards is read with the stock `temporal` CLI, not with devicepool's code.
The unreachable server (exit 1, one line) is
tests/client/test_client_cli.py::test_unreachable_server_is_exit_1_with_one_line.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_OK, EXIT_RUNTIME
from devicepool.testing import free_port, wait_until
from tests.helpers.servers import temporal_binary

pytestmark = pytest.mark.devserver

# Namespaces created with the server: one per test, so each starts from what it needs.
FRESH, PARTLY, CLASH = "setup-fresh", "setup-partly", "setup-clash"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A headless dev server with no devicepool search attribute registered; its address."""
    address = f"127.0.0.1:{free_port()}"
    host, port = address.split(":")
    process = subprocess.Popen(
        [
            temporal_binary(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            host,
            "--port",
            port,
            "--log-level",
            "error",
            *(arg for ns in (FRESH, PARTLY, CLASH) for arg in ("--namespace", ns)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                _temporal(address, "operator", "cluster", "health", check=False).returncode == 0
            ),
            timeout=30,
            what="the dev server",
            every=0.2,
        )
        yield address
    finally:
        process.terminate()
        process.wait(timeout=10)


def _temporal(address: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [temporal_binary(), *argv, "--address", address],
        capture_output=True,
        text=True,
        timeout=30,
        check=check,
    )


def _create_attribute(address: str, namespace: str, name: str, type_: str) -> None:
    """Register one search attribute with the stock `temporal` CLI, as an operator would."""
    _temporal(
        address,
        "operator",
        "search-attribute",
        "create",
        "--namespace",
        namespace,
        "--name",
        name,
        "--type",
        type_,
    )


def _custom_attributes(address: str, namespace: str) -> dict[str, str]:
    """name -> type ("Keyword", "Int", ...) of the namespace's custom search attributes."""
    listed = _temporal(
        address, "operator", "search-attribute", "list", "--namespace", namespace, "-o", "json"
    )
    custom = json.loads(listed.stdout).get("customAttributes", {})  # absent when none
    return {
        name: kind.removeprefix("INDEXED_VALUE_TYPE_").title().replace("_", "")
        for name, kind in custom.items()
    }


def _setup(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    address: str,
    namespace: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS"):
        monkeypatch.delenv(name, raising=False)
    code = main(["setup"])
    out, err = capsys.readouterr()
    return code, out, err


def test_setup_registers_every_search_attribute_and_again_changes_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    assert not set(SEARCH_ATTRIBUTES) & set(_custom_attributes(server, FRESH))

    code, out, err = _setup(capsys, monkeypatch, server, FRESH)
    assert code == EXIT_OK, err
    assert out.splitlines() == [
        f"search attribute {name} registered" for name in sorted(SEARCH_ATTRIBUTES)
    ]
    have = _custom_attributes(server, FRESH)
    assert {name: have.get(name) for name in SEARCH_ATTRIBUTES} == SEARCH_ATTRIBUTES
    # The Web UI's list can filter on them now (an unknown attribute is an error).
    listed = _temporal(
        server,
        "workflow",
        "list",
        "--namespace",
        FRESH,
        "--query",
        "DevicePoolPlatform = 'android' AND DevicePoolReady >= 0",
    )
    assert listed.returncode == 0

    # Idempotent: a second run registers nothing and says so.
    code, out, err = _setup(capsys, monkeypatch, server, FRESH)
    assert code == EXIT_OK, err
    assert sorted(out.splitlines()) == sorted(
        f"search attribute {name} already registered" for name in SEARCH_ATTRIBUTES
    )
    assert _custom_attributes(server, FRESH) == have


def test_setup_adds_only_what_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    _create_attribute(server, PARTLY, "DevicePoolPlatform", "Keyword")
    code, out, err = _setup(capsys, monkeypatch, server, PARTLY)
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert "search attribute DevicePoolPlatform already registered" in lines
    assert sorted(lines) == sorted(
        f"search attribute {name} "
        + ("already registered" if name == "DevicePoolPlatform" else "registered")
        for name in SEARCH_ATTRIBUTES
    )
    have = _custom_attributes(server, PARTLY)
    assert {name: have.get(name) for name in SEARCH_ATTRIBUTES} == SEARCH_ATTRIBUTES


def test_a_name_taken_with_another_type_is_exit_1_naming_it_and_nothing_is_added(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    _create_attribute(server, CLASH, "DevicePoolRegion", "Int")
    code, out, err = _setup(capsys, monkeypatch, server, CLASH)
    assert code == EXIT_RUNTIME
    assert out == ""
    assert err.splitlines() == [
        "error: search attribute DevicePoolRegion exists with type Int, devicepool needs Keyword"
    ]
    have = _custom_attributes(server, CLASH)
    assert {name for name in SEARCH_ATTRIBUTES if name in have} == {"DevicePoolRegion"}
    assert have["DevicePoolRegion"] == "Int"
