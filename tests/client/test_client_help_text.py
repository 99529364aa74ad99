"""`devicepool --help` and each command's: whole summaries, one metavar style.

Issue 43 item 20: the command list showed docstrings' first lines cut mid-sentence
("... of one pool (NAME, or"), and the options' values were shown in three styles at once
(`<str>`, `<list[str]>`, `K=V`, `DURATION`). Every summary is now one complete sentence and
every value is named in capitals (`NAME`, `DURATION`, `KEY=VALUE`), never a Python type.
Walking the app's commands is cheap: no command runs.
"""

from __future__ import annotations

import re

import pytest
import typer

from devicepool.client.cli import app, main

# `devicepool emulator --help` is the emulator program's own help (its own parser).
NOT_OURS = {"emulator"}
METAVAR = re.compile(r"[A-Z][A-Z0-9_]*(=[A-Z][A-Z0-9_]*)?(\[=[A-Z]+\])?")


def commands() -> dict[str, typer.main.TyperCommand]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return dict(group.commands)  # type: ignore[arg-type]


def listed_summaries(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The Commands section of `devicepool --help`, each summary on one line."""
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    section = text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    summaries: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        if match := re.match(r"  (\S+)\s+(.*)", line):
            name, summaries[match.group(1)] = match.group(1), match.group(2)
        else:
            summaries[name] += " " + line.strip()
    return summaries


@pytest.mark.parametrize("columns", ["80", "200"])
def test_every_summary_is_one_whole_sentence(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    summaries = listed_summaries(capsys)
    assert set(summaries) == set(commands())
    for name, summary in summaries.items():
        assert not summary.endswith("..."), (name, summary)
        assert summary.endswith("."), (name, summary)
        assert summary.count("(") == summary.count(")"), (name, summary)
        assert len(summary) <= 100, (name, summary)  # short: the rest is the command's --help


def test_no_value_is_shown_as_a_python_type() -> None:
    group = typer.main.get_command(app)
    root = typer.Context(group, info_name="devicepool")
    shown: dict[str, list[str]] = {}
    for name, command in commands().items():
        if name in NOT_OURS:
            continue
        ctx = typer.Context(command, info_name=name, parent=root)
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            left = record[0]
            if param.param_type_name == "option":
                # "-o, --output FORMAT": what follows the last flag, if anything.
                names = [part.split()[0] for part in re.split(r", | / |; ", left)]
                values = [part.split()[1:] for part in re.split(r", | / |; ", left)]
                value = " ".join(v for vs in values for v in vs)
                assert all(n.startswith("-") for n in names), (name, left)
            else:
                value = left
            shown.setdefault(name, []).append(value)
            assert "<" not in left and ">" not in left, (name, left)
            if value:
                assert METAVAR.fullmatch(value), (name, left)
    assert "KEY=VALUE" in shown["lease"] and "KEY=VALUE" in shown["worker"]
    assert "DURATION" in shown["cost"] and "DURATION" in shown["protect"]
    assert shown["describe"] == ["NAME", "FORMAT", ""]


def test_an_argument_is_named_in_the_usage_line_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["replace", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Usage: devicepool replace [OPTIONS] POOL DEVICE"
    assert "<str>" not in out
