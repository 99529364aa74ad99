"""The marks pools match on, read as written: never scrubbed, never an exception.

A mark (a profile's `name` and `remark`) is what a pool recognises its devices
by. A worker secret that happens to occur in one (a proxy password `web`, a pool
named `web`) must not change it, or the pool never sees its devices again and
rents more on every pass. A mark edited by hand (`dp.at=nan`) is a foreign
profile: skipped and counted, never a failure of the whole listing.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.bitbrowser import (
    BrowserProfiles,
    CloudPhones,
    LocalApi,
    PhonePacer,
)
from devicepool.activities.providers.bitbrowser.models import ComputeType, Phone, PhoneProxy
from devicepool.activities.providers.bitbrowser.phone_marks import (
    Remark,
    parse_device_id,
    pool_prefix,
)
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.names import LABEL_POOL
from devicepool.api.v1beta1 import LifetimeSpec
from devicepool.workflows.pool.lifecycle import expiries
from tests.activities.conftest import bitbrowser_account
from tests.activities.test_bitbrowser_phone_provider import (
    PACE,
    PROXY_PASSWORD,
    SPEED,
    new_device,
    phones_stats,
)
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Recorder

POOL = "web"
PROXY = PhoneProxy(host="gw.proxy.test", port=1080, username="u", password=PROXY_PASSWORD)


account = bitbrowser_account(speed=SPEED, seed=5)


def _api(account: Account, *, secrets: list[str], metrics: Metrics | None = None) -> LocalApi:
    return LocalApi(
        base_url="http://node-1.local",
        api_key=account.key,
        timeout=5.0,
        transport=Recorder(account.transports["node-1"]),
        scrubber=Scrubber([SecretStr(s) for s in secrets]),
        metrics=metrics,
    )


# ------------------------------------------------------------ item 5: marks are not scrubbed


async def test_a_pool_named_like_a_worker_secret_still_sees_its_cloud_phones(
    account: Account,
) -> None:
    """Proxy password `web`, pool `web`: the pool's remark holds `devicepool.io/pool=web`.
    Scrubbed, it read `pool=**********`, the pool saw none of its phones, and each
    create rented another profile."""
    api = _api(account, secrets=[POOL, PROXY_PASSWORD])
    provider = PhoneProvider(CloudPhones(api, pacer=PhonePacer(interval=PACE)))
    try:
        made = await provider.create_device(new_device(pool=POOL))
        await account.advance(61)
        listed = await provider.list_pool(POOL)
        assert [d.id for d in listed] == [made.id]
        assert listed[0].labels[LABEL_POOL] == POOL
        again = await provider.create_device(new_device(pool=POOL))
        assert again.id == made.id
        assert (await phones_stats(account))["created"] == 1
        assert [d.info.id for d in await provider.list_managed()] == [made.id]
    finally:
        await api.aclose()


async def test_a_browser_mark_holding_a_worker_secret_is_found_as_written(
    account: Account,
) -> None:
    api = _api(account, secrets=[POOL])
    profiles = BrowserProfiles(api, settle_seconds=0.0)
    mark = f"devicepool pool={POOL} slot=0"
    try:
        made = await profiles.create_marked(mark=mark, name=f"{POOL}/0")
        again = await profiles.create_marked(mark=mark, name=f"{POOL}/0")
        assert (again.id, again.created) == (made.id, False)
        (found,) = await profiles.list_all(mark_prefix=f"devicepool pool={POOL} ")
        assert (found.id, found.remark, found.name) == (made.id, mark, f"{POOL}/0")
    finally:
        await api.aclose()
    listed = await account.ok("/browser/list", {"page": 0, "pageSize": 100})
    assert len(listed["list"]) == 1


async def test_free_text_is_still_scrubbed_and_secret_fields_never_kept() -> None:
    """What the marks no longer pass through: a `msg` inside data is free text (scrubbed);
    a phone's proxy password and adb code are fields no model keeps."""
    secret = "proxy-pass-Zq9"
    item = {
        "id": "p1",
        "name": "dvp-x",
        "remark": "devicepool/1",
        "proxyPassword": secret,
        "adb": json.dumps({"code": "adb-code-Rr1", "ip": "1.2.3.4", "port": 1}),
        "msg": f"echo {secret}",
    }

    def handler(request: httpx.Request) -> httpx.Response:
        data = {"list": [item], "total": 1, "msg": f"quoted {secret}"}
        return httpx.Response(200, json={"success": True, "data": data})

    api = LocalApi(transport=httpx.MockTransport(handler), scrubber=Scrubber([secret]))
    async with api:
        raw = await api.call("/phone/list", {"page": 0})
        page = await CloudPhones(api, pacer=PhonePacer(interval=0.001)).list_page(0)
    assert raw["msg"] == f"quoted {REDACTED}" and raw["list"][0]["msg"] == f"echo {REDACTED}"
    (phone,) = page.items
    for text in (phone.model_dump_json(), repr(phone), repr(page)):
        assert secret not in text and "adb-code-Rr1" not in text


# ------------------------------------------------------------ item 12: hostile remarks


def _short(value: Any) -> str:
    text = ascii(value)
    return text if len(text) <= 16 else f"{text[:12]}..{len(text)}"


HOSTILE_AT = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "infinity",
    "1e20",
    "1e308",
    "-1",
    "-1e20",
    "",
    "abc",
    "0x10",
    "²",
    "9" * 5000,
    "1" * 100,
]
HOSTILE_INC = ["", "-1", "²", "٣", "1e3", "9" * 5000, "0x1", "nan", " 1"]


def _remark(at: str = "1700000000", inc: str = "1", state: str = "active") -> str:
    return f"devicepool/1 dp.state={state} dp.inc={inc} dp.at={at} {LABEL_POOL}=phones-a"


@pytest.mark.parametrize("at", HOSTILE_AT, ids=_short)
def test_a_remark_whose_start_is_not_a_time_is_not_ours(at: str) -> None:
    assert Remark.parse(_remark(at=at)) is None


@pytest.mark.parametrize("inc", HOSTILE_INC, ids=_short)
def test_a_remark_whose_incarnation_is_not_a_count_is_not_ours(inc: str) -> None:
    assert Remark.parse(_remark(inc=inc)) is None


def test_a_remark_as_written_still_parses() -> None:
    written = Remark("active", 3, 1_700_000_000.9, {LABEL_POOL: "a b=c", "x": "%"})
    assert Remark.parse(written.text()) == Remark("active", 3, 1_700_000_000, written.labels)


def _usable(parsed: Remark | None) -> None:
    """What a listing does with a remark that parsed: a device created at `started`."""
    if parsed is not None:
        assert math.isfinite(parsed.started) and parsed.started >= 0
        assert parsed.incarnation >= 0
        datetime.fromtimestamp(parsed.started, UTC)


@given(st.text(max_size=600))
def test_no_remark_text_raises_and_what_parses_has_a_usable_start(text: str) -> None:
    _usable(Remark.parse(text))


@given(
    at=st.one_of(
        st.sampled_from(HOSTILE_AT),
        st.floats().map(repr),
        st.integers().map(str),
        st.text(max_size=40),
    ),
    inc=st.one_of(st.integers().map(str), st.text(max_size=20)),
)
def test_no_edited_own_field_raises_or_gives_an_unusable_start(at: str, inc: str) -> None:
    _usable(Remark.parse(_remark(at=quote(at, safe=""), inc=quote(inc, safe=""))))


@pytest.mark.parametrize("value", ["x.²", "x.٣", "x." + "9" * 5000, "x.-1", ".1", "x"], ids=_short)
def test_a_device_id_that_is_not_ours_is_none(value: str) -> None:
    assert parse_device_id(value) is None


@pytest.mark.parametrize(
    "seq", ["²", "9" * 5000, "-" + "9" * 30, "nan", 1e300, float("inf"), "1e3"], ids=_short
)
def test_a_hostile_seq_is_absent_not_a_failed_page(seq: Any) -> None:
    assert Phone.model_validate({"id": "p", "seq": seq}).seq is None


async def test_an_edited_remark_in_a_pool_is_skipped_and_counted_not_a_blind_pool(
    account: Account,
) -> None:
    """`dp.at=nan` in one phone's remark raised `ValueError` out of every listing of its
    pool and of the account (the orphan sweep, the ledger's count)."""
    metrics = Metrics(CollectorRegistry())
    api = _api(account, secrets=[PROXY_PASSWORD], metrics=metrics)
    phones = CloudPhones(api, pacer=PhonePacer(interval=PACE))
    provider = PhoneProvider(phones)
    try:
        made = await provider.create_device(new_device(pool="phones-a"))
        for n, at in enumerate(["nan", "inf", "1e20", "-1", "abc"]):
            await account.advance(2)
            await phones.add(
                mark=f"{pool_prefix('phones-a')}edited{n}",
                region_id="d69bcf13db844d1cb81e779f64161223",
                compute_type=ComputeType.TEMPORARY,
                proxy=PROXY,
                remark=_remark(at=at),
            )
        await account.advance(61)
        assert [d.id for d in await provider.list_pool("phones-a")] == [made.id]
        assert [d.info.id for d in await provider.list_managed()] == [made.id]
        assert (await provider.get_device(made.id)).info.id == made.id
        items, not_found = await provider.read_statuses([made.id])
        assert [i.id for i in items] == [made.id] and not_found == []
    finally:
        await api.aclose()
    skipped = metrics.registry.get_sample_value(
        "devicepool_foreign_marks_total", {"family": "phone"}
    )
    assert skipped is not None and skipped >= 5


# ------------------------------------------------------------ a start in the future

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "at",
    [str(int(NOW) + 3600), "4200000000", "253402300800", "999999999999"],
    ids=["an hour ahead", "2103", "year 10000", "12 digits"],
)
def test_a_remark_that_starts_in_the_future_starts_when_first_seen(at: str) -> None:
    """Review defect 2 (taken as written, `dp.at` in 2103 bills for good) and its second
    review's defect 1 (taken as 0, a phone written by a fast clock is 55 years old): a
    start far ahead is taken as when the reader first saw it, and ages from there."""
    parsed = Remark.parse(_remark(at=at), now=NOW)
    assert parsed is not None and parsed.started == NOW
    seen = Remark.parse(_remark(at=at), now=NOW + 60, first_seen=lambda written: NOW)
    assert seen is not None and seen.started == NOW
    _usable(parsed)


def test_a_start_a_clock_step_ahead_is_kept() -> None:
    """Within a few minutes ahead (the node's clock stepped back since it wrote it)."""
    parsed = Remark.parse(_remark(at=str(int(NOW) + 60)), now=NOW)
    assert parsed is not None and parsed.started == NOW + 60


LIFETIME = LifetimeSpec(max_age="24h", grace_period="2h")


async def test_a_phone_written_by_a_clock_ten_minutes_fast_is_not_forced_out(
    account: Account,
) -> None:
    """Second review of issue 37, defect 1. The node's clock ran 10 minutes fast when it
    created the phone (`dp.at` = wall + 600), then was set right. Before: that start
    parsed as 0 (1970), so with `lifetime: {maxAge: 24h, gracePeriod: 2h}` the serving
    phone was forced out at once (`expiries(...).force == [id]`). Now it starts when
    first seen, and retires a maxAge later."""
    wall = [datetime.now(UTC).timestamp() + 600]
    api = _api(account, secrets=[PROXY_PASSWORD])
    provider = PhoneProvider(
        CloudPhones(api, pacer=PhonePacer(interval=PACE)), wall_clock=lambda: wall[0]
    )
    try:
        made = await provider.create_device(new_device(pool="phones-a"))
        await account.advance(61)
        wall[0] -= 600  # the clock set right
        seen = wall[0]
        (listed,) = await provider.list_pool("phones-a")
        assert listed.id == made.id
        assert listed.created_at == datetime.fromtimestamp(seen, UTC)
        found = expiries([listed], lifetime=LIFETIME, protected=(), now=_at(seen))
        assert (found.force, found.retire) == ([], [])
        wall[0] = seen + 3600  # read again later: the same start
        (listed,) = await provider.list_pool("phones-a")
        assert listed.created_at == datetime.fromtimestamp(seen, UTC)
    finally:
        await api.aclose()


async def test_a_phone_whose_remark_was_edited_to_2103_still_ages(account: Account) -> None:
    """Review defect 2's guard: a start edited to 2103 ages from when it was first seen,
    past maxAge a maxAge later (not billed for good)."""
    wall = [datetime.now(UTC).timestamp()]
    api = _api(account, secrets=[PROXY_PASSWORD])
    phones = CloudPhones(api, pacer=PhonePacer(interval=PACE))
    provider = PhoneProvider(phones, wall_clock=lambda: wall[0])
    try:
        made = await provider.create_device(new_device(pool="phones-a"))
        await account.advance(61)
        phone_id = made.id.rpartition(".")[0]
        (phone,) = await phones.list_all(mark_prefix=pool_prefix("phones-a"))
        edited = phone.remark.replace(phone.remark.split("dp.at=")[1].split()[0], "4200000000")
        await phones.update(phone_id, {"remark": edited})
        seen = wall[0]
        (listed,) = await provider.list_pool("phones-a")
        assert listed.id == made.id and listed.created_at == datetime.fromtimestamp(seen, UTC)
        wall[0] = seen + LIFETIME.max_age + 1
        (listed,) = await provider.list_pool("phones-a")
        found = expiries([listed], lifetime=LIFETIME, protected=(), now=_at(wall[0]))
        assert (found.retire, found.force) == ([made.id], [])
    finally:
        await api.aclose()


def _at(wall: float) -> datetime:
    return datetime.fromtimestamp(wall, UTC)
