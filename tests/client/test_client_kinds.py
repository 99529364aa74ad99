"""How a command names its pool's kind, as kubectl does (`browserpool/NAME`, `browserpools`)."""

from __future__ import annotations

import pytest

from devicepool.api.names import KIND_BROWSER_POOL, KIND_DEVICE_POOL
from devicepool.client._cli_browser import split_kind
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
