"""`apply` of a BrowserPool whose proxy pool none of its nodes has is refused before anything
starts (issue 43, item 6): the pool existed, sat `Ready=False UnknownProxyPool` and had to be
deleted by hand. A BrowserPool's proxy pools are its node workers' (each beats their names to
the node registry); `apply` reads the registry and refuses only when it knows: at least one
live node its `nodeSelector` matches, every one of them saying its proxy pools, none having
it. Anything it cannot know lets the apply through: the pool checks for itself, as before."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolSettings
from devicepool.activities.node_models import NodeInfo, NodeProxyPoolsView, NodesView
from devicepool.api.names import NODE_REGISTRY_WORKFLOW_ID, QUERY_NODE_PROXY_POOLS, QUERY_NODES
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK
from devicepool.workflows.pool.messages import Accepted
from tests.helpers.cli import FakeStarts, cli, fake_temporal

MANIFEST = """\
apiVersion: mobile.example.com/v1beta1
kind: BrowserPool
metadata:
  name: p
spec:
  replicas: 2
  nodeSelector:
    site: a
{proxy}"""

POOL_ID = "browserpool/p"
REFUSED = (
    "pool 'p': unknown proxy pool 'typo' (spec.proxy.poolRef) on the nodes its nodeSelector "
    "matches (node-1, node-2); known: dc, resi"
)
# ...and how old the names are (as the beats named them).
AGED = re.escape(REFUSED) + r" \(as their beats named them, the oldest [56]s ago\)"


@dataclass(frozen=True)
class Node:
    """A node as the registry answers it (its last beat `ago` seconds before the query, so a
    slow run does not age it), and the proxy pools its beats name (None: its beats do not
    say, an older node worker)."""

    name: str
    pools: list[str] | None
    site: str = "a"
    ago: float = 5.0

    def info(self) -> NodeInfo:
        last_seen = datetime.now(UTC) - timedelta(seconds=self.ago)
        return NodeInfo(
            node=self.name, labels={"site": self.site}, account="bb", last_seen=last_seen
        )


def node(name: str, pools: list[str] | None, *, site: str = "a", ago: float = 5.0) -> Node:
    return Node(name, pools, site, ago)


# node-3 has `typo`, but it is not a node the pool's selector matches.
NODES = (
    node("node-1", ["dc", "resi"]),
    node("node-2", ["resi"]),
    node("node-3", ["typo"], site="b"),
)


class Handle:
    def __init__(self, temporal: Temporal, workflow_id: str) -> None:
        self.temporal, self.id = temporal, workflow_id

    async def describe(self) -> Any:
        if self.id not in self.temporal.running:
            raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
        return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)

    async def query(self, name: str, *, result_type: Any = None, **_: Any) -> Any:
        self.temporal.queries.append((self.id, name))
        if self.id == NODE_REGISTRY_WORKFLOW_ID:
            if self.temporal.nodes is None:
                raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            if name == QUERY_NODES:
                return NodesView(nodes=[n.info() for n in self.temporal.nodes])
            if name == QUERY_NODE_PROXY_POOLS and self.temporal.knows_proxy_pools:
                said = {n.name: n.pools for n in self.temporal.nodes}
                return NodeProxyPoolsView(
                    proxy_pools={k: v for k, v in said.items() if v is not None}
                )
            raise RPCError(f"unknown queryType {name}", RPCStatusCode.INVALID_ARGUMENT, b"")
        if name == "spec" and self.id in self.temporal.specs:
            return self.temporal.specs[self.id]
        raise RPCTimeoutOrCancelledError("query timed out")

    async def execute_update(self, *_: Any, **__: Any) -> Any:
        self.temporal.updates.append(self.id)
        return Accepted(generation=2, replicas=2, result="configured")


class Temporal(FakeStarts):
    """The node registry's answers (`nodes` None: never started; `knows_proxy_pools` False:
    a registry of a build from before the names), BrowserPools by id, and the main worker's
    `pool_settings` (its `nodeLostAfterSeconds`)."""

    def __init__(
        self, nodes: tuple[Node, ...] | None = NODES, *, lost_after: float = 120.0
    ) -> None:
        super().__init__()
        self.nodes = nodes
        self.knows_proxy_pools = True
        self.lost_after = lost_after
        self.specs: dict[str, Any] = {}
        self.updates: list[str] = []
        self.queries: list[tuple[str, str]] = []

    async def execute_activity(self, defined: Any, *_: Any, **__: Any) -> Any:
        assert defined.__name__ == "pool_settings"
        return PoolSettings(node_lost_after_seconds=self.lost_after)

    def handle(self, workflow_id: str) -> Handle:
        return Handle(self, workflow_id)

    def run(self, proxy: str | None) -> None:
        """`browserpool/p` runs with this `proxy.poolRef` (its `spec` query)."""
        self.running.add(POOL_ID)
        spec: dict[str, Any] = {"replicas": 2, "nodeSelector": {"site": "a"}}
        if proxy is not None:
            spec["proxy"] = {"poolRef": proxy}
        self.specs[POOL_ID] = {"metadata": {"name": "p"}, "spec": spec}


def write(tmp_path: Path, proxy: str | None = "typo") -> str:
    path = tmp_path / "p.yaml"
    said = f"  proxy:\n    poolRef: {proxy}\n" if proxy else ""
    path.write_text(MANIFEST.format(proxy=said))
    return str(path)


def test_a_proxy_pool_no_matching_node_has_is_refused_before_the_pool_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    path = write(tmp_path)
    code, out, err = cli(capsys, "apply", "-f", path, "--wait")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert re.fullmatch(f"error: {re.escape(path)}: {AGED} — nothing was created\n", err), err
    assert (temporal.started, temporal.updates) == ([], [])


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param((node("node-1", ["dc"]), node("node-2", ["typo"])), id="one-node-has-it"),
        pytest.param((node("node-1", ["dc"]), node("node-2", None)), id="a-node-does-not-say"),
        pytest.param((node("node-1", ["dc"], site="b"),), id="no-node-matches"),
        pytest.param((node("node-1", ["dc"], ago=600),), id="the-matching-node-is-lost"),
        pytest.param(None, id="no-registry"),
        # Review R10: names from a beat two intervals old may be of a process since stopped
        # (a node worker restarted with `typo` added beats only once it is up).
        pytest.param(
            (node("node-1", ["dc", "resi"], ago=25), node("node-2", ["resi"])),
            id="names-from-an-old-beat",
        ),
    ],
)
def test_what_apply_cannot_know_lets_the_pool_check_for_itself(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    nodes: tuple[Node, ...] | None,
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal(nodes))
    code, out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert out.startswith("browserpool/p created")
    assert temporal.started == [POOL_ID]


def test_a_registry_of_an_older_build_lets_the_apply_through(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    temporal.knows_proxy_pools = False
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert temporal.started == [POOL_ID]


def test_a_pool_without_a_proxy_pool_asks_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path, proxy=None))
    assert (code, err) == (EXIT_OK, ""), err
    assert [q for q in temporal.queries if q[0] == NODE_REGISTRY_WORKFLOW_ID] == []


def test_a_node_alive_by_the_workers_node_lost_after_has_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The split is the pool's: node-2 beat 200 s ago, alive for a worker whose
    `nodeLostAfterSeconds` is 300 (the default 120 would call it lost and refuse)."""
    nodes = (node("node-1", ["dc"]), node("node-2", ["typo"], ago=200))
    temporal = fake_temporal(monkeypatch, Temporal(nodes, lost_after=300))
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert temporal.started == [POOL_ID]


@pytest.mark.parametrize("before", ["dc", None])
def test_a_running_pool_changed_to_a_proxy_pool_no_node_has_is_refused_unchanged(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    before: str | None,
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    temporal.run(before)
    path = write(tmp_path)
    code, out, err = cli(capsys, "apply", "-f", path)
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert re.fullmatch(f"error: {re.escape(path)}: {AGED} — nothing was changed\n", err), err
    assert (temporal.started, temporal.updates) == ([], [])


def test_a_running_pool_whose_proxy_pool_its_nodes_lost_still_takes_a_change(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The manifest keeps the poolRef the pool runs with: no reference changes, so a
    scale-down (the way to stop the billing) is not shut."""
    temporal = fake_temporal(monkeypatch, Temporal())
    temporal.run("typo")
    code, out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert out.startswith("browserpool/p configured")
    assert temporal.updates == [POOL_ID]


def test_a_running_pool_whose_spec_no_worker_answers_is_left_to_its_own_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    temporal.running.add(POOL_ID)  # no `spec` answer
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert temporal.updates == [POOL_ID]


def test_a_clock_far_from_the_servers_does_not_refuse_on_its_own_count(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Review R10: this machine's clock 115 s ahead counts node-1 (it has `typo`, beat 9 s
    ago) lost and node-2 (1 s ago, without it) alive; the registry's own clock, its newest
    beat, counts both alive: no refusal."""
    import devicepool.client._refs_check as refs_module

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(seconds=115)

    nodes = (node("node-1", ["typo"], ago=9), node("node-2", ["resi"], ago=1))
    temporal = fake_temporal(monkeypatch, Temporal(nodes, lost_after=120.0))
    monkeypatch.setattr(refs_module, "datetime", Ahead)
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, ""), err
    assert temporal.started == [POOL_ID]


def test_a_registry_that_cannot_answer_is_asked_once_an_apply_not_once_a_pool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Review R10: a registry nobody answers took its whole query timeout (5 s) for each
    BrowserPool of an `apply -f DIR`, past the 5 s its answer is kept: a read that fails is
    kept as long as a failed worker check is (the pools check for themselves meanwhile)."""
    import devicepool.client._refs_check as refs_module

    monkeypatch.setattr(refs_module, "NODES_KEEP_SECONDS", 0.0)  # each read outlived its keep
    temporal = fake_temporal(monkeypatch, Temporal(None))  # no registry: its reads fail
    for name in ("p1", "p2", "p3"):
        text = MANIFEST.format(proxy="  proxy:\n    poolRef: typo\n").replace(
            "name: p\n", f"name: {name}\n"
        )
        (tmp_path / f"{name}.yaml").write_text(text)
    code, _out, err = cli(capsys, "apply", "-f", str(tmp_path), "--concurrency", "1")
    assert (code, err) == (EXIT_OK, "3 pools: 3 created\n"), err
    asked = [q for q in temporal.queries if q == (NODE_REGISTRY_WORKFLOW_ID, QUERY_NODES)]
    assert len(asked) == 1, temporal.queries
