"""`get -o yaml --api-version v1alpha1` shows a BrowserPool in v1alpha1, as a DevicePool (issue
43, item 5: it printed v1beta1 under the name of the other), also when the spec read does not
validate (a newer worker's field): never a v1beta1 field under a v1alpha1 header."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from devicepool.api import load_resources_text
from devicepool.api.names import KIND_BROWSER_POOL, KIND_DEVICE_POOL
from devicepool.client._results import PoolSummary
from devicepool.client.render import Output, print_data

ALPHA = "mobile.example.com/v1alpha1"
BROWSER_SPEC = {
    "replicas": 4,
    "nodeSelector": {"zone": "eu"},
    "fingerprint": {},
    "proxy": {"poolRef": "proxyseller-eu", "sessionTTL": "15m"},
    "open": True,
    "health": {"failureStreakLimit": 3, "maxUnhealthy": "40%"},
}
DEVICE_SPEC = {
    "provider": {"name": "bitcloudphone", "account": "default"},
    "platform": "android",
    "region": "us-west",
    "replicas": 2,
    "proxy": {"poolRef": "proxyseller-us", "sessionTTL": "15m"},
}


def shown(capsys: pytest.CaptureFixture[str], kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    summary = PoolSummary(name="p", spec=spec, status={"phase": "Ready"}, kind=kind)
    print_data(summary.to_resource(ALPHA), Output.YAML)
    text = capsys.readouterr().out
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def test_a_browser_pool_in_v1alpha1_applies_again_as_the_same_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = shown(capsys, KIND_BROWSER_POOL, BROWSER_SPEC)
    assert (document["apiVersion"], document["kind"]) == (ALPHA, KIND_BROWSER_POOL)
    assert document["spec"]["proxy"] == {"poolRef": "proxyseller-eu", "stickyTTL": 900}
    assert "health" not in document["spec"]  # in the annotation, as a DevicePool's
    [pool] = load_resources_text(yaml.safe_dump(document))
    assert pool.spec.to_json_dict() == BROWSER_SPEC


@pytest.mark.parametrize(
    ("kind", "spec", "proxy"),
    [
        (KIND_BROWSER_POOL, BROWSER_SPEC, {"poolRef": "proxyseller-eu", "stickyTTL": 900}),
        (KIND_DEVICE_POOL, DEVICE_SPEC, {"poolRef": "proxyseller-us", "stickyTTL": 900}),
    ],
)
def test_a_spec_that_does_not_validate_is_converted_as_far_as_it_goes(
    capsys: pytest.CaptureFixture[str], kind: str, spec: dict[str, Any], proxy: dict[str, Any]
) -> None:
    document = shown(capsys, kind, {**spec, "aFieldOfANewerBuild": 1})
    assert document["apiVersion"] == ALPHA
    assert document["spec"]["proxy"] == proxy  # not v1beta1's sessionTTL
    assert document["spec"]["aFieldOfANewerBuild"] == 1  # shown as it came
