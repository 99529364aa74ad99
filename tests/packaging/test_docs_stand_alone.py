"""The README and docs/ stand alone: they name only what a clone has (no design notes, issue
numbers or vendor files kept outside the repository; every relative link resolves)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# What a clone does not have: the project's design notes, the vendor pages and the issue
# tracker beside the repository.
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|shared/reference|\bissues? #?\d+", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _name(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def test_the_docs_are_found() -> None:
    assert {"README.md", "docs/pools.md", "docs/providers.md"} <= {_name(d) for d in DOCS}


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_a_doc_names_nothing_outside_the_repository(doc: Path) -> None:
    found = [
        f"{_name(doc)}:{number}: {match.group(0)!r}"
        for number, line in enumerate(doc.read_text().splitlines(), start=1)
        for match in OUTSIDE.finditer(line)
    ]
    assert not found, "say the fact itself, not where it was written down:\n" + "\n".join(found)


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_a_docs_relative_links_resolve_in_the_clone(doc: Path) -> None:
    missing = []
    for target in LINK.findall(doc.read_text()):
        path = target.split("#", 1)[0]
        if not path or re.match(r"[a-z][a-z0-9+.-]*:", path):  # an anchor here, or a URL
            continue
        resolved = (doc.parent / path).resolve()
        if not resolved.exists() or not resolved.is_relative_to(ROOT):
            missing.append(target)
    assert not missing, f"{_name(doc)} links to what a clone lacks: {missing}"


def test_the_check_sees_each_kind_of_outside_reference() -> None:
    for text in ("DESIGN.md says", "see ../shared/reference/x.md", "(issue 26)", "Issues #7"):
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search("the pool's issues are its conditions; 26 devices")
