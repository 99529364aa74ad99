"""`devicepool get --watch`: the table, then a row per change, until Ctrl-C (exit 0)."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL, KINDS
from devicepool.client import PoolSummary, _cli_pools
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_OK, EXIT_RUNTIME, PoolNotFound
from tests.helpers.cli import DEVICE_POOL_COLUMNS


def pool(name: str, ready: int, phase: str = "Provisioning") -> PoolSummary:
    return PoolSummary(
        name=name,
        spec={"platform": "android", "region": "us-west", "replicas": 2},
        status={"phase": phase, "desiredReplicas": 2, "readyDevices": ready},
    )


def browser(name: str, ready: int, phase: str = "Pending") -> PoolSummary:
    return PoolSummary(
        name=name,
        spec={"replicas": 2},
        status={"phase": phase, "desiredReplicas": 2, "readyProfiles": ready},
        kind=BROWSER_POOL.name,
    )


class ScriptedPools:
    """Answers each read with the pools of the next step of the script, of the kinds asked
    for; a kind asked again starts the next step. After the last, presses Ctrl-C."""

    def __init__(self, script: list[list[PoolSummary]]) -> None:
        self.script = script
        self.reads = 0
        self.asked: set[str] = set()

    async def list_kinds(self, kinds: list[str], **_: Any) -> list[PoolSummary]:
        step = self._next(kinds[0])  # one List call: one step of the script
        return [p for kind in kinds for p in step if p.kind == kind]

    async def summary(self, name: str, *, kind: str | None = None) -> PoolSummary:
        kind = kind or DEVICE_POOL.name
        pools = [p for p in self._next(kind) if p.name == name and p.kind == kind]
        if not pools:
            raise PoolNotFound(name, KINDS[kind].resource)
        return pools[0]

    def _next(self, kind: str) -> list[PoolSummary]:
        if kind in self.asked or not self.reads:
            self.asked = set()
            self.reads += 1
        self.asked.add(kind)
        if self.reads > len(self.script):
            # A real SIGINT, as a terminal sends it: asyncio turns it into KeyboardInterrupt.
            os.kill(os.getpid(), signal.SIGINT)
            return self.script[-1]
        return self.script[self.reads - 1]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(script: list[list[PoolSummary]]) -> ScriptedPools:
        pools = ScriptedPools(script)

        async def fake_pools(name: str | None = None) -> ScriptedPools:
            return pools

        monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)
        monkeypatch.setattr(_cli_pools, "WATCH_SECONDS", 0.01)
        return pools

    return install


def test_watch_prints_the_table_then_a_row_per_change_and_ctrl_c_is_exit_0(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted(
        [
            [pool("p1", 0)],
            [pool("p1", 0)],  # nothing changed: no row
            [pool("p1", 1)],
            [pool("p1", 2, "Ready"), pool("p2", 0)],
            [pool("p1", 2, "Ready"), pool("p2", 0)],
        ]
    )
    code = main(["get", "--watch", "-o", "table"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].split() == DEVICE_POOL_COLUMNS
    rows = [(line.split()[0], line.split()[4], line.split()[-1]) for line in lines[1:]]
    assert rows == [
        ("p1", "0", "Provisioning"),
        ("p1", "1", "Provisioning"),
        ("p1", "2", "Ready"),
        ("p2", "0", "Provisioning"),
    ]
    # Rows printed apart still line up under the header.
    col = lines[0].index("READY")
    assert [line[col - 1 :].split()[0] for line in lines[1:]] == ["0", "1", "2", "0"]


def test_watch_one_pool_and_the_short_flag(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[pool("p1", 0), pool("p2", 0)], [pool("p1", 1), pool("p2", 1)]])
    code = main(["get", "p1", "-w", "-o", "table"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    assert [line.split()[:5] for line in out.splitlines()[1:]] == [
        ["p1", "android", "us-west", "2", "0"],
        ["p1", "android", "us-west", "2", "1"],
    ]


def test_watch_json_prints_each_change_as_one_resource(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[pool("p1", 0)], [pool("p1", 0)], [pool("p1", 2, "Ready")]])
    code = main(["get", "-w", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    decoder, docs, at = json.JSONDecoder(), [], 0
    while out[at:].strip():
        doc, end = decoder.raw_decode(out[at:].lstrip())
        at += len(out[at:]) - len(out[at:].lstrip()) + end
        docs.append(doc)
    assert [d["status"]["readyDevices"] for d in docs] == [0, 2]


def test_watching_a_missing_pool_is_exit_1(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[pool("p1", 0)]])
    code = main(["get", "nope", "--watch"])
    _, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert err.strip().splitlines() == [
        # A bare NAME may be either kind's, as for `get nope` (issue 43).
        'error: pool "nope" not found (no running DevicePool or BrowserPool of that name)'
    ]


def test_watch_one_browser_pool_prints_its_row_again_on_each_change(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[browser("b1", 0)], [browser("b1", 0)], [browser("b1", 2, "Ready")]])
    code = main(["get", "browserpool/b1", "-w", "-o", "table"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].split() == list(BROWSER_POOL.columns)
    assert [line.split()[:3] + line.split()[-1:] for line in lines[1:]] == [
        ["browserpool/b1", "2", "0", "Pending"],
        ["browserpool/b1", "2", "2", "Ready"],
    ]


def test_watch_browser_pools_lists_them_then_a_row_per_change(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[browser("b1", 0), pool("p1", 0)], [browser("b1", 1), pool("p1", 1)]])
    code = main(["get", "browserpools", "--watch", "-o", "table"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].split() == list(BROWSER_POOL.columns)
    assert [line.split()[:3] for line in lines[1:]] == [["b1", "2", "0"], ["b1", "2", "1"]]


def test_watch_both_kinds_prints_a_header_where_the_kind_changes(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted(
        [
            [pool("p1", 0), browser("b1", 0)],
            [pool("p1", 0), browser("b1", 1)],  # the BrowserPool alone: a row, no header
            [pool("p1", 1), browser("b1", 1)],  # the DevicePool again: its header again
        ]
    )
    code = main(["get", "-w", "-o", "table"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    assert [line.split()[:3] for line in out.splitlines()] == [
        DEVICE_POOL_COLUMNS[:3],
        ["p1", "android", "us-west"],
        [],
        list(BROWSER_POOL.columns[:3]),
        ["browserpool/b1", "2", "0"],
        ["browserpool/b1", "2", "1"],
        [],
        DEVICE_POOL_COLUMNS[:3],
        ["p1", "android", "us-west"],
    ]
    # A DevicePool row printed again still lines up under its own header.
    lines = out.splitlines()
    col = lines[-2].index("READY")
    assert [lines[i][col - 1 :].split()[0] for i in (1, -1)] == ["0", "1"]


def test_watch_a_bare_name_only_a_browser_pool_has(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[pool("p1", 0), browser("b1", 0)], [pool("p1", 1), browser("b1", 1)]])
    code = main(["get", "b1", "-w", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    docs = _json_docs(out)
    assert [(d["kind"], d["status"]["readyProfiles"]) for d in docs] == [
        ("BrowserPool", 0),
        ("BrowserPool", 1),
    ]


def test_watching_a_missing_browser_pool_is_exit_1(
    capsys: pytest.CaptureFixture[str], scripted: Any
) -> None:
    scripted([[pool("nope", 0)]])
    code = main(["get", "browserpool/nope", "-w"])
    _, err = capsys.readouterr()
    assert code == EXIT_RUNTIME
    assert err.strip().splitlines() == [
        "error: browserpool/nope not found (no running workflow browserpool/nope)"
    ]


def _json_docs(out: str) -> list[Any]:
    decoder, docs, at = json.JSONDecoder(), [], 0
    while out[at:].strip():
        doc, end = decoder.raw_decode(out[at:].lstrip())
        at += len(out[at:]) - len(out[at:].lstrip()) + end
        docs.append(doc)
    return docs
