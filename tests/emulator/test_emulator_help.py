"""`devicepool emulator --help` reads as every other command's help (issue 28).

The emulator has its own (argparse) parser; its help and usage errors follow
the typer commands' layout, and its flags are the ones it always had.
"""

from __future__ import annotations

import pytest

from devicepool.client.cli import main as cli_main
from devicepool.emulator.cli import build_parser

FLAGS = [
    "--host",
    "--port",
    "--account",
    "--provision-seconds",
    "--terminate-seconds",
    "--creates-per-minute",
    "--speed",
    "--seed",
    "--state",
    "-h",
    "--help",
]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def emulator_help(capsys: pytest.CaptureFixture[str], flag: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli_main(["emulator", flag])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_flags_are_unchanged() -> None:
    flags = [flag for action in build_parser()._actions for flag in action.option_strings]
    assert sorted(flags) == sorted(FLAGS)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_has_the_layout_of_the_other_commands(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    out = emulator_help(capsys, flag)
    code, dev, _ = cli(capsys, "dev", "--help")
    assert code == 0
    for text in (out, dev):
        lines = text.splitlines()
        assert lines[0].startswith("Usage: devicepool ") and lines[0].endswith(" [OPTIONS]")
        assert lines[1] == "" and lines[2].startswith("  ")
        assert "Options:" in lines
        assert lines[-1].split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]
    assert out.splitlines()[0] == "Usage: devicepool emulator [OPTIONS]"
    assert "--port <int>" in out and "--speed <float>" in out and "--state FILE" in out
    assert "[default: 8088]" in out and "[default: 45]" in out
    assert "(default 8" not in out  # argparse-era wording
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_bad_flag_is_one_line_worded_as_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, dev = cli(capsys, "dev", "--port", "abc")
    assert code == 2
    with pytest.raises(SystemExit) as exited:
        cli_main(["emulator", "--port", "abc"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    # lower-case "error:", as the emulator always said (scripts grep it); the rest as click's
    assert err.startswith("error: Invalid value for '--port': 'abc' is not a port number")
    assert err.rstrip().endswith("(see `devicepool emulator --help`)")
    assert dev.lower().startswith("error: invalid value for '--port'")
