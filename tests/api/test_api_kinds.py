"""The kind registry (`api.kinds`): one row a kind, and every row agrees with the names."""

from __future__ import annotations

import pytest

from devicepool.api.kinds import (
    BROWSER_POOL,
    DEVICE_POOL,
    KINDS,
    Kind,
    kind_named,
    resource_named,
)
from devicepool.api.names import (
    BROWSER_POOL_WORKFLOW_ID_PREFIX,
    WORKFLOW_ID_PREFIX,
    browser_pool_workflow_id,
    pool_workflow_id,
)


@pytest.mark.parametrize("kind", KINDS.values(), ids=lambda k: k.name)
def test_a_kind_row_agrees_with_its_models_and_names(kind: Kind) -> None:
    assert kind is kind_named(kind.name)
    for version, model in kind.models.items():
        assert model.model_fields["kind"].default == kind.name
        assert model.model_fields["api_version"].default == version
    assert kind.workflow_id_prefix in (WORKFLOW_ID_PREFIX, BROWSER_POOL_WORKFLOW_ID_PREFIX)
    assert kind.name_from_workflow_id(kind.workflow_id("a/b")) == "a/b"
    assert kind.columns[0] == "NAME"


def test_the_cli_words_name_the_kinds_as_kubectl_does() -> None:
    for word, name in [
        ("devicepool", "DevicePool"),
        ("devicepools", "DevicePool"),
        ("browserpool", "BrowserPool"),
        ("browserpools", "BrowserPool"),
    ]:
        assert resource_named(word) is kind_named(name)
        assert resource_named(word.upper()) is kind_named(name)
    assert resource_named("nodepool") is None
    assert DEVICE_POOL.workflow_id("x") == pool_workflow_id("x")
    assert BROWSER_POOL.workflow_id("x") == browser_pool_workflow_id("x")
    assert DEVICE_POOL.name_from_workflow_id(BROWSER_POOL.workflow_id("x")) is None
    # DevicePools first: `get` of every pool shows them first.
    assert list(KINDS) == ["DevicePool", "BrowserPool"]
