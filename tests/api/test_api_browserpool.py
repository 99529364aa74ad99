"""BrowserPool, the second kind: its fields and one-line errors, conversion both ways
(a hypothesis property over each version), its names, and `load_resources` reading
both kinds mixed with names unique per kind."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.api import (
    BrowserConditionType,
    BrowserPool,
    BrowserPoolStatus,
    Condition,
    ConditionStatus,
    DevicePool,
    ManifestError,
    Phase,
    load_manifests,
    load_manifests_text,
    load_resources,
    load_resources_text,
    names,
    parse_resource,
)
from devicepool.api.browserpool import conversion, v1alpha1, v1beta1
from devicepool.api.conversion import CONVERSION_ANNOTATION, ConversionError, written_in
from devicepool.api.kinds import BROWSER_POOL, kind_named
from devicepool.api.labels import (
    check_label_key,
    check_label_value,
    check_node_name,
    parse_label,
    selector_matches,
)
from devicepool.api.v1beta1 import ProxySpec as BetaProxySpec
from devicepool.api.v1beta1 import resolve_max_unhealthy
from tests.helpers.manifest_fuzz import (
    ALPHA_PROXIES,
    BETA_PROXIES,
    MAX_UNHEALTHY,
    METADATA,
    NAMES,
    SHORT_TEXTS,
    mutated,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "browserpools.md"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

ALPHA = """\
apiVersion: mobile.example.com/v1alpha1
kind: BrowserPool
metadata:
  name: shop-eu
spec:
  replicas: 6
  nodeSelector:
    os: windows
  fingerprint: {}
  proxy:
    poolRef: proxyseller-eu
    stickyTTL: 900
  groupId: "2c9c29a2824c6b1a01825e01d3b10071"
  open: true
"""

BETA = """\
apiVersion: mobile.example.com/v1beta1
kind: BrowserPool
metadata:
  name: shop-eu
spec:
  replicas: 6
  nodeSelector: {os: windows, example.com/gpu: ""}
  fingerprint: {coreVersion: "124", ostype: PC}
  proxy: {poolRef: proxyseller-eu, sessionTTL: 15m}
  groupId: "g1"
  open: false
  health: {failureStreakLimit: 3, maxUnhealthy: 2}
"""

DEVICE_POOL = """\
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata: {name: shop-eu}
spec: {platform: android, region: us-west, replicas: 2}
"""


def load_one(text: str) -> v1beta1.BrowserPool:
    [pool] = load_resources_text(text, source="f.yaml")
    assert isinstance(pool, v1beta1.BrowserPool)
    return pool


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_resources_text(text, source="f.yaml")
    return info.value.problems


def only_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    assert "\n" not in found[0]
    return found[0]


# ---------------------------------------------------------------- the manifest


def test_the_v1alpha1_manifest_loads_into_the_stored_version() -> None:
    pool = load_one(ALPHA)
    assert (pool.api_version, pool.kind, pool.name) == (
        "mobile.example.com/v1beta1",
        "BrowserPool",
        "shop-eu",
    )
    spec = pool.spec
    assert spec.replicas == 6
    assert spec.node_selector == {"os": "windows"}
    assert spec.fingerprint == {}
    assert spec.proxy == BetaProxySpec(pool_ref="proxyseller-eu", session_ttl="15m")
    assert spec.group_id == "2c9c29a2824c6b1a01825e01d3b10071"
    assert spec.open is True
    assert spec.health == v1beta1.BrowserHealthSpec()
    assert pool.source == "f.yaml"


def test_the_v1beta1_manifest_loads_with_every_field() -> None:
    pool = load_one(BETA)
    spec = pool.spec
    assert spec.node_selector == {"os": "windows", "example.com/gpu": ""}
    assert spec.fingerprint == {"coreVersion": "124", "ostype": "PC"}
    assert spec.proxy is not None and spec.proxy.session_ttl == 900
    assert (spec.group_id, spec.open) == ("g1", False)
    assert spec.health.failure_streak_limit == 3
    assert resolve_max_unhealthy(spec.health.max_unhealthy, 50) == 2
    assert spec.to_json_dict() == {
        "replicas": 6,
        "nodeSelector": {"os": "windows", "example.com/gpu": ""},
        "fingerprint": {"coreVersion": "124", "ostype": "PC"},
        "proxy": {"poolRef": "proxyseller-eu", "sessionTTL": "15m"},
        "groupId": "g1",
        "open": False,
        "health": {"failureStreakLimit": 3, "maxUnhealthy": 2},
    }


def test_the_least_a_browser_pool_says_is_its_size() -> None:
    pool = load_one(
        "apiVersion: mobile.example.com/v1alpha1\nkind: BrowserPool\n"
        "metadata: {name: p}\nspec: {replicas: 0}\n"
    )
    spec = pool.spec
    assert (spec.node_selector, spec.fingerprint, spec.proxy, spec.group_id) == ({}, {}, None, None)
    assert spec.open is True  # placement only means something for open browsers
    assert spec.health.failure_streak_limit is None  # the worker's
    assert resolve_max_unhealthy(spec.health.max_unhealthy, 10) == 4  # 40%, as a DevicePool's
    assert selector_matches(spec.node_selector, {"os": "mac"})  # no selector: any node


def test_a_fingerprint_is_passed_through_as_written() -> None:
    fingerprint = {
        "coreVersion": "124",
        "ostype": "PC",
        "resolution": "1920 x 1080",
        "hardwareConcurrency": 8,
        "deviceMemory": 8.0,
        "webGL": None,
        "doNotTrack": True,
        "fonts": ["Arial", {"custom": []}],
        "nested": {"deep": {"deeper": {}}},
    }
    text = ALPHA.replace("fingerprint: {}", f"fingerprint: {json.dumps(fingerprint)}")
    pool = load_one(text)
    assert pool.spec.fingerprint == fingerprint
    # None stays: `exclude_none` of the JSON form applies to fields, not to what the user wrote.
    assert pool.to_json_dict()["spec"]["fingerprint"] == fingerprint


def test_a_fingerprint_holds_at_most_a_thousand_values() -> None:
    fields = {f"f{i}": i for i in range(v1beta1.MAX_FINGERPRINT_VALUES)}
    assert len(v1beta1.BrowserPoolSpec(replicas=1, fingerprint=fields).fingerprint) == 1000
    nested = {"a": [{"b": i} for i in range(499)]}  # 1 + 499 items + 499 fields = 999
    assert v1beta1.BrowserPoolSpec(replicas=1, fingerprint=nested).fingerprint == nested
    text = ALPHA.replace("fingerprint: {}", f"fingerprint: {json.dumps({**fields, 'x': 0})}")
    assert only_problem(text) == (
        "f.yaml: spec.fingerprint: must hold at most 1000 values "
        "(fields and list items, at every depth), has more"
    )


def test_aliases_that_unfold_into_billions_of_values_are_refused_quickly() -> None:
    # Nine levels of nine aliases each: 9**9 values once unfolded, a few lines of text.
    lines = ['l0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    text = ALPHA.replace("fingerprint: {}", "fingerprint:\n" + "".join(f"    {x}\n" for x in lines))
    started = time.perf_counter()
    assert only_problem(text).startswith("f.yaml: spec.fingerprint: must hold at most 1000 values")
    # A guard against unfolding them (minutes), not a timing target (milliseconds).
    assert time.perf_counter() - started < 10


# The manifests docs/browserpools.md shows are the ones a user copies: they must load.
def _doc_manifests() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    return [block for block in blocks if "kind: BrowserPool" in block]


def test_the_documented_manifests_load() -> None:
    blocks = _doc_manifests()
    assert len(blocks) == 2
    alpha, beta = (load_one(block) for block in blocks)
    assert alpha.name == beta.name == "shop-eu-browsers"
    assert alpha.spec.replicas == beta.spec.replicas == 6
    assert beta.spec.health.failure_streak_limit == 3
    # The two versions say the same but for v1beta1's health and fingerprint.
    assert (
        alpha.spec.model_copy(
            update={"health": beta.spec.health, "fingerprint": beta.spec.fingerprint}
        )
        == beta.spec
    )


def test_the_examples_directory_loads_as_resources_too() -> None:
    # `apply -f examples/` takes both kinds: the DevicePools and make demo's BrowserPool.
    found = {(pool.kind, pool.name) for pool in load_resources(EXAMPLES)}
    assert found == {
        ("DevicePool", "quickstart"),
        ("DevicePool", "tiktok-us-pool"),
        ("BrowserPool", "quickstart-browsers"),
    }


# ---------------------------------------------------------------- one line per mistake

ALPHA_BAD = [
    ("replicas: 6", "replicas: 501", "spec.replicas: must be <= 500, got 501"),
    ("replicas: 6", "replicas: -1", "spec.replicas: must be >= 0, got -1"),
    ("replicas: 6", "replicas: yes", "spec.replicas: must be an integer, got true"),
    ("replicas: 6", "replicas: 2.5", "spec.replicas: must be an integer, got 2.5"),
    ("replicas: 6", "replica: 6", "spec.replica: unknown field (did you mean 'replicas'?)"),
    (
        "os: windows",
        "Bad Key: windows",
        "spec.nodeSelector.Bad Key: label key must be letters, digits, '-', '_' or '.', "
        "starting and ending with a letter or digit, got 'Bad Key'",
    ),
    (
        "os: windows",
        "EXAMPLE.com/os: windows",
        "spec.nodeSelector.EXAMPLE.com/os: label key prefix must be a DNS subdomain "
        "(lowercase letters, digits, '-' and '.', such as 'example.com'), got 'EXAMPLE.com'",
    ),
    (
        "os: windows",
        f"{'k' * 64}: windows",
        f"spec.nodeSelector.{'k' * 59}…: label key name must be at most 63 characters, got 64",
    ),
    (
        "os: windows",
        "os: 'win dows'",
        "spec.nodeSelector.os: label value must be empty or letters, digits, '-', '_' or '.', "
        "starting and ending with a letter or digit, got 'win dows'",
    ),
    (
        "os: windows",
        f"os: {'w' * 64}",
        "spec.nodeSelector.os: label value must be at most 63 characters, got 64",
    ),
    (
        "os: windows",
        "os: 10",
        "spec.nodeSelector.os: must be a string, got 10 (quote it: labels are text)",
    ),
    (
        "os: windows",
        "os: yes",
        "spec.nodeSelector.os: must be a string, got true "
        "(quote it: YAML reads yes/no/on/off as booleans)",
    ),
    ("os: windows", "1: windows", "spec.nodeSelector: keys must be strings, got 1"),
    (
        "nodeSelector:\n    os: windows",
        "nodeSelector: windows",
        "spec.nodeSelector: must be a mapping, got 'windows'",
    ),
    ("fingerprint: {}", "fingerprint: random", "spec.fingerprint: must be a mapping, got 'random'"),
    (
        "fingerprint: {}",
        "fingerprint: {a: [1, {b: .inf}]}",
        "spec.fingerprint: a[1].b: must be a finite number, got .inf",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {a: .nan}",
        "spec.fingerprint: a: must be a finite number, got .nan",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {since: 2024-01-31}",
        "spec.fingerprint: since: must be a string, got the date 2024-01-31 "
        "(quote it: YAML reads an unquoted date as a date)",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {a: !!binary aGk=}",
        "spec.fingerprint: a: must be a string, number, true/false, null, list or mapping, "
        "got bytes",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {a: {1: x}}",
        "spec.fingerprint.a: keys must be strings, got 1",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {cookie: x}",
        "spec.fingerprint: cookie: a profile secret is no fingerprint field "
        "(a pool's spec is in Temporal history; proxies come from proxy.poolRef)",
    ),
    (
        "fingerprint: {}",
        "fingerprint: {a: [{proxyPassword: x}]}",
        "spec.fingerprint: a[0].proxyPassword: a profile secret is no fingerprint field "
        "(a pool's spec is in Temporal history; proxies come from proxy.poolRef)",
    ),
    ("poolRef: proxyseller-eu", 'poolRef: ""', "spec.proxy.poolRef: must not be empty"),
    ("stickyTTL: 900", "stickyTTL: -5", "spec.proxy.stickyTTL: must be >= 0, got -5"),
    (
        "stickyTTL: 900",
        "sessionTTL: 15m",
        "spec.proxy.sessionTTL: unknown field (known fields: poolRef, stickyTTL)",
    ),
    (
        'groupId: "2c9c29a2824c6b1a01825e01d3b10071"',
        "groupId: 0123",
        # YAML 1.1 reads 0123 as octal: the number it became is named, not turned back to text.
        'spec.groupId: must be a string, got the number 83 (quote it: groupId: "...", '
        "an id from BitBrowser's /group/list)",
    ),
    (
        'groupId: "2c9c29a2824c6b1a01825e01d3b10071"',
        "groupId: ''",
        "spec.groupId: must not be empty",
    ),
    ("open: true", "open: 'true'", "spec.open: must be true or false, got 'true'"),
    ("open: true", "open: 1", "spec.open: must be true or false, got 1"),
    ("open: true", "open: null", "spec.open: must be true or false, got null"),
    ("open: true", "opne: true", "spec.opne: unknown field (did you mean 'open'?)"),
    (
        "open: true",
        "open: true\n  health: {failureStreakLimit: 3}",
        "spec.health: unknown field (known fields: replicas, nodeSelector, fingerprint, "
        "proxy, groupId, open)",
    ),
    ("  replicas: 6\n", "", "spec.replicas: required"),
    (
        "name: shop-eu",
        "name: Shop_EU",
        "metadata.name: must be a DNS-1123 label (lowercase letters, digits and '-', "
        "starting and ending with a letter or digit), got 'Shop_EU'",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), ALPHA_BAD, ids=[m for _, _, m in ALPHA_BAD])
def test_a_bad_v1alpha1_field_is_one_line_naming_it(old: str, new: str, message: str) -> None:
    assert old in ALPHA
    assert only_problem(ALPHA.replace(old, new)) == f"f.yaml: {message}"


BETA_BAD = [
    (
        "sessionTTL: 15m",
        "sessionTTL: 900",
        "spec.proxy.sessionTTL: must be a duration such as '90s', '3m' or '1h30m' "
        "(a number has no unit), got 900",
    ),
    (
        "sessionTTL: 15m",
        "stickyTTL: 900",
        "spec.proxy.stickyTTL: unknown field (known fields: poolRef, sessionTTL)",
    ),
    (
        "failureStreakLimit: 3",
        "failureStreakLimit: 0",
        "spec.health.failureStreakLimit: must be >= 1, got 0",
    ),
    (
        "failureStreakLimit: 3",
        "failureStreakLimit: true",
        "spec.health.failureStreakLimit: must be an integer, got true",
    ),
    (
        "maxUnhealthy: 2",
        "maxUnhealthy: 140%",
        "spec.health.maxUnhealthy: must be a count or a percentage such as '40%', got '140%'",
    ),
    (
        "maxUnhealthy: 2",
        "offlineAfter: 3m",
        "spec.health.offlineAfter: unknown field (known fields: failureStreakLimit, maxUnhealthy)",
    ),
    ("open: false", "open: no", None),  # YAML's `no` is false: accepted
]


@pytest.mark.parametrize(("old", "new", "message"), BETA_BAD, ids=[m or n for _, n, m in BETA_BAD])
def test_a_bad_v1beta1_field_is_one_line_naming_it(old: str, new: str, message: str | None) -> None:
    assert old in BETA
    if message is None:
        assert load_one(BETA.replace(old, new)).spec.open is False
    else:
        assert only_problem(BETA.replace(old, new)) == f"f.yaml: {message}"


def test_all_problems_of_a_browser_pool_are_reported() -> None:
    text = ALPHA.replace("replicas: 6", "replicas: 501").replace("open: true", "open: 1")
    assert problems(text) == [
        "f.yaml: spec.replicas: must be <= 500, got 501",
        "f.yaml: spec.open: must be true or false, got 1",
    ]


def test_a_long_selector_value_is_shortened_in_its_error() -> None:
    message = only_problem(ALPHA.replace("os: windows", "os: '" + "w " * 3000 + "'"))
    assert len(message) < 300
    assert message.startswith("f.yaml: spec.nodeSelector.os: label value must be at most 63")


# ---------------------------------------------------------------- labels and selectors


@pytest.mark.parametrize(
    "key", ["os", "example.com/gpu", "a", "A.b_c-9", "k" * 63, "a.b-c.d/" + "n" * 63]
)
def test_label_keys_kubernetes_takes(key: str) -> None:
    assert check_label_key(key) == key


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("", "label key must not be empty"),
        ("/x", "label key prefix before '/' must not be empty, got '/x'"),
        ("x/", "label key name after '/' must not be empty, got 'x/'"),
        ("a/b/c", "label key prefix must be a DNS subdomain"),
        ("-a", "label key must be letters, digits"),
        ("a_", "label key must be letters, digits"),
        ("p" * 254 + "/x", "label key prefix must be at most 253 characters, got 254"),
    ],
)
def test_label_keys_kubernetes_refuses(key: str, rule: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(rule)}"):
        check_label_key(key)


def test_a_node_label_argument_is_read_by_the_same_rules() -> None:
    # `devicepool worker --node-label k=v`
    assert parse_label("os=windows") == ("os", "windows")
    assert parse_label("example.com/tier=") == ("example.com/tier", "")
    # The first '=' ends the key; '=' is no label value character.
    with pytest.raises(ValueError, match="label value must be empty or letters"):
        parse_label("a=b=c")
    with pytest.raises(ValueError, match=r"^must be key=value, got 'windows'$"):
        parse_label("windows")
    with pytest.raises(ValueError, match=r"^label key must not be empty$"):
        parse_label("=windows")


@pytest.mark.parametrize("name", ["node-1", "win-desk-07", "a", "n" * 63])
def test_a_node_name_is_a_dns_label_so_node_equals_name_is_a_label(name: str) -> None:
    assert check_node_name(name) == name
    assert check_label_value(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "must not be empty"),
        ("WIN-DESK", "must be a DNS-1123 label"),
        ("node_1", "must be a DNS-1123 label"),
        ("node.1", "must be a DNS-1123 label"),
        ("-node", "must be a DNS-1123 label"),
        ("n" * 64, "must be at most 63 characters, got 64"),
    ],
)
def test_a_node_name_that_could_not_be_a_label_is_refused(name: str, rule: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(rule)}"):
        check_node_name(name)


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({}, {"os": "windows"}, True),
        ({"os": "windows"}, {"os": "windows", "node": "node-1"}, True),
        ({"os": "windows"}, {"os": "mac"}, False),
        ({"os": "windows"}, {}, False),
        ({"os": "windows", "gpu": ""}, {"os": "windows"}, False),  # an empty value is a value
        ({"os": "windows", "gpu": ""}, {"os": "windows", "gpu": ""}, True),
    ],
)
def test_a_selector_needs_every_pair(
    selector: dict[str, str], labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selector, labels) is matches


# ---------------------------------------------------------------- status


def test_the_status_is_camel_case_with_kubernetes_conditions() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    status = BrowserPoolStatus(
        phase=Phase.READY,
        desired_replicas=6,
        ready_profiles=5,
        open_profiles=5,
        lost_profiles=1,
        by_node={"node-1": 3, "node-2": 2},
        profile_ids=["a", "b"],
        last_reconciled=when,
        observed_generation=2,
        conditions=[
            Condition(
                type=BrowserConditionType.NODES_AVAILABLE,
                status=ConditionStatus.FALSE,
                reason="NodeLost",
                message="node-3 silent for 130s",
            )
        ],
    )
    data = status.to_json_dict()
    assert data == {
        "phase": "Ready",
        "desiredReplicas": 6,
        "readyProfiles": 5,
        "openProfiles": 5,
        "lostProfiles": 1,
        "byNode": {"node-1": 3, "node-2": 2},
        "profileIds": ["a", "b"],
        "lastReconciled": "2026-01-02T03:04:05Z",
        "observedGeneration": 2,
        "leasedDevices": 0,
        "leasesQueued": 0,
        "leasesExpired": 0,
        "conditions": [
            {
                "type": "NodesAvailable",
                "status": "False",
                "reason": "NodeLost",
                "message": "node-3 silent for 130s",
                "observedGeneration": 0,
            }
        ],
    }
    assert BrowserPoolStatus.model_validate(data) == status
    nodes = status.condition("NodesAvailable")
    assert nodes is not None and nodes.reason == "NodeLost"
    assert status.condition(BrowserConditionType.TEARDOWN_BLOCKED) is None


def test_a_status_in_a_manifest_is_ignored_so_get_output_applies_again() -> None:
    pool = load_one(BETA)
    shown = {
        **pool.to_json_dict(),
        "status": BrowserPoolStatus(ready_profiles=3).to_json_dict(),
    }
    shown["metadata"] = {**shown["metadata"], "uid": "x", "generation": 4}
    assert load_resources_text(yaml.safe_dump(shown)) == [pool]


# ---------------------------------------------------------------- conversion


def test_v1beta1_health_rides_in_the_annotation_and_comes_back() -> None:
    pool = load_one(BETA)
    alpha = conversion.BROWSER_POOL.to_v1alpha1(pool)
    assert alpha.api_version == "mobile.example.com/v1alpha1"
    assert alpha.spec.proxy is not None and alpha.spec.proxy.sticky_ttl == 900
    assert json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION]) == {
        "health": {"failureStreakLimit": 3, "maxUnhealthy": 2}
    }
    assert conversion.BROWSER_POOL.to_v1beta1(alpha) == pool
    assert conversion.BROWSER_POOL.convert(pool, "mobile.example.com/v1beta1") is pool
    assert conversion.BROWSER_POOL.convert(pool, "mobile.example.com/v1alpha1") == alpha
    with pytest.raises(ConversionError, match=r"^apiVersion: unsupported 'v2'"):
        conversion.BROWSER_POOL.convert(pool, "v2")


def test_a_leases_block_rides_in_the_annotation_and_comes_back() -> None:
    pool = load_one(BETA + "  leases: {maxDuration: 30m, onRelease: replace}\n")
    assert pool.spec.leases is not None and pool.spec.leases.max_duration == 1800
    alpha = conversion.BROWSER_POOL.to_v1alpha1(pool)
    kept = json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION])
    assert kept["leases"]["onRelease"] == "replace"
    assert conversion.BROWSER_POOL.to_v1beta1(alpha) == pool


def test_a_pool_at_the_defaults_converts_without_an_annotation() -> None:
    alpha = conversion.BROWSER_POOL.to_v1alpha1(load_one(ALPHA))
    assert CONVERSION_ANNOTATION not in alpha.metadata.annotations


def test_a_v1alpha1_manifest_with_the_annotation_loads_its_health() -> None:
    annotation = json.dumps({"health": {"failureStreakLimit": 5}})
    text = ALPHA.replace(
        "name: shop-eu",
        f"name: shop-eu\n  annotations: {{{CONVERSION_ANNOTATION}: '{annotation}'}}",
    )
    pool = load_one(text)
    assert pool.spec.health.failure_streak_limit == 5
    assert CONVERSION_ANNOTATION not in pool.metadata.annotations


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (
            "not json",
            "not what devicepool writes for a BrowserPool (a JSON object with autoscale, health, leases, schedule)",
        ),
        # A DevicePool's kept field means nothing on a BrowserPool.
        ('{"scaleDown": {}}', "not what devicepool writes for a BrowserPool"),
        ('{"health": 3}', "not what devicepool writes for a BrowserPool"),
        (
            '{"health": {"failureStreakLimit": 0}}',
            "health.failureStreakLimit: must be >= 1, got 0 "
            "(remove the annotation or convert the pool again)",
        ),
    ],
)
def test_a_conversion_annotation_not_ours_is_one_line(value: str, rule: str) -> None:
    text = ALPHA.replace(
        "name: shop-eu",
        f"name: shop-eu\n  annotations: {{{CONVERSION_ANNOTATION}: {json.dumps(value)}}}",
    )
    line = only_problem(text)
    assert line.startswith(f"f.yaml: metadata.annotations.{CONVERSION_ANNOTATION}: {rule}"), line


def test_a_v1alpha1_spec_in_a_message_reads_into_v1beta1() -> None:
    # What a client or a build that wrote v1alpha1 would send in a pool's input.
    spec = {
        "replicas": 4,
        "nodeSelector": {"node": "node-1"},
        "proxy": {"poolRef": "p", "stickyTTL": 60},
        "open": False,
        "aFieldFromTheFuture": 1,  # between builds, unknown fields are ignored
    }
    stored = conversion.BROWSER_POOL.stored_spec(spec)
    assert isinstance(stored, v1beta1.BrowserPoolSpec)
    assert stored.proxy is not None and stored.proxy.session_ttl == 60
    assert (stored.replicas, stored.node_selector, stored.open) == (4, {"node": "node-1"}, False)
    # A spec in the fields both versions share is left to the stored model as it is.
    shared = {"replicas": 1, "open": True}
    assert conversion.BROWSER_POOL.stored_spec(shared) is shared
    assert v1beta1.BrowserPoolSpec.model_validate(shared).replicas == 1
    assert conversion.BROWSER_POOL.stored_spec_json(spec)["proxy"] == {
        "poolRef": "p",
        "sessionTTL": "1m",
    }
    assert conversion.BROWSER_POOL.stored_spec_json({"proxy": {"stickyTTL": "x"}}) == {
        "proxy": {"stickyTTL": "x"}
    }


def test_a_stored_pool_shows_in_either_version() -> None:
    pool = load_one(BETA)
    data = pool.to_json_dict()
    resource = {"metadata": data["metadata"], "spec": data["spec"]}
    beta = conversion.BROWSER_POOL.resource_json_in(
        resource, api_version="mobile.example.com/v1beta1"
    )
    assert beta["spec"] == data["spec"] and beta["kind"] == "BrowserPool"
    alpha = conversion.BROWSER_POOL.resource_json_in(
        resource, api_version="mobile.example.com/v1alpha1"
    )
    assert alpha["apiVersion"] == "mobile.example.com/v1alpha1"
    assert alpha["spec"]["proxy"] == {"poolRef": "proxyseller-eu", "stickyTTL": 900}
    assert load_resources_text(yaml.safe_dump(alpha)) == [pool]
    with pytest.raises(ConversionError, match=r"^--api-version: unsupported 'v9'"):
        conversion.BROWSER_POOL.resource_json_in(resource, api_version="v9")


names_ = NAMES
texts = SHORT_TEXTS
label_names = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?", fullmatch=True)
label_keys = label_names | st.builds(lambda p, n: f"{p}/{n}", names_, label_names)
label_values = st.just("") | label_names
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
secret_free_keys = texts.filter(lambda k: k not in v1beta1.SECRET_FINGERPRINT_KEYS)
fingerprints = st.dictionaries(
    secret_free_keys,
    st.recursive(
        json_leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(secret_free_keys, inner, max_size=3)
        ),
        max_leaves=6,
    ),
    max_size=4,
)


def _common(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "replicas": draw(st.integers(0, 500)),
        "node_selector": draw(st.dictionaries(label_keys, label_values, max_size=3)),
        "fingerprint": draw(fingerprints),
        "group_id": draw(st.none() | texts),
        "open": draw(st.booleans()),
    }


@st.composite
def beta_pools(draw: st.DrawFn) -> v1beta1.BrowserPool:
    proxy = draw(BETA_PROXIES)
    health = v1beta1.BrowserHealthSpec(
        failure_streak_limit=draw(st.none() | st.integers(1, 1000)),
        max_unhealthy=draw(MAX_UNHEALTHY),
    )
    spec = v1beta1.BrowserPoolSpec(**_common(draw), proxy=proxy, health=health)
    return v1beta1.BrowserPool(metadata=draw(METADATA), spec=spec)


@st.composite
def alpha_pools(draw: st.DrawFn) -> v1alpha1.BrowserPool:
    proxy = draw(ALPHA_PROXIES)
    spec = v1alpha1.BrowserPoolSpec(**_common(draw), proxy=proxy)
    return v1alpha1.BrowserPool(metadata=draw(METADATA), spec=spec)


# 100 (Hypothesis's default), not 200: the conversion is a fixed field-by-field
# rename and every field is drawn on its own, so 100 pools already carry each
# optional field both set and unset many times over (~0.6 CPU-s saved per test).
@settings(max_examples=100, deadline=None)
@given(beta_pools())
def test_v1beta1_to_v1alpha1_and_back_is_the_same_pool(pool: v1beta1.BrowserPool) -> None:
    alpha = conversion.BROWSER_POOL.to_v1alpha1(pool)
    # ...through JSON too, as `get --api-version v1alpha1 -o json` then `apply` would.
    again = v1alpha1.BrowserPool.model_validate(json.loads(alpha.model_dump_json()))
    assert conversion.BROWSER_POOL.to_v1beta1(again) == pool


@settings(max_examples=100, deadline=None)
@given(alpha_pools())
def test_v1alpha1_to_v1beta1_and_back_is_the_same_pool(pool: v1alpha1.BrowserPool) -> None:
    beta = conversion.BROWSER_POOL.to_v1beta1(pool)
    again = v1beta1.BrowserPool.model_validate(json.loads(beta.model_dump_json()))
    assert conversion.BROWSER_POOL.to_v1alpha1(again) == pool


# 50: each example dumps and loads YAML twice, over the pools the round trips above draw.
@settings(max_examples=50, deadline=None)
@given(beta_pools())
def test_a_stored_pool_printed_as_yaml_applies_again(pool: v1beta1.BrowserPool) -> None:
    # What `get -o yaml` will print, in either version, is a manifest the loader takes.
    for shown in (pool, conversion.BROWSER_POOL.to_v1alpha1(pool)):
        assert load_resources_text(yaml.safe_dump(shown.to_json_dict())) == [pool]


# ---------------------------------------------------------------- both kinds


def test_both_kinds_load_mixed_in_order_in_the_stored_version() -> None:
    text = f"{ALPHA}---\n{DEVICE_POOL}---\n{BETA.replace('shop-eu', 'other')}"
    loaded = load_resources_text(text, source="f.yaml")
    assert [(type(p).__name__, p.name, p.api_version) for p in loaded] == [
        ("BrowserPool", "shop-eu", "mobile.example.com/v1beta1"),
        ("DevicePool", "shop-eu", "mobile.example.com/v1beta1"),
        ("BrowserPool", "other", "mobile.example.com/v1beta1"),
    ]
    assert isinstance(loaded[0], BrowserPool) and isinstance(loaded[1], DevicePool)
    assert [p.source for p in loaded] == ["f.yaml[0]", "f.yaml[1]", "f.yaml[2]"]


def test_a_list_and_a_json_array_hold_both_kinds() -> None:
    items = [yaml.safe_load(ALPHA), yaml.safe_load(DEVICE_POOL)]
    as_list = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    as_json = json.dumps(items)
    for text in (as_list, as_json):
        assert [p.kind for p in load_resources_text(text)] == ["BrowserPool", "DevicePool"]
    bad = [yaml.safe_load(ALPHA.replace("replicas: 6", "replicas: -3")), items[1]]
    assert problems(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": bad})) == [
        "f.yaml: items[0].spec.replicas: must be >= 0, got -3"
    ]


def test_names_are_unique_per_kind() -> None:
    # A DevicePool and a BrowserPool may share a name; two of one kind may not.
    assert len(load_resources_text(f"{ALPHA}---\n{DEVICE_POOL}")) == 2
    assert only_problem(f"{DEVICE_POOL}---\n{ALPHA}---\n{BETA}") == (
        "f.yaml[2]: metadata.name: duplicate pool name 'shop-eu' (first defined in f.yaml[1])"
    )
    assert only_problem(f"{DEVICE_POOL}---\n{ALPHA}---\n{DEVICE_POOL}") == (
        "f.yaml[2]: metadata.name: duplicate pool name 'shop-eu' (first defined in f.yaml[0])"
    )


def test_names_are_unique_per_kind_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ALPHA)
    (tmp_path / "b.yaml").write_text(DEVICE_POOL)
    assert [p.kind for p in load_resources(tmp_path)] == ["BrowserPool", "DevicePool"]
    (tmp_path / "c.json").write_text(json.dumps(yaml.safe_load(BETA)))
    with pytest.raises(ManifestError) as info:
        load_resources(tmp_path)
    assert info.value.problems == [
        f"{tmp_path / 'c.json'}: metadata.name: duplicate pool name 'shop-eu' "
        f"(first defined in {tmp_path / 'a.yaml'})"
    ]


def test_problems_of_both_kinds_are_collected_and_name_the_document() -> None:
    text = (
        f"{ALPHA.replace('open: true', 'open: maybe')}---\n"
        f"{DEVICE_POOL.replace('replicas: 2', 'replicas: 501')}---\n"
        "apiVersion: mobile.example.com/v1alpha1\nkind: PhonePool\nmetadata: {name: x}\n"
    )
    assert problems(text) == [
        "f.yaml[0]: spec.open: must be true or false, got 'maybe'",
        "f.yaml[1]: spec.replicas: must be <= 500, got 501",
        "f.yaml[2]: kind: unsupported 'PhonePool', supported: BrowserPool, DevicePool",
    ]


def test_no_documents_names_both_kinds() -> None:
    assert only_problem("# nothing\n") == (
        "f.yaml: no documents (expected a BrowserPool or DevicePool manifest)"
    )


def test_parse_resource_takes_either_kind() -> None:
    assert isinstance(parse_resource(yaml.safe_load(ALPHA)), BrowserPool)
    assert isinstance(parse_resource(yaml.safe_load(DEVICE_POOL)), DevicePool)
    with pytest.raises(ManifestError) as info:
        parse_resource({**yaml.safe_load(ALPHA), "kind": "Deployment"}, source="cli")
    assert str(info.value) == (
        "cli: kind: unsupported 'Deployment', supported: BrowserPool, DevicePool"
    )


def test_load_manifests_still_takes_device_pools_only(tmp_path: Path) -> None:
    # `apply -f` reads through load_manifests until the engine runs BrowserPools.
    with pytest.raises(ManifestError) as info:
        load_manifests_text(f"{DEVICE_POOL}---\n{ALPHA}", source="f.yaml")
    assert info.value.problems == [
        "f.yaml[1]: kind: unsupported 'BrowserPool', supported: DevicePool"
    ]
    (tmp_path / "a.yaml").write_text(DEVICE_POOL)
    assert [p.kind for p in load_manifests(tmp_path)] == ["DevicePool"]
    assert only_problem_of_manifests("") == "f.yaml: no documents (expected a DevicePool manifest)"


def only_problem_of_manifests(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source="f.yaml")
    [problem] = info.value.problems
    return problem


def test_stdin_takes_both_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{ALPHA}---\n{DEVICE_POOL}"))
    assert [p.kind for p in load_resources("-")] == ["BrowserPool", "DevicePool"]


# ---------------------------------------------------------------- names


def test_workflow_ids_and_node_queues() -> None:
    assert names.KIND_BROWSER_POOL == "BrowserPool"
    assert names.browser_pool_workflow_id("shop-eu") == "browserpool/shop-eu"
    assert BROWSER_POOL.name_from_workflow_id("browserpool/shop-eu") == "shop-eu"
    assert BROWSER_POOL.name_from_workflow_id("devicepool/shop-eu") is None
    for kind, workflow_id in [
        ("BrowserPool", "browserpool/shop-eu"),
        ("DevicePool", "devicepool/shop-eu"),
    ]:
        assert kind_named(kind).workflow_id("shop-eu") == workflow_id
    assert names.node_task_queue("node-1") == "devicepool-node-node-1"


def test_a_key_that_is_no_string_is_said_at_its_mapping() -> None:
    # Not `metadata.labels[1]`, which reads as a list index. The same for DevicePool.
    text = DEVICE_POOL.replace(
        "metadata: {name: shop-eu}", "metadata: {name: shop-eu, labels: {1: x}}"
    )
    assert only_problem(text) == "f.yaml: metadata.labels: keys must be strings, got 1"


def test_a_manifest_converts_as_its_author_wrote_it() -> None:
    # What `devicepool convert -f FILE --to ...` will write: renamed fields, no spelled-out defaults.
    written = yaml.safe_load(ALPHA.replace("  fingerprint: {}\n", ""))
    [pool] = load_resources_text(yaml.safe_dump(written))
    assert isinstance(pool, v1beta1.BrowserPool)
    assert written_in(pool, written)["spec"] == {  # type: ignore[arg-type]
        "replicas": 6,
        "nodeSelector": {"os": "windows"},
        "proxy": {"poolRef": "proxyseller-eu", "sessionTTL": "15m"},
        "groupId": "2c9c29a2824c6b1a01825e01d3b10071",
        "open": True,
    }
    beta = yaml.safe_load(BETA)
    alpha = written_in(conversion.BROWSER_POOL.to_v1alpha1(load_one(BETA)), beta)  # type: ignore[arg-type]
    assert "health" not in alpha["spec"]
    assert CONVERSION_ANNOTATION in alpha["metadata"]["annotations"]
    assert load_resources_text(yaml.safe_dump(alpha)) == [load_one(BETA)]


# ---------------------------------------------------------------- every problem is one short line

FULL = yaml.safe_load(BETA)


@settings(max_examples=200, deadline=None)
@given(mutated(FULL))
def test_a_mutated_browser_pool_gets_one_short_line_per_problem(text: str) -> None:
    try:
        load_resources_text(text, source="f.yaml")
    except ManifestError as exc:
        for problem in exc.problems:
            assert problem.startswith("f.yaml"), problem
            assert len(problem.split(": ", 1)[1]) <= 200, problem[:400]
            assert problem.splitlines() == [problem], problem[:400]
