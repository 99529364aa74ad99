"""Device lifecycle on the virtual clock, and the /_emulator control plane."""

from __future__ import annotations

import pytest

from tests.emulator.conftest import creates
from tests.helpers.emulator import AUTH, Provider, assert_problem


async def test_provisioning_becomes_ready(provider: Provider) -> None:
    device = await provider.create_ok()
    await provider.advance(44)
    assert await provider.status(device["id"]) == "provisioning"
    await provider.advance(1)
    status = (await provider.get(f"/api/v1/devices/{device['id']}/status")).json()
    assert status["status"] == "ready"
    assert status["reason"] is None
    assert status["updatedAt"] > device["updatedAt"]


async def test_provision_seconds_is_configurable(make_provider) -> None:
    provider = await make_provider(provision_seconds=0)
    device = await provider.create_ok()
    assert device["status"] == "provisioning"  # the create answer always says provisioning
    assert await provider.status(device["id"]) == "ready"


async def test_terminating_becomes_terminated(make_provider) -> None:
    provider = await make_provider(terminate_seconds=10)
    device = await provider.create_ok()
    await provider.http.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)
    await provider.advance(9)
    status = (await provider.get(f"/api/v1/devices/{device['id']}/status")).json()
    assert (status["status"], status["reason"]) == ("terminating", "deleted")
    await provider.advance(1)
    assert await provider.status(device["id"]) == "terminated"
    stats = await provider.stats()
    assert stats["devices"] == {"live": 0, "byStatus": {}, "byPool": {}}
    assert stats["terminations"] == 1


async def test_sessions(provider: Provider) -> None:
    device = await provider.create_ok()
    session = f"devices/{device['id']}/session"
    assert_problem(await provider.control(session, {"active": True}), 409, "invalid_state")
    await provider.advance(45)
    busy = await provider.control(session, {"active": True})
    assert busy.status_code == 200
    assert busy.json()["status"] == "busy"
    assert busy.json()["sessionActive"] is True
    started = busy.json()["lastActivityAt"]
    assert started is not None
    await provider.advance(30)
    ready = (await provider.control(session, {"active": False})).json()
    assert ready["status"] == "ready"
    assert ready["sessionActive"] is False
    assert ready["lastActivityAt"] > started
    for bad in ({}, {"active": "yes"}, None):
        assert_problem(await provider.control(session, bad), 400, "invalid_argument")
    missing = await provider.control("devices/dev-none/session", {"active": True})
    assert_problem(missing, 404, "not_found")


async def test_offline_and_online_restore_the_previous_status(provider: Provider) -> None:
    device = await provider.create_ok()
    await provider.advance(45)
    await provider.control(f"devices/{device['id']}/session", {"active": True})
    offline = await provider.control(f"devices/{device['id']}/offline")
    assert offline.status_code == 200
    assert (offline.json()["status"], offline.json()["reason"]) == ("offline", "unreachable")
    went_offline = offline.json()["updatedAt"]
    assert_problem(
        await provider.control(f"devices/{device['id']}/session", {"active": False}),
        409,
        "invalid_state",
    )
    await provider.advance(200)
    still = (await provider.get(f"/api/v1/devices/{device['id']}/status")).json()
    assert (still["status"], still["updatedAt"]) == ("offline", went_offline)
    online = (await provider.control(f"devices/{device['id']}/online")).json()
    assert online["status"] == "busy"
    assert online["sessionActive"] is True
    assert_problem(await provider.control("devices/dev-none/offline"), 404, "not_found")


async def test_offline_terminated_device_is_409(make_provider) -> None:
    provider = await make_provider(terminate_seconds=0)
    device = await provider.create_ok()
    await provider.http.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)
    for action in ("offline", "online"):
        assert_problem(
            await provider.control(f"devices/{device['id']}/{action}"), 409, "invalid_state"
        )


async def test_deleting_an_offline_device_terminates_it(provider: Provider) -> None:
    device = await provider.create_ok()
    await provider.control(f"devices/{device['id']}/offline")
    deleted = await provider.http.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)
    assert deleted.json()["status"] == "terminating"


async def test_region_down_and_up(provider: Provider) -> None:
    ready = await provider.create_ok(region="eu-west")
    await provider.advance(45)
    busy = await provider.create_ok(region="eu-west")
    await provider.advance(45)
    await provider.control(f"devices/{busy['id']}/session", {"active": True})
    provisioning = await provider.create_ok(region="eu-west")
    elsewhere = await provider.create_ok(region="us-east")

    down = await provider.control("regions/eu-west", {"status": "down"})
    assert down.json() == {"name": "eu-west", "status": "down"}
    regions = (await provider.get("/api/v1/regions")).json()
    assert {"name": "eu-west", "status": "down"} in regions
    for device in (ready, busy, provisioning):
        status = (await provider.get(f"/api/v1/devices/{device['id']}/status")).json()
        assert (status["status"], status["reason"]) == ("offline", "region_down")
    assert await provider.status(elsewhere["id"]) == "provisioning"
    assert_problem(await provider.create(region="eu-west"), 503, "region_unavailable")
    stats = await provider.stats()
    assert stats["devices"]["byStatus"] == {"offline": 3, "provisioning": 1}
    assert stats["creates"]["rejected"] == 1

    await provider.advance(60)  # the provisioning device finishes while its region is down
    await provider.control("regions/eu-west", {"status": "up"})
    assert await provider.status(ready["id"]) == "ready"
    assert await provider.status(busy["id"]) == "busy"
    assert await provider.status(provisioning["id"]) == "ready"
    await provider.create_ok(region="eu-west")


async def test_degraded_region_still_accepts_creates(provider: Provider) -> None:
    await provider.control("regions/ap-southeast", {"status": "degraded"})
    assert {"name": "ap-southeast", "status": "degraded"} in (
        await provider.get("/api/v1/regions")
    ).json()
    await provider.create_ok(region="ap-southeast")


async def test_region_control_validates(provider: Provider) -> None:
    assert_problem(
        await provider.control("regions/us-west", {"status": "sideways"}), 400, "invalid_argument"
    )
    assert_problem(await provider.control("regions/us-west", None), 400, "invalid_argument")
    new = await provider.control("regions/moon-1", {"status": "down"})
    assert new.status_code == 200
    assert_problem(await provider.create(region="moon-1"), 503, "region_unavailable")


async def test_clock(provider: Provider) -> None:
    before = (await provider.http.get("/_emulator/clock")).json()
    assert set(before) == {"now", "speed"}
    assert before["speed"] == 1
    after = (await provider.control("clock", {"advanceSeconds": 300})).json()
    assert after["now"] > before["now"]
    assert (await provider.control("clock", {"speed": 60})).json()["speed"] == 60
    assert provider.emulator.clock.speed == 60
    for bad in ({"speed": 0}, {"advanceSeconds": -1}, {"speed": "fast"}, {"rewind": 1}):
        assert_problem(await provider.control("clock", bad), 400, "invalid_argument")


async def test_speed_scales_every_duration(make_provider) -> None:
    provider = await make_provider(speed=1_000_000)
    device = await provider.create_ok()
    # 45 virtual seconds pass in microseconds of real time.
    assert await provider.status(device["id"]) == "ready"


async def test_stats_shape_and_billing(make_provider) -> None:
    provider = await make_provider(terminate_seconds=0)
    a = await provider.create_ok(labels={"pool": "p1"})
    await provider.create_ok(labels={"pool": "p1"})
    await provider.create_ok(labels={"pool": "p2"})
    await provider.advance(3600)
    await provider.http.delete(f"/api/v1/devices/{a['id']}", headers=AUTH)
    await provider.advance(1800)
    stats = await provider.stats()
    assert set(stats) == {"devices", "creates", "terminations", "deviceHoursBilled", "extra"}
    assert stats["devices"] == {
        "live": 2,
        "byStatus": {"ready": 2},
        "byPool": {"p1": 1, "p2": 1},
    }
    assert stats["creates"] == creates(accepted=3)
    assert stats["terminations"] == 1
    # 1 h for the deleted device, 1.5 h for each of the two others.
    assert stats["deviceHoursBilled"] == pytest.approx(4.0, abs=0.001)


async def test_reset(provider: Provider) -> None:
    await provider.create_ok()
    await provider.control("faults", {"latencyMs": 1})
    await provider.control("regions/us-west", {"status": "down"})
    response = await provider.control("reset")
    assert response.status_code == 200
    stats = await provider.stats()
    assert stats["devices"]["live"] == 0
    assert stats["creates"]["accepted"] == 0
    assert (await provider.http.get("/_emulator/faults")).json()["latencyMs"] == 0
    await provider.create_ok(region="us-west")


async def test_control_plane_needs_no_auth_and_ignores_faults(provider: Provider) -> None:
    await provider.control("faults", {"serverErrorRate": 1})
    assert (await provider.http.get("/_emulator/stats")).status_code == 200
    assert (await provider.http.get("/_emulator/clock")).status_code == 200
