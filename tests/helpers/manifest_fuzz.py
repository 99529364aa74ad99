"""The mutation fuzz both kinds' manifests go through: every problem is one short line.

`mutated(full)` draws a copy of a complete manifest with one to four fields changed
(a value replaced, a key renamed, a field added or removed), written as JSON, YAML or
YAML with unicode left as is. `TEXT` reaches for what breaks a line or a length bound:
long text, control and line-separator characters, private-use and unassigned ones.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import yaml
from hypothesis import strategies as st

from devicepool.api import v1alpha1, v1beta1
from devicepool.api.durations import MAX_SECONDS

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


# ---------------------------------------------------------------- both kinds' models, drawn

# What both kinds' round-trip properties draw their pools from: names Kubernetes takes,
# short UTF-8 text, metadata, maxUnhealthy (a count or a percentage) and the proxy of
# either version.
NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
SHORT_TEXTS = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8
)
METADATA = st.builds(
    v1alpha1.ObjectMeta,
    name=NAMES,
    labels=st.dictionaries(NAMES, SHORT_TEXTS, max_size=2),
    annotations=st.dictionaries(NAMES, SHORT_TEXTS, max_size=2),
)
MAX_UNHEALTHY = st.one_of(
    st.integers(min_value=0, max_value=600), st.integers(0, 100).map(lambda p: f"{p}%")
)
ALPHA_PROXIES = st.none() | st.builds(
    lambda ref, ttl: v1alpha1.ProxySpec(pool_ref=ref, sticky_ttl=ttl),
    SHORT_TEXTS,
    st.integers(0, MAX_SECONDS),
)
BETA_PROXIES = st.none() | st.builds(
    lambda ref, ttl: v1beta1.ProxySpec(pool_ref=ref, session_ttl=timedelta(seconds=ttl)),
    SHORT_TEXTS,
    st.integers(0, MAX_SECONDS),
)
