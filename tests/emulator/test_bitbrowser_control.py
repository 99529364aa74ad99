"""The BitBrowser emulator's `/_emulator` control plane: faults, stats, secrets, clock, reset."""

from __future__ import annotations

import logging
import time

import pytest

import devicepool.emulator.bitbrowser as bitbrowser
from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import Account, phone_body, refusal_of


def test_the_public_surface() -> None:
    assert sorted(bitbrowser.__all__) == [
        "BitBrowserConfig",
        "BitBrowserEmulator",
        "StateFileError",
        "create_app",
        "create_apps",
        "main",
    ]


async def test_faults_roundtrip_and_clear(account: Account) -> None:
    body = {
        "latencyMs": 5,
        "failureRate": 0.1,
        "serverErrorRate": 0.05,
        "timeoutRate": 0.01,
        "timeoutSeconds": 10,
        "openFailures": 2,
        "openFailureRate": 0.2,
        "openStuckRate": 0.1,
        "phoneRequestsPerSecond": 2,
        "phoneShutdownsLost": 1,
    }
    assert await account.control("faults", body) == body
    assert (await account.http["node-2"].get("/_emulator/faults")).json() == body
    cleared = await account.control("faults", {})
    assert cleared["openFailures"] == 0 and cleared["phoneRequestsPerSecond"] is None
    assert cleared["phoneShutdownsLost"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"openFailureRate": 1.5},
        {"failureRate": -0.1},
        {"openFailures": 1.5},
        {"phoneRequestsPerSecond": 0},
        {"latencyMs": -1},
        {"timeoutSeconds": 0},
        {"typoRate": 0.1},
        [0.1],
    ],
)
async def test_faults_are_validated(account: Account, body: object) -> None:
    response = await account.http["node-1"].post("/_emulator/faults", json=body)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_injected_failures_in_the_envelope_and_as_http_500(account: Account) -> None:
    await account.faults(failureRate=1)
    assert "繁忙" in refusal_of(await account.call("/browser/update", {}))
    await account.faults(serverErrorRate=1)
    response = await account.call("/health")
    assert response.status_code == 500 and "json" not in response.headers["content-type"]
    await account.faults()
    stats = await account.stats()
    assert stats["creates"] == 0
    assert stats["faultsInjected"] == {"failure": 1, "serverError": 1}


async def test_latency(account: Account) -> None:
    await account.faults(latencyMs=150)
    started = time.monotonic()
    await account.ok("/health")
    assert time.monotonic() - started >= 0.15


async def test_stats_shape(make_account: MakeAccount) -> None:
    account = await make_account(phone_requests_per_second=100)
    profile = await account.create()
    await account.ok("/browser/open", {"id": profile["id"]}, node="node-2")
    await account.ok("/phone/profile/add", phone_body())
    assert await account.stats() == {
        "profiles": {
            "total": 1,
            "open": 1,
            "opening": 0,
            "closing": 0,
            "openByNode": {"node-1": 0, "node-2": 1},
        },
        "creates": 1,
        "deletes": 0,
        "opens": 1,
        "openFailures": 0,
        "closes": 0,
        "resets": 0,
        "kills": 0,
        "duplicates": {"byName": {}, "byRemark": {}},
        "nodes": {"node-1": True, "node-2": True},
        "phones": {
            "profiles": 1,
            "running": 0,
            "booting": 0,
            "suspended": 0,
            "offline": 0,
            "created": 1,
            "powerOns": 0,
            "shutdowns": 0,
            "recovers": 0,
            "requests": 1,
            "rateLimited": 0,
            "maxRequestsPerSecond": 1,
            "hoursBilled": 0.0,
        },
        "secrets": {"live": 3},
        "faultsInjected": {},
        "account": "default",
    }


async def test_reset_forgets_everything_but_the_clock(account: Account) -> None:
    profile = await account.create()
    await account.ok("/browser/open", {"id": profile["id"]})
    await account.control("node", {"up": False}, node="node-2")
    await account.faults(openFailures=3)
    await account.advance(100)
    stats = await account.control("reset")
    assert stats["profiles"]["total"] == 0 and stats["creates"] == 0
    assert stats["nodes"] == {"node-1": True, "node-2": True}
    assert (await account.http["node-1"].get("/_emulator/faults")).json()["openFailures"] == 0
    clock = (await account.http["node-1"].get("/_emulator/clock")).json()
    assert clock["speed"] == 1


async def test_secrets_are_never_logged(
    account: Account, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    profile = await account.create(password="acct-pw-1", faSecretKey="2FA-KEY-1")
    await account.ok("/browser/list", {"page": 0})
    await account.ok("/browser/detail", {"id": profile["id"]})
    await account.refused("/browser/update", {"id": profile["id"], "name": "partial"})
    secrets = (await account.http["node-1"].get("/_emulator/secrets")).json()["secrets"]
    assert set(secrets) == {"acct-pw-1", "2FA-KEY-1", "proxy-secret-0"}
    printed = caplog.text + "".join(capsys.readouterr())
    assert not [s for s in secrets if s in printed]
    stats = await account.stats()
    assert not [s for s in secrets if s in str(stats)]
