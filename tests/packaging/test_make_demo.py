"""`make demo` installs the runtime only and takes `ARGS=`; `make test` adds the dev extras.

Read with `make -n` (the commands make would run, none run) on a copy of the
Makefile and pyproject.toml, with the venv's stamps dated by hand: the one venv
(.venv) must end up right in either order (demo then test, test then demo).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def make_n(checkout: Path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        ["make", "-n", *args], cwd=checkout, capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line]


def dated(checkout: Path, *stamps: str) -> None:
    """A venv whose `stamps` are newer than pyproject.toml."""
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").touch()
    later = time.time() + 60
    for stamp in stamps:
        (checkout / ".venv" / stamp).touch()
        os.utime(checkout / ".venv" / stamp, (later, later))


def test_a_fresh_demo_installs_the_runtime_only_and_passes_args(checkout: Path) -> None:
    lines = make_n(checkout, "demo", "ARGS=--port 17233 --ui-port 18233")
    assert installs(lines) == [".venv/bin/python -m pip install -e ."]
    assert lines[-1] == (
        ".venv/bin/devicepool dev --browser-nodes 2 --apply examples/quickstart.yaml "
        "--apply examples/browserpool.yaml --port 17233 --ui-port 18233"
    )


def test_a_demo_venv_gets_the_dev_extras_for_the_tests(checkout: Path) -> None:
    dated(checkout, ".installed-run")
    assert installs(make_n(checkout, "venv")) == [".venv/bin/python -m pip install -e '.[dev]'"]


def test_a_test_venv_serves_the_demo_as_it_is(checkout: Path) -> None:
    dated(checkout, ".installed", ".installed-run")
    assert installs(make_n(checkout, "demo")) == []
    assert installs(make_n(checkout, "venv")) == []


def test_a_changed_pyproject_reinstalls_the_runtime_for_the_demo(checkout: Path) -> None:
    dated(checkout)
    later = time.time() + 120
    for stamp in (".installed", ".installed-run"):
        (checkout / ".venv" / stamp).touch()
        os.utime(checkout / ".venv" / stamp, (later - 240, later - 240))
    assert installs(make_n(checkout, "demo")) == [".venv/bin/python -m pip install -e ."]


def test_the_readme_shows_the_ports_the_second_terminal_and_the_venv_python() -> None:
    readme = (ROOT / "README.md").read_text()
    assert 'make demo ARGS="--port 17233 --ui-port 18233"' in readme
    direct = readme.split(
        ".venv/bin/devicepool dev --browser-nodes 2 --apply examples/quickstart.yaml", 1
    )[1]
    command = direct.split("\nexport", 1)[0]
    for flag in ("--port", "--ui-port", "--emulator-port", "--metrics-port"):
        assert f"{flag} " in command
    tour = readme.split("\n## A first tour\n", 1)[1].split("\n## ", 1)[0]
    assert "second terminal" in tour
    api = readme.split("\n## Python API\n", 1)[1].split("```python", 1)[0]
    assert ".venv/bin/python example.py" in api
