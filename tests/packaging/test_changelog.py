"""CHANGELOG.md names each release's commit, so a clone without tags can find it.

Tags do not travel with every clone (CI's, for one), so a release heading carries the
full hash of the commit it released: `## v0.1.0 — the first release` followed by a line
`Commit: <40 hex digits>`. Tools that need a release's tree (the upgrade test, the replay
recorder) read it from here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from devicepool import __version__

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
HEADING = re.compile(r"^## (v\d+\.\d+\.\d+)\b.*$", re.MULTILINE)
COMMIT = re.compile(r"^Commit: ([0-9a-f]{40})\b", re.MULTILINE)


def release_commits(text: str) -> dict[str, str | None]:
    """Each release heading's version and the hash on its `Commit:` line (None if missing)."""
    found: dict[str, str | None] = {}
    headings = list(HEADING.finditer(text))
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        section = text[heading.end() : end]
        commit = COMMIT.search(section)
        found[heading.group(1)] = commit.group(1) if commit else None
    return found


def _shallow() -> bool:
    answer = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        check=False,
    )
    return answer.stdout.strip() == "true"


def test_every_release_heading_names_its_full_commit_hash() -> None:
    releases = release_commits(CHANGELOG.read_text())
    assert "v0.1.0" in releases, sorted(releases)
    missing = [version for version, commit in releases.items() if commit is None]
    assert not missing, f"release headings without a `Commit: <full hash>` line: {missing}"


def test_the_named_commit_is_in_history_and_carries_that_version() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for version, commit in release_commits(CHANGELOG.read_text()).items():
        assert commit is not None
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:devicepool/__init__.py"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0 and _shallow():
            pytest.skip("a shallow clone does not hold the release commits")
        assert shown.returncode == 0, (
            f"{version}: commit {commit} not in this clone: {shown.stderr}"
        )
        assert f'__version__ = "{version[1:]}"' in shown.stdout, f"{version} at {commit}"


def test_the_current_version_is_released_or_unreleased() -> None:
    text = CHANGELOG.read_text()
    assert "## Unreleased" in text or f"## v{__version__}" in text
