"""Record a release's replay corpus from that release's own code.

    .venv/bin/python -m tests.replay.record_release v0.2.0        # a tag or a commit
    make replay-corpus RELEASE=v0.2.0

The release is checked out with `git worktree` into a temporary folder and its
own `tests/replay/record.py` runs there, with this environment's dependencies,
so the histories are what that build's workflows recorded, not today's. They
are written to `tests/replay/histories/<release>/` of this checkout (or
`--out`), where `test_replay_histories.py` replays them on every later build.
A release whose tree has no `tests/replay/record.py` (none before v0.1.0)
cannot be recorded this way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "replay" / "histories"


def record(release: str, out: Path, *, timeout: float = 900) -> None:
    """Run `release`'s own recorder into `out`; raise SystemExit with one line if it cannot."""
    git = ["git", "-C", str(ROOT)]
    if subprocess.run([*git, "rev-parse", "--verify", "--quiet", f"{release}^{{commit}}"],
                      capture_output=True).returncode != 0:  # fmt: skip
        raise SystemExit(f"error: {release!r} is not a tag or commit of {ROOT}")
    with tempfile.TemporaryDirectory(prefix="devicepool-release-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), release],
                       check=True, capture_output=True)  # fmt: skip
        try:
            if not (tree / "tests" / "replay" / "record.py").is_file():
                raise SystemExit(f"error: {release} has no tests/replay/record.py to record with")
            out.mkdir(parents=True, exist_ok=True)
            # The release's own package and tests first on the path (its `devicepool/`
            # symlinks resolve inside its tree); this venv's site-packages after.
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(
                [sys.executable, "-m", "tests.replay.record", str(out.resolve())],
                cwd=tree, env=env, check=True, timeout=timeout,
            )  # fmt: skip
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], capture_output=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="a tag or commit (e.g. v0.2.0)")
    parser.add_argument("--out", type=Path, help="where to write (default: histories/<release>)")
    args = parser.parse_args(argv)
    out = args.out or HISTORIES / args.release
    record(args.release, out)
    written = sorted(p.name for p in out.glob("*.json"))
    print(f"{out}: {len(written)} histories ({', '.join(written)})")


if __name__ == "__main__":
    main()
