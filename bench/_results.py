"""bench/RESULTS.md: each bench script writes its own section there, replacing its last one.

    with recorded("scale", "One worker, many pools", parser, args):
        asyncio.run(main(args))

Everything the script prints inside the block goes to the terminal as before and,
once the block ends without an error, into the script's section with the
machine, the date, the commit, the command and the arguments that differ from
the script's defaults (so a reduced run says so). A failed or interrupted run
leaves the file as it was. Sections are kept in file order; a new one is added
at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = """# Benchmark results

Written by the bench scripts themselves (`make bench`, or any `bench/*.py`): each
run replaces its own script's section and leaves the others. Do not edit the
sections by hand; what the figures mean is in docs/scaling.md and in each
script's docstring.
"""


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def recorded(
    name: str,
    title: str,
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    *,
    script: str | None = None,
) -> Iterator[None]:
    """Tee stdout for the block; on success, write the section `name` of RESULTS.md.

    `script`: the bench script's name when it writes more than one section (its
    `name` by default)."""
    started, host = datetime.now(UTC), machine()
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    changed = {key: value for key, value in vars(args).items() if value != parser.get_default(key)}
    section = render(
        name,
        title,
        script=script or name,
        started=started,
        host=host,
        command=shlex.join(["python", *sys.argv]),
        changed=changed,
        output=tee.kept.getvalue(),
    )
    write_section(RESULTS, name, section)
    print(f"(figures written to {RESULTS})", flush=True)


def render(
    name: str,
    title: str,
    *,
    script: str | None = None,
    started: datetime,
    host: str,
    command: str,
    changed: dict[str, object],
    output: str,
) -> str:
    sizes = (
        "the script's defaults"
        if not changed
        else "REDUCED or changed from the defaults: "
        + ", ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in changed.items())
    )
    lines = [
        f"<!-- bench:{name} -->",
        f"## {title} (`bench/{script or name}.py`)",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; commit {_commit()}",
        f"- machine: {host}",
        f"- command: `{command}`",
        f"- sizes: {sizes}",
        "",
        "```text",
        output.rstrip("\n"),
        "```",
        f"<!-- /bench:{name} -->",
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, name: str, section: str) -> None:
    """Replace section `name` in `path` (or add it at the end); the others stay as they are."""
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(
        rf"^<!-- bench:{re.escape(name)} -->\n.*?^<!-- /bench:{re.escape(name)} -->\n",
        re.DOTALL | re.MULTILINE,
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def machine() -> str:
    """CPU model and count, memory, OS and Python, and the load when the run began."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1])
        memory = f", {kib / 1024**2:.1f} GiB RAM"
    load = ""
    with contextlib.suppress(OSError):
        load = f", load average {os.getloadavg()[0]:.2f}"
    return (
        f"{os.cpu_count()} x {cpu}{memory}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}{load}"
    )


def _commit() -> str:
    root = RESULTS.parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!bench/RESULTS.md",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} (with uncommitted changes)" if dirty else head
