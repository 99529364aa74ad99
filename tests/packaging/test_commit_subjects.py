"""Commit subjects are at most 72 characters (docs/architecture.md, "Commits").

Checked from v0.2.0 on, when the rule was first written down; the few longer subjects
that landed before the hook existed are named, each with the reason it was kept (rewording
a landed commit rewrites main and every hash that notes and bench/RESULTS.md cite)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINCE = "d734be3"  # v0.2.0 (CHANGELOG.md)
LIMIT = 72
# Landed before .githooks/commit-msg; their bodies say why they are long.
LANDED_LONG = {"c7cc40f", "d4319c3", "7bb92e0", "afacd0c", "508429d", "9beadbd"}


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def history() -> list[tuple[str, str]]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git clone: no history to check")
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", SINCE]).returncode:
        pytest.skip(f"a shallow clone without {SINCE}: no history to check")
    lines = _git("log", "--format=%h%x09%s", "--abbrev=7", f"{SINCE}..HEAD").splitlines()
    return [tuple(line.split("\t", 1)) for line in lines]  # type: ignore[misc]


def test_commit_subjects_are_at_most_72_characters(history: list[tuple[str, str]]) -> None:
    long = [
        f"{sha} ({len(subject)}): {subject}" for sha, subject in history if len(subject) > LIMIT
    ]
    unexplained = [line for line in long if line.split(" ", 1)[0][:7] not in LANDED_LONG]
    assert not unexplained, "subjects over 72 characters:\n" + "\n".join(unexplained)


def test_the_hook_refuses_a_long_subject(tmp_path: Path) -> None:
    hook = ROOT / ".githooks" / "commit-msg"
    message = tmp_path / "MSG"
    message.write_text("x" * 73 + "\n\nbody\n")
    refused = subprocess.run(["sh", str(hook), str(message)], capture_output=True, text=True)
    assert refused.returncode == 1 and "73 characters" in refused.stderr
    message.write_text("# a comment line git strips\n" + "x" * 72 + "\n")
    assert subprocess.run(["sh", str(hook), str(message)]).returncode == 0
