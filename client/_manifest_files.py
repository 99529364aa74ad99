"""The manifest files a `-f` names (`apply`, `dev --apply`, `convert`): a file, stdin (`-`), or a
directory's `*.yaml|*.yml|*.json`, where a worker config (`examples/worker/`) is passed by with a
note on stderr; named alone, it is an error that says what it is."""

from __future__ import annotations

import sys
from pathlib import Path

Source = tuple[Path | None, str, str]  # (path, name for messages, text) of a manifest file


def manifest_sources(filename: str, *, verb: str) -> list[Source]:
    """Each manifest file `filename` stands for, `verb` (`apply`, `convert`) naming what a
    command would do with none.

    A directory's worker configs are left out, each with a note on stderr; a worker config
    named alone (or on stdin) is a `ManifestError`, as is a directory of nothing else.
    """
    from devicepool.api.documents import read_text
    from devicepool.api.loader import MANIFEST_SUFFIXES, ManifestError

    path = Path(filename)
    if filename == "-" or not path.is_dir():
        one: Source = (
            (None, "<stdin>", sys.stdin.read())
            if filename == "-"
            else (path, filename, read_text(path))
        )
        if is_worker_config(one[2], source=one[1]):
            what = "a worker config (devicepool worker --config), not a manifest"
            raise ManifestError([f"{one[1]}: {what}: nothing to {verb}"])
        return [one]
    files = sorted(
        p for p in path.iterdir() if p.suffix.lower() in MANIFEST_SUFFIXES and p.is_file()
    )
    if not files:
        suffixes = ", ".join("*" + suffix for suffix in MANIFEST_SUFFIXES)
        raise ManifestError([f"{path}: no manifest files ({suffixes})"])
    sources: list[Source] = []
    for file in files:
        text = read_text(file)
        if is_worker_config(text, source=str(file)):
            sys.stderr.write(f"{file}: skipped: a worker config, not a manifest\n")
        else:
            sources.append((file, str(file), text))
    if not sources:
        raise ManifestError([f"{path}: no manifests to {verb}"])
    return sources


def is_worker_config(text: str, *, source: str) -> bool:
    """Whether `text` is clearly a worker config: mappings of worker config keys only
    (`accounts`, `proxyPools`, ...), none with a manifest's `apiVersion` or `kind`."""
    from devicepool.api.documents import parse_documents
    from devicepool.api.loader import ManifestError
    from devicepool.worker.config_file import ConfigFile

    try:
        documents = parse_documents(text, source=source)
    except ManifestError:
        return False  # the loader says what is wrong with it
    keys = {field.alias or name for name, field in ConfigFile.model_fields.items()}
    return bool(documents) and all(
        isinstance(doc, dict) and doc and set(doc) <= keys for doc in documents
    )
