"""`devicepool convert`: rewrite manifests (DevicePools and BrowserPools) to another version, as
`kubectl convert` does.

Every manifest is checked first (a bad one writes nothing); each document is then changed in
place with ruamel.yaml's round-trip mode, so comments, key order and quoting stay wherever their
key survives (docs/pools.md, 'Versions: v1alpha1 and v1beta1'). JSON stays JSON. In a directory,
a worker config (`examples/worker/`) is passed by with a note; named alone, it is an error."""

from __future__ import annotations

import io
import json
import sys
from typing import Annotated, Any

import typer

from devicepool.api.conversion import API_VERSIONS
from devicepool.api.names import API_VERSION_STORED
from devicepool.client._cli_support import fail
from devicepool.client._manifest_files import manifest_sources
from devicepool.client.errors import EXIT_BAD_INPUT
from devicepool.client.render import json_shaped


def convert(
    filename: Annotated[
        str,
        typer.Option(
            "--filename", "-f", help="a manifest file, a directory of them, or - for stdin"
        ),
    ],
    to: Annotated[
        str,
        typer.Option("--to", help=f"the version to write ({', '.join(API_VERSIONS)})"),
    ] = API_VERSION_STORED,
    in_place: Annotated[
        bool,
        typer.Option("--in-place", help="rewrite the files instead of printing the result"),
    ] = False,
) -> None:
    """Rewrite pool manifests (both kinds) to another apiVersion, keeping comments.

    The default is the stored v1beta1; a directory's worker configs are passed by."""
    from devicepool.api.conversion import ConversionError, api_version_named
    from devicepool.api.loader import ManifestError, load_resource_texts

    try:
        version = api_version_named(to, option="--to")
    except ConversionError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    if in_place and filename == "-":
        raise fail("--in-place: cannot rewrite stdin; give a file or directory", EXIT_BAD_INPUT)
    try:
        sources = manifest_sources(filename, verb="convert")
        # Every problem of every file, before anything is written.
        load_resource_texts([(name, text) for _, name, text in sources])
    except ManifestError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    outputs = [(path, _rewrite(text, version, source=name)) for path, name, text in sources]
    if in_place:
        for path, text in outputs:
            assert path is not None
            path.write_text(text, encoding="utf-8")
            sys.stderr.write(f"{path}: written in {version}\n")
        return
    sys.stdout.write(
        "---\n".join(text if text.endswith("\n") else text + "\n" for _, text in outputs)
    )


def _rewrite(text: str, version: str, *, source: str) -> str:
    """`text` with each pool document converted to `version`."""
    if text.lstrip()[:1] in ("{", "["):
        data = json.loads(text)
        converted = [
            _convert(item, version, source) for item in (data if isinstance(data, list) else [data])
        ]
        result: Any = converted if isinstance(data, list) else converted[0]
        return json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments, order and quotes kept
    yaml.preserve_quotes = True
    yaml.width = 4096
    documents = [doc for doc in yaml.load_all(text.removeprefix("\ufeff")) if doc is not None]
    for document in documents:
        if document.get("kind") == "List":
            for item in document.get("items") or []:
                _merge(item, _convert(item, version, source))
        else:
            _merge(document, _convert(document, version, source))
    out = io.StringIO()
    yaml.explicit_start = len(documents) > 1 or text.lstrip().startswith("---")
    yaml.dump_all(documents, out)
    return out.getvalue()


def _convert(document: Any, version: str, source: str) -> dict[str, Any]:
    """The document in `version`, as the author would write it (`written_in`)."""
    from devicepool.api.conversion import written_in
    from devicepool.api.kinds import kind_named
    from devicepool.api.loader import parse_resource

    plain = json_shaped(document)
    stored = parse_resource(plain, source=source)  # v1beta1, whichever version was written
    converted = written_in(kind_named(stored.kind).conversion.convert(stored, version), plain)
    if "status" in plain:  # the server's word: left as it was (apply ignores it)
        converted["status"] = plain["status"]
    return converted


def _merge(node: Any, target: dict[str, Any]) -> None:
    """Make mapping `node` equal to `target`, changing only what differs (comments stay).

    A key `target` adds goes where a key it drops was (a renamed field keeps
    its place), else at the end.
    """
    freed: list[int] = []
    for index, key in reversed(list(enumerate(list(node.keys())))):
        if key not in target:
            del node[key]
            freed.append(index)
    freed.sort()
    for key, value in target.items():
        if key in node:
            if isinstance(value, dict) and hasattr(node[key], "keys"):
                _merge(node[key], value)
            elif json_shaped(node[key]) != value:
                node[key] = value
        elif freed and hasattr(node, "insert"):
            position = min(freed.pop(0), len(node))
            node.insert(position, key, value)
        else:
            node[key] = value
