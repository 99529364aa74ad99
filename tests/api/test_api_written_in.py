"""`written_in` (what `devicepool convert` writes): the same pool, and nothing the author left to
a default spelled out (issue 43, item 12: `convert` added `account: default`)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicepool.api.kinds import kind_named
from devicepool.api.loader import parse_resource
from devicepool.api.v1alpha1 import PoolResource
from tests.api import test_api_browserpool as browser_pools
from tests.api import test_api_v1beta1 as device_pools

POOLS = st.one_of(
    device_pools.beta_pools(),
    device_pools.alpha_pools(),
    browser_pools.beta_pools(),
    browser_pools.alpha_pools(),
)


def _as_written(pool: PoolResource) -> dict[str, Any]:
    """The manifest an author writes for `pool`: only what is not at its default."""
    written = pool.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return {"apiVersion": pool.api_version, "kind": pool.kind, **written}  # type: ignore[attr-defined]


def _leaves(data: Any, base: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if isinstance(data, dict) and data:
        return {leaf for key, value in data.items() for leaf in _leaves(value, (*base, key))}
    return {base}


@settings(
    max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(POOLS, st.sampled_from(["mobile.example.com/v1alpha1", "mobile.example.com/v1beta1"]))
def test_convert_writes_the_same_pool_and_no_default_the_author_left_out(
    pool: PoolResource, version: str
) -> None:
    written = _as_written(pool)
    stored = parse_resource(written)
    converter = kind_named(pool.kind).conversion
    shown = converter.written_in(converter.convert(stored, version), written)
    assert parse_resource(shown) == stored
    # Converted again to the version written, nothing the author left out appears.
    back = converter.written_in(
        converter.convert(parse_resource(shown), pool.api_version),  # type: ignore[attr-defined]
        shown,
    )
    assert _leaves(back["spec"]) <= _leaves(written["spec"]) | {()}
