"""`spec.autoscale` and `spec.schedule` in both kinds' v1beta1 manifests: accepted, `replicas`
optional beside them, one line naming the field for each bad input, refused in v1alpha1, and
kept through a conversion to v1alpha1 and back."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from devicepool.api import ManifestError, load_resources, load_resources_text
from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL

EXAMPLES = Path(__file__).parents[2] / "examples"
DEVICE = """\
apiVersion: mobile.example.com/v1beta1
kind: DevicePool
metadata: {name: shop}
spec:
  platform: android
  region: us-west
"""
BROWSER = """\
apiVersion: mobile.example.com/v1beta1
kind: BrowserPool
metadata: {name: shop}
spec:
"""
KINDS = pytest.mark.parametrize("head", [DEVICE, BROWSER], ids=["DevicePool", "BrowserPool"])
AUTOSCALE = """\
  autoscale: {minReplicas: 1, maxReplicas: 80, idleBuffer: 2, scaleDownAfter: 10m}
  schedule:
  - {cron: "0 18 * * fri", duration: 54h, minReplicas: 60, timeZone: Europe/Berlin}
"""


def load(text: str):  # type: ignore[no-untyped-def]
    [pool] = load_resources_text(textwrap.dedent(text), source="f.yaml")
    return pool


def only_problem(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        load_resources_text(text, source="f.yaml")
    [line] = info.value.problems
    return line


@KINDS
def test_an_autoscaled_pool_needs_no_replicas(head: str) -> None:
    pool = load(head + AUTOSCALE)
    spec = pool.spec
    assert spec.autoscale is not None
    assert (spec.autoscale.min_replicas, spec.autoscale.max_replicas) == (1, 80)
    assert (spec.autoscale.idle_buffer, spec.autoscale.scale_down_after) == (2, 600)
    assert spec.schedule is not None and spec.schedule[0].time_zone == "Europe/Berlin"
    # The autoscaler's to set: minReplicas until the first pass sizes the pool (what a worker
    # from before autoscale, which ignores the field, holds).
    assert spec.replicas == 1
    written = spec.to_json_dict()
    assert written["autoscale"]["scaleDownAfter"] == "10m"
    assert written["schedule"][0]["duration"] == "54h"


@KINDS
def test_a_pool_without_autoscale_still_needs_replicas_and_writes_no_new_field(head: str) -> None:
    assert only_problem(head + "  open: true\n" * (head == BROWSER)) == (
        "f.yaml: spec.replicas: required"
    )
    spec = load(head + "  replicas: 2\n").spec
    assert spec.autoscale is None and spec.schedule is None
    assert not {"autoscale", "schedule"} & set(spec.to_json_dict())


@KINDS
@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            '  replicas: 2\n  schedule: [{cron: "0 18 * * fri", duration: 1h, minReplicas: 3}]\n',
            "spec.schedule: needs autoscale: a window raises the autoscaler's floor",
        ),
        (
            "  autoscale: {maxReplicas: 5}\n"
            '  schedule: [{cron: "0 18 * * fri", duration: 1h, minReplicas: 9}]\n',
            "spec.schedule[0].minReplicas: must be <= autoscale.maxReplicas (5), got 9",
        ),
        (
            "  autoscale: {maxReplicas: 5, minReplicas: 7}\n",
            "spec.autoscale.minReplicas: must be <= maxReplicas (5), got 7",
        ),
        ("  autoscale: {minReplicas: 1}\n", "spec.autoscale.maxReplicas: required"),
        (
            "  autoscale: {maxReplicas: 5, scaleDownAfter: soon}\n",
            "spec.autoscale.scaleDownAfter: must be a duration",
        ),
        (
            "  autoscale: {maxReplicas: 5}\n"
            '  schedule: [{cron: "0 18 * * fri", duration: 1h, minReplicas: 1, timeZone: Mars}]\n',
            "spec.schedule[0].timeZone: must be an IANA time zone",
        ),
    ],
)
def test_a_bad_autoscale_or_schedule_is_one_line_naming_the_field(
    head: str, block: str, message: str
) -> None:
    line = only_problem(head + block)
    assert line.startswith(f"f.yaml: {message}"), line


@pytest.mark.parametrize(
    "head",
    [
        DEVICE.replace("v1beta1", "v1alpha1") + "  replicas: 1\n",
        BROWSER.replace("v1beta1", "v1alpha1") + "  replicas: 1\n",
    ],
    ids=["DevicePool", "BrowserPool"],
)
def test_v1alpha1_has_no_autoscale(head: str) -> None:
    line = only_problem(head + "  autoscale: {maxReplicas: 5}\n")
    assert line.startswith("f.yaml: spec.autoscale: unknown field"), line


@pytest.mark.parametrize(
    ("head", "kind"), [(DEVICE, DEVICE_POOL), (BROWSER, BROWSER_POOL)], ids=["Device", "Browser"]
)
def test_autoscale_and_schedule_survive_a_conversion_to_v1alpha1(head: str, kind) -> None:  # type: ignore[no-untyped-def]
    pool = load(head + AUTOSCALE)
    alpha = kind.conversion.to_v1alpha1(pool)
    assert "autoscale" not in alpha.spec.to_json_dict()
    assert kind.conversion.to_v1beta1(alpha) == pool


def test_the_autoscale_example_loads() -> None:
    [pool] = load_resources(EXAMPLES / "autoscale")
    assert pool.spec.autoscale is not None and pool.spec.autoscale.max_replicas == 40
    assert pool.spec.schedule is not None and pool.spec.schedule[0].min_replicas == 20
