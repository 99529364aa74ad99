"""`devicepool-bitbrowser-emulator`: flags, help in the house layout, and real node servers."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

from devicepool.emulator.bitbrowser.cli import build_parser, config_from_args, main, node_ports
from devicepool.emulator.bitbrowser.config import BitBrowserConfig, default_accounts_dir
from devicepool.testing import free_port
from tests.emulator.conftest import ROOT, emulator_process, refused_in_one_line
from tests.helpers.bitbrowser import profile_body

MODULE = [sys.executable, "-m", "devicepool.emulator.bitbrowser"]


def test_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.host, args.port) == ("127.0.0.1", 54345)
    # Without --state, the account is shared by this user's processes of it (test_bitbrowser_shared).
    assert config_from_args(args) == BitBrowserConfig(accounts_dir=default_accounts_dir())
    assert BitBrowserConfig().nodes == ["node-1"] and BitBrowserConfig().api_key is None


def test_all_flags(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "--nodes=3",
            "--account=acme",
            "--api-key=k",
            "--auth-refusal-status=200",
            "--open-seconds=0",
            "--close-linger-seconds=5",
            "--phone-boot-seconds=6",
            "--phone-resume-seconds=1",
            "--phone-restart-seconds=2",
            "--phone-requests-per-second=4",
            "--phone-rate-limit=delay",
            "--phone-rate-scope=node",
            "--phone-region=r1",
            "--phone-region=r2",
            "--speed=60",
            "--seed=9",
            f"--state={tmp_path / 'account.json'}",
        ]
    )
    config = config_from_args(args)
    assert config.nodes == ["node-1", "node-2", "node-3"]
    assert (config.account, config.api_key, config.auth_refusal_status) == ("acme", "k", 200)
    assert (config.open_seconds, config.close_linger_seconds) == (0, 5)
    assert (config.phone_boot_seconds, config.phone_resume_seconds) == (6, 1)
    assert (config.phone_requests_per_second, config.phone_rate_mode) == (4, "delay")
    assert (config.phone_rate_scope, config.phone_regions) == ("node", ["r1", "r2"])
    assert (config.speed, config.seed) == (60, 9)
    assert config.state_file == tmp_path / "account.json"
    named = build_parser().parse_args(["--node", "a=6001", "--node", "b"])
    assert config_from_args(named).nodes == ["a", "b"]
    assert named.named_nodes == [("a", 6001), ("b", None)]


def test_node_ports() -> None:
    assert node_ports(54345, 3) == [54345, 54346, 54347]
    assert node_ports(0, 2) == [0, 0]
    assert node_ports(54345, 3, [6001, None, 6003]) == [6001, 54346, 6003]
    assert node_ports(0, 2, [6001, None]) == [6001, 0]
    with pytest.raises(ValueError, match="65535"):
        node_ports(65535, 2)
    with pytest.raises(ValueError, match="one port"):
        node_ports(0, 2, [6001, 6001])


@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "0"],
        ["--port", "http"],
        ["--speed", "0"],
        ["--open-seconds", "-1"],
        ["--phone-requests-per-second", "0"],
        ["--phone-rate-limit", "drop"],
        ["--auth-refusal-status", "401"],
        ["--node", "a", "--node", "a"],
        ["--node", "=6001"],
        ["--node", "a=port"],
        ["--node", "a=6001", "--node", "b=6001"],
        ["--api-key", ""],
        ["--port", "65535", "--nodes", "2"],
        ["--bogus"],
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused_in_one_line(capsys, lambda: main(argv))
    assert err.rstrip().endswith("(see `devicepool-bitbrowser-emulator --help`)")


def test_help_has_the_layout_of_the_other_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Usage: devicepool-bitbrowser-emulator [OPTIONS]"
    assert lines[1] == "" and lines[2].startswith("  Run the BitBrowser Local API emulator")
    assert "Options:" in lines
    assert lines[-1].split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]
    assert "--port <int>" in out and "[default: 54345]" in out and "--nodes <int>" in out
    assert "--state FILE" in out
    assert "--phone-rate-limit refuse|http429|delay" in out and "[default: refuse]" in out
    assert max(len(line) for line in lines) <= 80
    # The name a caller gives it (e.g. a `devicepool emulator --bitbrowser`) is the usage's.
    assert (
        build_parser("devicepool emulator")
        .format_help()
        .startswith("Usage: devicepool emulator [OPTIONS]")
    )


@pytest.mark.e2e  # a real emulator process
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_two_nodes_of_one_account_over_real_sockets(tmp_path: Path, stop: signal.Signals) -> None:
    log = tmp_path / "emulator.log"
    port = free_port()
    argv = ["--node", f"node-a={port}", "--node", "node-b", "--api-key", "k", "--open-seconds", "0"]
    with emulator_process(log, MODULE, *argv) as (process, nodes):
        assert sorted(nodes) == ["node-a", "node-b"]
        assert nodes["node-a"] == f"http://127.0.0.1:{port}"
        key = {"x-api-key": "k"}
        body = profile_body(password="pw-in-no-log", cookie="cookie-in-no-log")
        created = httpx.post(f"{nodes['node-a']}/browser/update", json=body, headers=key)
        assert created.json()["success"] is True
        listed = httpx.post(f"{nodes['node-b']}/browser/list", json={"page": 0}, headers=key)
        assert [p["id"] for p in listed.json()["data"]["list"]] == [created.json()["data"]["id"]]
        refused = httpx.post(f"{nodes['node-b']}/health", headers={"x-api-key": "nope"})
        assert refused.status_code == 403 and refused.json()["success"] is False
        process.send_signal(stop)
        assert process.wait(timeout=10) == 0
        assert process.stdout is not None
        access_log = process.stdout.read().decode()  # uvicorn writes it to stdout
    text = log.read_text() + access_log
    assert "POST /browser/list" in text  # the access log is there, and holds no secret
    for secret in ("pw-in-no-log", "cookie-in-no-log", "proxy-secret-0"):
        assert secret not in text


def test_the_console_script_is_the_cli() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["devicepool-bitbrowser-emulator"] == "devicepool.emulator.bitbrowser.cli:main"


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            main(["--port", str(port)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.e2e  # real emulator processes
def test_a_process_killed_and_started_again_on_its_state_file_keeps_the_account(
    tmp_path: Path,
) -> None:
    # SIGKILL: every answered call is already on disk.
    argv = ["--node", "node-1", "--state", str(tmp_path / "account.json")]
    with emulator_process(tmp_path / "first.log", MODULE, *argv) as (process, nodes):
        created = httpx.post(f"{nodes['node-1']}/browser/update", json=profile_body()).json()
        assert created["success"] is True
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    with emulator_process(tmp_path / "second.log", MODULE, *argv) as (process, nodes):
        listed = httpx.post(f"{nodes['node-1']}/browser/list", json={"page": 0}).json()
        assert [p["id"] for p in listed["data"]["list"]] == [created["data"]["id"]]
        assert httpx.get(f"{nodes['node-1']}/_emulator/stats").json()["creates"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


# ------------------------------------------------- `devicepool emulator --bitbrowser`


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--port", "abc"], "--port"),
        (["--nodes", "0"], "--nodes"),
        (["--node", "=3"], "--node"),
        (["--accounts-dir"], "--accounts-dir"),
        (["--phone-rate-scope", "world"], "--phone-rate-scope"),
        (["--state", "a.json", "--accounts-dir", "d"], "--accounts-dir"),
    ],
)
def test_devicepool_emulator_bitbrowser_refuses_a_bad_flag_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    from devicepool.client.cli import main as cli_main

    # The flag goes anywhere.
    err = refused_in_one_line(capsys, lambda: cli_main(["emulator", *argv, "--bitbrowser"]))
    assert flag in err
    assert err.rstrip().endswith("(see `devicepool emulator --bitbrowser --help`)")


def test_devicepool_emulator_bitbrowser_help(capsys: pytest.CaptureFixture[str]) -> None:
    from devicepool.client.cli import main as cli_main

    with pytest.raises(SystemExit) as exited:
        cli_main(["emulator", "--bitbrowser", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Usage: devicepool emulator --bitbrowser [OPTIONS]"
    assert "--node NAME[=PORT]" in out and "--account" in out and "--accounts-dir DIR" in out
    # Without --bitbrowser it is the BitCloudPhone emulator, as before.
    with pytest.raises(SystemExit):
        cli_main(["emulator", "--help"])
    assert capsys.readouterr().out.splitlines()[0] == "Usage: devicepool emulator [OPTIONS]"
