"""The mutation fuzz both kinds' manifests go through: every problem is one short line.

`mutated(full)` draws a copy of a complete manifest with one to four fields changed
(a value replaced, a key renamed, a field added or removed), written as JSON, YAML or
YAML with unicode left as is. `TEXT` reaches for what breaks a line or a length bound:
long text, control and line-separator characters, private-use and unassigned ones.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

TEXT = (
    st.text(max_size=20)
    | st.text(min_size=50, max_size=300)
    | st.text(st.characters(codec="utf-8"), max_size=100)
    | st.text(st.characters(categories=["Cc", "Zl", "Zp", "Co", "Cn"]), min_size=1, max_size=80)
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def field_paths(document: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key's path in `document`, mappings' keys included, depth first."""
    paths = []
    for key, value in document.items():
        paths.append((*prefix, key))
        if isinstance(value, dict):
            paths += field_paths(value, (*prefix, key))
    return paths


@st.composite
def mutated(draw: st.DrawFn, full: dict[str, Any]) -> str:
    """`full` with a few keys renamed, values replaced, fields added or removed, as text."""
    document = copy.deepcopy(full)
    for _ in range(draw(st.integers(1, 4))):
        paths = field_paths(document)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = document
        for segment in path[:-1]:
            parent = parent[segment]
        how = draw(st.sampled_from(["value", "key", "add", "remove"]))
        if how == "value":
            parent[path[-1]] = draw(VALUES)
        elif how == "key":
            parent[draw(TEXT)] = parent.pop(path[-1])
        elif how == "add":
            parent[draw(TEXT)] = draw(VALUES)
        else:
            del parent[path[-1]]
    form = draw(st.sampled_from(["json", "yaml", "yaml-unicode"]))
    if form == "json":
        return json.dumps(document)
    return yaml.safe_dump(document, allow_unicode=form == "yaml-unicode")
