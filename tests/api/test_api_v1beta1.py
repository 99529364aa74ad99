"""v1beta1, the stored version: its fields, its durations, and conversion to and from v1alpha1.

Conversion is lossless both ways (a hypothesis property over each version's
pools); the article's v1alpha1 manifest keeps applying, converted; a pool's
workflow input written in v1alpha1 (a pool started before v1beta1) reads into
v1beta1.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicepool.api import ManifestError, load_manifests_text, v1alpha1, v1beta1
from devicepool.api.conversion import (
    CONVERSION_ANNOTATION,
    convert,
    stored_spec,
    to_v1alpha1,
    to_v1beta1,
    wire_spec,
)
from devicepool.api.durations import MAX_SECONDS, format_duration, parse_duration
from devicepool.workflows.pool.messages import PoolInput
from tests.helpers.manifest_fuzz import (
    ALPHA_PROXIES,
    BETA_PROXIES,
    MAX_UNHEALTHY,
    METADATA,
    SHORT_TEXTS,
)

BETA = """\
apiVersion: mobile.example.com/v1beta1
kind: DevicePool
metadata:
  name: tiktok-us-pool
spec:
  provider: {name: bitcloudphone, account: second}
  platform: android
  region: us-west
  osVersion: "14"
  replicas: 50
  proxy: {poolRef: proxyseller-us, sessionTTL: 15m}
  health: {offlineAfter: 3m, startupTimeout: 5m, maxUnhealthy: 40%}
  scaleDown: {idleGrace: 1m}
"""


def load_one(text: str) -> v1beta1.DevicePool:
    [pool] = load_manifests_text(text, source="f.yaml")
    return pool


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source="f.yaml")
    return info.value.problems


# ---------------------------------------------------------------- the v1beta1 manifest


def test_a_v1beta1_manifest_applies_with_every_field() -> None:
    pool = load_one(BETA)
    spec = pool.spec
    assert pool.api_version == "mobile.example.com/v1beta1"
    assert (spec.provider.name, spec.account) == (v1beta1.Provider.BITCLOUDPHONE, "second")
    assert spec.proxy is not None and spec.proxy.session_ttl == 900
    assert (spec.health.offline_after, spec.health.startup_timeout) == (180, 300)
    assert spec.health.max_unhealthy == "40%"
    assert spec.scale_down.idle_grace == 60
    # The durations are written back as they were read.
    assert spec.to_json_dict()["health"] == {
        "offlineAfter": "3m",
        "startupTimeout": "5m",
        "maxUnhealthy": "40%",
    }


def test_unset_thresholds_are_the_workers_and_set_ones_override_it() -> None:
    bare = load_one(BETA.split("  health:")[0])
    assert bare.spec.setting_overrides() == {}
    assert bare.spec.health.max_unhealthy == "40%"  # the same default as v1alpha1
    assert load_one(BETA).spec.setting_overrides() == {
        "offline_after_seconds": 180,
        "startup_timeout_seconds": 300,
        "idle_grace_seconds": 60,
    }


@pytest.mark.parametrize(
    ("line", "written", "message"),
    [
        (
            "offlineAfter: 3m",
            "offlineAfter: 180",
            "spec.health.offlineAfter: must be a duration such as '90s', '3m' or '1h30m' "
            "(a number has no unit), got 180",
        ),
        (
            "offlineAfter: 3m",
            "offlineAfter: 3 minutes",
            "spec.health.offlineAfter: must be a duration such as '90s', '3m' or '1h30m', "
            "got '3 minutes'",
        ),
        ("offlineAfter: 3m", "offlineAfter: 0s", "spec.health.offlineAfter: must be > 0, got '0s'"),
        (
            "sessionTTL: 15m",
            "sessionTTL: 1.5s",
            "spec.proxy.sessionTTL: must be whole seconds, got '1.5s'",
        ),
        (
            "idleGrace: 1m",
            "idleGrace: -1m",
            "spec.scaleDown.idleGrace: must be a duration such as '90s', '3m' or '1h30m', "
            "got '-1m'",
        ),
        (
            "maxUnhealthy: 40%",
            "maxUnhealthy: 140%",
            "spec.health.maxUnhealthy: must be a count or a percentage such as '40%', got '140%'",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(line: str, written: str, message: str) -> None:
    assert problems(BETA.replace(line, written)) == [f"f.yaml: {message}"]


def test_v1alpha1_fields_under_v1beta1_say_where_they_went() -> None:
    text = BETA.replace(
        "  provider: {name: bitcloudphone, account: second}\n", "  provider: bitcloudphone\n"
    )
    [line] = problems(text)
    assert line.startswith("f.yaml: spec.provider: must be a mapping such as {name: bitcloudphone")
    assert "providerCredentialRef` moved here" in line


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds", "shortest"),
    [
        ("90s", 90, "1m30s"),
        ("3m", 180, "3m"),
        ("1h30m", 5400, "1h30m"),
        ("1.5h", 5400, "1h30m"),
        ("15m0s", 900, "15m"),  # kubectl's own spelling reads
        ("500ms", 0.5, "0.5s"),
        ("0s", 0, "0s"),
    ],
)
def test_durations_read_as_kubectl_writes_them(text: str, seconds: float, shortest: str) -> None:
    assert parse_duration(text) == seconds
    assert format_duration(seconds) == shortest


@given(st.decimals(min_value=0, max_value=MAX_SECONDS, places=3, allow_nan=False))
def test_a_written_duration_reads_back_the_same(seconds: Any) -> None:
    value = float(seconds)
    assert parse_duration(format_duration(value)) == value


# ---------------------------------------------------------------- conversion


def test_the_articles_manifest_converts_and_back() -> None:
    article = load_one(
        "apiVersion: mobile.example.com/v1alpha1\nkind: DevicePool\nmetadata: {name: p}\n"
        "spec: {platform: ios, region: eu, replicas: 3, maxUnhealthy: 2,"
        " providerCredentialRef: second, proxy: {poolRef: r, stickyTTL: 60}}\n"
    )
    assert article.api_version == "mobile.example.com/v1beta1"
    assert article.spec.account == "second" and article.spec.health.max_unhealthy == 2
    assert article.spec.proxy is not None and article.spec.proxy.session_ttl == 60
    back = to_v1alpha1(article)
    assert back.spec.provider_credential_ref == "second"
    assert back.spec.proxy is not None and back.spec.proxy.sticky_ttl == 60
    assert CONVERSION_ANNOTATION not in back.metadata.annotations  # nothing to keep


def test_v1beta1_only_fields_travel_in_an_annotation() -> None:
    pool = load_one(BETA)
    alpha = to_v1alpha1(pool)
    kept = json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION])
    assert kept == {
        "health": {"offlineAfter": "3m", "startupTimeout": "5m"},
        "scaleDown": {"idleGrace": "1m"},
    }
    assert to_v1beta1(alpha) == pool
    assert convert(pool, "mobile.example.com/v1beta1") is pool


@pytest.mark.parametrize(
    "value", ["not json", '["health"]', '{"owner": {}}', '{"health": 3}', '{"health": {"x": 1}}']
)
def test_a_conversion_annotation_not_ours_is_one_line(value: str) -> None:
    text = (
        "apiVersion: mobile.example.com/v1alpha1\nkind: DevicePool\n"
        f"metadata: {{name: p, annotations: {{{CONVERSION_ANNOTATION}: {json.dumps(value)}}}}}\n"
        "spec: {platform: ios, region: eu, replicas: 3}\n"
    )
    [line] = problems(text)
    assert line.startswith(f"f.yaml: metadata.annotations.{CONVERSION_ANNOTATION}: ")


durations = st.one_of(
    st.none(), st.integers(min_value=1, max_value=10**6).map(lambda s: timedelta(seconds=s))
)
texts = SHORT_TEXTS


@st.composite
def beta_pools(draw: st.DrawFn) -> v1beta1.DevicePool:
    proxy = draw(BETA_PROXIES)
    spec = v1beta1.DevicePoolSpec(
        provider=v1beta1.ProviderRef(account=draw(texts)),
        platform=draw(st.sampled_from(v1beta1.Platform)),
        region=draw(texts),
        os_version=draw(st.sampled_from(["", "14", "17.2"])),
        replicas=draw(st.integers(0, 500)),
        proxy=proxy,
        health=v1beta1.HealthSpec(
            offline_after=draw(durations),
            startup_timeout=draw(durations),
            max_unhealthy=draw(MAX_UNHEALTHY),
        ),
        scale_down=v1beta1.ScaleDownSpec(idle_grace=draw(durations)),
        spend_cap=draw(
            st.none()
            | st.builds(
                lambda devices, cost: v1beta1.SpendCapSpec(
                    max_devices=devices, max_hourly_cost=cost
                ),
                st.none() | st.integers(0, 1000),
                st.none() | st.floats(0, 1e6, allow_nan=False),
            )
        ),
        reserve=draw(st.none() | st.builds(v1beta1.ReserveSpec, keep=st.integers(0, 500))),
        leases=draw(
            st.none()
            | st.builds(
                lambda most, idle, queue, wait, on: v1beta1.LeaseSpec(
                    max_duration=timedelta(seconds=most),
                    idle_timeout=timedelta(seconds=idle),
                    queue=v1beta1.LeaseQueueSpec(max=queue, max_wait=timedelta(seconds=wait)),
                    on_release=on,
                ),
                st.integers(1, 10**6),
                st.integers(1, 10**5),
                st.integers(0, 10_000),
                st.integers(1, 10**4),
                st.sampled_from(v1beta1.OnRelease),
            )
        ),
        rollout=draw(
            st.none()
            | st.builds(
                lambda surge, unavailable: v1beta1.RolloutSpec(
                    max_surge=surge, max_unavailable=unavailable
                ),
                st.integers(1, 50) | st.integers(1, 100).map(lambda p: f"{p}%"),
                st.integers(0, 50) | st.integers(0, 100).map(lambda p: f"{p}%"),
            )
        ),
        lifetime=draw(
            st.none()
            | st.builds(
                lambda age, grace: v1beta1.LifetimeSpec(
                    max_age=timedelta(seconds=age),
                    grace_period=None if grace is None else timedelta(seconds=grace),
                ),
                st.integers(1, 10**7),
                st.none() | st.integers(0, 10**6),
            )
        ),
    )
    return v1beta1.DevicePool(metadata=draw(METADATA), spec=spec)


@st.composite
def alpha_pools(draw: st.DrawFn) -> v1alpha1.DevicePool:
    proxy = draw(ALPHA_PROXIES)
    spec = v1alpha1.DevicePoolSpec(
        platform=draw(st.sampled_from(v1alpha1.Platform)),
        region=draw(texts),
        os_version=draw(st.sampled_from(["", "14", "17.2"])),
        replicas=draw(st.integers(0, 500)),
        proxy=proxy,
        provider_credential_ref=draw(texts),
        max_unhealthy=draw(MAX_UNHEALTHY),
    )
    return v1alpha1.DevicePool(metadata=draw(METADATA), spec=spec)


# 100 (Hypothesis's default), not 200: the conversion is a fixed field-by-field
# rename and every field is drawn on its own, so 100 pools already carry each
# optional field both set and unset many times over (~0.6 CPU-s saved per test).
@settings(
    max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(beta_pools())
def test_v1beta1_to_v1alpha1_and_back_is_the_same_pool(pool: v1beta1.DevicePool) -> None:
    alpha = to_v1alpha1(pool)
    # ...through JSON too, as `get --api-version v1alpha1 -o json` then `apply` would.
    again = v1alpha1.DevicePool.model_validate(json.loads(alpha.model_dump_json()))
    assert to_v1beta1(again) == pool


@settings(
    max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(alpha_pools())
def test_v1alpha1_to_v1beta1_and_back_is_the_same_pool(pool: v1alpha1.DevicePool) -> None:
    beta = to_v1beta1(pool)
    again = v1beta1.DevicePool.model_validate(json.loads(beta.model_dump_json()))
    assert to_v1alpha1(again) == pool


# ---------------------------------------------------------------- pools started in v1alpha1


def test_a_v1alpha1_workflow_input_reads_into_v1beta1() -> None:
    # What a pool started by v0.1.0 carries in its input (and its `apply` updates).
    spec = {
        "provider": "bitcloudphone",
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 5,
        "proxy": {"poolRef": "proxyseller-us", "stickyTTL": 900},
        "providerCredentialRef": "second",
        "maxUnhealthy": "40%",
        "aFieldFromTheFuture": 1,  # between builds, unknown fields are ignored
    }
    stored = stored_spec(spec)
    assert isinstance(stored, v1beta1.DevicePoolSpec)
    assert stored.account == "second" and stored.proxy is not None
    assert stored.proxy.session_ttl == 900
    read = PoolInput.model_validate({"metadata": {"name": "p"}, "spec": spec})
    assert read.spec == stored
    # A spec in the fields both versions share is read as it is.
    shared = {"platform": "ios", "region": "eu", "replicas": 1}
    assert stored_spec(shared) is shared


def test_a_client_sends_the_oldest_version_that_holds_the_spec() -> None:
    # A build from before v1beta1 (a rollback) still reads what a newer client sends.
    article = load_one(BETA.split("  health:")[0])
    assert wire_spec(article.spec)["provider"] == "bitcloudphone"
    assert wire_spec(article.spec)["proxy"] == {"poolRef": "proxyseller-us", "stickyTTL": 900}
    # A v1beta1-only field cannot go as v1alpha1: it goes as v1beta1.
    tuned = load_one(BETA).spec
    assert wire_spec(tuned) == tuned.to_json_dict()
    for spec in (article.spec, tuned):
        assert (
            PoolInput.model_validate({"metadata": {"name": "p"}, "spec": wire_spec(spec)}).spec
            == spec
        )


@pytest.mark.parametrize(
    ("cap", "price", "allowed"),
    [
        ({"maxDevices": 5}, 0.10, 5),
        ({"maxHourlyCost": 0.3}, 0.10, 3),  # not 2: 0.3 / 0.1 is 2.999… in floats
        ({"maxHourlyCost": 2, "maxDevices": 50}, 0.10, 20),  # the tighter one
        ({"maxHourlyCost": 2}, 0.0, None),  # free devices cross no money cap
        ({}, 0.10, None),
    ],
)
def test_a_spend_cap_is_a_number_of_devices_at_the_accounts_price(
    cap: dict[str, Any], price: float, allowed: int | None
) -> None:
    assert v1beta1.SpendCapSpec.model_validate(cap).devices_allowed(price) == allowed


def test_a_spend_cap_in_v1alpha1_rides_in_the_annotation() -> None:
    pool = load_one(BETA + "  spendCap: {maxDevices: 200, maxHourlyCost: 20}\n")
    alpha = to_v1alpha1(pool)
    assert json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION])["spendCap"] == {
        "maxDevices": 200,
        "maxHourlyCost": 20.0,
    }
    assert to_v1beta1(alpha) == pool
    assert problems(BETA + "  spendCap: {maxDevices: -1}\n") == [
        "f.yaml: spec.spendCap.maxDevices: must be >= 0, got -1"
    ]


@given(
    replicas=st.integers(0, 500),
    surge=st.integers(0, 100),
    unavailable=st.integers(0, 100),
)
def test_rollout_percentages_round_as_cluster_api_does(
    replicas: int, surge: int, unavailable: int
) -> None:
    if surge == unavailable == 0:
        with pytest.raises(ValueError, match="cannot both be 0"):
            v1beta1.RolloutSpec(max_surge="0%", max_unavailable=0)
        return
    spec = v1beta1.RolloutSpec(max_surge=f"{surge}%", max_unavailable=f"{unavailable}%")
    got_surge, got_unavailable = spec.limits(replicas)
    exact_surge, exact_unavailable = replicas * surge / 100, replicas * unavailable / 100
    if (got_surge, got_unavailable) != (1, 0):  # both rounded to 0 on a tiny pool: 1 surge
        assert got_surge == -(-replicas * surge // 100) >= exact_surge  # up
        assert got_unavailable == replicas * unavailable // 100 <= exact_unavailable  # down


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        (
            "{devices: 1, schedule: '0 9 * * *'}",
            "spec.disruption.budgets[0]: schedule and duration go together: set both or neither",
        ),
        (
            "{devices: 1, schedule: 'at nine', duration: 8h}",
            "spec.disruption.budgets[0].schedule: must be a cron expression such as",
        ),
        ("{devices: 1, reasons: [Bored]}", "spec.disruption.budgets[0].reasons[0]: must be one of"),
        ("{devices: 150%}", "spec.disruption.budgets[0].devices: must be a count or a percentage"),
    ],
)
def test_a_bad_disruption_budget_is_one_line(budget: str, message: str) -> None:
    [line] = problems(BETA + f"  disruption: {{budgets: [{budget}]}}\n")
    assert line.startswith(f"f.yaml: {message}"), line


def test_a_disruption_budget_in_v1alpha1_rides_in_the_annotation() -> None:
    pool = load_one(
        BETA + "  disruption: {budgets: [{devices: 10%, reasons: [Drifted],"
        " schedule: '0 9 * * mon-fri', duration: 8h}]}\n"
    )
    assert to_v1beta1(to_v1alpha1(pool)) == pool


def test_a_reserve_policy_in_v1alpha1_rides_in_the_annotation() -> None:
    pool = load_one(BETA + "  reserve: {keep: 2}\n")
    assert pool.spec.reserve == v1beta1.ReserveSpec(keep=2)
    alpha = to_v1alpha1(pool)
    assert json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION])["reserve"] == {"keep": 2}
    assert to_v1beta1(alpha).spec.reserve == pool.spec.reserve


@pytest.mark.parametrize("keep", ["-1", "501", "two", "1.5"])
def test_a_reserve_keep_out_of_range_is_one_line_naming_the_field(keep: str) -> None:
    with pytest.raises(ManifestError, match=r"spec\.reserve\.keep"):
        load_one(BETA + f"  reserve: {{keep: {keep}}}\n")


def test_leases_default_when_unset_and_ride_in_the_annotation() -> None:
    assert load_one(BETA).spec.leases is None  # unset: `DEFAULT_LEASES` apply
    assert v1beta1.DEFAULT_LEASES.max_duration == 3600 and v1beta1.DEFAULT_LEASES.queue.max == 50
    pool = load_one(BETA + "  leases: {idleTimeout: 2m, queue: {max: 5}, onRelease: replace}\n")
    leases = pool.spec.leases
    assert leases is not None and leases.idle_timeout == 120 and leases.queue.max_wait == 300
    assert leases.on_release == v1beta1.OnRelease.REPLACE
    alpha = to_v1alpha1(pool)
    assert (
        json.loads(alpha.metadata.annotations[CONVERSION_ANNOTATION])["leases"]["queue"]["max"] == 5
    )
    assert to_v1beta1(alpha) == pool


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("{maxDuration: 0s}", r"spec\.leases\.maxDuration"),
        ("{idleTimeout: 5}", r"spec\.leases\.idleTimeout"),
        ("{queue: {max: -1}}", r"spec\.leases\.queue\.max"),
        ("{onRelease: reuse}", r"spec\.leases\.onRelease"),
        ("{maxWait: 5m}", r"spec\.leases\.maxWait"),
    ],
)
def test_a_bad_leases_block_is_one_line_naming_the_field(block: str, field: str) -> None:
    with pytest.raises(ManifestError, match=field) as info:
        load_one(BETA + f"  leases: {block}\n")
    assert len(info.value.problems) == 1
