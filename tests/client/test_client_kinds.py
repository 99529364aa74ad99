"""How a command names its pool's kind, as kubectl does (`browserpool/NAME`, `browserpools`)."""

from __future__ import annotations

import pytest

from devicepool.api.kinds import KINDS
from devicepool.api.names import KIND_BROWSER_POOL, KIND_DEVICE_POOL
from devicepool.client._cli_browser import browser_rows
from devicepool.client._cli_kinds import print_pools, split_kind
from devicepool.client._results import PoolSummary
from devicepool.client.browser_pools import BrowserPoolSummary
from devicepool.client.errors import BadInput


@pytest.mark.parametrize(
    ("named", "kind", "pool"),
    [
        (None, KIND_DEVICE_POOL, None),
        ("web", KIND_DEVICE_POOL, "web"),  # a bare NAME is a DevicePool's
        ("devicepool/web", KIND_DEVICE_POOL, "web"),
        ("browserpool/web", KIND_BROWSER_POOL, "web"),
        ("BrowserPool/web", KIND_BROWSER_POOL, "web"),
        ("browserpools", KIND_BROWSER_POOL, None),
        ("devicepools", KIND_DEVICE_POOL, None),
    ],
)
def test_a_kind_is_named_as_kubectl_names_it(
    named: str | None, kind: str, pool: str | None
) -> None:
    assert split_kind(named) == (kind, pool)


def test_an_unknown_kind_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(
        BadInput, match=r"^nodepool/x: unknown kind 'nodepool' \(known: browserpool, devicepool\)$"
    ):
        split_kind("nodepool/x")


def test_get_with_both_kinds_leads_each_table_with_its_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pools = [
        PoolSummary(
            "web",
            {"platform": "android", "region": "us-west", "replicas": 2},
            {"desiredReplicas": 2, "readyDevices": 2, "phase": "Ready"},
        )
    ]
    browsers = [
        BrowserPoolSummary(
            "shop",
            {"replicas": 4},
            {"desiredReplicas": 4, "readyProfiles": 4, "byNode": {"node-1": 2, "node-2": 2}},
            None,
            kind=KIND_BROWSER_POOL,
        )
    ]
    print_pools([*browsers, *pools], list(KINDS.values()))
    tables = capsys.readouterr().out.split("\n\n")
    assert len(tables) == 2, tables
    devices, profiles = (t.strip().splitlines() for t in tables)
    assert devices[0].split()[:3] == ["KIND", "NAME", "PLATFORM"], devices
    assert devices[1].split()[:3] == [KIND_DEVICE_POOL, "web", "android"], devices
    assert profiles[0].split()[:3] == ["KIND", "NAME", "DESIRED"], profiles
    assert profiles[1].split()[:2] == [KIND_BROWSER_POOL, "shop"], profiles
    assert "node-1=2," in profiles[1], profiles


def test_a_browser_pool_row_from_search_attributes_marks_its_phase() -> None:
    live = BrowserPoolSummary("a", {"replicas": 1}, {"phase": "Ready"}, None)
    stale = BrowserPoolSummary("b", {"replicas": 1}, {"phase": "Ready"}, None, stale=True)
    assert [row[-1] for row in browser_rows([live, stale])] == ["Ready", "Ready?"]
