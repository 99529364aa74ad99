"""`devicepool dev --geelark`: the GeeLark emulator's command, the account `geelark` the worker
gets, its key file, its port across restarts, and the banner's line.

Without processes (the stack's spawns and waits are stubbed); the real stack is
tests/e2e/test_e2e_dev_geelark.py.
"""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest
import yaml

from devicepool.client._dev_config import (
    DEFAULT_GEELARK_PORT,
    GEELARK_ACCOUNT,
    DevOptions,
    write_worker_config,
)
from devicepool.client._dev_stack import DevStack, geelark_command
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID, DEFAULT_TOKEN
from devicepool.testing import free_port
from devicepool.worker.config import load_config
from tests.helpers.dev_stubs import start_and_stop, stub_dev_stack


def flags(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == name]


def test_the_emulator_keeps_its_team_in_the_data_dir_and_boots_as_the_stacks_devices(
    tmp_path: Path,
) -> None:
    options = DevOptions(data_dir=tmp_path, geelark=True, provision_seconds=2)
    command = geelark_command(options, DEFAULT_GEELARK_PORT)
    assert command[1:3] == ["-m", "devicepool.emulator.geelark"]
    assert flags(command, "--port") == [str(DEFAULT_GEELARK_PORT)]
    assert flags(command, "--host") == ["127.0.0.1"]
    assert flags(command, "--state") == [str(tmp_path / "geelark.json")]
    # `--provision-seconds`: how long a device takes to come up, on either emulator.
    assert flags(command, "--boot-seconds") == ["2"]
    # Its own default credentials: no key or token on a command line (ps, the log's first line).
    assert "--api-key" not in command and "--token" not in command
    assert DEFAULT_API_KEY not in " ".join(command)


def test_the_worker_gets_the_account_geelark_signing_with_a_key_file(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path, geelark=True, creates_per_minute=120)
    rest, _ = write_worker_config(options, [], geelark_url="http://127.0.0.1:18090")
    assert GEELARK_ACCOUNT not in rest  # the REST emulator never serves it
    written = yaml.safe_load((tmp_path / "worker.yaml").read_text())
    assert written["accounts"][GEELARK_ACCOUNT] == {
        "api": "geelark",
        "baseUrl": "http://127.0.0.1:18090",
        "appId": DEFAULT_APP_ID,
        "apiKeyFile": "secrets/geelark.key",
        "createsPerMinute": 120,
        # What the emulator bills: $0.007 a running minute, at most $1.00 a phone a UTC day.
        "billing": {"perMinute": 0.007, "dailyCap": 1.0},
    }
    key_file = tmp_path / "secrets" / "geelark.key"
    assert key_file.read_text().strip() == DEFAULT_API_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert DEFAULT_API_KEY not in (tmp_path / "worker.yaml").read_text()
    # The worker takes it as it is: key mode, the emulator's URL, the key from the file.
    config = load_config(tmp_path / "worker.yaml", env={})
    account = config.accounts[GEELARK_ACCOUNT]
    assert (account.api, account.base_url, account.app_id) == (
        "geelark",
        "http://127.0.0.1:18090",
        DEFAULT_APP_ID,
    )
    assert account.api_key.get_secret_value() == DEFAULT_API_KEY
    # Billed per running minute to the daily cap, as the emulator bills (`cost`, the cap).
    assert config.settings.billing_of(GEELARK_ACCOUNT).daily_cap == 1.0
    assert round(config.settings.price_per_hour(GEELARK_ACCOUNT), 6) == 0.42


def test_without_the_flag_no_geelark_account_even_one_a_pool_or_last_run_named(
    tmp_path: Path,
) -> None:
    """A pool on `geelark` (or the previous run's config) never makes it a REST account of the
    provider emulator, whose key would overwrite the GeeLark key file."""
    from devicepool.api.loader import load_manifests

    examples = Path(__file__).resolve().parents[2] / "examples"
    pools = load_manifests(examples / "geelark" / "geelark.yaml")
    options = DevOptions(data_dir=tmp_path)
    write_worker_config(options, [], geelark_url="http://127.0.0.1:18090")
    rest, _ = write_worker_config(options, pools)
    written = yaml.safe_load((tmp_path / "worker.yaml").read_text())
    assert GEELARK_ACCOUNT not in written["accounts"] and GEELARK_ACCOUNT not in rest
    assert (tmp_path / "secrets" / "geelark.key").read_text().strip() == DEFAULT_API_KEY


# ------------------------------------------------------------ the stack, stubbed


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """`DevStack.start` with nothing spawned: each child's command line, by name."""
    commands: dict[str, list[str]] = {}

    async def spawn(stack: DevStack, name: str, args: list[str], **__: object) -> None:
        commands[name] = args

    stub_dev_stack(monkeypatch, spawn, skip=("_wait_http",))
    return commands


def banner_of(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("devicepool dev is up\n"))


async def test_the_banner_adds_one_line_naming_the_emulator_and_its_stats(
    tmp_path: Path, spawned: dict[str, list[str]]
) -> None:
    port = free_port()
    with_it = banner_of(
        await start_and_stop(DevOptions(data_dir=tmp_path / "a", geelark=True, geelark_port=port))
    )
    assert list(spawned) == ["temporal", "emulator", "geelark"]
    url = f"http://127.0.0.1:{port}"
    line = (
        f"  GeeLark emulator: {url} (account {GEELARK_ACCOUNT}; stats {url}/_emulator/stats; "
        "team in geelark.json, log geelark.log)"
    )
    assert line in with_it.splitlines(), with_it
    for secret in (DEFAULT_API_KEY, DEFAULT_TOKEN):
        assert secret not in with_it
    # Without the flag: no GeeLark process, and the banner as it was, that line apart.
    spawned.clear()
    without = banner_of(await start_and_stop(DevOptions(data_dir=tmp_path / "b")))
    assert list(spawned) == ["temporal", "emulator"]
    assert "GeeLark" not in without
    lines = with_it.replace(str(tmp_path / "a"), str(tmp_path / "b")).splitlines()
    assert [one for one in lines if one != line] == without.splitlines()


async def test_a_restart_keeps_the_emulators_port_unless_the_flag_says_another(
    tmp_path: Path, spawned: dict[str, list[str]]
) -> None:
    """Its address (the worker's `baseUrl`, the user's `curl` lines) holds across restarts, as
    the BitBrowser nodes' ports do: kept in the data dir."""
    port, other = free_port(), free_port()
    await start_and_stop(DevOptions(data_dir=tmp_path, geelark=True, geelark_port=port))
    await start_and_stop(DevOptions(data_dir=tmp_path, geelark=True))
    assert flags(spawned["geelark"], "--port") == [str(port)]
    written = yaml.safe_load((tmp_path / "worker.yaml").read_text())
    assert written["accounts"][GEELARK_ACCOUNT]["baseUrl"] == f"http://127.0.0.1:{port}"
    await start_and_stop(DevOptions(data_dir=tmp_path, geelark=True, geelark_port=other))
    assert flags(spawned["geelark"], "--port") == [str(other)]
    # A new data dir, or a damaged file: the default port.
    (tmp_path / "geelark-port.json").write_text("not json")
    await start_and_stop(DevOptions(data_dir=tmp_path, geelark=True))
    assert flags(spawned["geelark"], "--port") == [str(DEFAULT_GEELARK_PORT)]


async def test_ctrl_c_stops_it_with_the_emulators(tmp_path: Path) -> None:
    from devicepool.client._dev_banner import stopping_line

    options = DevOptions(data_dir=tmp_path, geelark=True)
    assert await stopping_line(options, "geelark") == "stopping the GeeLark emulator ..."


# ------------------------------------------------------------ bad input


def test_a_taken_geelark_port_names_its_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flagged = ["--port", "--ui-port", "--emulator-port", "--metrics-port"]
    argv = [arg for flag in flagged for arg in (flag, str(free_port()))]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(
            [
                "dev",
                "--data-dir",
                str(tmp_path / "d"),
                *argv,
                "--geelark",
                "--geelark-port",
                str(port),
            ]
        )
    out, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert out == ""
    assert err.count("\n") == 1, err
    assert f"port {port} (--geelark-port) is already in use" in err
    assert not (tmp_path / "d" / "temporal.db").exists()


def test_the_geelark_port_without_the_flag_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["dev", "--data-dir", str(tmp_path / "d"), "--geelark-port", "18090"])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert (out, err) == ("", "error: --geelark-port needs --geelark\n")
    assert not (tmp_path / "d").exists()


def test_the_help_names_the_geelark_flags(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    assert main(["dev", "--help"]) == 0
    said = " ".join(re.sub(r"[│\s]+", " ", capsys.readouterr().out).split())
    assert "--geelark " in said and "--geelark-port" in said
    assert "account geelark" in said


def test_a_geelark_port_another_flag_has_names_both(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Both free when looked at, but only one server can listen there: said before anything
    starts, not as the GeeLark emulator dying with a bind error in its log."""
    flagged = ["--port", "--ui-port", "--emulator-port", "--metrics-port"]
    ports = [str(free_port()) for _ in flagged]
    argv = [arg for pair in zip(flagged, ports, strict=True) for arg in pair]
    data_dir = tmp_path / "d"
    code = main(
        ["dev", "--data-dir", str(data_dir), *argv, "--geelark", "--geelark-port", ports[2]]
    )
    out, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert (out, err) == (
        "",
        f"error: port {ports[2]} is both --emulator-port and --geelark-port: "
        "give each its own port\n",
    )
    assert not (data_dir / "temporal.db").exists()
