"""`devicepool emulator --geelark` / `python -m devicepool.emulator.geelark`: flags, help in
the house layout, and one real server."""

from __future__ import annotations

import json
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

from devicepool.emulator.geelark.cli import build_parser, config_from_args
from devicepool.emulator.geelark.config import GeeLarkConfig
from tests.emulator.conftest import emulator_process, refused_in_one_line
from tests.helpers.geelark import signed_headers


def test_the_flags_build_the_config() -> None:
    args = build_parser().parse_args(
        [
            "--requests-per-minute",
            "5",
            "--creates-per-day",
            "3",
            "--no-token-auth",
            "--batch-envelope",
            "coded",
            "--idle-minutes",
            "0.5",
            "--speed",
            "60",
        ]
    )
    config = config_from_args(args)
    assert (config.requests_per_minute, config.creates_per_day, config.token) == (5, 3, None)
    assert (config.batch_envelope, config.idle_minutes, config.speed) == ("coded", 0.5, 60)
    defaults = config_from_args(build_parser().parse_args([]))
    assert defaults == GeeLarkConfig()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--port", "abc"], "--port"),
        (["--requests-per-minute", "0"], "--requests-per-minute"),
        (["--opens-per-day", "-1"], "--opens-per-day"),
        (["--batch-envelope", "maybe"], "--batch-envelope"),
        (["--idle-minutes", "0"], "--idle-minutes"),
        (["--no-key-auth", "--no-token-auth"], "auth"),
    ],
)
def test_devicepool_emulator_geelark_refuses_a_bad_flag_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    from devicepool.client.cli import main as cli_main

    # The flag goes anywhere.
    err = refused_in_one_line(capsys, lambda: cli_main(["emulator", *argv, "--geelark"]))
    assert flag in err
    assert err.rstrip().endswith("(see `devicepool emulator --geelark --help`)")


def test_devicepool_emulator_geelark_help_lists_its_knobs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from devicepool.client.cli import main as cli_main

    with pytest.raises(SystemExit) as exited:
        cli_main(["emulator", "--geelark", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Usage: devicepool emulator --geelark [OPTIONS]"
    for knob in (
        "--requests-per-hour",
        "--lock-seconds",
        "--creates-per-day",
        "--opens-per-day",
        "--max-profiles",
        "--daily-cap",
        "--idle-minutes",
        "--boot-seconds",
        "--speed",
    ):
        assert knob in out, knob
    assert "[default: 0.007]" in out and "[default: 24000]" in out
    # Without --geelark it is the BitCloudPhone emulator, as before.
    with pytest.raises(SystemExit):
        cli_main(["emulator", "--help"])
    assert capsys.readouterr().out.splitlines()[0] == "Usage: devicepool emulator [OPTIONS]"


def test_a_real_server_answers_a_signed_call_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "geelark.log"
    state = tmp_path / "team.json"
    command = [sys.executable, "-m", "devicepool.emulator.geelark"]
    argv = ["--seed", "1", "--state", str(state)]
    with emulator_process(log, command, *argv, lines=1) as (process, apps):
        url = apps["geelark"]
        assert url.startswith("http://127.0.0.1:"), log.read_text()
        headers = signed_headers(GeeLarkConfig())
        request = urllib.request.Request(
            f"{url}/open/v1/phone/list",
            data=b"{}",
            headers={**headers, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
        assert (body["code"], body["traceId"]) == (0, headers["traceId"])
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
        assert json.loads(state.read_text())["kind"] == "devicepool-geelark-emulator"
