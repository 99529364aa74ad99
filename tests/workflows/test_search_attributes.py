from __future__ import annotations

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.workflows.reconciler.search_attributes import search_attribute_keys


def test_the_typed_keys_are_exactly_the_registered_attributes() -> None:
    declared = {key.name: key.indexed_value_type.name for key in search_attribute_keys()}
    assert declared == {name: kind.upper() for name, kind in SEARCH_ATTRIBUTES.items()}
