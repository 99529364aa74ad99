"""The tests name no path of one machine (a checkout under /work, a home, /usr/bin/chromium):
they derive paths from the repository, `tmp_path`, `sys.executable` or PATH, so a clone
anywhere runs them. Recorded histories (tests/replay/histories) keep what they recorded."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
_ROOTS = r"(?:work|home|root|opt|tmp|var|usr/bin|usr/local)/"
# A string literal that opens with a machine's own folder, or a flag's value that does
# (`--state=<that>`). `"/usr/bin:/bin"` (a PATH) is neither.
_LITERAL = re.compile(rf"""["'](/{_ROOTS}[^"']*)["']""")
_FLAG_VALUE = re.compile(rf"=(/{_ROOTS}[\w./-]*)")


def machine_paths(text: str) -> list[str]:
    return _LITERAL.findall(text) + _FLAG_VALUE.findall(text)


def test_the_pattern_finds_what_it_must() -> None:
    tmp = "/tmp"
    assert machine_paths(f'Path("{tmp}/x.json")') == [f"{tmp}/x.json"]
    assert machine_paths(f'"--state={tmp}/account.json"') == [f"{tmp}/account.json"]
    assert machine_paths('CHROMIUM = Path("/usr/bin/chromium")') == ["/usr/bin/chromium"]
    assert machine_paths('"PATH": "/usr/bin:/bin"') == []
    assert machine_paths('f"--state={tmp_path}"') == []


def test_no_test_names_a_machine_path() -> None:
    found = [
        f"{path.relative_to(TESTS)}: {hit}"
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__).resolve()  # its own examples
        for hit in machine_paths(path.read_text(errors="replace"))
    ]
    assert found == [], found
