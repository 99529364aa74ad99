"""Reading pool manifests from YAML/JSON and explaining what is wrong with them.

All problems of all documents are collected before anything is raised, one line each
(`api.problems`), as a `ManifestError` (a `ValueError`, its lines in `.problems`); no pydantic,
YAML or OS exception escapes. This module owns what a set of manifests is (files, documents,
`kind: List`, names unique per kind). `load_manifests` takes DevicePools only (what `apply`
runs); `load_resources` takes both kinds, mixed. Both return the stored version (v1beta1)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pydantic

from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.converter import API_VERSIONS, ConversionError
from devicepool.api.documents import parse_documents, read_text
from devicepool.api.kinds import KINDS, kind_named
from devicepool.api.names import API_VERSION_V1BETA1, KIND_DEVICE_POOL
from devicepool.api.problems import Loc, ManifestError, loc_path, problem_line, show_value
from devicepool.api.v1beta1 import DevicePool
from devicepool.api.validation_messages import format_errors, format_validation_error

# What `load_manifests` takes.
SUPPORTED_KINDS: tuple[str, ...] = (KIND_DEVICE_POOL,)
# What `load_resources` takes (as messages list them, sorted).
RESOURCE_KINDS: tuple[str, ...] = tuple(sorted(KINDS))

# A pool of either kind, in the stored version.
Resource = DevicePool | BrowserPool
MANIFEST_SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")

# What the server sets and `get -o yaml` prints: ignored on apply, as kubectl
# does, so that a pool read back applies again. Only these: any other unknown
# field is still a mistake.
SERVER_SET_METADATA: frozenset[str] = frozenset(
    {
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "generation",
        "managedFields",
        "resourceVersion",
        "selfLink",
        "uid",
    }
)

__all__ = [
    "ManifestError",
    "Resource",
    "format_validation_error",
    "load_manifests",
    "load_manifests_text",
    "load_resource_texts",
    "load_resources",
    "load_resources_text",
    "parse_pool",
    "parse_resource",
]

_Where = tuple[str, Loc]  # (message prefix, base loc) of a pool, for duplicate reports


# --- public API -------------------------------------------------------------------


def parse_pool(data: Any, *, source: str = "<input>") -> DevicePool:
    """Validate one already-parsed manifest (a mapping) into a `DevicePool` (v1beta1)."""
    return cast(DevicePool, _parse_one(data, source=source, kinds=SUPPORTED_KINDS))


def parse_resource(data: Any, *, source: str = "<input>") -> Resource:
    """Validate one already-parsed manifest of either kind into its stored version."""
    return _parse_one(data, source=source, kinds=RESOURCE_KINDS)


def load_manifests_text(text: str, *, source: str = "<stdin>") -> list[DevicePool]:
    """Every DevicePool in `text`: YAML (one or many documents) or JSON.

    A JSON list of objects and a Kubernetes `kind: List` with `items` are
    unpacked. Empty documents are skipped; text without any document is an error.
    """
    found = _load_text(text, source=source, kinds=SUPPORTED_KINDS)
    return cast(list[DevicePool], _check_unique(found))


def load_manifests(path: str | Path) -> list[DevicePool]:
    """Every DevicePool in a file, in a directory's `*.yaml|*.yml|*.json` files
    (sorted by name, not recursive), or on stdin when `path` is `-`."""
    return cast(list[DevicePool], _load_path(path, kinds=SUPPORTED_KINDS))


def load_resources_text(text: str, *, source: str = "<stdin>") -> list[Resource]:
    """Every pool of either kind in `text`, mixed and in either version, as `load_manifests_text`
    reads them: names unique per kind, each in the stored version, in the order written.
    """
    return _check_unique(_load_text(text, source=source, kinds=RESOURCE_KINDS))


def load_resources(path: str | Path) -> list[Resource]:
    """Every pool of either kind in a file, a directory or stdin (`-`), as `load_manifests`."""
    return _load_path(path, kinds=RESOURCE_KINDS)


def _parse_one(data: Any, *, source: str, kinds: tuple[str, ...]) -> Resource:
    pool, problems = _parse_document(data, prefix=f"{source}: ", base=(), kinds=kinds)
    if pool is None:
        raise ManifestError(problems)
    return pool


def load_resource_texts(texts: list[tuple[str, str]]) -> list[Resource]:
    """Every pool of either kind in each (source, text) of `texts`, as `load_resources` reads a
    directory's files: every problem of every text, names unique per kind across them all."""
    return _load_texts(texts, kinds=RESOURCE_KINDS)


def _load_path(path: str | Path, *, kinds: tuple[str, ...]) -> list[Resource]:
    if str(path) == "-":
        return _check_unique(_load_text(sys.stdin.read(), source="<stdin>", kinds=kinds))
    found: list[tuple[_Where, Resource]] = []
    problems: list[str] = []
    for file in _manifest_files(Path(path)):
        try:
            found.extend(_load_text(read_text(file), source=str(file), kinds=kinds))
        except ManifestError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ManifestError(problems)
    return _check_unique(found)


def _load_texts(texts: list[tuple[str, str]], *, kinds: tuple[str, ...]) -> list[Resource]:
    found: list[tuple[_Where, Resource]] = []
    problems: list[str] = []
    for source, text in texts:
        try:
            found.extend(_load_text(text, source=source, kinds=kinds))
        except ManifestError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ManifestError(problems)
    return _check_unique(found)


# --- files and documents ----------------------------------------------------------


def _manifest_files(path: Path) -> list[Path]:
    """`path` itself, or a directory's manifest files sorted by name (at least one)."""
    if not path.is_dir():
        return [path]
    files = sorted(
        p for p in path.iterdir() if p.suffix.lower() in MANIFEST_SUFFIXES and p.is_file()
    )
    if not files:
        raise ManifestError(
            [f"{path}: no manifest files ({', '.join('*' + s for s in MANIFEST_SUFFIXES)})"]
        )
    return files


def _expand(documents: list[Any]) -> list[Any]:
    """A top-level JSON list stands for its elements."""
    if len(documents) == 1 and isinstance(documents[0], list):
        return documents[0]
    return documents


def _load_text(text: str, *, source: str, kinds: tuple[str, ...]) -> list[tuple[_Where, Resource]]:
    """(where, pool) for every pool of one of `kinds` in `text`."""
    documents = _expand(parse_documents(text, source=source))
    if not documents:
        expected = " or ".join(kinds)
        raise ManifestError([f"{source}: no documents (expected a {expected} manifest)"])
    found: list[tuple[_Where, Resource]] = []
    problems: list[str] = []
    for index, document in enumerate(documents):
        prefix = f"{source}[{index}]: " if len(documents) > 1 else f"{source}: "
        for base, item in _items(document):
            pool, item_problems = _parse_document(item, prefix=prefix, base=base, kinds=kinds)
            problems.extend(item_problems)
            if pool is not None:
                where = prefix.removesuffix(": ") + (f" ({loc_path(base)})" if base else "")
                found.append(((prefix, base), pool.read_from(where)))
    if problems:
        raise ManifestError(problems)
    return found


def _items(document: Any) -> Iterator[tuple[Loc, Any]]:
    """A `kind: List` document stands for its `items`; anything else for itself."""
    if (
        isinstance(document, dict)
        and document.get("kind") == "List"
        and isinstance(document.get("items"), list)
    ):
        for i, item in enumerate(document["items"]):
            yield ("items", i), item
    else:
        yield (), document


def _check_unique(found: list[tuple[_Where, Resource]]) -> list[Resource]:
    # Per kind: a DevicePool and a BrowserPool of one name are two pools
    # (`devicepool/NAME` and `browserpool/NAME`).
    first: dict[tuple[str, str], _Where] = {}
    problems: list[str] = []
    for (prefix, base), pool in found:
        key = (pool.kind, pool.name)
        if key in first:
            first_prefix, first_base = first[key]
            first_at = f"{first_prefix}{loc_path(first_base)}".rstrip(": ")
            rule = f"duplicate pool name {pool.name!r} (first defined in {first_at})"
            problems.append(problem_line(prefix, (*base, "metadata", "name"), rule))
        else:
            first[key] = (prefix, base)
    if problems:
        raise ManifestError(problems)
    return [pool for _, pool in found]


# --- one document -----------------------------------------------------------------


def _parse_document(
    data: Any, *, prefix: str, base: Loc, kinds: tuple[str, ...]
) -> tuple[Resource | None, list[str]]:
    """The pool (stored version), or None and the problems (each a full message line)."""
    if not isinstance(data, dict):
        rule = f"must be a mapping with apiVersion, kind, metadata and spec, got {show_value(data)}"
        return None, [problem_line(prefix, base, rule)]
    # apiVersion and kind first: for a Deployment, "spec.platform: required" is noise.
    problems: list[str] = []
    for key, supported in (("apiVersion", API_VERSIONS), ("kind", kinds)):
        if key not in data:
            problems.append(problem_line(prefix, (*base, key), "required"))
        elif data[key] not in supported:
            rule = f"unsupported {show_value(data[key])}, supported: {', '.join(supported)}"
            problems.append(problem_line(prefix, (*base, key), rule))
    if problems:
        return None, problems
    kind = kind_named(data["kind"])
    model = kind.models[data["apiVersion"]]
    try:
        pool = model.model_validate(_without_server_set(data))
    except pydantic.ValidationError as exc:
        return None, format_errors(exc.errors(), model=model, prefix=prefix, base=base)
    try:
        return cast(Resource, kind.conversion.convert(pool, API_VERSION_V1BETA1)), []
    except ConversionError as exc:
        return None, [f"{prefix}{loc_path(base) + '.' if base else ''}{exc}"]


def _without_server_set(data: dict[str, Any]) -> dict[str, Any]:
    """`data` without `status` and the server-set metadata (`SERVER_SET_METADATA`)."""
    data = {k: v for k, v in data.items() if k != "status"}
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        data["metadata"] = {k: v for k, v in metadata.items() if k not in SERVER_SET_METADATA}
    return data
