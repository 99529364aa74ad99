"""Counts are numbers, not strings, in both kinds and both versions; `stickyTTL` says what it
takes (issue 43, item 17: `replicas: "5"` was accepted, `stickyTTL: 15m` said only "must be an
integer")."""

from __future__ import annotations

import json

import pytest

from devicepool.api import ManifestError, load_resources_text
from devicepool.api.browserpool import v1beta1 as browser_beta
from devicepool.api.conversion import stored_spec
from devicepool.api.v1beta1 import DevicePoolSpec

HEADS = {
    "devices-alpha": "apiVersion: mobile.example.com/v1alpha1\nkind: DevicePool\n",
    "devices-beta": "apiVersion: mobile.example.com/v1beta1\nkind: DevicePool\n",
    "browsers-alpha": "apiVersion: mobile.example.com/v1alpha1\nkind: BrowserPool\n",
    "browsers-beta": "apiVersion: mobile.example.com/v1beta1\nkind: BrowserPool\n",
}
DEVICE_SPEC = "  platform: android\n  region: us-west\n"


def manifest(head: str, spec: str) -> str:
    more = DEVICE_SPEC if "DevicePool" in HEADS[head] else ""
    return f"{HEADS[head]}metadata: {{name: p}}\nspec:\n{more}{spec}"


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_resources_text(text, source="p.yaml")
    return info.value.problems


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize(
    ("written", "rule"),
    [
        ('"5"', "must be an integer, got '5' (a quoted number is a string: write 5)"),
        ("'05'", "must be an integer, got '05' (a quoted number is a string: write 05)"),
        ("five", "must be an integer, got 'five'"),
        ("5.0", "must be an integer, got 5.0"),
    ],
)
def test_replicas_is_a_number_not_a_string(head: str, written: str, rule: str) -> None:
    assert problems(manifest(head, f"  replicas: {written}\n")) == [
        f"p.yaml: spec.replicas: {rule}"
    ]


@pytest.mark.parametrize("head", ["devices-alpha", "browsers-alpha"])
@pytest.mark.parametrize("written", ["15m", '"900"', "900s"])
def test_sticky_ttl_says_seconds_and_the_v1beta1_name(head: str, written: str) -> None:
    text = manifest(head, f"  replicas: 1\n  proxy: {{poolRef: p, stickyTTL: {written}}}\n")
    shown = written.strip('"')
    assert problems(text) == [
        f"p.yaml: spec.proxy.stickyTTL: must be a whole number of seconds such as 900,"
        f" got '{shown}' (apiVersion mobile.example.com/v1beta1 takes a duration such as 15m"
        " as proxy.sessionTTL)"
    ]


def test_numbers_still_load_in_every_version() -> None:
    for head in HEADS:
        proxy = "stickyTTL: 900" if head.endswith("alpha") else "sessionTTL: 15m"
        [pool] = load_resources_text(
            manifest(head, f"  replicas: 5\n  proxy: {{poolRef: p, {proxy}}}\n")
        )
        assert pool.spec.replicas == 5  # type: ignore[union-attr]
        assert pool.spec.proxy is not None and pool.spec.proxy.session_ttl == 900  # type: ignore[union-attr]


def test_what_temporal_carries_still_decodes() -> None:
    """Payloads are JSON: their counts are numbers, as every build wrote them (the pydantic
    data converter, a v1alpha1 spec in a v0.1.0 pool's input, a BrowserPool's)."""
    spec = {"platform": "android", "region": "us-west", "replicas": 5, "osVersion": "14"}
    assert DevicePoolSpec.model_validate_json(json.dumps(spec)).replicas == 5
    alpha = {**spec, "provider": "bitcloudphone", "proxy": {"poolRef": "p", "stickyTTL": 900}}
    assert DevicePoolSpec.model_validate(stored_spec(json.loads(json.dumps(alpha)))).replicas == 5
    assert browser_beta.BrowserPoolSpec.model_validate_json('{"replicas": 3}').replicas == 3
