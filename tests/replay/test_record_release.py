"""The corpus recorder's parts that run only at release time, checked on every build."""

from __future__ import annotations

import importlib
import inspect
import subprocess
from pathlib import Path

import pytest

from tests.replay.record_release import ROOT, resolve, shimmed_python

RELEASE = "8a87418db561fad6f289d0a486deca8abd45ae91"  # v0.1.0


def _through_shim(tmp_path: Path, *args: str) -> list[str]:
    """The arguments the shim hands the real CLI (here `echo`)."""
    dbs = tmp_path / "dbs"
    dbs.mkdir(exist_ok=True)
    python = shimmed_python(tmp_path / "work", dbs, real="/bin/echo")
    shim = python.parent / "temporal"
    return subprocess.run([str(shim), *args], capture_output=True, text=True).stdout.split()


def test_every_dev_server_the_suite_starts_keeps_a_file(tmp_path: Path) -> None:
    told = _through_shim(tmp_path, "server", "start-dev", "--port", "7233", "--headless")
    assert told[:5] == ["server", "start-dev", "--port", "7233", "--headless"]
    assert told[5] == "--db-filename" and told[6].startswith(str(tmp_path / "dbs"))
    assert told[6].endswith(".db") and len(told) == 7
    assert "start-dev --port 7233" in (tmp_path / "dbs" / "started.log").read_text()


@pytest.mark.parametrize(
    "args",
    [
        ("server", "start-dev", "--db-filename", "own.db"),
        ("server", "start-dev", "-f", "own.db"),
        ("workflow", "list", "--namespace", "default"),
    ],
)
def test_a_server_with_a_file_of_its_own_and_other_commands_pass_unchanged(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    assert _through_shim(tmp_path, *args) == list(args)


def test_a_release_is_found_by_the_hash_the_changelog_gives(tmp_path: Path) -> None:
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{RELEASE}^{{commit}}"], capture_output=True
    )
    if known.returncode != 0:
        pytest.skip(f"commit {RELEASE} (v0.1.0) is not in this clone's history")
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(f"# Changelog\n\n## v0.1.0 — the first release\n\nCommit `{RELEASE}`.\n")
    assert resolve("v0.1.0", changelog=changelog) == RELEASE
    assert resolve(RELEASE[:12], changelog=changelog) == RELEASE
    with pytest.raises(SystemExit, match=r"v9\.9\.9"):
        resolve("v9.9.9", changelog=changelog)


def test_the_scenario_recorder_of_this_tree_imports() -> None:
    # `record.py` runs on this tree's modules (`record_v010_upgrade.py` on v0.1.0's, in
    # its export): a name it imports that moves would break it only when a release is
    # recorded. Before: it imported `start_janitors` from where it no longer lived.
    record = importlib.import_module("tests.replay.record")
    assert inspect.iscoroutinefunction(record.record)
