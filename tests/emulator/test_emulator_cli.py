"""The emulator CLI: flag parsing, and a real server process on a loopback socket."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devicepool.emulator.cli import build_parser, config_from_args, main
from devicepool.emulator.config import EmulatorConfig
from devicepool.testing import free_port, stats_sync
from tests.emulator.conftest import refused_in_one_line

ROOT = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.host, args.port) == ("127.0.0.1", 8088)
    config = config_from_args(args)
    assert config == EmulatorConfig(
        accounts={"default": ["devicepool-dev-key"]},
        provision_seconds=45,
        terminate_seconds=5,
        creates_per_minute=20,
        speed=1,
        seed=None,
    )


def test_all_flags() -> None:
    args = build_parser().parse_args(
        [
            "--host=0.0.0.0",
            "--port=9000",
            "--account",
            "acme=k1,k2",
            "--account",
            "other=k3",
            "--account",
            "acme=k4",
            "--provision-seconds",
            "2.5",
            "--terminate-seconds",
            "0.5",
            "--creates-per-minute",
            "100",
            "--speed",
            "60",
            "--seed",
            "42",
        ]
    )
    config = config_from_args(args)
    assert (args.host, args.port) == ("0.0.0.0", 9000)
    assert config.accounts == {"acme": ["k1", "k2", "k4"], "other": ["k3"]}
    assert (config.provision_seconds, config.creates_per_minute) == (2.5, 100)
    assert config.terminate_seconds == 0.5
    assert (config.speed, config.seed) == (60, 42)


@pytest.mark.parametrize(
    "argv",
    [
        ["--account", "foo"],
        ["--account", "=key"],
        ["--account", "foo="],
        ["--account", "foo=a,,b"],
        ["--port", "http"],
        ["--port", "70000"],
        ["--speed", "0"],
        ["--speed", "nan"],
        ["--provision-seconds", "-1"],
        ["--terminate-seconds", "-1"],
        ["--creates-per-minute", "0"],
        ["--seed", "abc"],
        ["--bogus"],
        ["--account", "a=k", "--account", "b=k"],  # one key, two accounts
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    refused_in_one_line(capsys, lambda: main(argv))


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="speed"):
        EmulatorConfig(speed=0)
    with pytest.raises(ValueError, match="two accounts"):
        EmulatorConfig(accounts={"a": ["k"], "b": ["k"]})
    with pytest.raises(ValueError, match="no API key"):
        EmulatorConfig(accounts={"a": []})


@contextlib.contextmanager
def serving(log_path: Path, *argv: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real `python -m devicepool.emulator` process on a free port, once it answers."""
    port = free_port()
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "devicepool.emulator", "--port", str(port), *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30  # a busy 2-core machine starts Python slowly
        while True:
            try:
                httpx.get(f"{base}/_emulator/clock", timeout=0.5)
                break
            except httpx.TransportError:
                assert process.poll() is None, f"the emulator died: {log_path.read_text()}"
                assert time.monotonic() < deadline, (
                    f"the emulator did not start: {log_path.read_text()}"
                )
                time.sleep(0.05)
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.e2e  # a real emulator process
# (SIGTERM: the state-file test's first process, which serves and stops as this one does.)
@pytest.mark.parametrize("stop", [signal.SIGINT])
def test_serves_over_a_real_socket_and_stops_cleanly(tmp_path: Path, stop: signal.Signals) -> None:
    argv = ["--account", "acme=secret", "--provision-seconds", "0"]
    with serving(tmp_path / "emulator.log", *argv) as (process, base):
        headers = {"Authorization": "Bearer secret", "Idempotency-Key": "k"}
        body = {"region": "us-west", "osVersion": "17", "name": "p", "labels": {"pool": "x"}}
        created = httpx.post(f"{base}/api/v1/ios/devices", json=body, headers=headers)
        assert created.status_code == 202
        status = httpx.get(f"{base}/api/v1/devices/{created.json()['id']}/status", headers=headers)
        assert status.json()["status"] == "ready"
        process.send_signal(stop)
        assert process.wait(timeout=5) == 0


@pytest.mark.e2e  # a real emulator process
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_process_started_again_on_its_state_file_keeps_its_devices(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # SIGKILL too: every answered change is already committed to the file.
    argv = ["--account", "acme=secret", "--state", str(tmp_path / "emulator.sqlite")]
    argv += ["--provision-seconds", "0"]
    headers = {"Authorization": "Bearer secret", "Idempotency-Key": "k"}
    body = {"region": "us-west", "osVersion": "17", "name": "p", "labels": {"pool": "x"}}
    with serving(tmp_path / "first.log", *argv) as (process, base):
        created = httpx.post(f"{base}/api/v1/ios/devices", json=body, headers=headers)
        assert created.status_code == 202
        status = httpx.get(f"{base}/api/v1/devices/{created.json()['id']}/status", headers=headers)
        assert status.json()["status"] == "ready"
        process.send_signal(stop)
        code = process.wait(timeout=5)
        assert stop == signal.SIGKILL or code == 0, code  # SIGTERM: stopped cleanly
    with serving(tmp_path / "second.log", *argv) as (process, base):
        listed = httpx.get(f"{base}/api/v1/devices", headers=headers).json()["items"]
        assert [d["id"] for d in listed] == [created.json()["id"]]
        replay = httpx.post(f"{base}/api/v1/ios/devices", json=body, headers=headers)
        assert replay.status_code == 202
        assert replay.headers["Idempotent-Replayed"] == "true"
        stats = stats_sync(base)
        assert stats["creates"]["accepted"] == 1
        assert stats["creates"]["idempotentReplays"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
